"""The host's time to dispatch one kernel of a training step: what gputopo.speed's host floor (HOST_OP_S) rests on.

Run: .venv/bin/python benchmarks/host_dispatch.py [--steps N] [--device cpu|cuda]

A training step in eager PyTorch is Python, transformers' modules, torch's dispatcher, autograd and (on a GPU) a
launch per kernel; when the kernels are short the GPU waits for the host. This times the forward and backward
of models built from their configuration at a tiny width (64 wide, 8 tokens), so the kernels themselves take
next to nothing, in fp32 and under autocast (bf16), and divides by the kernels gputopo.ops.kernels counts for
them. The optimizer is left out: on a GPU torch's foreach AdamW launches a few dozen kernels for the whole model,
on a CPU it loops over every tensor (no foreach kernels there), which no GPU step does. On a CPU the "kernels" run on
the same core (a few microseconds each at this size): the figure is an upper bound of the dispatch alone; on a GPU
it includes the launches. Prints the step, the kernels counted and the time per kernel, per model family.
"""
import argparse
import statistics
import time


def families():
    """(name, transformers config kwargs, gputopo ModelSpec) for each family timed: the model's depth and layout,
    64 wide."""
    import tempfile

    import transformers

    from gputopo import models
    out = []
    for name, cfg in (("gpt2", transformers.GPT2Config(n_embd=64, n_layer=12, n_head=2, vocab_size=64,
                                                       n_positions=64)),
                      ("llama", transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=16,
                                                         num_attention_heads=2, num_key_value_heads=1, vocab_size=64,
                                                         max_position_embeddings=64))):
        with tempfile.TemporaryDirectory(prefix=f"gputopo-host-{name}-") as folder:   # read once, then removed
            cfg.save_pretrained(folder)
            out.append((name, cfg, models.from_path(folder)))
    return out


def step_seconds(model, ids, autocast: bool, device: str, steps: int) -> float:
    import torch

    def step():
        with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        model.zero_grad(set_to_none=True)
    for _ in range(5):
        step()
    times = []
    for _ in range(steps):
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        step()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    a = ap.parse_args()
    import torch
    import transformers

    from gputopo import ops
    from gputopo.plan import Training
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {a.device}, median of {a.steps} steps")
    print(f"{'family':8s} {'precision':9s} {'fwd+bwd ms':>10s} {'kernels':>8s} {'us/kernel':>9s}")
    for name, cfg, spec in families():
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").to(a.device).train()
        ids = torch.randint(0, 64, (1, 8), device=a.device)
        for precision, autocast in (("fp32", False), ("bf16", True)):
            t = Training(precision=precision, batch_size=1, seq_len=8, attention="sdpa")
            n = ops.kernels(spec, t, "sdpa", a.device)
            s = step_seconds(model, ids, autocast, a.device, a.steps)
            print(f"{name:8s} {precision:9s} {s * 1e3:10.1f} {n:8d} {s / n * 1e6:9.1f}")


if __name__ == "__main__":
    main()
