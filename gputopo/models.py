"""Model sizes: well-known architectures from their public hyper-parameters (no hub), a local config.json
counted exactly on the meta device, or a bare parameter count. Pure except `from_path` (transformers)."""
from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import NamedTuple

from . import jsonread
from .errors import BadInput
from .units import MOST_CHARS, MOST_COUNT, NUMBER, shown

# What a model can be, named in each refusal and in docs/options.md; checked before anything is built.
MOST_PARAMS = 1e14       # 100T: fifty times the largest dense models trained (2T, benchmarks/gpu_public.json)
MOST_LAYERS = 2048       # blocks: twice DeepNet's 1,000, the deepest transformer trained; each is built to count it
MOST_WIDTH = 7_071_067   # hidden size, heads, vocabulary, intermediate size: one h x h pair of it is MOST_PARAMS / 2
MOST_PER_BLOCK = 2 ** 16   # parameters in one block, in h^2: Switch-C's blocks of 2,048 experts hold about 12,100
MOST_MODULES = 50_000    # modules built on the meta device: 24 a block for MOST_LAYERS blocks
MOST_CONFIG_BYTES = 2 ** 20   # config.json: transformers' configs are a few KB
MOST_DEPTH = 32          # config.json's nesting: a multimodal config's text_config.rope_scaling is 3 deep
# config.json's counts (at any depth: a multimodal model's text_config has its own) and the bound of each
SHAPE_KEYS = {**dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers", "n_layers", "num_decoder_layers",
                               "encoder_layers", "decoder_layers"), "layers"),
              **dict.fromkeys(("hidden_size", "n_embd", "d_model", "num_attention_heads", "n_head", "num_heads",
                               "num_key_value_heads", "vocab_size", "intermediate_size", "n_inner", "d_ff",
                               "ffn_dim"), "widths"),
              # a context of -5 made speed.flash_share take log2 of it (math domain error, exit 70)
              **dict.fromkeys(("max_position_embeddings", "n_positions"), "positions"),
              # read by gputopo whatever the family (a string head_dim in a GPT-2 config was exit 70)
              **dict.fromkeys(("head_dim", "d_kv"), "widths"),
              # transformers builds an id2label of that many entries: 10**12 grew without bound
              "num_labels": "labels"}
# What some transformers config class (5.x) holds in place of a number, and so may config.json: null (GPT-2's
# n_inner, GPT-Neo's intermediate_size, ESM's vocab_size, Nemotron's K/V heads), a list (Swin's heads per stage,
# Gemma 3n's intermediate size per layer), an object (LXMERT's layers per part). Elsewhere each is refused, naming it,
# before transformers reads it (its own refusal came after 2 s and 266 MB, cut at a colon).
NULLABLE = {"n_inner", "intermediate_size", "vocab_size", "num_key_value_heads", "head_dim"}
LISTED = {"num_attention_heads", "num_heads", "intermediate_size"}
PER_PART = {"num_hidden_layers"}
# The bound of each and why, for config.json's counts and --layers, --hidden-size, --vocab-size alike
BOUNDS = {"layers": (MOST_LAYERS, "twice DeepNet's 1,000, the deepest transformer trained"),
          "widths": (MOST_WIDTH, "one h x h pair of it is half of the 100T parameters any model has"),
          "positions": (MOST_COUNT, "as --seq-len: beyond the largest 32-bit int is a typo"),
          "labels": (1_000_000, "a classifier's classes: ImageNet-21k has 21,841, a million is beyond any")}


class Linear(NamedTuple):
    """A Linear (or GPT-2's Conv1D) module as PEFT and bitsandbytes see it: its path with each block's index as '*'
    (model.layers.*.self_attn.q_proj), its shape, how many the model has, and its place in a block: "qkv" (reads the
    attention's input), "o" (the attention's output), "up" (reads the MLP's input), "down" (the MLP's output),
    "head" (the output head), "other"."""
    name: str
    fan_in: int
    fan_out: int
    count: int
    stage: str

    def matches(self, target: str) -> bool:
        """PEFT's rule for a target module name: the whole path, or its last dotted parts."""
        return self.name == target or self.name.endswith("." + target)


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
    # What the step's memory depends on beyond the sizes (see gputopo.memory):
    model_type: str | None = None  # transformers' model_type, to rebuild the model for --measure
    kv_heads: int | None = None    # grouped-query attention: K/V heads (None: as many as heads)
    head_dim: int | None = None    # None: hidden_size // heads
    tied: bool = False             # lm_head shares the input embedding
    norm: str = "layernorm"        # "layernorm" or "rmsnorm"
    gated_mlp: bool = False        # SwiGLU-style gate and up projections
    fused_qkv: bool = False        # one projection for Q, K and V (GPT-2's c_attn, Phi-3's qkv_proj)
    fused_up: bool = False         # one projection for the MLP's gate and up (Phi-3's gate_up_proj)
    qk_norm: bool = False          # an RMSNorm on each head's Q and K (Qwen3's q_norm, k_norm)
    norms: int = 2                 # norms in a block: before the attention and the MLP (Gemma 2: after each too)
    attn_dropout: float = 0.0      # on the attention probabilities
    hidden_dropout: float = 0.0    # after the attention and MLP outputs
    embd_dropout: float = 0.0      # after the embeddings
    sdpa: bool = True              # transformers runs this architecture with SDPA when not told otherwise
    rotary: bool = False           # rotary positions (RoPE): no learned table, so max_positions is not a wall
    defaulted: tuple[str, ...] = ()  # what config.json left out, as transformers fills it: "layers (32)"
    head: str = "lm"               # what the loss sees: "lm" (vocabulary logits for every token: causal or masked
                                   # LM), "token" (a classifier of `labels` per token), "sequence" (one per sequence)
    labels: int | None = None      # a classification head's classes
    kv_cache: bool = True          # a decoder builds a KV cache in training (use_cache); an encoder (BERT) none
    linears: tuple = ()            # every Linear module (Linear tuples): what LoRA targets and bitsandbytes quantizes
    linears_assumed: bool = False  # the names are the usual ones for its shape, not read from the model (--params)

    def __post_init__(self):
        # read back from JSON (plan --measure's child, saved plans): lists, made Linear tuples again
        object.__setattr__(self, "linears", tuple(Linear(*x) for x in self.linears))
        object.__setattr__(self, "defaulted", tuple(self.defaulted))

    @property
    def output_embedding(self) -> int:
        """Parameters of a vocabulary-wide output matrix besides the input embedding (an untied LM head)."""
        return (self.vocab_size or 0) * self.hidden_size if self.head == "lm" and not self.tied else 0

    @property
    def logits(self) -> int:
        """Logit columns per token the loss reads: the vocabulary (an LM head), the classes (a token
        classifier), none (a sequence classifier: one row per sequence, its pooled first token)."""
        return {"lm": self.vocab_size or 0, "token": self.labels or 2}.get(self.head, 0)

    @property
    def mlp_inputs(self) -> int:
        """Projections reading the MLP's input (each casts it under autocast): gate and up, or one (fused, plain)."""
        return 2 if self.gated_mlp and not self.fused_up else 1

    def to_dict(self) -> dict:
        return asdict(self)


# Public hyper-parameters of well-known checkpoints (their config.json on the Hugging Face hub).
CAUSAL_FAMILIES = ("gpt2", "llama")   # catalog families rebuilt as causal LMs (worker, --measure, bench)
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
    "llama-3.1-8b": dict(family="llama", h=4096, L=32, a=32, kvh=8, V=128256, I=14336, P=131072),
    "llama-3.1-70b": dict(family="llama", h=8192, L=80, a=64, kvh=8, V=128256, I=28672, P=131072),
    "llama-3.1-405b": dict(family="llama", h=16384, L=126, a=128, kvh=8, V=128256, I=53248, P=131072),
    "llama-3.2-1b": dict(family="llama", h=2048, L=16, a=32, kvh=8, V=128256, I=8192, P=131072, tied=True),
    "llama-3.2-3b": dict(family="llama", h=3072, L=28, a=24, kvh=8, V=128256, I=8192, P=131072, tied=True),
    "llama-3.3-70b": dict(family="llama", h=8192, L=80, a=64, kvh=8, V=128256, I=28672, P=131072),
    "mistral-7b": dict(family="llama", h=4096, L=32, a=32, kvh=8, V=32000, I=14336, P=32768),
    "mistral-7b-v0.3": dict(family="llama", h=4096, L=32, a=32, kvh=8, V=32768, I=14336, P=32768),
    "mistral-nemo-12b": dict(family="llama", h=5120, L=40, a=32, kvh=8, kv=128, V=131072, I=14336, P=128000),
    **{f"qwen2.5-{size}": dict(family="llama", h=h, L=L, a=a, kvh=kvh, V=V, I=I, P=32768, qkv_bias=True, tied=tied,
                               model_type="qwen2")
       for size, h, L, a, kvh, V, I, tied in (("0.5b", 896, 24, 14, 2, 151936, 4864, True),
                                              ("1.5b", 1536, 28, 12, 2, 151936, 8960, True),
                                              ("3b", 2048, 36, 16, 2, 151936, 11008, True),
                                              ("7b", 3584, 28, 28, 4, 152064, 18944, False),
                                              ("14b", 5120, 48, 40, 8, 152064, 13824, False),
                                              ("32b", 5120, 64, 40, 8, 152064, 27648, False),
                                              ("72b", 8192, 80, 64, 8, 152064, 29568, False))},
    **{f"qwen3-{size}": dict(family="llama", h=h, L=L, a=a, kvh=8, kv=128, V=151936, I=I, P=40960, tied=tied,
                             model_type="qwen3")
       for size, h, L, a, I, tied in (("0.6b", 1024, 28, 16, 3072, True), ("1.7b", 2048, 28, 16, 6144, True),
                                      ("4b", 2560, 36, 32, 9728, True), ("8b", 4096, 36, 32, 12288, False),
                                      ("14b", 5120, 40, 40, 17408, False), ("32b", 5120, 64, 64, 25600, False))},
    "gemma-2-2b": dict(family="llama", h=2304, L=26, a=8, kvh=4, kv=256, V=256000, I=9216, P=8192, tied=True,
                       model_type="gemma2"),
    "gemma-2-9b": dict(family="llama", h=3584, L=42, a=16, kvh=8, kv=256, V=256000, I=14336, P=8192, tied=True,
                       model_type="gemma2"),
    "gemma-2-27b": dict(family="llama", h=4608, L=46, a=32, kvh=16, kv=128, V=256000, I=36864, P=8192, tied=True,
                        model_type="gemma2"),
    # Qwen (1), remote code transformers does not carry (model_type qwen): its config.json's shape
    # (intermediate_size 22016 is both MLP halves: w1 and w2 each 11008), c_attn fused with its bias
    "qwen-7b": dict(family="llama", h=4096, L=32, a=32, kvh=32, V=151936, I=11008, P=8192, qkv_bias=True,
                    model_type="qwen"),
    "phi-3.5-mini": dict(family="llama", h=3072, L=32, a=32, kvh=32, V=32064, I=8192, P=131072, model_type="phi3"),
    "phi-4": dict(family="llama", h=5120, L=40, a=40, kvh=10, V=100352, I=17920, P=16384, model_type="phi3"),
}
# The structure of each family as transformers builds it, and its configuration's default dropout.
FAMILY = {
    "gpt2": dict(norm="layernorm", fused_qkv=True, tied=True, attn_dropout=0.1, hidden_dropout=0.1, embd_dropout=0.1),
    "bert": dict(norm="layernorm", tied=True, attn_dropout=0.1, hidden_dropout=0.1, embd_dropout=0.1, kv_cache=False),
    "t5": dict(norm="rmsnorm", tied=True, attn_dropout=0.1, hidden_dropout=0.1, embd_dropout=0.1),
    "llama": dict(norm="rmsnorm", gated_mlp=True, rotary=True),
}
# What a model_type of the llama family builds beyond Llama's block, as transformers builds it: Qwen3's Q/K norms,
# Gemma 2's norms after the attention and the MLP (eager attention: its logit soft-capping has no SDPA kernel in
# transformers) and tanh GeLU, Phi-3's fused projections.
MODEL_TYPES = {
    "qwen3": dict(qk_norm=True),
    "gemma2": dict(norms=4, sdpa=False, activation="gelu_pytorch_tanh"),
    "phi3": dict(fused_qkv=True, fused_up=True),
    "qwen": dict(fused_qkv=True),
}
# Hub ids of the catalog's checkpoints; a chat or instruct tuning has its base's shape (not Mistral v0.2+:
# another vocabulary, nor Llama 3.1: another context). Where the two config.json files differ only in their context
# (max_position_embeddings: Qwen2.5's and Qwen3's base and tuned), the catalog keeps the tuned one's (docs/sources.md
# #model-catalog): the shape and every count are the same.
ALIASES = {
    "Qwen/Qwen-7B": "qwen-7b", "Qwen/Qwen-7B-Chat": "qwen-7b",
    **{f"openai-community/{n}": n for n in ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")},
    **{f"google-t5/{n}": n for n in ("t5-small", "t5-base", "t5-large", "t5-3b", "t5-11b")},
    **{f"google-bert/{n}": n for n in ("bert-base-uncased", "bert-large-uncased")},
    **{f"meta-llama/Llama-2-{s}{c}-hf": f"llama-2-{s}" for s in ("7b", "13b", "70b") for c in ("", "-chat")},
    **{f"meta-llama/Meta-Llama-3-{s}{c}": f"llama-3-{s.lower()}" for s in ("8B", "70B") for c in ("", "-Instruct")},
    **{f"meta-llama/{m}Llama-3.1-{s}{c}": f"llama-3.1-{s.lower()}" for m in ("", "Meta-")
       for s in ("8B", "70B", "405B") for c in ("", "-Instruct")},
    **{f"meta-llama/Llama-3.2-{s}{c}": f"llama-3.2-{s.lower()}" for s in ("1B", "3B") for c in ("", "-Instruct")},
    "meta-llama/Llama-3.3-70B-Instruct": "llama-3.3-70b",
    **{f"Qwen/Qwen2.5-{s}{c}": f"qwen2.5-{s.lower()}" for s in ("0.5B", "1.5B", "3B", "7B", "14B", "32B", "72B")
       for c in ("", "-Instruct")},
    **{f"Qwen/Qwen3-{s}{c}": f"qwen3-{s.lower()}" for s in ("0.6B", "1.7B", "4B", "8B", "14B", "32B")
       for c in ("", "-Base") if (s, c) != ("32B", "-Base")},   # Qwen3-32B has no base release
    **{f"google/gemma-2-{s}{c}": f"gemma-2-{s}" for s in ("2b", "9b", "27b") for c in ("", "-it")},
    "mistralai/Mistral-7B-v0.1": "mistral-7b", "mistralai/Mistral-7B-Instruct-v0.1": "mistral-7b",
    "mistralai/Mistral-7B-v0.3": "mistral-7b-v0.3", "mistralai/Mistral-7B-Instruct-v0.3": "mistral-7b-v0.3",
    "mistralai/Mistral-Nemo-Base-2407": "mistral-nemo-12b", "mistralai/Mistral-Nemo-Instruct-2407": "mistral-nemo-12b",
    "microsoft/Phi-3.5-mini-instruct": "phi-3.5-mini", "microsoft/phi-4": "phi-4"}


def _count(family: str, h: int, L: int, a: int, V: int, P: int = 0, I: int | None = None, kv: int | None = None,
           kvh: int | None = None, qkv_bias: bool = False, tied: bool = False, qk_norm: bool = False,
           norms: int = 2) -> tuple[int, int, int, str]:
    """Parameters, largest layer, intermediate size and activation of one family, as transformers builds it
    (kv: the head size where config.json gives one, T5's d_kv, a llama-like head_dim; qk_norm, norms: MODEL_TYPES)."""
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
    if family == "llama":  # Llama, Mistral, Qwen2/3, Gemma 2, Phi-3 (fused, same counts): SwiGLU, RMSNorm
        d = kv or h // a
        hq, kv_dim = a * d, kvh * d
        attn = 2 * h * hq + 2 * h * kv_dim + ((hq + 2 * kv_dim) if qkv_bias else 0) + (2 * d if qk_norm else 0)
        block = attn + 3 * h * I + norms * h
        return (1 if tied else 2) * V * h + L * block + h, V * h, I, "silu"
    raise BadInput(f"unknown model family {family!r}")


def _known_names() -> dict[str, str]:
    """Every name of a catalog model, lowercased: its hub ids, and each hub id without its owner when that names one
    model only (Meta-Llama-3-8B as meta-llama/Meta-Llama-3-8B, as transformers' old ids without owners read)."""
    tails: dict[str, set] = {}
    for hub, key in ALIASES.items():
        tails.setdefault(hub.rpartition("/")[2].lower(), set()).add(key)
    return {**{t: keys.pop() for t, keys in tails.items() if len(keys) == 1},
            **{hub.lower(): key for hub, key in ALIASES.items()}}


KNOWN_NAMES = _known_names()


def catalog_key(name: str) -> str:
    """The catalog's name for a model name or hub id (either in any case, the owner left out or not); the name
    itself when unknown."""
    return KNOWN_NAMES.get(name.lower(), name.lower())


def named(name: str) -> ModelSpec:
    """A catalog model by name (e.g. gpt2, t5-3b, llama-2-7b) or its hub id."""
    key = catalog_key(name)
    if key not in CATALOG:
        if re.fullmatch(r"[\w.-]+/[\w.-]+", name) and not name.startswith("."):   # an owner/name hub id
            raise BadInput(f"--model {name}: no such folder here, nor a hub id gputopo knows (it reads no hub: put"
                           " the model's config.json in a folder and give the folder, or --params)")
        raise BadInput(f"--model {name}: not a known model and no such folder; known: {', '.join(CATALOG)}"
                       " (or give a folder with config.json, or --params)")
    c = dict(CATALOG[key])
    family, model_type = c.pop("family"), c.pop("model_type", None)
    model_type = model_type or ("mistral" if key.startswith("mistral") else family)
    kind = dict(MODEL_TYPES.get(model_type, {}))
    params, largest, inter, act = _count(family, **c, qk_norm=kind.get("qk_norm", False), norms=kind.get("norms", 2))
    act = kind.pop("activation", act)
    layers = 2 * c["L"] if family == "t5" else c["L"]
    shape = {**FAMILY[family], **kind, **({"tied": True} if c.get("tied") else {})}
    spec = ModelSpec(name=key, family=family, params=params, hidden_size=c["h"], layers=layers, heads=c["a"],
                     vocab_size=c["V"], intermediate_size=inter, largest_layer_params=largest, activation=act,
                     max_positions=c.get("P") or None, model_type=model_type, kv_heads=c.get("kvh"),
                     head_dim=c.get("kv"), **shape)
    return replace(spec, linears=usual_linears(spec))


# Module paths of each family's Linear modules as transformers names them, in block_matrices' order: the block's
# prefix, Q/K/V (one fused or three), the attention's output, the MLP's input projection(s), its output; and the head.
MODULE_NAMES = {
    "gpt2": ("transformer.h.*", ("attn.c_attn",), "attn.c_proj", ("mlp.c_fc",), "mlp.c_proj", "lm_head"),
    "bert": ("bert.encoder.layer.*", ("attention.self.query", "attention.self.key", "attention.self.value"),
             "attention.output.dense", ("intermediate.dense",), "output.dense", "cls.predictions.decoder"),
    "llama": ("model.layers.*", ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), "self_attn.o_proj",
              ("mlp.gate_proj", "mlp.up_proj"), "mlp.down_proj", "lm_head"),
    "phi3": ("model.layers.*", ("self_attn.qkv_proj",), "self_attn.o_proj", ("mlp.gate_up_proj",), "mlp.down_proj",
             "lm_head"),
    "qwen": ("transformer.h.*", ("attn.c_attn",), "attn.c_proj", ("mlp.w2", "mlp.w1"), "mlp.c_proj", "lm_head"),
}


def usual_linears(m: ModelSpec) -> tuple[Linear, ...]:
    """The Linear modules of a model not read from its own code (the catalog, --params): its family's names
    (MODULE_NAMES, its model_type's where it has its own: Phi-3's fused ones; Llama's for any other) on
    block_matrices' shapes. T5's encoder and decoder blocks are named apart, the decoder's cross-attention with
    them."""
    mats, _, _, attn = block_matrices(m)
    head = [Linear("lm_head", m.hidden_size, m.vocab_size, 1, "head")] if m.vocab_size and m.head == "lm" else []
    if m.family == "t5":
        L = m.layers // 2
        (_, q), (_, kv), o, (_, wi), (_, _) = mats[0], mats[1], mats[attn], mats[attn + 1], mats[-1]
        def attention(prefix):
            return [Linear(f"{prefix}.{n}", m.hidden_size, w, L, "qkv") for n, w in (("q", q), ("k", kv), ("v", kv))] \
                + [Linear(f"{prefix}.o", o[0], o[1], L, "o")]
        mlp = lambda prefix: [Linear(f"{prefix}.wi", m.hidden_size, wi, L, "up"),   # noqa: E731
                              Linear(f"{prefix}.wo", wi, m.hidden_size, L, "down")]
        return tuple(attention("encoder.block.*.layer.0.SelfAttention") + mlp("encoder.block.*.layer.1.DenseReluDense")
                     + attention("decoder.block.*.layer.0.SelfAttention")
                     + attention("decoder.block.*.layer.1.EncDecAttention")
                     + mlp("decoder.block.*.layer.2.DenseReluDense") + head)
    block, qkv, o, up, down, head_name = MODULE_NAMES.get(m.model_type) or MODULE_NAMES.get(m.family,
                                                                                             MODULE_NAMES["llama"])
    if len(qkv) != attn:   # three named where the shape has one fused (or the reverse): the usual three
        qkv = MODULE_NAMES["llama"][1] if attn == 3 else ("self_attn.qkv_proj",)
    ups = len(mats) - attn - 2
    up = up if len(up) == ups else (("mlp.gate_proj", "mlp.up_proj") if ups == 2 else
                                    ("mlp.gate_up_proj",) if m.fused_up else ("mlp.up_proj",))
    stages = ["qkv"] * attn + ["o"] + ["up"] * ups + ["down"]
    out = [Linear(f"{block}.{n}", i, o_, m.layers, st) for n, (i, o_), st in zip((*qkv, o, *up, down), mats, stages)]
    if m.family == "bert" and head:   # its MLM head transforms the hidden state before the decoder
        out.append(Linear("cls.predictions.transform.dense", m.hidden_size, m.hidden_size, 1, "other"))
    return tuple(out + [h._replace(name=head_name) for h in head])


def read_linears(model, m: ModelSpec) -> tuple[Linear, ...]:
    """The Linear (and Conv1D) modules of a model built on the meta device, each path's block indices as '*', with
    their place in a block found by their shape in block_matrices' order (the output head by what transformers
    calls it)."""
    import torch
    from transformers.pytorch_utils import Conv1D
    out_emb = model.get_output_embeddings()
    found: dict[str, list] = {}
    for name, mod in model.named_modules():
        if isinstance(mod, Conv1D):   # GPT-2's: weight (in, out)
            shape = (mod.nx, mod.nf)
        elif isinstance(mod, torch.nn.Linear):
            shape = (mod.in_features, mod.out_features)
        else:
            continue
        path = re.sub(r"\.\d+(?=\.|$)", ".*", name)
        entry = found.setdefault(path, [shape, 0, "head" if mod is out_emb else None])
        entry[1] += 1
    mats, _, _, attn = block_matrices(m)
    stages = ["qkv"] * attn + ["o"] + ["up"] * (len(mats) - attn - 2) + ["down"]
    free = list(zip(mats, stages))
    out = []
    for path, (shape, count, stage) in found.items():
        if stage is None and "*" in path:   # a block's module: the first of block_matrices' shapes it has
            hit = next((i for i, (mat, _) in enumerate(free) if tuple(mat) == shape), None)
            stage = free.pop(hit)[1] if hit is not None else "other"
        out.append(Linear(path, shape[0], shape[1], count, stage or "other"))
    return tuple(out)


KINDS = {stat.S_IFDIR: "a folder", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
         stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFSOCK: "a socket"}


def read_config(folder) -> dict:
    """A model folder's config.json: a regular file (a link to one is followed) of at most MOST_CONFIG_BYTES, a
    JSON object nested at most MOST_DEPTH deep, naming no code of its own (auto_map). Checked before it is
    opened: a FIFO would wait for a writer, /dev/zero never ends."""
    path, where = Path(folder) / "config.json", f"--model {folder}: config.json"
    try:
        st = os.stat(path)   # follows a link
    except FileNotFoundError:
        raise BadInput(f"--model {folder}: no config.json in that folder") from None
    except OSError as e:
        raise BadInput(f"{where} unreadable ({e.strerror})") from None
    link = f" (a link to {os.path.realpath(path)})" if os.path.islink(path) else ""
    if not stat.S_ISREG(st.st_mode):
        raise BadInput(f"{where} is {KINDS.get(stat.S_IFMT(st.st_mode), 'not a file')}{link}, not a regular file")
    too_big = BadInput(f"{where} is over {MOST_CONFIG_BYTES // 2 ** 20} MiB{link}; a model's config.json is a few KB")
    if st.st_size > MOST_CONFIG_BYTES:
        raise too_big
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)   # replaced by a FIFO since the stat: never waits
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise BadInput(f"{where} is not a regular file")
            data = f.read(MOST_CONFIG_BYTES + 1)
    except OSError as e:
        raise BadInput(f"{where} unreadable ({e.strerror})") from None
    if len(data) > MOST_CONFIG_BYTES:
        raise too_big
    try:
        text = data.decode()
    except UnicodeDecodeError as e:
        raise BadInput(f"{where} unreadable ({e})") from None
    raw = jsonread.loads(text, where, MOST_DEPTH)
    if not isinstance(raw, dict):
        raise BadInput(f"{where} is not a JSON object")
    for key, _ in jsonread.walk(raw):
        if key.rpartition(".")[2] == "auto_map":   # at any depth: a sub-config's auto_map names code too
            at = "" if key == "auto_map" else f" (at {key})"
            raise BadInput(f"{where} has auto_map{at}: the model is code in the folder, and gputopo never runs a"
                           " folder's code (transformers' trust_remote_code); give --params with its size instead")
    return raw


def check_counts(raw: dict, folder) -> None:
    """config.json's layers, widths (hidden size, heads, vocabulary, intermediate size), at any depth: whole
    numbers from 1 to their bound (null, a list or an object only where transformers holds one: NULLABLE, LISTED,
    PER_PART), refused before anything is built, naming the key and what it holds."""
    for at, value in jsonread.walk(raw):
        key = at.rpartition(".")[2]
        if key not in SHAPE_KEYS:
            continue
        if value is None and key in NULLABLE:
            continue
        if isinstance(value, list) and key in LISTED:
            counts = [(f"{at}[{i}]", v) for i, v in enumerate(value)]
        elif isinstance(value, dict) and key in PER_PART:
            counts = [(f"{at}.{k}", v) for k, v in value.items()]
        else:
            counts = [(at, value)]
        for name, v in counts:
            _check_count(folder, name, SHAPE_KEYS[key], v)


def _check_count(folder, name: str, shape: str, value) -> None:
    """One count of config.json: a whole number from 1 to the bound of its `shape` (layers, widths)."""
    most, why = BOUNDS[shape]
    rule = f"a whole number from 1 to {most}: {why}"
    where = f"--model {folder}: config.json {name}"
    if isinstance(value, str):
        raise BadInput(f'{where} is the text {json.dumps(shown(value))}, not a number: write it without quotes'
                       f" ({rule})")
    if value is None or isinstance(value, (bool, list, dict)):
        what = ("null" if value is None else "true" if value is True else "false" if value is False else
                f"a list ({shown(json.dumps(value))})" if isinstance(value, list) else
                f"an object ({shown(json.dumps(value))})")
        raise BadInput(f"{where} is {what}, not a number ({rule})")
    if not isinstance(value, int) or not 1 <= value <= most:
        raise BadInput(f"{where} {shown(value)}: must be a whole number from 1 to {most} ({why})")


def from_path(path: str) -> ModelSpec:
    """Count a local model folder's parameters exactly by building it on the meta device (no weights). Its
    config.json is read (read_config) and its counts checked (check_counts) before transformers is imported."""
    raw = read_config(path)
    check_counts(raw, path)
    import transformers
    transformers.logging.set_verbosity_error()
    try:
        config_class = transformers.CONFIG_MAPPING[raw.get("model_type")]
    except (KeyError, TypeError):   # not a name it knows, or not a name (a list, an object)
        raise BadInput(f"--model {path}: transformers cannot build it: config.json's model_type"
                       f" {shown(raw.get('model_type'))!r} is not one transformers {transformers.__version__} knows"
                       ) from None
    try:
        cfg = config_class.from_dict(raw)   # the dict read above: transformers does not read the file again
        model = _build(transformers, cfg)
    except BadInput as e:
        raise BadInput(f"--model {path}: {e}") from None
    except Exception as e:  # transformers raises many kinds for a bad config; the user needs one line
        said = " ".join(str(e).split())   # on one line, not cut at its first line's end ("for field 'n_layer':")
        said = said if len(said) <= 300 else said[:300] + "..."
        raise BadInput(f"--model {path}: transformers cannot build it ({type(e).__name__}: {said})") from None
    params = sum(p.numel() for p in model.parameters())  # shared (tied) parameters are listed once
    if params > MOST_PARAMS:
        raise BadInput(f"--model {path}: {params:,} parameters, more than any model has (at most {MOST_PARAMS:.0e})")
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    # The config object, not config.json: it fills what the file leaves out with transformers' defaults. An
    # activation that is no name is a key the model ignores (a llama's "activation_function": 5; it uses hidden_act).
    get = lambda *keys: next((getattr(cfg, k) for k in keys if getattr(cfg, k, None) is not None), None)  # noqa: E731
    h = get("hidden_size", "n_embd", "d_model")
    layers = get(*LAYER_KEYS)
    if raw.get("model_type") == "t5" or raw.get("num_decoder_layers"):
        layers = (layers or 0) + (get("num_decoder_layers") or layers or 0)
    heads = get("num_attention_heads", "n_head", "num_heads")
    shape = {"hidden size": (("hidden_size", "n_embd", "d_model"), h), "layers": (LAYER_KEYS, layers),
             "attention heads": (("num_attention_heads", "n_head", "num_heads"), heads),
             "vocabulary": (("vocab_size",), get("vocab_size"))}
    # Left out: none of its names (nor the config's own alias, attribute_map) in the file, and the value the
    # config class gives when nothing is said (BART's depth comes from encoder_layers: given, not defaulted).
    bare = type(cfg)()
    aliases = getattr(cfg, "attribute_map", {}) or {}
    defaulted = tuple(f"{what} ({value})" for what, (keys, value) in shape.items()
                      if value is not None and not any(k in raw or aliases.get(k) in raw for k in keys)
                      and value == next((getattr(bare, k) for k in keys if getattr(bare, k, None) is not None), None))
    spec = ModelSpec(name=str(path), family=raw.get("model_type", "custom"), params=params, hidden_size=h,
                     layers=layers, heads=heads, vocab_size=get("vocab_size"),
                     intermediate_size=get("intermediate_size", "n_inner", "d_ff") or (4 * h if h else None),
                     largest_layer_params=largest,
                     activation=next((v for k in ("activation_function", "hidden_act", "hidden_activation",
                                                  "feed_forward_proj") if isinstance(v := getattr(cfg, k, None), str)),
                                     None),
                     max_positions=get("max_position_embeddings", "n_positions"), source="config.json",
                     model_type=raw.get("model_type"), defaulted=defaulted, **structure(model, cfg))
    return replace(spec, linears=read_linears(model, spec))


LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")


def structure(model, cfg) -> dict:
    """What the step's memory depends on, read from the built model (meta device) and its config, so any
    architecture transformers builds is described by what it really contains, not by its family's name."""
    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    kinds = {type(m).__name__.lower() for m in model.modules()}
    out_emb, in_emb = model.get_output_embeddings(), model.get_input_embeddings()
    get = lambda *keys: next((float(getattr(cfg, k)) for k in keys  # noqa: E731
                              if isinstance(getattr(cfg, k, None), (int, float))), 0.0)
    kv = getattr(cfg, "num_key_value_heads", None)
    return dict(kv_heads=kv, head_dim=getattr(cfg, "head_dim", None) or getattr(cfg, "d_kv", None),
                tied=bool(out_emb is not None and in_emb is not None and out_emb.weight is in_emb.weight),
                norm="rmsnorm" if any("rmsnorm" in k or k == "t5layernorm" for k in kinds) else "layernorm",
                gated_mlp=bool(names & {"gate_proj", "w1", "gate_up_proj", "wi_0"}),
                fused_qkv=bool(names & {"c_attn", "qkv_proj", "query_key_value", "Wqkv"}),
                fused_up="gate_up_proj" in names, qk_norm=bool(names & {"q_norm", "k_norm"}), norms=_block_norms(model),
                attn_dropout=get("attn_pdrop", "attention_dropout", "attention_probs_dropout_prob", "dropout_rate"),
                hidden_dropout=get("resid_pdrop", "hidden_dropout", "hidden_dropout_prob", "dropout_rate"),
                embd_dropout=get("embd_pdrop", "embedding_dropout", "hidden_dropout_prob", "dropout_rate"),
                sdpa=bool(getattr(type(model), "_supports_sdpa", False)),
                rotary=any("rotaryembedding" in k for k in kinds),  # LlamaRotaryEmbedding, GPTNeoXRotaryEmbedding
                kv_cache=_builds_cache(model, cfg),
                **head_of(model, cfg))


def _block_norms(model) -> int:
    """The norms the first block holds as its own modules (Gemma 2: 4); 2 where they are deeper (BERT's)."""
    first = next((mod for name, mod in model.named_modules() if re.search(r"(^|\.)(layers|h|layer|block)\.0$", name)),
                 None)
    found = sum("norm" in type(c).__name__.lower() for c in first.children()) if first is not None else 0
    return found if found >= 2 else 2


def _builds_cache(model, cfg) -> bool:
    """Whether the model builds a KV cache in training: transformers' decoders make a DynamicCache whenever
    use_cache is on, whatever head they carry (LlamaForSequenceClassification too); an encoder (BERT, RoBERTa,
    DistilBERT: a masked-LM architecture) reads use_cache only when configured as a decoder."""
    if not getattr(cfg, "use_cache", False):
        return False
    from transformers.models.auto import modeling_auto as auto
    model_type = getattr(cfg, "model_type", None)
    decoder_only = (model_type in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
                    and model_type not in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES)
    return bool(decoder_only or model.can_generate() or getattr(cfg, "is_decoder", False))


# The head transformers' task classes put on a model, by the class's name: what the loss sees.
HEADS = (("ForSequenceClassification", "sequence"), ("ForTokenClassification", "token"),
         ("ForQuestionAnswering", "token"))


def head_of(model, cfg) -> dict:
    """{"head", "labels"}: a classification head (sequence, token; question answering's start and end logits per
    token) with its classes (config.num_labels), else the LM head over the vocabulary."""
    name = type(model).__name__
    head = next((h for suffix, h in HEADS if name.endswith(suffix)), "lm")
    labels = 2 if name.endswith("ForQuestionAnswering") else int(getattr(cfg, "num_labels", 2) or 2)
    return {"head": head, "labels": None if head == "lm" else labels}


def hf_config(spec: ModelSpec) -> dict:
    """The transformers configuration (AutoConfig.for_model keywords) that rebuilds this model for --measure."""
    if spec.source == "config.json":
        return read_config(spec.name)   # read again as from_path read it: the folder may have changed since
    if spec.source != "catalog" or spec.family not in CAUSAL_FAMILIES:
        raise BadInput(f"--measure builds causal LMs from their architecture; {spec.name} is not one"
                       " (give --model with a catalog causal LM or a folder with config.json)")
    if spec.family == "gpt2":
        return dict(model_type="gpt2", n_embd=spec.hidden_size, n_layer=spec.layers, n_head=spec.heads,
                    vocab_size=spec.vocab_size, n_positions=spec.max_positions, n_inner=spec.intermediate_size,
                    attn_pdrop=spec.attn_dropout, resid_pdrop=spec.hidden_dropout, embd_pdrop=spec.embd_dropout)
    c = CATALOG[spec.name]
    return dict(model_type=spec.model_type, hidden_size=spec.hidden_size, num_hidden_layers=spec.layers,
                num_attention_heads=spec.heads, num_key_value_heads=spec.kv_heads or spec.heads,
                intermediate_size=spec.intermediate_size, vocab_size=spec.vocab_size,
                max_position_embeddings=spec.max_positions, tie_word_embeddings=spec.tied,
                attention_dropout=spec.attn_dropout, **({"head_dim": spec.head_dim} if spec.head_dim else {}),
                **({"attention_bias": True} if c.get("qkv_bias") and spec.model_type == "llama" else {}))


def _build(transformers, cfg):
    """The model on the meta device: the class config.json's architectures names when it is a transformers model
    class (a Trainer or TextStreamer named there is never built), else transformers' Auto classes; at most
    MOST_MODULES modules, whatever count (experts, groups) config.json grows them by."""
    import torch
    arch = (getattr(cfg, "architectures", None) or [None])[0]
    cls = getattr(transformers, arch, None) if isinstance(arch, str) and arch.isidentifier() else None
    built = [0]

    def count(module, name, submodule):
        built[0] += 1
        if built[0] > MOST_MODULES:
            raise BadInput(f"the model grows past {MOST_MODULES:,} modules ({MOST_LAYERS:,} blocks of 24): check"
                           " config.json's counts")
    hook = torch.nn.modules.module.register_module_module_registration_hook(count)
    try:
        with torch.device("meta"):
            if isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel):
                return cls(cfg)
            return _auto(transformers, cfg)
    finally:
        hook.remove()


def _auto(transformers, cfg):
    for auto in (transformers.AutoModelForCausalLM, transformers.AutoModelForSeq2SeqLM, transformers.AutoModel):
        try:
            return auto.from_config(cfg, trust_remote_code=False)   # never a folder's code, never a prompt
        except ValueError:
            continue
    raise BadInput("no transformers class builds this config")


def parse_count(text: str) -> int:
    """'7B' -> 7e9, '125M' -> 125e6, '1.5e9' -> 1.5e9 (numbers as every option reads them: units.NUMBER)."""
    m = re.fullmatch(rf"\s*({NUMBER})\s*([kKmMbBtT]?)\s*", str(text)) if len(str(text)) <= MOST_CHARS else None
    if not m or float(m.group(1)) <= 0:
        raise BadInput(f"--params {shown(text)}: expected a positive count like 7B, 350M or 1.5e9")
    n = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}[m.group(2).lower()]
    if n > MOST_PARAMS:
        raise BadInput(f"--params {text}: more than any model has (at most {MOST_PARAMS / 1e12:g}T)")
    return int(n)


def from_size(params: str, hidden_size: int | None, layers: int | None, vocab_size: int | None = None) -> ModelSpec:
    """A model known only by its size; activations need --hidden-size and --layers."""
    n = parse_count(params)
    if not hidden_size or not layers:
        raise BadInput("--params needs --hidden-size and --layers too (activation memory depends on them)")
    if hidden_size <= 0 or layers <= 0:
        raise BadInput("--hidden-size and --layers must be positive")
    # Even blocks that share their weights (ALBERT) hold one block's attention query and output, h x h each
    least = 2 * hidden_size ** 2 + (vocab_size or 0) * hidden_size
    if n < least:
        raise BadInput(f"--params {params}: a model of hidden size {hidden_size} holds at least {least:,} parameters"
                       " (one block's attention query and output, h x h each, even shared by all blocks"
                       + (", and the embedding" if vocab_size else "") + "): check --params and --hidden-size")
    vocab = vocab_size or MOST_WIDTH
    most = layers * MOST_PER_BLOCK * hidden_size ** 2 + 2 * vocab * hidden_size
    if n > most:
        blocks = f"{layers} block{'s' if layers > 1 else ''}"
        raise BadInput(f"--params {params}: {blocks} of hidden size {hidden_size} hold at most {most:,} parameters"
                       f" ({MOST_PER_BLOCK} h^2 a block, five times Switch-C's 2,048 experts; an embedding and a head"
                       f" of {vocab:,} tokens): check --params, --hidden-size and --layers")
    largest = max(hidden_size * 4 * hidden_size, (vocab_size or 0) * hidden_size)
    spec = ModelSpec(name=f"{params} params", family="custom", params=n, hidden_size=hidden_size, layers=layers,
                     heads=max(1, hidden_size // 128), vocab_size=vocab_size, intermediate_size=4 * hidden_size,
                     largest_layer_params=largest, activation="gelu", source="params")
    return replace(spec, linears=usual_linears(spec), linears_assumed=True)


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
    if catalog_key(model) in CATALOG:   # before a file of that name in the current folder
        return named(model)
    if Path(model).is_file():   # the folder is what transformers and the launched training load from
        folder = f" ({Path(model).parent}/)" if Path(model).name == "config.json" else ""
        raise BadInput(f"--model {model}: a file; give the folder that holds the model's config.json{folder}")
    return named(model)


# ---- the model's parameter tensors (what the optimizer, buckets and matmuls see) ----------------------------------

def block_tensors(m) -> list[tuple[int, bool]]:
    """One block's parameter tensors in forward order, as (elements, is a weight matrix): the norms, the
    projections and their biases. Biases are read from the parameter count: what the matrices, norms and
    embeddings leave of m.params is biases on every projection (GPT-2, BERT), on Q, K and V only (Qwen2), or
    none (Llama). Qwen3's Q and K norms follow the projections; Gemma 2's norms after the attention and the MLP
    follow their output projections."""
    mats, biased, norm, attn = block_matrices(m)
    after = (m.norms - 2) // 2   # norms after the attention's output and after the MLP's
    out = [(x, False) for x in norm]
    for i, (fan_in, fan_out) in enumerate(mats):
        if i == attn + 1:
            out += [(x, False) for x in norm] * (1 + after)
        out += [(fan_in * fan_out, True)] + ([(fan_out, False)] if i in biased else [])
        if i == attn - 1 and m.qk_norm:
            out += [(qk_head_dim(m), False)] * 2
    return out + [(x, False) for x in norm] * after


def qk_head_dim(m) -> int:
    """The size of one head: what Qwen3's Q and K norms hold each."""
    return m.head_dim or m.hidden_size // (m.heads or 1)


def param_tensors(m) -> int:
    """How many parameter tensors the model has: each block's, the embeddings and the final norm's."""
    _, _, norm, _ = block_matrices(m)
    return m.layers * len(block_tensors(m)) + len(embedding_tensors(m)) + len(norm)


def factored_elements(m) -> int:
    """The elements of Adafactor's factored second moment (Shazeer and Stern, arXiv 1804.04235; transformers'
    Adafactor keeps exp_avg_sq_row and exp_avg_sq_col for a tensor of two dimensions or more, exp_avg_sq whole for
    a vector): a row and a column per weight matrix, the vectors (biases, norms) whole."""
    mats, biased, norm, _ = block_matrices(m)
    h = m.hidden_size
    block = (sum(i + o for i, o in mats) + sum(mats[i][1] for i in biased) + m.norms * sum(norm)
             + (2 * qk_head_dim(m) if m.qk_norm else 0))
    embeddings = sum(n // h + h for n in embedding_tensors(m))   # each h wide: its rows and its h columns
    return m.layers * block + embeddings + sum(norm)


def block_matrices(m) -> tuple[list, set, list, int]:
    """(the block's projections as (fan_in, fan_out) in forward order, the indices of those with a bias, one norm's
    tensors, how many of the projections are Q, K and V)."""
    h, I, a = m.hidden_size, m.intermediate_size or 4 * m.hidden_size, m.heads or 1
    d = m.head_dim or h // a
    hq, hkv = a * d, (m.kv_heads or a) * d
    attn = [(h, hq + 2 * hkv)] if m.fused_qkv else [(h, hq), (h, hkv), (h, hkv)]
    mlp = ([(h, 2 * I)] if m.fused_up else [(h, I)] * (2 if m.gated_mlp else 1)) + [(I, h)]
    norm = [h, h] if m.norm == "layernorm" else [h]
    mats = attn + [(hq, h)] + mlp
    known = (m.layers * (sum(i * o for i, o in mats) + m.norms * sum(norm) + (2 * d if m.qk_norm else 0))
             + sum(embedding_tensors(m)) + sum(norm))
    spare = (m.params - known) / max(m.layers, 1)
    qkv = sum(o for _, o in attn)
    every = spare >= 0.99 * sum(o for _, o in mats)
    biased = {i for i in range(len(mats)) if every or (i < len(attn) and spare >= 0.99 * qkv)}
    return mats, biased, norm, len(attn)


def embedding_tensors(m) -> list[int]:
    """The token embedding, learned positions (GPT-2, BERT) and an untied head."""
    h = m.hidden_size
    emb = ([m.vocab_size * h] if m.vocab_size else []) + ([m.output_embedding] if m.output_embedding else [])
    pos = [m.max_positions * h] if m.family in ("gpt2", "bert") and m.max_positions else []
    return emb + pos
