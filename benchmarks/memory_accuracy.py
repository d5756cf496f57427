"""Estimate vs measured memory, per component, for real GPT-2 models trained one step on CPU.

Run: .venv/bin/python benchmarks/memory_accuracy.py [--quick]
Builds GPT-2 models from tiny to gpt2 size (random weights), runs a real AdamW step, and measures the bytes of
parameters, gradients and optimizer states, and the bytes saved for backward (saved_tensors_hooks), in fp32
and in bf16 autocast, with and without gradient checkpointing. Targets: model states exact, activations
within 10 %. The estimate is gputopo's own (gputopo.plan), told that dropout masks on CPU take the value
dtype (CUDA keeps them as 1-byte bools).
"""
import argparse
import time

import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel

from gputopo import plan
from gputopo.models import ModelSpec

transformers.logging.set_verbosity_error()

SIZES = {  # name: (hidden, layers, heads, vocab)
    "tiny": (64, 2, 2, 1000),
    "small": (256, 4, 4, 5000),
    "medium": (512, 6, 8, 20000),
    "gpt2": (768, 12, 12, 50257),
}


def measure(h, L, a, V, batch, seq, precision, ckpt):
    torch.manual_seed(0)
    cfg = GPT2Config(n_embd=h, n_layer=L, n_head=a, vocab_size=V, n_positions=seq, bos_token_id=0, eos_token_id=0,
                     attn_implementation="eager")
    model = GPT2LMHeadModel(cfg).train()
    if ckpt:
        # Reentrant checkpointing saves each block's input through save_for_backward, so the hook sees it.
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, V, (batch, seq))
    params = {p.untyped_storage().data_ptr(): p for p in model.parameters()}
    shapes = {tuple(p.shape) for p in params.values()} | {tuple(reversed(p.shape)) for p in params.values()}
    saved, weight_copies = {}, {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr in params:
            return t
        if t.dtype == torch.bfloat16 and tuple(t.shape) in shapes and t.dim() == 2:
            weight_copies[ptr] = t.untyped_storage().nbytes()  # autocast's 16-bit copy of a weight
        else:
            saved[ptr] = t.untyped_storage().nbytes()
        return t
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = model(ids, labels=ids).loss
    loss.backward()
    opt.step()
    n = sum(p.numel() for p in params.values())
    weights = sum(p.numel() * p.element_size() for p in params.values()) + sum(weight_copies.values())
    grads = sum(p.grad.numel() * p.grad.element_size() for p in params.values() if p.grad is not None)
    states = sum(v.numel() * v.element_size() for s in opt.state.values() for k, v in s.items()
                 if torch.is_tensor(v) and k != "step")  # AdamW's per-tensor step counters are a few bytes
    return n, {"weights": weights, "gradients": grads, "optimizer": states, "activations": sum(saved.values())}


def estimate(h, L, a, V, n, batch, seq, precision, ckpt):
    spec = ModelSpec("bench", "gpt2", n, hidden_size=h, layers=L, heads=a, vocab_size=V, intermediate_size=4 * h,
                     activation="gelu_new")
    t = plan.Training(precision=precision, batch_size=batch, seq_len=seq, grad_checkpointing=ckpt)
    lay = plan.Layout(gpus_per_node=1, gpu_mem_bytes=1 << 50)
    single = next(s for s in plan.strategies(spec, lay, t) if s.name == "single").per_gpu_bytes
    mask = t.value_bytes  # CPU dropout keeps its mask in the value dtype
    act = plan.activation_bytes(spec, t, mask_bytes=mask)
    if ckpt:
        # Forward keeps only the block inputs; the recomputed block lives during backward only.
        act -= plan.layer_activation_bytes(spec, t, mask_bytes=mask)
    return {"weights": single["weights"], "gradients": single["gradients"], "optimizer": single["optimizer"],
            "activations": act}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="skip the gpt2-size model")
    ap.add_argument("--full", action="store_true", help="also bf16 at gpt2 size (bf16 on CPU is slow: ~5 min)")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    args = ap.parse_args()
    print(f"batch {args.batch} x {args.seq} tokens, AdamW, CPU; error = estimate / measured - 1")
    print(f"{'model':8} {'prec':5} {'ckpt':5} {'component':12} {'estimate':>14} {'measured':>14} {'error':>8}")
    worst = {"states": 0.0, "activations": 0.0}
    for name, (h, L, a, V) in SIZES.items():
        if args.quick and name == "gpt2":
            continue
        for precision in ("fp32", "bf16") if (name != "gpt2" or args.full) else ("fp32",):
            for ckpt in (False, True):
                t0 = time.perf_counter()
                n, got = measure(h, L, a, V, args.batch, args.seq, precision, ckpt)
                est = estimate(h, L, a, V, n, args.batch, args.seq, precision, ckpt)
                for comp in ("weights", "gradients", "optimizer", "activations"):
                    err = est[comp] / got[comp] - 1 if got[comp] else 0.0
                    key = "activations" if comp == "activations" else "states"
                    if comp in ("activations", "weights") and precision == "bf16":
                        # Autocast on CPU: its 16-bit weight copies live only while the graph holds them (none
                        # under reentrant checkpointing), and fp32 and bf16 activations sit side by side.
                        key = None
                    if key:
                        worst[key] = max(worst[key], abs(err))
                    print(f"{name:8} {precision:5} {str(ckpt):5} {comp:12} {est[comp]:14,d} {got[comp]:14,d} {err:+8.1%}"
                          + ("" if key else "  (info)"))
                print(f"{'':8} {'':5} {'':5} {'(step took':12} {time.perf_counter() - t0:.1f} s)")
    print(f"worst model-state error (fp32; gradients and optimizer in bf16): {worst['states']:.2%} (target: exact)")
    print(f"worst fp32 activation error: {worst['activations']:.1%} (target: within 10 %)")


if __name__ == "__main__":
    main()
