"""Predicted vs measured memory of one real training step, for models of every family gputopo plans for.

Run: .venv/bin/python benchmarks/memory_accuracy.py [--only NAME ...] [--list]
Each configuration is a causal LM built by transformers from its config (random weights), trained for two
steps with torch.optim.AdamW by the same child process `gputopo plan --measure` runs (gputopo.measure): on
CPU the step's memory is the high-water mark of the process over the second step (VmHWM after clear_refs,
glibc mmapping every block >= 64 KiB), on CUDA torch.cuda.max_memory_allocated(). "step" is the peak above
weights and optimizer states: the gradients, activations and temporaries alive at the worst moment, which
is what gputopo.memory predicts. fp32 with dropout 0 on CPU (a CPU step then allocates what a CUDA step
does); on a CUDA machine (or with --bf16) every configuration also runs under bf16 autocast. Targets: within 10 % (eager
attention) and 15 % (sdpa). Then `--measure`'s defaults on CPU (DEFAULT_CASES, --skip-defaults leaves them out):
GPT-2 with dropout 0.1 under bf16 autocast, where SDPA runs PyTorch's fp32 math kernel. Models are small
(weights of a few MB to ~30 MB; stock GPT-2 for the default case) so the run fits a shared 2-core machine in
a few minutes; the step memory of each is 50-400 MB (stock GPT-2: 1.9 GiB).
"""
import argparse
import json
import time

from gputopo import measure, memory
from gputopo.models import ModelSpec
from gputopo.plan import Training

TARGET = {"eager": 0.10, "sdpa": 0.15}

# name: (transformers config, batch, seq). Families: GPT-2 (LayerNorm, fused QKV, tanh GeLU, tied),
# Llama (RMSNorm, SwiGLU, GQA, untied), Qwen2 (tied, large vocabulary, QKV bias), Mistral (GQA, SwiGLU).
GPT2 = dict(model_type="gpt2", attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)
CONFIGS = {
    "gpt2-h256-L4": (dict(GPT2, n_embd=256, n_layer=4, n_head=4, vocab_size=8000, n_positions=512), 4, 256),
    "gpt2-h128-L6-longseq": (dict(GPT2, n_embd=128, n_layer=6, n_head=4, vocab_size=512, n_positions=1024), 2, 1024),
    "llama-gqa-h256-L4": (dict(model_type="llama", hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                               num_attention_heads=8, num_key_value_heads=2, vocab_size=8000,
                               max_position_embeddings=512), 4, 256),
    "llama-gqa-h192-L8-smallvocab": (dict(model_type="llama", hidden_size=192, intermediate_size=512,
                                          num_hidden_layers=8, num_attention_heads=6, num_key_value_heads=3,
                                          vocab_size=1000, max_position_embeddings=1024), 2, 512),
    "qwen2-tied-h128-V32k": (dict(model_type="qwen2", hidden_size=128, intermediate_size=352, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, vocab_size=32000,
                                  tie_word_embeddings=True, max_position_embeddings=512), 2, 192),
    "mistral-h256-L4": (dict(model_type="mistral", hidden_size=256, intermediate_size=896, num_hidden_layers=4,
                             num_attention_heads=8, num_key_value_heads=2, vocab_size=4000,
                             max_position_embeddings=1024), 2, 384),
}
# (config, attention, checkpointing): 12 CPU cases over the families, both attentions, with and without.
CASES = [
    ("gpt2-h256-L4", "eager", False), ("gpt2-h256-L4", "sdpa", True),
    ("gpt2-h128-L6-longseq", "eager", False), ("gpt2-h128-L6-longseq", "eager", True),
    ("llama-gqa-h256-L4", "eager", True), ("llama-gqa-h256-L4", "sdpa", False),
    ("llama-gqa-h192-L8-smallvocab", "sdpa", True), ("llama-gqa-h192-L8-smallvocab", "eager", False),
    ("qwen2-tied-h128-V32k", "eager", False), ("qwen2-tied-h128-V32k", "sdpa", True),
    ("mistral-h256-L4", "sdpa", False), ("mistral-h256-L4", "eager", True),
]
# `plan --measure`'s defaults on a CPU machine: stock GPT-2 (dropout 0.1) under bf16 autocast, where SDPA with
# attention dropout runs PyTorch's math kernel in fp32 (gputopo.memory.math_sdpa_bytes), and a small GPT-2 with
# dropout 0.1 at a long sequence (the s^2 tensors dominate). (config, attention, checkpointing, precision).
CONFIGS["gpt2-stock-dropout0.1"] = (dict(model_type="gpt2", n_embd=768, n_layer=12, n_head=12, vocab_size=50257,
                                         n_positions=1024), 4, 256)
CONFIGS["gpt2-h256-L4-dropout0.1"] = (dict(model_type="gpt2", n_embd=256, n_layer=4, n_head=4, vocab_size=8000,
                                           n_positions=1024), 2, 1024)
# One block, long sequence, small vocabulary: the peak falls in the block's backward (the scores' gradients).
CONFIGS["gpt2-h64-L1-V256-dropout0.1"] = (dict(model_type="gpt2", n_embd=64, n_layer=1, n_head=4, vocab_size=256,
                                               n_positions=1024), 2, 1024)
DEFAULT_CASES = [
    ("gpt2-stock-dropout0.1", "sdpa", False, "bf16"),
    ("gpt2-h64-L1-V256-dropout0.1", "sdpa", False, "bf16"), ("gpt2-h64-L1-V256-dropout0.1", "eager", False, "bf16"),
    ("gpt2-h64-L1-V256-dropout0.1", "sdpa", False, "fp32"),
    ("gpt2-h256-L4-dropout0.1", "sdpa", False, "bf16"), ("gpt2-h256-L4-dropout0.1", "sdpa", True, "bf16"),
    ("gpt2-h256-L4-dropout0.1", "eager", False, "bf16"), ("gpt2-h256-L4-dropout0.1", "sdpa", False, "fp32"),
]


def spec_of(name: str) -> ModelSpec:
    """The ModelSpec gputopo would read from this config.json (built on the meta device, like --model PATH)."""
    import json
    import tempfile
    from pathlib import Path

    from gputopo.models import from_path
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "config.json").write_text(json.dumps(CONFIGS[name][0]))
        return from_path(d)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="run only these configurations (names from --list)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--bf16", action="store_true", help="also bf16 autocast on CPU (always on a CUDA machine)")
    ap.add_argument("--skip-defaults", action="store_true",
                    help="leave out the dropout-0.1 cases (--measure's defaults on CPU; stock GPT-2 takes ~1 min)")
    ap.add_argument("--save", metavar="JSON", help="also write the raw measurements here")
    ap.add_argument("--load", metavar="JSON", help="compare with measurements saved by --save (no training)")
    args = ap.parse_args()
    if args.list:
        print("\n".join([f"{c} {a} ckpt={k}" for c, a, k in CASES]
                        + [f"{c} {a} ckpt={k} {p}" for c, a, k, p in DEFAULT_CASES]))
        return
    precisions = ["fp32"] + (["bf16"] if args.bf16 else [])
    try:
        import torch
        if torch.cuda.is_available() and "bf16" not in precisions:
            precisions.append("bf16")
    except ImportError:
        pass
    items = [(c, a, k, p) for c, a, k in CASES for p in precisions]
    items += [] if args.skip_defaults else DEFAULT_CASES
    reqs, plans = [], []
    for name, attention, ckpt, precision in items:
        if args.only and name not in args.only:
            continue
        cfg, batch, seq = CONFIGS[name]
        t = Training(precision=precision, batch_size=batch, seq_len=seq, grad_checkpointing=ckpt, attention=attention)
        reqs.append({"config": cfg, "attention": attention, "precision": precision, "optimizer": "adamw",
                     "batch_size": batch, "seq_len": seq, "grad_checkpointing": ckpt})
        plans.append((name, spec_of(name), t))
    t0 = time.perf_counter()
    if args.load:
        with open(args.load) as f:
            saved = {json.dumps(r["request"], sort_keys=True): r for r in json.load(f)}
        results = [saved[json.dumps(r, sort_keys=True)] for r in reqs]
    else:
        results = measure.run_many(reqs, need_bytes=2 ** 30 * 4)
        for req, res in zip(reqs, results):
            res["request"] = req
    if args.save:
        with open(args.save, "w") as f:
            json.dump(results, f, indent=1)
    device = results[0]["device"]
    how = f"loaded from {args.load}" if args.load else f"in {time.perf_counter() - t0:.0f} s"
    print(f"{len(results)} steps measured on {device} {how} (torch {results[0]['torch']},"
          f" transformers {results[0]['transformers']}); error = predicted / measured - 1")
    print(f"{'configuration':30} {'prec':5} {'attn':5} {'ckpt':5} {'params':>7} {'predicted':>10} {'measured':>10}"
          f" {'error':>7}  peak phase (predicted)")
    worst = {}
    for (name, spec, t), res in zip(plans, results):
        pk = memory.peak(spec, t, res["attention"], 4 * spec.params, device=device)
        err = pk["bytes"] / res["step"] - 1
        key = (res["attention"], t.precision, f"dropout {spec.attn_dropout:g}")
        worst[key] = max(worst.get(key, 0.0), abs(err))
        print(f"{name:30} {t.precision:5} {res['attention']:5} {str(t.grad_checkpointing):5} {spec.params / 1e6:6.1f}M"
              f" {pk['bytes'] / 2 ** 20:8.1f}Mi {res['step'] / 2 ** 20:8.1f}Mi {err:+7.1%}  {pk['phase']}")
    for (attention, precision, dropout), w in sorted(worst.items()):
        plain = precision == "fp32" and dropout == "dropout 0"
        target = f" (target {TARGET[attention]:.0%})" if plain else " (for information)"
        print(f"worst error, {precision} {attention} {dropout}: {w:.1%}{target}")


if __name__ == "__main__":
    main()
