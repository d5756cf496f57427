"""The CPU twin's op-by-op dtypes of eager attention under autocast: what gputopo.ops prices over the scores.

Run: .venv/bin/python benchmarks/autocast_dtypes.py [--family bert|gpt2] [--checkpointing]

A tiny model of the family (random weights, 2 layers, 32 wide, 4 heads, 16 tokens with one padded, so the additive
mask is built) is trained one step under torch.autocast("cpu", bf16) with eager attention, and every aten op of its
forward and backward is recorded by a TorchDispatchMode: its name and the dtypes it reads and writes. Printed: the
ops over the attention scores (batch x heads x seq^2 elements) in order, the casts of the model's own weights (forward,
backward, and checkpointing's recomputed forward), and beside them the dtypes gputopo.ops assumes for the same
ops (score_dtypes, weight_casts). tests/test_autocast_dtypes.py asserts the two agree.

What CPU autocast shares with CUDA's here: matmul and linear run in 16 bits on both (each casts its fp32 inputs,
weights cached for the forward); a 16-bit tensor plus the fp32 mask is fp32 on both (type promotion, no autocast
involved); softmax, dropout and the cast back see fp32 inputs on both, so run in fp32 on both. Where they differ:
CUDA's autocast lists softmax (and layer_norm) as fp32 ops, casting a 16-bit input up, where CPU's does not, so a
step without a mask (no add to promote the scores) runs softmax in 16 bits on CPU and in fp32 on CUDA; CPU's
dropout multiplies by a mask of its input's dtype (here fp32, 4 bytes), CUDA's fused dropout keeps a bool (1).
"""
import argparse
import sys

FAMILIES = ("bert", "gpt2")
SEQ, BATCH = 16, 2


def tiny(family: str):
    """(transformers model, gputopo ModelSpec) of the family at 2 layers, 32 wide, 4 heads, eager attention."""
    import tempfile

    import transformers

    from gputopo import models
    cfg = (transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
                                   vocab_size=64, max_position_embeddings=SEQ, type_vocab_size=2)
           if family == "bert" else
           transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_inner=48, vocab_size=64, n_positions=SEQ,
                                   bos_token_id=0, eos_token_id=0))
    cls = transformers.BertForSequenceClassification if family == "bert" else transformers.GPT2LMHeadModel
    model = cls._from_config(cfg, attn_implementation="eager")
    with tempfile.TemporaryDirectory(prefix=f"gputopo-dtypes-{family}-") as folder:
        cfg.architectures = [cls.__name__]
        cfg.save_pretrained(folder)
        spec = models.from_path(folder)
    return model.train(), spec


def record(family: str, checkpointing: bool = False) -> dict:
    """One training step of the tiny model under CPU bf16 autocast: {"scores": [(op, phase, in dtypes, out dtype)],
    "casts": {"forward": n, "backward": n}}: the ops writing a tensor of the scores' size, and the fp32 -> bf16
    casts of the model's parameters (autocast's) and bf16 -> fp32 casts of their gradients."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    torch.manual_seed(0)
    model, spec = tiny(family)
    if checkpointing:   # transformers 5 renamed it
        (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
    heads = spec.heads
    scores = BATCH * heads * SEQ * SEQ
    params = {p.data_ptr() for p in model.parameters()}
    out = {"scores": [], "casts": {"forward": 0, "backward": 0}, "spec": spec}
    phase = ["forward"]

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))
            ins = [a for a in tree_flatten(args)[0] if isinstance(a, torch.Tensor)]
            outs = [o for o in tree_flatten(result)[0] if isinstance(o, torch.Tensor)]
            name = func.overloadpacket.__name__
            if name == "_to_copy" and ins and outs:
                if ins[0].data_ptr() in params and outs[0].dtype == torch.bfloat16:
                    out["casts"][phase[0]] += 1
            skip = ("view", "_unsafe_view", "expand", "detach", "t", "transpose", "clone", "empty_like")
            if outs and outs[0].numel() == scores and tuple(outs[0].shape[-2:]) == (SEQ, SEQ) and name not in skip:
                out["scores"].append((name, phase[0], tuple(str(a.dtype).replace("torch.", "") for a in ins),
                                      str(outs[0].dtype).replace("torch.", "")))
            return result

    ids = torch.randint(0, 64, (BATCH, SEQ))
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    mask[0, -1] = 0   # one padded token: the additive mask is built (an all-ones mask may be skipped)
    labels = torch.zeros(BATCH, dtype=torch.long) if family == "bert" else ids
    with Record():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        phase[0] = "backward"
        loss.backward()
    return out


def planned(spec, checkpointing: bool = False) -> dict:
    """What gputopo.ops assumes for the same step: the scores' dtypes (ops.score_dtypes) and autocast's weight
    casts per step (ops.weight_casts, forward again in the recomputation)."""
    from gputopo import memory, ops
    from gputopo.plan import Training
    t = Training(precision="bf16", batch_size=BATCH, seq_len=SEQ, attention="eager",
                 grad_checkpointing=checkpointing)
    x = memory.shape(spec, t, "cpu")
    block, head = ops.weight_casts(spec, x)
    forwards = ops.forward_passes(t)
    return {"dtypes": ops.score_dtypes(spec, x, "eager"),
            "casts": {"forward": spec.layers * block + head, "backward": spec.layers * block * (forwards - 1)}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", choices=FAMILIES, default="bert")
    ap.add_argument("--checkpointing", action="store_true", help="gradient checkpointing: the recomputed casts")
    a = ap.parse_args()
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    got = record(a.family, a.checkpointing)
    plan = planned(got["spec"], a.checkpointing)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}: tiny {a.family}, eager attention, CPU"
          f" autocast bf16, {BATCH} x {SEQ} tokens (one padded){', checkpointed' if a.checkpointing else ''}")
    print("ops writing a scores-sized tensor (batch x heads x seq^2), in order:")
    for name, phase, ins, dtype in got["scores"]:
        print(f"  {phase:8s} {name:28s} reads {', '.join(ins) or '-':28s} writes {dtype}")
    print("gputopo.ops assumes (bytes an element):", ", ".join(f"{k} {v}" for k, v in plan["dtypes"].items()))
    print(f"autocast's casts of the parameters (fp32 -> bf16): {got['casts']['forward']} in the forward,"
          f" {got['casts']['backward']} in backward (checkpointing's recomputation); gputopo.ops.weight_casts:"
          f" {plan['casts']['forward']} and {plan['casts']['backward']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
