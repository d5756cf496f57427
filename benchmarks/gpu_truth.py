"""Real Hugging Face training steps on one GPU, timed and profiled by the parts gputopo prices (issue 41, item 1).

    PYTHONPATH=. timeout 480 python benchmarks/gpu_truth.py --out $OUT/gpu-truth.json
    python benchmarks/gpu_truth.py --compare --load docs/measurements/gpu-truth-DATE-GPU.json
    python benchmarks/gpu_truth.py --device cpu --only gpt2-bf16-8x1024 --out /tmp/twin.json   # the CPU twin

Each case builds a transformers causal LM from its config (random weights, no hub) and trains it as the HF Trainer
does: fp32 weights, bf16 under torch.autocast (fp32: no TF32), transformers' default attention (SDPA), the loss from
labels=input_ids, torch.optim.AdamW(lr=1e-5) with torch's defaults, zero_grad(set_to_none=True). 3 warm-up steps,
then 10 timed ones, each from the end of the last to the synchronize after the optimizer step; then one step under
torch.profiler whose every kernel goes to the part of gputopo.speed.parts it belongs to. The JSON is rewritten after
each case, so a run its time limit kills keeps what it measured. docs/gpu-truth.md has the schema.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))   # gputopo from this checkout, with or without PYTHONPATH=.

SCHEMA_VERSION = 1
WARMUP, TIMED = 3, 10
LR = 1e-5
BUDGET_S = 480
MODULE = "module: "                                   # the profiler range around each module's forward
NODE = "autograd::engine::evaluate_function: "       # autograd's range around each backward node
STEP_RANGE, BACKWARD_RANGE, OPTIMIZER_RANGE = "gpu_truth: step", "gpu_truth: backward", "gpu_truth: optimizer"
RANGES = (MODULE, NODE, "Optimizer.", "gpu_truth:", "ProfilerStep", "[memory]")
OTHER, UNCLASSIFIED = "elementwise: other", "unclassified"
CASTS = ("aten::to", "aten::_to_copy")
MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
           "aten::_addmm_activation")
MATMUL_NODES = ("MmBackward0", "AddmmBackward0", "BmmBackward0", "BaddbmmBackward0")
SDPA = ("scaled_dot_product", "flash_attention", "efficient_attention", "cudnn_attention")


def gpt2(h: int, layers: int, heads: int) -> dict:
    """GPT-2 as transformers' GPT2Config builds it (dropout 0.1, tanh GeLU, tied head)."""
    return dict(model_type="gpt2", n_embd=h, n_layer=layers, n_head=heads, vocab_size=50257, n_positions=1024)


# The checkpoints' config.json, sizes only: rotary settings (rope_theta, Llama 3's rope_scaling) change values, not
# work, and are left at transformers' defaults so the same dicts build under every transformers 5.x.
CONFIGS = {
    "gpt2": gpt2(768, 12, 12), "gpt2-medium": gpt2(1024, 24, 16), "gpt2-large": gpt2(1280, 36, 20),
    "gpt2-xl": gpt2(1600, 48, 25),
    "tinyllama-1.1b": dict(model_type="llama", hidden_size=2048, num_hidden_layers=22, intermediate_size=5632,
                           num_attention_heads=32, num_key_value_heads=4, vocab_size=32000,
                           max_position_embeddings=2048, rms_norm_eps=1e-5, tie_word_embeddings=False),
    "llama-3.2-1b": dict(model_type="llama", hidden_size=2048, num_hidden_layers=16, intermediate_size=8192,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
                         max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=True),
    "qwen2.5-0.5b": dict(model_type="qwen2", hidden_size=896, num_hidden_layers=24, intermediate_size=4864,
                         num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                         max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=True),
}


@dataclass(frozen=True)
class Case:
    name: str
    model: str                 # a key of CONFIGS
    precision: str             # bf16 (autocast over fp32 weights; DeepSpeed: its bf16 model) or fp32
    batch: int
    seq: int
    ckpt: bool = False         # gradient checkpointing
    engine: str = "plain"      # plain, ddp (world size 1) or deepspeed (one process, world size 1)
    strategy: str = "single"   # the row of `gputopo plan` it is compared with
    est_s: float = 15.0        # seconds on an H100/H200, build and profile in: what --budget expects of it


CASES = [
    Case("gpt2-bf16-8x1024", "gpt2", "bf16", 8, 1024, est_s=10),
    Case("gpt2-bf16-2x512", "gpt2", "bf16", 2, 512, est_s=8),      # small: the host sets the pace
    Case("gpt2-bf16-32x512", "gpt2", "bf16", 32, 512, est_s=12),
    Case("gpt2-medium-fp32-4x1024", "gpt2-medium", "fp32", 4, 1024, est_s=15),
    Case("gpt2-medium-bf16-16x1024-ckpt", "gpt2-medium", "bf16", 16, 1024, ckpt=True, est_s=18),
    Case("gpt2-large-bf16-8x1024", "gpt2-large", "bf16", 8, 1024, est_s=20),
    Case("tinyllama-1.1b-bf16-4x2048", "tinyllama-1.1b", "bf16", 4, 2048, est_s=20),
    Case("llama-3.2-1b-bf16-4x2048", "llama-3.2-1b", "bf16", 4, 2048, est_s=20),
    Case("llama-3.2-1b-bf16-8x2048-ckpt", "llama-3.2-1b", "bf16", 8, 2048, ckpt=True, est_s=25),
    Case("qwen2.5-0.5b-bf16-8x1024", "qwen2.5-0.5b", "bf16", 8, 1024, est_s=15),
    Case("qwen2.5-0.5b-fp32-2x1024", "qwen2.5-0.5b", "fp32", 2, 1024, est_s=15),
    Case("gpt2-ddp-bf16-8x1024", "gpt2", "bf16", 8, 1024, engine="ddp", strategy="ddp", est_s=12),
    # DeepSpeed builds FusedAdam and CPU Adam at first use (about 40 s each on 16 cores): in their estimates
    Case("gpt2-xl-zero2-bf16-4x1024", "gpt2-xl", "bf16", 4, 1024, engine="deepspeed", strategy="zero2", est_s=70),
    Case("gpt2-xl-zero2-offload-bf16-4x1024", "gpt2-xl", "bf16", 4, 1024, engine="deepspeed",
         strategy="zero2_offload_cpu", est_s=80),
]
TWIN_EST_S = {"plain": 8.0, "ddp": 8.0, "deepspeed": 20.0}   # the CPU twin's cases on 2 cores


def tiny(config: dict) -> dict:
    """The CPU twin's model: the same family, tying, GQA and biases, 2 blocks 64 wide (no dimension equal to the
    twin's token counts, so a cast's shape tells a weight from an activation)."""
    if config["model_type"] == "gpt2":
        return {**config, "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 1001, "n_positions": 128}
    gqa = config["num_key_value_heads"] < config["num_attention_heads"]
    out = {**config, "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 176, "num_attention_heads": 4,
           "num_key_value_heads": 2 if gqa else 4, "vocab_size": 1000, "max_position_embeddings": 128}
    if "head_dim" in config:
        out["head_dim"] = 16
    return out


def setup(case: Case, device: str) -> dict:
    """What a case runs: its config and shape on a GPU; on the CPU twin a tiny model, 1-2 x 40-48 tokens."""
    if device == "cuda":
        return {"config": CONFIGS[case.model], "batch_size": case.batch, "seq_len": case.seq}
    return {"config": tiny(CONFIGS[case.model]), "batch_size": 2 if case.batch >= 4 else 1,
            "seq_len": 48 if case.seq >= 1024 else 40}


# ---- the matmuls: which projection a shape is ---------------------------------------------------------------


def matmul_table(m, t, device: str = "cuda", conv1d: bool = False) -> dict:
    """(M, N, K) -> {"forward"|"backward": {part: count}}: the projections whose forward matmul (or one of its two
    backward matmuls) has that shape, in gputopo.speed's own list and names. The weight's gradient is the
    (K, N, M) of ops.backward_shapes where the weight is stored [K, N] (GPT-2's Conv1D blocks: conv1d), and
    (N, K, M) where nn.Linear stores it [N, K] (every other projection and every LM head): torch's mm backward
    computes it in the weight's own layout."""
    from gputopo import ops
    table: dict = {}
    for name, (count, M, N, K) in zip(ops.matmul_names(m, t), ops.matmuls(m, t, t.attention, device)):
        data, weight = ops.backward_shapes(M, N, K)
        if not (conv1d and name != "LM head") and not name.startswith("attention"):
            weight = (N, K, M)
        for direction, shapes in (("forward", [(M, N, K)]), ("backward", [data, weight])):
            for shape in shapes:
                parts = table.setdefault(tuple(shape), {}).setdefault(direction, {})
                parts[f"matmul: {name}"] = parts.get(f"matmul: {name}", 0) + count
    return table


def matmul_parts(table: dict, mnk, direction: str) -> dict:
    """{part: share} of a matmul of this shape; a shape two projections share (Llama's Q and output projections are
    both h x h) is split between them by how many of it each has, as the plan prices them alike."""
    hits = table.get(tuple(mnk) if mnk else None, {}).get(direction) or {}
    total = sum(hits.values())
    return {part: count / total for part, count in hits.items()} if total else {}


def mnk(op) -> tuple | None:
    """(M, N, K) of a matmul op from its recorded input shapes (out[M, N] = a[M, K] @ b[K, N]; per batch for bmm)."""
    s, name = [list(x) for x in op.input_shapes], op.name
    try:
        if name == "aten::mm":
            (M, K), (_, N) = s[0], s[1]
        elif name in ("aten::addmm", "aten::_addmm_activation", "aten::baddbmm"):
            M, K, N = s[1][-2], s[1][-1], s[2][-1]
        elif name == "aten::bmm":
            M, K, N = s[0][-2], s[0][-1], s[1][-1]
        elif name == "aten::linear":   # weight [N, K]; the input's leading dimensions are the tokens
            M, K, N = math.prod(s[0][:-1]), s[0][-1], s[1][0]
        elif name == "aten::matmul":
            M = math.prod(s[0][:-1]) if len(s[1]) == 2 else s[0][-2]
            K, N = s[0][-1], s[1][-1]
        else:
            return None
    except (IndexError, ValueError, TypeError):
        return None
    return int(M), int(N), int(K)


def weight_args(op) -> list:
    """The shapes a matmul op takes as weights (addmm: bias and weight; linear: weight and bias), less any equal to
    its activation's (then a cast cannot say which it was)."""
    s = [list(x) for x in op.input_shapes]
    slots = {"aten::addmm": (1, (0, 2)), "aten::linear": (0, (1, 2)), "aten::matmul": (0, (1,)),
             "aten::mm": (0, (1,))}.get(op.name)
    if not slots or len(s) <= slots[0]:
        return []
    act = s[slots[0]]
    return [s[i] for i in slots[1] if i < len(s) and s[i] and s[i] != act]


# ---- the profile: every kernel to a part ------------------------------------------------------------------


@dataclass(frozen=True)
class Facts:
    """What classification needs to know of the model and the run."""
    top: str              # the causal LM's class (its own ops are the loss's)
    base: str             # the base model's class (GPT-2 adds its positions there)
    vocab: int
    hidden: int
    rotary: bool
    gated: bool
    python_gelu: bool
    table: dict           # matmul_table
    known: frozenset      # every part name speed.parts gives for this model, on a GPU or a CPU
    engine: str
    offload: bool


def is_range(name: str) -> bool:
    """A profiler range this script or torch opens (modules, autograd nodes, the optimizer, the step)."""
    return name.startswith(RANGES)


def is_sdpa(name: str) -> bool:
    """An op of scaled_dot_product_attention or the fused kernel it chose."""
    return any(s in name for s in SDPA)


@dataclass
class Where:
    ops: list             # the op and the ops around it, innermost first, up to the nearest range
    modules: list         # module classes around it, innermost first (forward, or checkpointing's recompute)
    node: object          # the backward node's range, when the op ran in backward
    optimizer: bool


def where(e) -> Where:
    """Where an op ran: the nearest range decides forward (a module) or backward (an autograd node)."""
    ops, modules, node, first, optimizer = [], [], None, None, False
    x = e
    while x is not None:
        name = x.name
        if name.startswith(MODULE):
            modules.append(name[len(MODULE):])
            first = first or "module"
        elif name.startswith(NODE):
            node = x if first is None else node
            first = first or "node"
        elif name.startswith("Optimizer.step") or name == OPTIMIZER_RANGE:
            optimizer = True
        elif first is None and not name.startswith(RANGES):
            ops.append(x)
        x = x.cpu_parent
    return Where(ops, modules, node, optimizer)


def creators(events) -> dict:
    """(thread, sequence number) -> the forward op that made that autograd node: the last op recorded with it (the
    composite ops around it record the same number first)."""
    out = {}
    for e in events:
        if e.name.startswith("aten::") and e.sequence_nr >= 0:
            key = (e.thread, e.sequence_nr)
            if key not in out or e.time_range.start >= out[key].time_range.start:
                out[key] = e
    return out


def classify(e, facts: Facts, made: dict) -> dict:
    """{part: share} of an op's device time."""
    w = where(e)
    if w.optimizer:
        parts = {"optimizer": 1.0}
    elif w.node is not None:
        parts = backward_part(w, facts, made)
    elif w.modules:
        parts = forward_part(w.ops, w.modules, facts)
    else:   # outside the model and autograd's nodes: the loss's seed gradient; DDP's and DeepSpeed's gradient copies
        parts = {"framework copies" if facts.engine != "plain" else OTHER: 1.0}
    out: dict = {}
    for part, share in parts.items():   # a name this model's plan does not have is reported as other, not hidden
        name = part if part in facts.known else OTHER
        out[name] = out.get(name, 0.0) + share
    return out


def backward_part(w: Where, facts: Facts, made: dict) -> dict:
    """A backward op's part: by its node where the node says (matmuls, attention, embeddings, gradient
    accumulation), else by the forward op that made the node, where that ran."""
    node = w.node.name[len(NODE):]
    creator = made.get((w.node.fwd_thread, w.node.sequence_nr))
    fw = where(creator) if creator is not None else None
    if node.startswith("ScaledDotProduct") or (fw and any(is_sdpa(o.name) for o in fw.ops)):
        return {"attention backward": 1.0}
    if node in MATMUL_NODES:   # besides the two matmuls: a bias's gradient (a reduction the plan does not price)
        mm = next((o for o in w.ops if o.name in MATMULS), None)
        return matmul_share(facts, mm, "backward") if mm else {OTHER: 1.0}
    if node == "EmbeddingBackward0":
        return {"elementwise: embedding gradient": 1.0}
    if node.endswith("AccumulateGrad"):   # a tied embedding's second gradient is added; DDP's, DeepSpeed's hooks
        acc = next((o for o in w.ops if o.name.endswith("AccumulateGrad")), None)
        shape = list(acc.input_shapes[0]) if acc is not None and acc.input_shapes else []
        added = w.ops and w.ops[0].name.startswith("aten::add")
        return {"elementwise: embedding gradient" if added and shape == [facts.vocab, facts.hidden]
                else "framework copies": 1.0}
    if fw is None or not fw.modules:
        return {OTHER: 1.0}
    return forward_part(fw.ops, fw.modules, facts)


def forward_part(ops: list, modules: list, facts: Facts) -> dict:
    """A forward op's part, from the op and the module it ran in."""
    names = [o.name for o in ops]
    cast = next((o for o in ops if o.name in CASTS), None)
    # inside the kernel SDPA chose (not autocast's casts of q, k, v before it): attention
    if any(is_sdpa(n) and n != "aten::scaled_dot_product_attention" for n in names) or (
            cast is None and any(is_sdpa(n) for n in names)):
        return {"attention forward": 1.0}
    mm = next((o for o in ops if o.name in MATMULS), None)
    if cast is not None:
        return {cast_part(cast, mm, modules, facts): 1.0}
    family = module_family(modules, facts)
    if family:
        return {family: 1.0}
    if mm is not None:
        return matmul_share(facts, mm, "forward")
    if any("log_softmax" in n for n in names):
        return {"elementwise: log-softmax": 1.0}
    if any("nll_loss" in n for n in names):
        return {"elementwise: loss gradient": 1.0}
    return {module_part(modules, ops[-1] if ops else None, facts): 1.0}


def matmul_share(facts: Facts, mm, direction: str) -> dict:
    """The projection(s) a matmul op is, by its shape; a shape the model has none of stays unclassified."""
    return matmul_parts(facts.table, mnk(mm), direction) or {UNCLASSIFIED: 1.0}


def cast_part(cast, mm, modules: list, facts: Facts) -> str:
    """A dtype cast: autocast's copy of a weight (framework copies; the plan's cast_bytes), the logits' upcast for the
    loss, a cast inside a norm or an activation (part of that op), or autocast's cast of an activation."""
    shape = list(cast.input_shapes[0]) if cast.input_shapes else []
    if mm is not None and shape in weight_args(mm):
        return "framework copies"
    if shape and shape[-1] == facts.vocab and modules and modules[0] == facts.top:
        return "elementwise: logits.float()"
    return module_family(modules, facts) or "elementwise: autocast cast"


def module_family(modules: list, facts: Facts) -> str | None:
    """The part every op of a module is, whatever the op: norms, activations, dropout, embeddings, rotary tables."""
    if not modules:
        return None
    c = modules[0].lower()
    if "rmsnorm" in c:
        return "elementwise: rmsnorm"
    if "layernorm" in c:
        return "elementwise: layernorm"
    if "rotary" in c:
        return "elementwise: rotary"
    if c == "dropout":
        return "elementwise: embedding dropout" if modules[1:2] == [facts.base] else "elementwise: dropout"
    if c == "embedding":
        return "elementwise: embedding"
    if "gelu" in c or "silu" in c or "relu" in c or c.endswith("activation"):
        if facts.gated:
            return "elementwise: activation(gate)"
        return "elementwise: tanh GeLU" if facts.python_gelu else "elementwise: activation"
    return None


def module_part(modules: list, op, facts: Facts) -> str:
    """An op run directly by a larger module: rotary's multiplies, negation and concatenation (on the last dim) and
    the output's transpose in attention, gate x up in a gated MLP, the residual adds in a block, GPT-2's position
    add; anything else is other (DynamicCache's copy of K and V, concatenated on the sequence, among it)."""
    c, name = modules[0].lower(), op.name if op is not None else ""
    if "attention" in c:
        if facts.rotary and (name in ("aten::mul", "aten::add", "aten::neg", "aten::slice") or
                             name == "aten::cat" and cat_dim(op) in (-1, None)):
            return "elementwise: rotary"
        return "elementwise: attention output transpose" if name in ("aten::contiguous", "aten::clone") else OTHER
    if "mlp" in c and facts.gated and name == "aten::mul":
        return "elementwise: gate x up"
    if c.endswith(("block", "layer")) and name in ("aten::add", "aten::add_"):
        return "elementwise: residual add"
    if modules[0] == facts.base and name == "aten::add" and not facts.rotary:
        return "elementwise: position embedding add"
    return OTHER


def cat_dim(op) -> int | None:
    """The dim a recorded aten::cat joined on (None where the profiler kept no concrete inputs)."""
    args = getattr(op, "concrete_inputs", None) or []
    return args[1] if len(args) > 1 and isinstance(args[1], int) else None


def kernel_part(kernel: str, facts: Facts) -> str | None:
    """A kernel whose name alone says its part: NCCL's collectives, offload's copies between host and GPU."""
    if kernel.startswith("nccl"):
        return "communication (exposed)"
    if facts.offload and kernel.startswith("Memcpy") and ("HtoD" in kernel or "DtoH" in kernel):
        return "offload"
    return None


def own_time(e, cuda: bool) -> list:
    """(what, seconds) of the work an event did itself. On a GPU its kernels: the profiler gives each kernel to the
    innermost op or range open when it was launched (a range: an extension's kernels, DeepSpeed's FusedAdam), less
    the range's own annotation on the GPU's timeline (named as the range). On a CPU an aten op's own time (the time
    between ops is the host's, as on a GPU)."""
    from torch.autograd import DeviceType
    if e.device_type != DeviceType.CPU:
        return []
    if cuda:
        return [(k.name, k.duration / 1e6) for k in e.kernels if k.name != e.name and not is_range(k.name)]
    if e.name.startswith("aten::") and e.self_cpu_time_total > 0 and not getattr(e, "is_user_annotation", False):
        return [(e.name, e.self_cpu_time_total / 1e6)]
    return []


def device_events(events) -> list:
    """The GPU's own events (kernels, copies, fills), not the profiler's annotations of ranges."""
    from torch.autograd import DeviceType
    return [e for e in events if e.device_type != DeviceType.CPU and not getattr(e, "is_user_annotation", False)
            and not is_range(e.name)]


def group(events, facts: Facts, cuda: bool) -> dict:
    """The profiled step's device time by part, each part's kernel count and its largest contributors, and what went
    to other or stayed unclassified (op and where it ran)."""
    made = creators(events)
    parts, kernels, detail = {}, {}, {}
    for e in events:
        work = own_time(e, cuda)
        shares = classify(e, facts, made) if work else {}
        for what, seconds in work:
            named = kernel_part(what, facts)
            for part, share in ({named: 1.0} if named else shares).items():
                parts[part] = parts.get(part, 0.0) + seconds * share
                kernels[part] = kernels.get(part, 0) + 1
                row = detail.setdefault(part, {}).setdefault(label(e, what, part, made, cuda), [0.0, 0])
                row[0] += seconds * share
                row[1] += 1
    attributed = sum(parts.values())
    total = sum(e.time_range.elapsed_us() for e in device_events(events)) / 1e6 if cuda else attributed
    if total - attributed > 1e-7:   # kernels the profiler linked to no op
        parts[UNCLASSIFIED] = parts.get(UNCLASSIFIED, 0.0) + total - attributed
    top = {p: sorted(([k, round(v[0], 9), v[1]] for k, v in rows.items()), key=lambda r: -r[1])[:8]
           for p, rows in detail.items()}
    return {"device_s": total, "attributed_s": attributed, "parts": parts, "part_kernels": kernels, "top": top}


def label(e, what: str, part: str, made: dict, cuda: bool) -> str:
    """How a contributor is listed: the kernel (GPU) or op (CPU); for other and unclassified the op and where it ran
    (and the dim a concatenation joined on: rotary's last, DynamicCache's the sequence)."""
    if part not in (OTHER, UNCLASSIFIED):
        return (what if cuda else e.name)[:160]
    dim = f" (dim {cat_dim(e)})" if e.name == "aten::cat" else ""
    return f"{e.name} in {context(e, made)}{dim}"[:160]


def context(e, made: dict) -> str:
    """Where an op ran, in a few words (for what went to other): its module, or its backward node and the module of
    the forward op that made the node."""
    w = where(e)
    if w.optimizer:
        return "the optimizer"
    if w.node is not None:
        creator = made.get((w.node.fwd_thread, w.node.sequence_nr))
        modules = where(creator).modules if creator is not None else []
        return w.node.name[len(NODE):] + (f" of {modules[0]}" if modules else "")
    return w.modules[0] if w.modules else "no module"


def busy_seconds(events, start: float, end: float) -> float:
    """Seconds in [start, end] (microseconds) during which the GPU ran anything: the union of its events."""
    spans = sorted((max(e.time_range.start, start), min(e.time_range.end, end)) for e in device_events(events))
    busy, reach = 0.0, start
    for a, b in spans:
        if b > max(a, reach):
            busy += b - max(a, reach)
            reach = b
    return busy / 1e6


# ---- running a case ---------------------------------------------------------------------------------------


def model_spec(config: dict):
    """gputopo's ModelSpec of a config, as `gputopo plan --model FOLDER` reads it."""
    from gputopo import models
    with config_folder(config) as folder:
        return models.from_path(folder)


@contextmanager
def config_folder(config: dict):
    """A temporary folder holding config.json."""
    with tempfile.TemporaryDirectory(prefix="gpu-truth-") as folder:
        Path(folder, "config.json").write_text(json.dumps(config))
        yield folder


def facts_of(case: Case, model, run: dict, device: str) -> Facts:
    """Facts for classification: the model's classes and shapes, its matmul table and its plan's part names."""
    from gputopo import memory
    from gputopo.plan import Training
    m = model_spec(run["config"])
    t = Training(precision=case.precision, batch_size=run["batch_size"], seq_len=run["seq_len"],
                 grad_checkpointing=case.ckpt, attention="sdpa")
    return Facts(top=type(model).__name__, base=type(model.base_model).__name__, vocab=m.vocab_size,
                 hidden=m.hidden_size, rotary=m.rotary, gated=m.gated_mlp,
                 python_gelu=(m.activation or "") in memory.PYTHON_GELUS,
                 table=matmul_table(m, t, device, conv1d=any(type(x).__name__ == "Conv1D" for x in model.modules())),
                 known=part_names(m, t, case.strategy), engine=case.engine, offload="offload" in case.strategy)


def part_names(m, t, strategy: str) -> frozenset:
    """Every name speed.parts gives this model and strategy, on a GPU and on a CPU (the names, not the times: any
    GPU's datasheet will do), with other and unclassified."""
    from gputopo import speed
    from gputopo.plan import Layout
    lay = Layout(gpus_per_node=1, gpu_mem_bytes=80 * 2 ** 30, gpu_model="H100", cpu_cores=16)
    rates = speed.gpu_rates(lay, t)
    names = {OTHER, UNCLASSIFIED}
    for device in ("cuda", "cpu"):
        names |= set(speed.parts(strategy, m, lay, t, rates, device=device))
    return frozenset(names)


def build(run: dict, ckpt: bool, device):
    """The causal LM from its config as gputopo.calibrate builds it: random weights (seed 0), fp32, train mode."""
    from gputopo.build import build_model
    return build_model({"config": run["config"], "attention": "auto", "grad_checkpointing": ckpt}, device)


def plain_trainer(model, precision: str, device, ddp: bool = False):
    """One training step as the HF Trainer runs it, DDP-wrapped for the ddp case: (step(ids) -> loss, info, None)."""
    import torch
    from torch.profiler import record_function
    net = model
    if ddp:
        from torch.nn.parallel import DistributedDataParallel
        process_group(device)
        net = DistributedDataParallel(model, device_ids=[device.index or 0] if device.type == "cuda" else None)
    opt = torch.optim.AdamW(model.parameters(), lr=LR)   # torch's defaults: foreach on CUDA
    dtype = torch.bfloat16 if precision == "bf16" else None

    def step(ids):
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = net(input_ids=ids, labels=ids).loss
        with record_function(BACKWARD_RANGE):
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()
    return step, {"optimizer": type(opt).__name__, "lr": LR, "autocast": str(dtype) if dtype else None}, None


def deepspeed_trainer(case: Case, model, run: dict, device):
    """A DeepSpeed engine in this process (world size 1) with the config gputopo writes for the strategy:
    (step(ids) -> loss, info, engine)."""
    from gputopo import dsconfig, dsops
    env = dsops.deepspeed_env(os.environ)   # TORCH_CUDA_ARCH_LIST as DeepSpeed 0.19 can parse it ('9.0a' -> '9.0')
    if dsops.ARCH_VAR not in env:   # an entry it could not mend: unset, DeepSpeed builds for the GPU it sees
        os.environ.pop(dsops.ARCH_VAR, None)
    os.environ.update(env)
    process_group(device)
    import deepspeed
    from torch.profiler import record_function
    stage, offload = dsconfig.STRATEGY_TO_CONFIG[case.strategy]
    cfg = dsconfig.build(stage, offload, dsconfig.Shape(hf=False, precision=case.precision, gpus=1,
                                                          hidden_size=model.config.hidden_size,
                                                          batch_size=run["batch_size"]))
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)

    def step(ids):
        loss = engine(ids, labels=ids).loss
        with record_function(BACKWARD_RANGE):
            engine.backward(loss)
        with record_function(OPTIMIZER_RANGE):
            engine.step()
        return loss.detach()
    inner = getattr(engine.optimizer, "optimizer", None)
    info = {"deepspeed": deepspeed.__version__, "deepspeed_config": cfg, "optimizer": type(engine.optimizer).__name__,
            "basic_optimizer": type(inner).__name__ if inner is not None else None}
    return step, info, engine


def process_group(device) -> None:
    """A one-process group (NCCL on a GPU, gloo on the CPU twin), in memory: no port, no launcher."""
    import torch.distributed as dist
    # DeepSpeed reads these as its launcher sets them (its CPU accelerator's shared-memory op needs the address)
    for k, v in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "LOCAL_SIZE": "1",
                 "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(29500 + os.getpid() % 1000)}.items():
        os.environ.setdefault(k, v)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", store=dist.HashStore(), rank=0,
                                world_size=1)


def synchronizer(device):
    """torch.cuda.synchronize on a GPU; nothing to wait for on a CPU."""
    import torch
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)


def timed_steps(step, ids, device) -> tuple[list, list, int | None]:
    """(10 step times after 3 warm-up steps, the losses, the allocated peak over all 13 on a GPU)."""
    import torch
    sync, cuda = synchronizer(device), device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    losses = [step(ids) for _ in range(WARMUP)]
    sync()
    times, t0 = [], time.perf_counter()
    for _ in range(TIMED):
        losses.append(step(ids))
        sync()
        t = time.perf_counter()
        times.append(t - t0)
        t0 = t
    peak = torch.cuda.max_memory_allocated(device) if cuda else None
    return times, [float(x) for x in torch.stack([x.float() for x in losses]).cpu()], peak


@contextmanager
def module_ranges(model):
    """Each module's forward inside a profiler range named after its class, so every forward op (checkpointing's
    recompute too) has a family. Only while profiling: a range costs the host a few microseconds."""
    from torch.profiler import record_function
    open_: dict = {}

    def enter(mod, args):
        rf = record_function(MODULE + type(mod).__name__)
        rf.__enter__()
        open_.setdefault(id(mod), []).append(rf)

    def leave(mod, args, out):
        if open_.get(id(mod)):
            open_[id(mod)].pop().__exit__(None, None, None)
    # always_call: checkpointing's recompute stops a forward early by raising; the range still closes
    handles = [h for mod in model.modules() for h in (mod.register_forward_pre_hook(enter),
                                                       mod.register_forward_hook(leave, always_call=True))]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def profiled(step, ids, device, model):
    """One step under torch.profiler (CPU and CUDA activity, shapes recorded), after one under it unrecorded (the
    profiler's own start-up)."""
    from torch.profiler import ProfilerActivity, profile, record_function, schedule
    sync, cuda = synchronizer(device), device.type == "cuda"
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with module_ranges(model), profile(activities=acts, record_shapes=True, profile_memory=not cuda,
                                       schedule=schedule(wait=0, warmup=1, active=1, repeat=1)) as prof:
        for _ in range(2):
            sync()
            with record_function(STEP_RANGE):
                step(ids)
                sync()
            prof.step()
    return prof


def live_bytes() -> int:
    """Bytes of every tensor storage alive now: the CPU twin's stand-in for the allocator's count."""
    import gc

    import torch
    seen, total = set(), 0
    for obj in gc.get_objects():
        if issubclass(type(obj), torch.Tensor) and obj.device.type == "cpu":   # type(): no __class__ lookups
            try:
                storage = obj.untyped_storage()
            except (RuntimeError, NotImplementedError):
                continue
            if storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total += storage.nbytes()
    return total


def step_allocations(prof) -> int:
    """The most bytes the profiled step held beyond what it started with (the profiler's memory records)."""
    from torch.autograd import DeviceType
    records = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                     if e.name() == "[memory]" and e.device_type() == DeviceType.CPU)
    held = most = 0
    for _, n in records:
        held += n
        most = max(most, held)
    return most


def profile_summary(prof, facts: Facts, cuda: bool, median: float) -> dict:
    """The profiled step: its wall time, device time by part, and the GPU's time waiting for the host (the median
    step less the union of its kernels: profiling slows the host, not the kernels)."""
    events = prof.events()
    out = group(events, facts, cuda)
    rng = next((e for e in events if e.name == STEP_RANGE), None)
    wall = rng.time_range.elapsed_us() / 1e6 if rng is not None else None
    if cuda and rng is not None:
        busy = busy_seconds(events, rng.time_range.start, rng.time_range.end)
        out.update(busy_s=busy, idle_s=max(0.0, median - busy), idle_profiled_s=max(0.0, wall - busy))
    else:   # on a CPU the host is the device: nothing waits
        out.update(busy_s=out["device_s"], idle_s=0.0, idle_profiled_s=0.0)
    out["wall_s"] = wall
    return out


def run_case(case: Case, device) -> dict:
    """Build, train, time and profile one case."""
    import torch
    run = setup(case, device.type)
    t0 = time.perf_counter()
    model, cfg = build(run, case.ckpt, device)
    g = torch.Generator(device="cpu").manual_seed(0)
    ids = torch.randint(0, cfg.vocab_size, (run["batch_size"], run["seq_len"]), generator=g).to(device)
    if case.engine == "deepspeed":
        step, info, engine = deepspeed_trainer(case, model, run, device)
    else:
        step, info, engine = plain_trainer(model, case.precision, device, ddp=case.engine == "ddp")
    build_s = time.perf_counter() - t0
    times, losses, peak = timed_steps(step, ids, device)
    median = statistics.median(times)
    before = live_bytes() if device.type == "cpu" else 0
    prof = profiled(step, ids, device, model)
    if peak is None:
        peak = before + step_allocations(prof)
    facts = facts_of(case, model, run, device.type)
    q = statistics.quantiles(times, n=10)
    result = {"name": case.name, "model": case.model, "config": run["config"], "engine": case.engine,
              "strategy": case.strategy, "precision": case.precision, "batch_size": run["batch_size"],
              "seq_len": run["seq_len"], "grad_checkpointing": case.ckpt,
              "catalog": case.model if device.type == "cuda" and is_catalog(case.model) else None,
              "params": sum(p.numel() for p in model.parameters()), "build_s": build_s,
              "step_s": {"median": median, "p10": q[0], "p90": q[-1], "min": min(times), "max": max(times)},
              "step_times_s": times, "peak_bytes": peak,
              "peak_basis": "torch.cuda.max_memory_allocated over the 13 steps" if device.type == "cuda" else
                            "live tensors at the profiled step's start + its largest allocation (profiler)",
              "loss": {"first": losses[0], "last": losses[-1], "finite": all(math.isfinite(x) for x in losses)},
              "info": info, "profile": profile_summary(prof, facts, device.type == "cuda", median)}
    if engine is not None and hasattr(engine, "destroy"):
        engine.destroy()
    return result


def is_catalog(name: str) -> bool:
    """A model gputopo's catalog knows by name (plan then reads its catalog entry, as `--model NAME` does)."""
    from gputopo.models import CATALOG
    return name in CATALOG


# ---- the run: cases in turn, the file rewritten after each ----------------------------------------------------


def machine(device) -> dict:
    """The machine and the versions that ran the cases (no hostname)."""
    import torch
    import transformers
    out = {"device": device.type, "python": platform.python_version(), "torch": torch.__version__,
           "transformers": transformers.__version__, "deepspeed": version_of("deepspeed"),
           "cuda": torch.version.cuda, "cpu_model": cpu_model(), "cpu_cores_logical": os.cpu_count(),
           "cpu_cores_physical": physical_cores(), "ram_bytes": ram_bytes(),
           "tf32_matmul": torch.backends.cuda.matmul.allow_tf32, "torch_threads": torch.get_num_threads()}
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        out.update(gpu=p.name, gpu_memory_bytes=p.total_memory, gpu_sms=p.multi_processor_count,
                   gpu_capability=f"{p.major}.{p.minor}", gpu_count=torch.cuda.device_count(),
                   driver=driver_version())
    return out


def version_of(package: str) -> str | None:
    """A package's installed version from its metadata (no import)."""
    import importlib.metadata
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_model() -> str | None:
    """The CPU's model name as /proc/cpuinfo gives it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def physical_cores() -> int | None:
    """Physical cores (psutil), None without psutil."""
    try:
        import psutil
        return psutil.cpu_count(logical=False)
    except ImportError:
        return None


def ram_bytes() -> int | None:
    """The host's RAM."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def driver_version() -> str | None:
    """The NVIDIA driver's version: NVML, else nvidia-smi."""
    try:
        import pynvml
        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else v
    except Exception:   # no NVML binding or library: ask the tool
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def commit() -> str | None:
    """gputopo's commit: GPUTOPO_COMMIT (a copy of the tree without .git), else git rev-parse HEAD."""
    if os.environ.get("GPUTOPO_COMMIT"):
        return os.environ["GPUTOPO_COMMIT"]
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def write(path: Path, record: dict) -> None:
    """Replace the results file in one step (a temporary file beside it, then os.replace)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(record, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def skip_reason(case: Case, device, left: float, scale: float) -> str | None:
    """Why a case is not started: DeepSpeed missing, or the time left not holding its estimate."""
    if case.engine == "deepspeed" and version_of("deepspeed") is None:
        return "deepspeed is not installed"
    need = (case.est_s if device.type == "cuda" else TWIN_EST_S[case.engine]) * scale
    if need > left:
        return f"over the budget: about {need:.0f} s needed, {max(left, 0):.0f} s left"
    return None


def measure(cases: list, args, out: Path, started: float) -> dict:
    """Every case in turn, the file rewritten before and after each; a case that fails is recorded and the run goes
    on."""
    import torch
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False   # fp32 means fp32, as PyTorch's default has it
        torch.backends.cudnn.allow_tf32 = False
    record = {"schema_version": SCHEMA_VERSION, "tool": "benchmarks/gpu_truth.py", "gputopo_commit": commit(),
              "started": now(), "finished": None, "running": None, "machine": machine(device),
              "settings": {"warmup_steps": WARMUP, "timed_steps": TIMED, "lr": LR, "budget_s": args.budget,
                           "attention": "transformers' default (sdpa)"}, "cases": [], "skipped": []}
    spent = expected = 0.0
    for case in cases:
        scale = max(1.0, spent / expected) if expected else 1.0   # a slower machine than the estimates: said so
        why = skip_reason(case, device, args.budget - (time.monotonic() - started), scale)
        if why:
            record["skipped"].append({"name": case.name, "why": why})
            write(out, record)
            continue
        record["running"] = case.name
        write(out, record)
        t0 = time.monotonic()
        result = attempt(case, device)
        result["case_s"] = time.monotonic() - t0
        spent += result["case_s"]
        expected += case.est_s if device.type == "cuda" else TWIN_EST_S[case.engine]
        record["cases"].append(result)
        record["running"] = None
        write(out, record)
        say(progress_line(result, len(record["cases"]), len(cases)))
    record["finished"] = now()
    write(out, record)
    return record


def attempt(case: Case, device) -> dict:
    """run_case, with a failure (out of memory, a build that broke) recorded as the case's error."""
    import gc

    import torch
    try:
        return run_case(case, device)
    except Exception as e:   # one case's failure must not lose the others
        import traceback
        return {"name": case.name, "model": case.model, "engine": case.engine, "strategy": case.strategy,
                "error": f"{type(e).__name__}: {e}"[:1000], "traceback": traceback.format_exc()[-4000:]}
    finally:
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()


def progress_line(result: dict, i: int, n: int) -> str:
    """One line on stderr per case."""
    if "error" in result:
        return f"[{i}/{n}] {result['name']}: failed: {result['error'][:200]}"
    p = result["profile"]
    return (f"[{i}/{n}] {result['name']}: {result['step_s']['median'] * 1e3:.1f} ms median, peak"
            f" {result['peak_bytes'] / 2 ** 20:.0f} MiB, GPU idle {p['idle_s'] * 1e3:.1f} ms,"
            f" {p['parts'].get(UNCLASSIFIED, 0) * 1e3:.2f} ms unclassified ({result['case_s']:.0f} s)")


def now() -> str:
    """The time, UTC, ISO 8601."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def say(text: str) -> None:
    """Progress and errors go to stderr; --compare's table to stdout."""
    print(text, file=sys.stderr, flush=True)


# ---- --compare: plan's parts beside the measured ones ------------------------------------------------------


@contextmanager
def model_source(case: dict):
    """What `gputopo plan --model` is given for a case: its catalog name, else a folder with its config.json."""
    if case.get("catalog"):
        yield case["catalog"]
    else:
        with config_folder(case["config"]) as folder:
            yield folder


def planned(case: dict, mach: dict, gpu: str | None, own_gpu: bool) -> dict:
    """The plan for a case on the GPU's datasheet: {"parts", "step_s", "peak_bytes", "gpu"} or {"why"}."""
    if not gpu:
        return {"why": "no GPU datasheet: the record ran on a CPU (--gpu-model NAME prices its cases on one)"}
    from gputopo import request, speed
    from gputopo.errors import GputopoError
    try:
        with model_source(case) as model:
            req = request.resolve(
                request.ModelAsk(model=model),
                request.TrainingAsk(precision=case["precision"], batch_size=case["batch_size"],
                                    seq_len=case["seq_len"], grad_checkpointing=case["grad_checkpointing"]),
                request.HardwareAsk(gpus=1, gpu_model=gpu, gpu_mem=mach.get("gpu_memory_bytes") if own_gpu else None,
                                    cpu_mem=mach.get("ram_bytes"), cpu_cores=mach.get("cpu_cores_physical")))
    except GputopoError as e:
        return {"why": str(e)}
    m, lay, t, name = req.model, req.layout, req.training, case["strategy"]
    rates = speed.gpu_rates(lay, t)
    return {"parts": speed.parts(name, m, lay, t, rates), "step_s": speed.step(name, m, lay, t, rates).step_s,
            "peak_bytes": predicted_peak(name, m, lay, t), "gpu": lay.gpu_model}


def predicted_peak(name: str, m, lay, t) -> int:
    """The plan's bytes per GPU less the CUDA context (max_memory_allocated does not see it): plan.strategies()'s
    total; DDP and ZeRO-2 on one GPU, which strategies() leaves out (sharding over one GPU buys nothing), summed as
    it sums them."""
    from gputopo import memory, plan
    rows = {s.name: s for s in plan.strategies(m, lay, t)}
    if name in rows:
        total = rows[name].per_gpu_bytes["total"]
    else:
        states, _, _ = plan._model_states(name, m, lay, t)
        pk = memory.peak(m, t, t.attention, states["gradients"], plain_torch=name in ("single", "ddp"))
        total = states["weights"] + states["optimizer"] + plan._overhead(name, m, t) + pk["bytes"]
    return total - plan.CUDA_CONTEXT_BYTES


def error(plan: float | None, measured: float | None) -> float | None:
    """plan / measured - 1 (negative: the plan says faster or smaller than measured)."""
    return plan / measured - 1 if plan is not None and measured else None


def percent(x: float | None) -> str:
    """An error as a signed percentage, blank when there is none."""
    return f"{x:+.1%}" if x is not None else ""


def ms(x: float | None) -> str:
    """Seconds as milliseconds, n/a when unknown."""
    return f"{x * 1e3:.2f}" if x is not None else "n/a"


def case_rows(case: dict, plan: dict) -> list:
    """(part, plan seconds, measured seconds) for every part either side has, the plan's order first."""
    measured = dict(case["profile"]["parts"])
    measured["waiting for the host"] = case["profile"]["idle_s"]
    predicted = plan.get("parts") or {}
    names = list(predicted) + [n for n in sorted(measured) if n not in predicted]
    rows = []
    for name in names:
        p, m = predicted.get(name), measured.get(name)
        if (p or 0) < 1e-9 and (m or 0) < 1e-9:
            continue   # nothing on either side (no offload, no communication on one GPU)
        rows.append((name, p, m))
    return rows


def case_table(case: dict, plan: dict, errors: dict) -> list[str]:
    """One case's table: plan and measured per part, then the step and the peak, each with its error."""
    what = f"{case['name']} ({case['strategy']}, {case['precision']}, {case['batch_size']} x {case['seq_len']}" + (
        ", checkpointing)" if case["grad_checkpointing"] else ")")
    lines = ["", what + (f": plan on {plan['gpu']}'s datasheet" if "gpu" in plan else f": plan n/a, {plan['why']}")]
    lines.append(f"  {'part':<44}{'plan ms':>10}{'measured ms':>13}{'error':>11}")
    for name, p, m in case_rows(case, plan):
        e = error(p, m)
        if e is not None and name != "waiting for the host":
            errors["parts"].setdefault(name, []).append(e)
        lines.append(f"  {name:<44}{ms(p):>10}{ms(m):>13}{percent(e):>11}")
    step, median = plan.get("step_s"), case["step_s"]["median"]
    peak, measured_peak = plan.get("peak_bytes"), case["peak_bytes"]
    lines.append(f"  {'step (median of ' + str(TIMED) + ')':<44}{ms(step):>10}{ms(median):>13}"
                 f"{percent(error(step, median)):>11}")
    gib = (lambda b: f"{b / 2 ** 30:.2f}" if b is not None else "n/a")
    lines.append(f"  {'peak GiB (plan: per GPU less the CUDA context)':<44}{gib(peak):>10}{gib(measured_peak):>13}"
                 f"{percent(error(peak, measured_peak)):>11}")
    for key, e in (("step", error(step, median)), ("peak", error(peak, measured_peak))):
        if e is not None:
            errors[key].append((e, case["name"]))
    return lines


def summary(errors: dict) -> list[str]:
    """The median and worst error over the cases, for the step, the peak and each part."""
    lines = [""]
    for key in ("step", "peak"):
        values = errors[key]
        if values:
            worst = max(values, key=lambda v: abs(v[0]))
            lines.append(f"{key}: median {percent(statistics.median(v for v, _ in values))}, worst {percent(worst[0])}"
                         f" ({worst[1]}) over {len(values)} cases")
    if errors["parts"]:
        lines.append("by part (median error, worst, cases):")
        for name, values in sorted(errors["parts"].items(), key=lambda kv: statistics.median(kv[1])):
            lines.append(f"  {name:<44}{percent(statistics.median(values)):>11}"
                         f"{percent(max(values, key=abs)):>11}{len(values):>5}")
    return lines


def compare(record: dict, gpu_model: str | None = None) -> str:
    """Plan's parts beside the measured ones for every case of a record, with the errors' median and worst."""
    mach = record["machine"]
    gpu = gpu_model or mach.get("gpu")
    head = (f"{record.get('tool', 'gpu_truth')} at {record.get('gputopo_commit') or 'commit unknown'} on"
            f" {mach.get('gpu') or mach.get('device')} (torch {mach.get('torch')}, transformers"
            f" {mach.get('transformers')}); error = plan / measured - 1; measured parts are one profiled step's"
            " kernel time, 'waiting for the host' the median step less the GPU's busy time")
    if gpu_model and mach.get("device") != "cuda":
        head += f"\npriced on {gpu_model}'s datasheet; the record ran on a CPU: this checks the harness, not the plan"
    lines, errors = [head], {"step": [], "peak": [], "parts": {}}
    for case in record.get("cases", []):
        if "error" in case:
            lines += ["", f"{case['name']}: failed: {case['error'][:300]}"]
            continue
        lines += case_table(case, planned(case, mach, gpu, own_gpu=not gpu_model), errors)
    for s in record.get("skipped", []):
        lines.append(f"{s['name']}: not run ({s['why']})")
    return "\n".join(lines + summary(errors))


def record_problems(record) -> list[str]:
    """Where a record differs from what gpu_truth writes, in what compare() reads and hands to gputopo's plan."""
    from gputopo.dsconfig import STRATEGY_TO_CONFIG
    from gputopo.options import MOST_CORES
    from gputopo.parse import MOST_NAME
    from gputopo.units import MOST_BYTES, MOST_COUNT

    def count(most):
        return lambda v: type(v) is int and 1 <= v <= most

    def seconds(v):
        return type(v) in (int, float) and v >= 0

    def optional(rule):
        return lambda v: v is None or rule(v)

    name = lambda v: type(v) is str and 0 < len(v) <= MOST_NAME   # noqa: E731
    machine_rules = {"gpu": optional(name), "gpu_memory_bytes": optional(count(MOST_BYTES)),
                     "ram_bytes": optional(count(MOST_BYTES)), "cpu_cores_physical": optional(count(MOST_CORES))}
    case_rules = {"strategy": lambda v: v in STRATEGY_TO_CONFIG, "precision": lambda v: v in ("fp32", "fp16", "bf16"),
                  "batch_size": count(MOST_COUNT), "seq_len": count(MOST_COUNT),
                  "grad_checkpointing": lambda v: type(v) is bool, "peak_bytes": seconds,
                  "step_s": lambda v: type(v) is dict and seconds(v.get("median")),
                  "profile": lambda v: type(v) is dict and seconds(v.get("idle_s")) and type(v.get("parts")) is dict
                  and all(seconds(x) for x in v["parts"].values())}
    if type(record) is not dict or type(record.get("machine")) is not dict:
        return ['the top (an object with "machine" and "cases")']
    cases, skipped = record.get("cases"), record.get("skipped", [])
    if type(cases) is not list or type(skipped) is not list or not cases + skipped:
        return ['"cases" (a list of the cases that ran, none here)']
    bad = [f"machine.{k}" for k, ok in machine_rules.items() if not ok(record["machine"].get(k))]
    for i, case in enumerate(cases):
        if type(case) is not dict or type(case.get("name")) is not str:
            bad.append(f"cases[{i}]")
        elif type(case.get("error")) is not str:   # a case that failed shows its name and error alone
            bad += [f"cases[{i}].{k}" for k, ok in case_rules.items() if not ok(case.get(k))]
            if not (name(case.get("catalog")) or type(case.get("config")) is dict):
                bad.append(f"cases[{i}].config")
    return bad + [f"skipped[{i}]" for i, s in enumerate(skipped)
                  if type(s) is not dict or type(s.get("name")) is not str or type(s.get("why")) is not str]


def load_record(path: Path) -> dict:
    """A saved record (--load), or BadInput naming what is wrong: a regular file (a FIFO waited for a writer,
    /dev/zero was read until MemoryError) of JSON within sources' and jsonread's bounds, as gpu_truth writes it
    ([], {}, NaN and {"cases": []} were tracebacks)."""
    from gputopo import jsonread, sources
    from gputopo.errors import BadInput
    where = f"--load {path}:"
    if not os.path.isfile(path):   # follows a link, as reading does; checked before opening: a FIFO would wait
        raise BadInput(f"{where} not a regular file" if os.path.exists(path) else f"{where} no such file")
    try:
        record = jsonread.loads(sources.read_text(str(path), expect="a gpu_truth record (JSON)"), where, 32,
                                what="no record holds", bad="not JSON")
    except BadInput as e:
        raise BadInput(str(e) if str(e).startswith("--load ") else f"--load {e}") from None
    bad = record_problems(record)
    if bad:
        raise BadInput(f"{where} not what gpu_truth writes at {', '.join(bad[:6])}"
                       + (f" and {len(bad) - 6} more" if len(bad) > 6 else ""))
    return record


# ---- the command line ----------------------------------------------------------------------------------------


def parse_args(argv=None):
    """The command line, with --only's names and --load's need of --compare checked."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="results JSON (default docs/measurements/gpu-truth-DATE-GPU.json)")
    ap.add_argument("--force", action="store_true", help="replace an existing --out")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="these cases only (--list names them)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cpu: the CPU twin (tiny models of the same families, bf16 under CPU autocast)")
    ap.add_argument("--budget", type=float, default=BUDGET_S, metavar="SECONDS",
                    help="start no case whose estimate would not fit in what is left of this (default 480)")
    ap.add_argument("--compare", action="store_true", help="print plan's parts beside the measured ones")
    ap.add_argument("--load", type=Path, metavar="FILE", help="with --compare: a saved record (no GPU needed)")
    ap.add_argument("--gpu-model", help="with --compare: price the cases on this GPU's datasheet")
    ap.add_argument("--list", action="store_true", help="print the cases' names and exit")
    args = ap.parse_args(argv)
    if args.load and not args.compare:
        ap.error("--load reads a record for --compare: give --compare")
    known = [c.name for c in CASES]
    unknown = [n for n in args.only or [] if n not in known]
    if unknown:
        ap.error(f"--only: no case {', '.join(unknown)}; the cases: {', '.join(known)}")
    return args


def default_out(device: str) -> Path:
    """docs/measurements/gpu-truth-DATE-GPU.json, the GPU's name as torch gives it, made a file name."""
    name = "cpu"
    if device == "cuda":
        import torch
        name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cuda"
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return ROOT / "docs" / "measurements" / f"gpu-truth-{datetime.now().date().isoformat()}-{slug}.json"


def main(argv=None) -> int:
    """Measure (and compare), or compare a saved record; the exit status."""
    started = time.monotonic()
    args = parse_args(argv)
    if args.list:
        print("\n".join(f"{c.name}  ({c.engine}, {c.strategy})" for c in CASES))
        return 0
    if args.load:
        from gputopo.errors import BadInput
        try:
            record = load_record(args.load)
        except BadInput as e:
            say(f"Error: {e}")
            return 1
        print(compare(record, args.gpu_model))
        return 0
    out = args.out or default_out(args.device)
    if out.exists() and not args.force:   # before any work: a finished record is never lost
        say(f"Error: {out} exists; pass --force to replace it.")
        return 1
    if args.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            say("Error: no CUDA device here; --device cpu runs the CPU twin.")
            return 3
    cases = [c for c in CASES if not args.only or c.name in args.only]
    record = measure(cases, args, out, started)
    say(f"wrote {out} ({len(record['cases'])} cases, {len(record['skipped'])} skipped,"
        f" {time.monotonic() - started:.0f} s)")
    if args.compare:
        print(compare(record, args.gpu_model))
    return 0


if __name__ == "__main__":
    code = main()
    from gputopo.worker import release_deepspeed_shm
    release_deepspeed_shm()   # the CPU twin's DeepSpeed made a 66 MB /dev/shm buffer that nothing else unlinks
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)   # DeepSpeed and transformers sometimes abort at interpreter exit after the work is done
