"""Model sizes: well-known architectures from their public hyper-parameters (no hub), a local config.json
counted exactly on the meta device, or a bare parameter count. Pure except `from_path` (transformers)."""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import BadInput


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str                    # gpt2, bert, t5, llama, or "custom"
    params: int
    hidden_size: int
    layers: int                    # transformer blocks (encoder + decoder for t5)
    heads: int
    vocab_size: int | None = None
    intermediate_size: int | None = None
    largest_layer_params: int | None = None  # the biggest module's own parameters (DeepSpeed's "largest layer")
    activation: str | None = None  # as the config names it: "gelu_new", "gelu", "silu", "relu"
    max_positions: int | None = None
    source: str = "catalog"        # "catalog", "config.json", "params"

    def to_dict(self) -> dict:
        return asdict(self)


# Public hyper-parameters of well-known checkpoints (their config.json on the Hugging Face hub).
CATALOG = {
    "gpt2": dict(family="gpt2", h=768, L=12, a=12, V=50257, P=1024),
    "gpt2-medium": dict(family="gpt2", h=1024, L=24, a=16, V=50257, P=1024),
    "gpt2-large": dict(family="gpt2", h=1280, L=36, a=20, V=50257, P=1024),
    "gpt2-xl": dict(family="gpt2", h=1600, L=48, a=25, V=50257, P=1024),
    "bert-base-uncased": dict(family="bert", h=768, L=12, a=12, V=30522, P=512, I=3072),
    "bert-large-uncased": dict(family="bert", h=1024, L=24, a=16, V=30522, P=512, I=4096),
    "t5-small": dict(family="t5", h=512, L=6, a=8, V=32128, I=2048, kv=64),
    "t5-base": dict(family="t5", h=768, L=12, a=12, V=32128, I=3072, kv=64),
    "t5-large": dict(family="t5", h=1024, L=24, a=16, V=32128, I=4096, kv=64),
    "t5-3b": dict(family="t5", h=1024, L=24, a=32, V=32128, I=16384, kv=128),
    "t5-11b": dict(family="t5", h=1024, L=24, a=128, V=32128, I=65536, kv=128),
    "llama-2-7b": dict(family="llama", h=4096, L=32, a=32, kvh=32, V=32000, I=11008, P=4096),
    "llama-2-13b": dict(family="llama", h=5120, L=40, a=40, kvh=40, V=32000, I=13824, P=4096),
    "llama-2-70b": dict(family="llama", h=8192, L=80, a=64, kvh=8, V=32000, I=28672, P=4096),
    "llama-3-8b": dict(family="llama", h=4096, L=32, a=32, kvh=8, V=128256, I=14336, P=8192),
    "llama-3-70b": dict(family="llama", h=8192, L=80, a=64, kvh=8, V=128256, I=28672, P=8192),
    "mistral-7b": dict(family="llama", h=4096, L=32, a=32, kvh=8, V=32000, I=14336, P=32768),
    "qwen2.5-7b": dict(family="llama", h=3584, L=28, a=28, kvh=4, V=152064, I=18944, P=32768, qkv_bias=True),
}
ALIASES = {"openai-community/gpt2": "gpt2", "meta-llama/Llama-2-7b-hf": "llama-2-7b",
           "meta-llama/Meta-Llama-3-8B": "llama-3-8b", "mistralai/Mistral-7B-v0.1": "mistral-7b",
           "google-t5/t5-3b": "t5-3b", "google-bert/bert-base-uncased": "bert-base-uncased",
           "google-bert/bert-large-uncased": "bert-large-uncased"}


def _count(family: str, h: int, L: int, a: int, V: int, P: int = 0, I: int | None = None, kv: int | None = None,
           kvh: int | None = None, qkv_bias: bool = False) -> tuple[int, int, int, str]:
    """Parameters, largest layer, intermediate size and activation of one family, as transformers builds it."""
    if family == "gpt2":  # GPT2LMHeadModel, lm_head tied to wte
        I = 4 * h
        block = 2 * h + (h * 3 * h + 3 * h) + (h * h + h) + 2 * h + (h * I + I) + (I * h + h)
        return V * h + P * h + L * block + 2 * h, V * h, I, "gelu_new"
    if family == "bert":  # BertForMaskedLM: no pooler; decoder weight tied to the word embeddings
        emb = V * h + P * h + 2 * h + 2 * h
        block = 4 * (h * h + h) + 2 * h + (h * I + I) + (I * h + h) + 2 * h
        head = h * h + h + 2 * h + V
        return emb + L * block + head, V * h + V, I, "gelu"  # largest: the MLM decoder (tied weight + bias)
    if family == "t5":  # T5ForConditionalGeneration (v1.0: tied lm_head, relu, no biases)
        inner = a * kv
        attn = 4 * h * inner
        ff = 2 * h * I
        enc = L * (attn + ff + 2 * h) + 32 * a + h
        dec = L * (2 * attn + ff + 3 * h) + 32 * a + h
        return V * h + enc + dec, max(V * h, h * I), I, "relu"
    if family == "llama":  # LlamaForCausalLM / MistralForCausalLM / Qwen2: untied lm_head, SwiGLU
        kv_dim = h // a * kvh
        attn = 2 * h * h + 2 * h * kv_dim + ((h + 2 * kv_dim) if qkv_bias else 0)
        block = attn + 3 * h * I + 2 * h
        return 2 * V * h + L * block + h, V * h, I, "silu"
    raise BadInput(f"unknown model family {family!r}")


def named(name: str) -> ModelSpec:
    """A catalog model by name (e.g. gpt2, t5-3b, llama-2-7b)."""
    key = ALIASES.get(name, name).lower()
    if key not in CATALOG:
        raise BadInput(f"--model {name}: not a known model and no such folder; known: {', '.join(CATALOG)}"
                       " (or give a folder with config.json, or --params)")
    c = dict(CATALOG[key])
    family = c.pop("family")
    params, largest, inter, act = _count(family, **c)
    layers = 2 * c["L"] if family == "t5" else c["L"]
    return ModelSpec(name=key, family=family, params=params, hidden_size=c["h"], layers=layers, heads=c["a"],
                     vocab_size=c["V"], intermediate_size=inter, largest_layer_params=largest, activation=act,
                     max_positions=c.get("P") or None)


def from_path(path: str) -> ModelSpec:
    """Count a local model folder's parameters exactly by building it on the meta device (no weights)."""
    cfg_file = Path(path) / "config.json"
    try:
        raw = json.loads(cfg_file.read_text())
    except FileNotFoundError:
        raise BadInput(f"--model {path}: no config.json in that folder")
    except (OSError, ValueError) as e:
        raise BadInput(f"--model {path}: config.json unreadable ({e})")
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    try:
        cfg = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
        arch = (getattr(cfg, "architectures", None) or [None])[0]
        cls = getattr(transformers, arch, None) if arch else None
        with torch.device("meta"):
            model = cls(cfg) if cls is not None else _auto(transformers, cfg)
    except Exception as e:  # transformers raises many kinds for a bad config; the user needs one line
        raise BadInput(f"--model {path}: transformers cannot build it ({type(e).__name__}: {e})".split("\n")[0])
    params = sum(p.numel() for p in model.parameters())  # shared (tied) parameters are listed once
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    get = lambda *keys: next((raw[k] for k in keys if raw.get(k) is not None), None)  # noqa: E731
    h = get("hidden_size", "n_embd", "d_model")
    layers = get("num_hidden_layers", "n_layer", "num_layers")
    if raw.get("model_type") == "t5" or get("num_decoder_layers"):
        layers = (layers or 0) + (get("num_decoder_layers") or layers or 0)
    return ModelSpec(name=str(path), family=raw.get("model_type", "custom"), params=params, hidden_size=h,
                     layers=layers, heads=get("num_attention_heads", "n_head", "num_heads"),
                     vocab_size=get("vocab_size"), intermediate_size=get("intermediate_size", "n_inner", "d_ff"),
                     largest_layer_params=largest, activation=get("activation_function", "hidden_act", "feed_forward_proj"),
                     max_positions=get("max_position_embeddings", "n_positions"), source="config.json")


def _auto(transformers, cfg):
    for auto in (transformers.AutoModelForCausalLM, transformers.AutoModelForSeq2SeqLM, transformers.AutoModel):
        try:
            return auto.from_config(cfg)
        except ValueError:
            continue
    raise BadInput("no transformers class builds this config")


def parse_count(text: str) -> int:
    """'7B' -> 7e9, '125M' -> 125e6, '1.5e9' -> 1.5e9."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kKmMbBtT]?)\s*", str(text))
    if not m or float(m.group(1)) <= 0:
        raise BadInput(f"--params {text}: expected a positive count like 7B, 350M or 1.5e9")
    return int(float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}[m.group(2).lower()])


def from_size(params: str, hidden_size: int | None, layers: int | None, vocab_size: int | None = None) -> ModelSpec:
    """A model known only by its size; activations need --hidden-size and --layers."""
    n = parse_count(params)
    if not hidden_size or not layers:
        raise BadInput("--params needs --hidden-size and --layers too (activation memory depends on them)")
    if hidden_size <= 0 or layers <= 0:
        raise BadInput("--hidden-size and --layers must be positive")
    largest = max(hidden_size * 4 * hidden_size, (vocab_size or 0) * hidden_size)
    return ModelSpec(name=f"{params} params", family="custom", params=n, hidden_size=hidden_size, layers=layers,
                     heads=max(1, hidden_size // 128), vocab_size=vocab_size, intermediate_size=4 * hidden_size,
                     largest_layer_params=largest, activation="gelu", source="params")


def resolve(model: str | None, params: str | None, hidden_size: int | None, layers: int | None,
            vocab_size: int | None = None) -> ModelSpec:
    """--model NAME|PATH, or --params with --hidden-size/--layers."""
    if params:
        return from_size(params, hidden_size, layers, vocab_size)
    if not model:
        raise BadInput("give --model NAME (e.g. gpt2, llama-2-7b), --model PATH to a folder with config.json,"
                       " or --params 7B --hidden-size 4096 --layers 32")
    if Path(model).is_dir():
        return from_path(model)
    return named(model)
