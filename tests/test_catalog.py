"""The catalog's models people fine-tune now (issue 48 item 10): each shape as its published config.json gives it
(docs/sources.md#model-catalog), counted as transformers builds it, and held against the parameter count its
model card states."""
import json
import re

import pytest

from gputopo import models


def config(model_type, h, L, a, kvh, I, V, P, tied, **extra):
    """A config.json's shape keys, as the model's hub page publishes them."""
    arch = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
            "qwen3": "Qwen3ForCausalLM", "gemma2": "Gemma2ForCausalLM", "phi3": "Phi3ForCausalLM"}[model_type]
    return {"architectures": [arch], "model_type": model_type, "hidden_size": h, "num_hidden_layers": L,
            "num_attention_heads": a, "num_key_value_heads": kvh, "intermediate_size": I, "vocab_size": V,
            "max_position_embeddings": P, "tie_word_embeddings": tied, **extra}


# catalog key: (the hub id whose config.json is cited, its shape keys as published)
PUBLISHED = {
    "llama-3.1-8b": ("meta-llama/Llama-3.1-8B", config("llama", 4096, 32, 32, 8, 14336, 128256, 131072, False)),
    "llama-3.1-70b": ("meta-llama/Llama-3.1-70B", config("llama", 8192, 80, 64, 8, 28672, 128256, 131072, False)),
    "llama-3.1-405b": ("meta-llama/Llama-3.1-405B", config("llama", 16384, 126, 128, 8, 53248, 128256, 131072, False)),
    "llama-3.2-1b": ("meta-llama/Llama-3.2-1B", config("llama", 2048, 16, 32, 8, 8192, 128256, 131072, True,
                                                       head_dim=64)),
    "llama-3.2-3b": ("meta-llama/Llama-3.2-3B", config("llama", 3072, 28, 24, 8, 8192, 128256, 131072, True,
                                                       head_dim=128)),
    "llama-3.3-70b": ("meta-llama/Llama-3.3-70B-Instruct", config("llama", 8192, 80, 64, 8, 28672, 128256, 131072,
                                                                  False)),
    "qwen2.5-0.5b": ("Qwen/Qwen2.5-0.5B-Instruct", config("qwen2", 896, 24, 14, 2, 4864, 151936, 32768, True)),
    "qwen2.5-1.5b": ("Qwen/Qwen2.5-1.5B-Instruct", config("qwen2", 1536, 28, 12, 2, 8960, 151936, 32768, True)),
    "qwen2.5-3b": ("Qwen/Qwen2.5-3B-Instruct", config("qwen2", 2048, 36, 16, 2, 11008, 151936, 32768, True)),
    "qwen2.5-7b": ("Qwen/Qwen2.5-7B-Instruct", config("qwen2", 3584, 28, 28, 4, 18944, 152064, 32768, False)),
    "qwen2.5-14b": ("Qwen/Qwen2.5-14B-Instruct", config("qwen2", 5120, 48, 40, 8, 13824, 152064, 32768, False)),
    "qwen2.5-32b": ("Qwen/Qwen2.5-32B-Instruct", config("qwen2", 5120, 64, 40, 8, 27648, 152064, 32768, False)),
    "qwen2.5-72b": ("Qwen/Qwen2.5-72B-Instruct", config("qwen2", 8192, 80, 64, 8, 29568, 152064, 32768, False)),
    **{f"qwen3-{s.lower()}": (f"Qwen/Qwen3-{s}", config("qwen3", h, L, a, 8, I, 151936, 40960, tied, head_dim=128,
                                                       attention_bias=False))
       for s, h, L, a, I, tied in (("0.6B", 1024, 28, 16, 3072, True), ("1.7B", 2048, 28, 16, 6144, True),
                                   ("4B", 2560, 36, 32, 9728, True), ("8B", 4096, 36, 32, 12288, False),
                                   ("14B", 5120, 40, 40, 17408, False), ("32B", 5120, 64, 64, 25600, False))},
    "gemma-2-2b": ("google/gemma-2-2b", config("gemma2", 2304, 26, 8, 4, 9216, 256000, 8192, True, head_dim=256,
                                               hidden_activation="gelu_pytorch_tanh")),
    "gemma-2-9b": ("google/gemma-2-9b", config("gemma2", 3584, 42, 16, 8, 14336, 256000, 8192, True, head_dim=256,
                                               hidden_activation="gelu_pytorch_tanh")),
    "gemma-2-27b": ("google/gemma-2-27b", config("gemma2", 4608, 46, 32, 16, 36864, 256000, 8192, True, head_dim=128,
                                                 hidden_activation="gelu_pytorch_tanh")),
    "mistral-7b-v0.3": ("mistralai/Mistral-7B-v0.3", config("mistral", 4096, 32, 32, 8, 14336, 32768, 32768, False)),
    "mistral-nemo-12b": ("mistralai/Mistral-Nemo-Base-2407", config("mistral", 5120, 40, 32, 8, 14336, 131072, 128000,
                                                                    False, head_dim=128)),
    "phi-3.5-mini": ("microsoft/Phi-3.5-mini-instruct", config("phi3", 3072, 32, 32, 32, 8192, 32064, 131072, False)),
    "phi-4": ("microsoft/phi-4", config("phi3", 5120, 40, 40, 10, 17920, 100352, 16384, False)),
}

# catalog key: (total as the card states it, non-embedding where it states one too). Gemma 2's card gives the sizes
# by name only; its technical report (arXiv 2408.00118, Table 1, cited by the card) gives exact counts: the
# non-embedding ones are held exactly, the totals in GEMMA_2 (its embedding counts 256,128 rows, config.json's
# vocabulary 256,000).
# Phi-4's card says "14B parameters" (the billions, truncated); its hub page's Safetensors size says 14.7B.
CARDS = {
    "llama-3.1-8b": ("8B", None), "llama-3.1-70b": ("70B", None), "llama-3.1-405b": ("405B", None),
    "llama-3.2-1b": ("1.23B", None), "llama-3.2-3b": ("3.21B", None), "llama-3.3-70b": ("70B", None),
    "qwen2.5-0.5b": ("0.49B", "0.36B"), "qwen2.5-1.5b": ("1.54B", "1.31B"), "qwen2.5-3b": ("3.09B", "2.77B"),
    "qwen2.5-7b": ("7.61B", "6.53B"), "qwen2.5-14b": ("14.7B", "13.1B"), "qwen2.5-32b": ("32.5B", "31.0B"),
    "qwen2.5-72b": ("72.7B", "70.0B"),
    "qwen3-0.6b": ("0.6B", "0.44B"), "qwen3-1.7b": ("1.7B", "1.4B"), "qwen3-4b": ("4.0B", "3.6B"),
    "qwen3-8b": ("8.2B", "6.95B"), "qwen3-14b": ("14.8B", "13.2B"), "qwen3-32b": ("32.8B", "31.2B"),
    "gemma-2-2b": (None, 2_024_517_888), "gemma-2-9b": (None, 8_324_201_984), "gemma-2-27b": (None, 26_047_480_320),
    "mistral-7b-v0.3": ("7.3B", None),    # Mistral's announcement of Mistral 7B; the card gives none
    "mistral-nemo-12b": ("12B", None), "phi-3.5-mini": ("3.8B", None), "phi-4": ("14.7B", None),
}
# Gemma 2's technical report, Table 1: embedding parameters, non-embedding parameters
GEMMA_2 = {"gemma-2-2b": (590_118_912, 2_024_517_888), "gemma-2-9b": (917_962_752, 8_324_201_984),
           "gemma-2-27b": (1_180_237_824, 26_047_480_320)}


def stated(figure) -> tuple[float, float]:
    """(the count a card states, how far a count may be from it): an exact count exactly; a rounded figure
    ("1.54B") within 1 % or half a unit of its last digit, whichever is wider (a card rounds 1.72B to "1.7B")."""
    if isinstance(figure, int):
        return figure, 0
    decimals = figure.rstrip("B").partition(".")[2]
    value = float(figure.rstrip("B")) * 1e9
    return value, max(0.01 * value, 0.5 * 10 ** -len(decimals) * 1e9)


def non_embedding(m) -> int:
    """The parameters besides the vocabulary's embedding and an untied LM head (the cards' "non-embedding")."""
    return m.params - m.vocab_size * m.hidden_size - m.output_embedding


@pytest.mark.parametrize("key", CARDS)
def test_catalog_counts_hold_to_the_model_cards(key):
    m = models.named(key)
    total, inner = CARDS[key]
    if total is not None:
        value, within = stated(total)
        assert abs(m.params - value) <= within, (key, m.params, total)
    if inner is not None:
        value, within = stated(inner)
        assert abs(non_embedding(m) - value) <= within, (key, non_embedding(m), inner)


def test_gemma_2_totals_are_the_reports_but_for_its_128_extra_embedding_rows():
    for key, (embedding, rest) in GEMMA_2.items():
        m = models.named(key)
        assert (embedding, rest) == ((256000 + 128) * m.hidden_size, CARDS[key][1])
        assert embedding + rest - m.params == 128 * m.hidden_size


def test_every_catalog_model_of_issue_48_has_its_card_and_config():
    assert set(CARDS) == set(PUBLISHED)
    wanted = ["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "llama-3.2-1b", "llama-3.2-3b", "llama-3.3-70b",
              *(f"qwen2.5-{s}" for s in ("0.5b", "1.5b", "3b", "7b", "14b", "32b", "72b")),
              *(f"qwen3-{s}" for s in ("0.6b", "1.7b", "4b", "8b", "14b", "32b")),
              "gemma-2-2b", "gemma-2-9b", "gemma-2-27b", "mistral-7b-v0.3", "mistral-nemo-12b", "phi-3.5-mini", "phi-4"]
    assert set(wanted) <= set(models.CATALOG) and set(wanted) <= set(CARDS)


STRUCTURE = ("params", "largest_layer_params", "hidden_size", "layers", "heads", "kv_heads", "vocab_size",
             "intermediate_size", "max_positions", "tied", "norm", "gated_mlp", "fused_qkv", "fused_up", "qk_norm",
             "norms", "sdpa", "rotary", "activation", "model_type")


@pytest.mark.parametrize("key", PUBLISHED)
def test_catalog_equals_its_config_json_built_by_transformers(tmp_path, key):
    """The strongest check: the published config.json built on the meta device (models.from_path) has the catalog's
    parameters, largest layer, structure and Linear modules (names and shapes, as PEFT targets them)."""
    (tmp_path / "config.json").write_text(json.dumps(PUBLISHED[key][1]))
    built, spec = models.from_path(str(tmp_path)), models.named(key)
    assert {f: getattr(spec, f) for f in STRUCTURE} == {f: getattr(built, f) for f in STRUCTURE}
    head_dim = lambda m: m.head_dim or m.hidden_size // m.heads   # noqa: E731
    assert head_dim(spec) == head_dim(built)
    assert sorted(spec.linears) == sorted(built.linears)


@pytest.mark.parametrize("key", PUBLISHED)
def test_measure_rebuilds_the_catalog_model(key):
    """--measure and the benchmark worker build a catalog model from hf_config: the same model_type and count."""
    import torch
    import transformers
    spec = models.named(key)
    cfg = transformers.AutoConfig.for_model(**models.hf_config(spec))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    assert (cfg.model_type, sum(p.numel() for p in model.parameters())) == (spec.model_type, spec.params)


@pytest.mark.parametrize("key", PUBLISHED)
def test_hub_ids_and_their_tunings_name_the_catalog_model(key):
    hub = PUBLISHED[key][0]
    assert models.named(hub) == models.named(key)
    tunings = [h for h, k in models.ALIASES.items() if k == key]
    alone = ("llama-3.3-70b", "qwen3-32b", "phi-3.5-mini", "phi-4")   # released tuned only (Qwen3-32B: no -Base)
    assert hub in tunings and len(tunings) >= (1 if key in alone else 2)
    for h in tunings:
        assert models.catalog_key(h) == key and re.fullmatch(r"[\w.-]+/[\w.-]+", h)
