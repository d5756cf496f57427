"""The kernels one micro-step runs, counted as transformers and torch run them: every matmul's shape (forward,
backward, recomputed; the frozen base's without weight gradients, LoRA's adapters beside them), and the elementwise
ops op by op (bytes read and written, kernels launched). gputopo.speed prices them. Pure."""
from __future__ import annotations

import math
from typing import NamedTuple

from . import finetune, memory
from .models import block_matrices


class Matmul(NamedTuple):
    """One forward matmul of a micro-step, `count` times: out[M, N] = a[M, K] @ b[K, N]. kind: "weight" (a
    projection: its backward computes the weight's gradient only when it is trained), "adapter" (a LoRA matrix),
    "score" (attention's scores and values: two activations), "head" (the output head, never recomputed)."""
    kind: str
    what: str
    count: float
    M: int
    N: int
    K: int


def forward_matmuls(m, t, attention: str, device: str = "cuda") -> list[Matmul]:
    """The forward matmuls of one micro-step, in the order matmul_names lists them: the blocks' projections, their
    LoRA adapters (lora_A: x[T, in] @ A^T, lora_B: [T, r] @ B^T), the attention's scores and values, the head."""
    x = memory.shape(m, t)
    hq, hkv, L = x.a * x.d, x.kv * x.d, m.layers
    qkv = ([("Q, K, V projection", 1, hq + 2 * hkv)] if m.fused_qkv else
           [("Q projection", 1, hq), ("K, V projections", 2, hkv)])
    up = ([("MLP gate and up projection (fused)", 1, 2 * x.I)] if m.fused_up else   # Phi-3's gate_up_proj
          [("MLP gate and up projections" if m.gated_mlp else "MLP up projection", m.mlp_inputs, x.I)])
    out = [Matmul("weight", what, c * L, x.T, N, x.h) for what, c, N in qkv]
    out += [Matmul("weight", "attention output projection", L, x.T, x.h, hq)]
    out += [Matmul("weight", what, c * L, x.T, N, x.h) for what, c, N in up]
    out += [Matmul("weight", "MLP down projection", L, x.T, x.h, x.I)]
    for lin in finetune.targeted(m, x.ft):   # every adapter, in the blocks or beside them (an explicit head)
        name = lin.name.rpartition(".")[2]
        out += [Matmul("adapter", f"LoRA A: {name}", lin.count, x.T, x.ft.rank, lin.fan_in),
                Matmul("adapter", f"LoRA B: {name}", lin.count, x.T, lin.fan_out, x.ft.rank)]
    # Fused attention kernels skip the masked half of causal scores; eager and the math kernel (CPU SDPA with
    # dropout, see gputopo.memory) compute all of it.
    fused = memory.resolve_attention(m, attention) == "sdpa" and (device == "cuda" or not m.attn_dropout)
    heads = round(x.b * x.a * (0.5 if fused else 1.0))
    out += [Matmul("score", "attention scores", heads * L, x.s, x.s, x.d),
            Matmul("score", "attention values", heads * L, x.s, x.d, x.s)]
    if x.L:   # the output head: the vocabulary's logits (LM), a token classifier's classes
        out.append(Matmul("head", OUTPUT_HEADS.get(m.head, "output head"), 1, x.T, x.L, x.h))
    return out


def matmuls(m, t, attention: str, device: str = "cuda") -> list[tuple[int, int, int, int]]:
    """The forward matmuls of one micro-step: (count, M, N, K) for out[M, N] = a[M, K] @ b[K, N]."""
    return [(mm.count, mm.M, mm.N, mm.K) for mm in forward_matmuls(m, t, attention, device)]


OUTPUT_HEADS = {"lm": "LM head", "token": "classifier head"}


def matmul_names(m, t) -> list[str]:
    """What each of matmuls()'s entries is, in its order."""
    return [mm.what for mm in forward_matmuls(m, t, t.attention)]


def backward_shapes(M: int, N: int, K: int) -> list[tuple[int, int, int]]:
    """The two matmuls of a matmul's backward: da = dc @ b^T and db = a^T @ dc."""
    return [(M, K, N), (K, N, M)]


def key(M: int, N: int, K: int) -> str:
    """A matmul shape as calibration names it."""
    return f"{M}x{N}x{K}"


def backward_of(mm: Matmul, frozen: bool) -> list[tuple[int, int, int]]:
    """A forward matmul's backward: both of backward_shapes, or only the input's gradient for a frozen base's
    weight (autograd computes no gradient a frozen tensor does not need)."""
    both = backward_shapes(mm.M, mm.N, mm.K)
    return both[:1] if frozen and mm.kind in ("weight", "head") else both


def training_matmuls(m, t, attention: str, device: str = "cuda") -> list[tuple[int, int, int, int]]:
    """Every matmul of a micro-step's forward and backward (and the blocks' recomputed forward)."""
    fwd = forward_matmuls(m, t, attention, device)
    frozen = memory.shape(m, t).frozen
    out = [(mm.count, mm.M, mm.N, mm.K) for mm in fwd]
    for mm in fwd:
        out += [(mm.count, *s) for s in backward_of(mm, frozen)]
    blocks = [mm for mm in fwd if mm.kind != "head"]
    if t.grad_checkpointing:  # the blocks' forward runs again in backward; the output head does not
        out += [(mm.count, mm.M, mm.N, mm.K) for mm in blocks]
    elif t.selective:   # torchtitan's per-op policy recomputes every other matmul (SDPA's output is kept; eager
        #                   attention's batched matmuls are not on its save list, so they run again)
        sdpa = memory.resolve_attention(m, attention) == "sdpa"
        out += [(mm.count / 2, mm.M, mm.N, mm.K) for mm in blocks if not (sdpa and mm.kind == "score")]
    return out


def score_shapes(m, t, device: str = "cuda") -> list[tuple[int, int, int]]:
    """The forward matmuls of the attention scores and values."""
    return [(mm.M, mm.N, mm.K) for mm in forward_matmuls(m, t, t.attention, device) if mm.kind == "score"]


def attention_shapes(m, t, device: str = "cuda") -> frozenset:
    """The keys of the scores' matmuls (forward and backward) when a fused kernel computes them (SDPA on a GPU)."""
    if device != "cuda" or memory.resolve_attention(m, t.attention) != "sdpa":
        return frozenset()
    return frozenset(key(*s) for M, N, K in score_shapes(m, t, device) for s in [(M, N, K)] + backward_shapes(M, N, K))


class Op(NamedTuple):
    what: str
    n: int
    bpe: float
    fwd: float
    bwd: float
    kind: str
    kernels: tuple = (1, 1)


def autocast(x) -> bool:
    """torch.autocast runs the step: 16-bit compute over fp32 weights, whose residual stream stays fp32 (plain
    PyTorch); a model whose weights are 16-bit itself (DeepSpeed, FSDP's param dtype, --pure-16bit) casts nothing."""
    return x.mixed and x.res == 4


def norm_op(m, x) -> Op:
    """LayerNorm is one kernel (forward: read, write; backward: the gradient, the input and the weights'
    gradients, in two kernels); HF's RMSNorm is Python: pow, mean, add eps, rsqrt, two multiplies, and their
    gradients one by one (the weight's a multiply and a sum)."""
    if m.norm == "layernorm":
        return Op("layernorm", x.T * x.h, 4, 2, 5, "math", (1, 2))
    return Op("rmsnorm", x.T * x.h, 4, 7, 19, "stream", (6, 11))


def weight_casts(m, x) -> tuple[int, int]:
    """(tensors per block, tensors outside the blocks) that torch.autocast casts to 16 bits in each forward: every
    Linear's weight and bias (linear/addmm are on autocast's 16-bit list, which casts all their floating inputs;
    embeddings and LayerNorm's weights are not cast). autocast caches a cast weight until the forward's autocast
    region exits, so each is cast once per forward, again in checkpointing's recomputation (torch.utils.checkpoint
    re-enters autocast around it, with a fresh cache), and each cast's backward casts its gradient back to fp32.
    Their bytes are speed.cast_bytes; these are their kernels. Under LoRA the base is 16-bit already (the adapters'
    casts are adapter_ops')."""
    if not autocast(x) or x.ft.peft:
        return 0, 0
    mats, biased, _, _ = block_matrices(m)
    outside = [lin for lin in m.linears if "*" not in lin.name]
    # a head's bias where the blocks' projections have theirs (BERT's pooler and classifier; no LM head has one)
    heads = sum(lin.count * (1 + (lin.stage != "head" and len(biased) == len(mats))) for lin in outside)
    if not m.linears and x.L:
        heads = 1   # a model described without its modules: its output head's weight
    return len(mats) + len(biased), heads


def norm_ops(m, x, consumers: int) -> list[Op]:
    """A norm before `consumers` projections, the residual add after the sublayer (backward: the two gradients
    reaching the residual stream summed), the dropout before it."""
    Th, f, v = x.T * x.h, 4, x.v
    ops = [norm_op(m, x), Op("residual add", Th, x.res, 3, 3, "stream")]
    if autocast(x):   # autocast casts the fp32 norm output for each projection (it caches weights, not activations)
        ops.append(Op("autocast cast", Th * consumers, (f + v) / 2, 2, 2, "stream", (consumers, consumers)))
    if m.hidden_dropout:
        ops.append(Op("dropout", Th, v, 2 + x.mask / v, 2 + x.mask / v, "stream"))
    return ops


def qk_norm_ops(m, x, fused: bool = False) -> list[Op]:
    """Qwen3's RMSNorm on each head's Q and K: HF's Python RMSNorm (norm_op's kernels) over T x (a + kv) x d
    elements, or one kernel each way (fused)."""
    if not m.qk_norm:
        return []
    n = x.T * (x.a + x.kv) * x.d
    return [Op("Q, K norm (fused)", n, x.v, 2, 3, "stream", (1, 2))] if fused else \
        [Op("Q, K rmsnorm", n, 4, 7, 19, "stream", (6, 11))]


def attention_ops(m, x, attention: str) -> list[Op]:
    """Around the attention kernel. Eager (and PyTorch's math SDPA) materializes the scores: matmul copies the
    strided Q, K^T and V (or repeat_kv does), then scale, mask add, fp32 softmax, cast back, dropout
    (transformers' eager_attention_forward; BERT and its kin drop out first, on the fp32 probabilities, and autocast
    casts them for the second matmul: memory.FP32_PROBS); a fused SDPA kernel does all of that inside. Under
    autocast the mask add's output is fp32: the mask is built fp32 (the parameters' or embeddings' dtype) and a
    16-bit tensor plus an fp32 one is fp32; its backward casts the gradient back to the scores' 16 bits. Rotary models
    rotate Q and K first: q * cos + rotate_half(q) * sin (neg, cat, 2 multiplies, add, each for q and k)."""
    T, v, f, hq, hkv = x.T, x.v, 4, x.a * x.d, x.kv * x.d
    ops = [Op("attention output transpose", T * hq, v, 2, 2, "stream")]
    if m.rotary:
        ops.append(Op("rotary", T * (hq + hkv), f, 10, 11, "stream", (10, 11)))
        if autocast(x):
            ops.append(Op("autocast cast", T * (hq + hkv), (f + v) / 2, 2, 2, "stream", (2, 2)))
    if attention in ("eager", "math"):
        sv = f if attention == "math" else v     # the math kernel upcasts to fp32
        ops += [Op("Q, K, V contiguous copies", 3 * T * hq, sv, 2, 2, "stream", (3, 3)),
                Op("scores: scale", x.S, sv, 2, 2, "stream"),
                Op("scores: mask add", x.S, (sv + f) / 2, 2, 2 if sv != f else 0, "stream", (1, int(sv != f))),
                Op("softmax", x.S, f, 2, 3, "math")]
        if sv != f:   # transformers' own cast back, or autocast's for the probabilities @ V matmul
            ops.append(Op("probabilities cast", x.S, (f + sv) / 2, 2, 2, "stream"))
        if m.attn_dropout:
            mask = 4 if attention == "math" else memory.eager_dropout_mask(m, x)
            # on fp32 probabilities before their cast where the model casts nothing back (memory.FP32_PROBS: BERT)
            dv = f if attention == "eager" and memory.fp32_probabilities(m, x) else sv
            ops.append(Op("attention dropout", x.S, dv, 2 + mask / dv, 2 + mask / dv, "stream"))
    return ops


def score_dtypes(m, x, attention: str = "eager") -> dict:
    """Bytes an element of each tensor eager attention writes over the scores, as attention_ops prices them (what
    benchmarks/autocast_dtypes.py holds against the CPU twin's ops): the scaled scores, the mask add's output, the
    softmax's, the dropout's and what the probabilities @ V matmul reads."""
    by = {op.what: op for op in attention_ops(m, x, attention)}
    scaled = by["scores: scale"].bpe
    out = {"scaled scores": scaled, "mask add": 2 * by["scores: mask add"].bpe - scaled,
           "softmax": by["softmax"].bpe}
    if "attention dropout" in by:
        out["dropout"] = by["attention dropout"].bpe
    out["probabilities @ V"] = scaled
    return out


def mlp_ops(m, x) -> list[Op]:
    """The activation between the MLP's projections. SwiGLU: act(gate), then gate x up (backward: a multiply for
    each). GPT-2's tanh GeLU is Python (NewGELUActivation): 8 kernels forward (pow, 3 multiplies, 2 adds, tanh,
    the last multiply), their gradients and the sums of the 3 gradients reaching x backward; CUDA autocast runs it
    in fp32."""
    TI, v = x.T * x.I, x.v
    act = (m.activation or "gelu").lower()
    if m.gated_mlp:   # on the projections' outputs (QLoRA over an fp32 stream: fp32, memory.Shape.linear_out)
        out = x.linear_out
        return [Op("activation(gate)", TI, out, 2, 3, "math"), Op("gate x up", TI, out, 3, 6, "stream", (1, 2))]
    if act in memory.PYTHON_GELUS:
        g = 4 if autocast(x) and x.cuda else v
        return [Op("tanh GeLU: tanh", TI, g, 2, 3, "math"),
                Op("tanh GeLU: multiplies and adds", TI, g, 16, 25, "stream", (7, 12))]
    return [Op("activation", TI, v, 2, 3, "stream" if act == "relu" else "math")]


def head_ops(m, x) -> list[Op]:
    """Embeddings (their backward zeroes a vocabulary x hidden gradient and adds the rows: torch's
    embedding_dense_backward sorts the token ids first, a few kernels), the final norm and autocast's cast of its
    output (the loss: loss_ops)."""
    Th, f, v = x.T * x.h, 4, x.v
    ops = [Op("embedding", Th, f, 2, 2, "stream", (1, 4)),
           Op("embedding gradient", x.V * x.h, f, 0, 1 + 2 * m.tied, "stream", (0, 1 + m.tied)), norm_op(m, x)]
    if not m.rotary and m.family in ("gpt2", "bert"):
        ops.append(Op("position embedding add", Th, f, 3, 2, "stream"))
    if m.embd_dropout:
        ops.append(Op("embedding dropout", Th, f, 2 + x.mask / f, 2 + x.mask / f, "stream"))
    if autocast(x):
        ops.append(Op("autocast cast", Th, (f + v) / 2, 2, 2, "stream"))
    return ops


def loss_ops(x, loss: str) -> list[Op]:
    """The loss over the logits. hf: transformers upcasts them to fp32 (logits.float() in ForCausalLMLoss),
    cross_entropy runs log-softmax and the NLL loss, and its backward writes a dense gradient and scatters into it.
    fused: one kernel reads the 16-bit logits (their log-sum-exp per row) and its backward reads them and writes the
    gradient (flash-attn's cross_entropy: upcast only in registers). chunked: a chunk's kernel reads its logits and
    writes their gradient in place in the forward (Liger's fused linear cross-entropy); nothing is left for
    backward."""
    TV, f, v = x.T * x.L, 4, x.v
    if loss == "fused":
        return [Op("cross-entropy (fused)", TV, v, 1, 2, "stream")]
    if loss == "chunked":
        chunks = max(1, math.ceil(x.L / max(x.h, 1)))
        return [Op("cross-entropy (chunked)", TV, v, 2, 0, "stream", (chunks, 0))]
    ops = [Op("logits.float()", TV, (f + v) / 2, 2, 2, "stream")] if x.mixed else []
    # torch's log-softmax over rows this long (cunn_SoftMaxForward / cunn_SoftMaxBackward in SoftMax.cu) reads a row
    # three times (max, sum of exponentials, the output) and writes it once, forward and backward alike
    return ops + [Op("log-softmax", TV, f, 4, 4, "math"), Op("loss gradient", TV, f, 0, 1, "stream", (1, 2))]


def fused_ops(m, x, attention: str) -> tuple[list[Op], list[Op]]:
    """(one block's ops, the ops outside the blocks) when each op is one kernel on 16-bit activations (torch.compile,
    Liger Kernel, Megatron, llm.c): a kernel reads its inputs once and writes its outputs once. The residual add
    and the norm after it are one kernel (forward: residual, input, sum, output; backward: the gradient in, the
    sum, the residual's gradient, the gradient out; the norm's weights' gradient a second kernel); GeLU reads and
    writes once (backward: the gradient and the input in, the gradient out); SwiGLU reads gate and up and writes
    their product (backward: 3 in, 2 out); rotary rewrites Q and K once each way. Attention scores, where kept
    (eager: Megatron), get one fused scale, mask and softmax (backward: the probabilities and their gradient in,
    the scores' gradient out)."""
    T, Th, TI, v = x.T, x.T * x.h, x.T * x.I, x.v
    block = [Op("residual add + norm (fused)", Th, v, 4, 4, "stream", (1, 2))] * 2 + qk_norm_ops(m, x, True)
    block += [Op("norm (fused)", Th, v, 2, 3, "stream", (1, 2))] * (m.norms - 2)   # Gemma 2's after each sublayer
    if m.rotary:
        block.append(Op("rotary (fused)", T * (x.a + x.kv) * x.d, v, 2, 2, "stream"))
    if attention in ("eager", "math"):
        block.append(Op("scores: scale, mask, softmax (fused)", x.S, v, 2, 3, "stream"))
        if m.attn_dropout:
            block.append(Op("attention dropout", x.S, v, 2 + x.mask / v, 2 + x.mask / v, "stream"))
    if m.hidden_dropout:   # dropped out inside the add + norm kernel: its mask written and read
        block.append(Op("dropout mask", 2 * Th, x.mask, 1, 1, "stream", (0, 0)))
    block.append(Op("SwiGLU (fused)", TI, v, 3, 5, "stream") if m.gated_mlp else
                 Op("activation (fused)", TI, v, 2, 3, "stream"))
    head = [Op("embedding", Th, v, 2, 2, "stream", (1, 4)),
            Op("embedding gradient", x.V * x.h, 4, 0, 1 + 2 * m.tied, "stream", (0, 1 + m.tied)),
            Op("norm (fused)", Th, v, 2, 3, "stream", (1, 2))]
    if not m.rotary and m.family in ("gpt2", "bert"):
        head.append(Op("position embedding add", Th, v, 3, 2, "stream"))
    return block, head


def elementwise_ops(m, t, attention: str, device: str, half: bool = False) -> tuple[list[Op], list[Op]]:
    """(one block's ops, the ops outside the blocks) of one micro-step, as the kernels the training runs do them;
    half: the model's own weights are 16-bit (half_model)."""
    x = memory.shape(m, t, device, half_model=half)
    att = memory.resolve_attention(m, attention)
    if att == "sdpa" and m.attn_dropout and device == "cpu":
        att = "math"    # CPU SDPA with dropout runs the math kernel (gputopo.memory)
    if t.kernels == "fused":
        block, head = fused_ops(m, x, att)
    else:
        block = (norm_ops(m, x, 1 if m.fused_qkv else 3) + qk_norm_ops(m, x) + attention_ops(m, x, att)
                 + norm_ops(m, x, m.mlp_inputs) + mlp_ops(m, x) + [norm_op(m, x)] * (m.norms - 2))
        if not t.grad_checkpointing and m.kv_cache:   # a decoder builds a DynamicCache in training
            # (use_cache defaults to True; only checkpointing turns it off; an encoder such as BERT keeps none):
            # each layer's K and V copied in
            block.append(Op("KV cache copy", x.T * 2 * x.kv * x.d, x.v, 2, 0, "stream", (2, 0)))
        head = head_ops(m, x)
        casts = weight_casts(m, x)
        if casts[0]:   # kernels only (each forward, its backward): their bytes are speed.cast_bytes
            block.append(Op("autocast weight casts", 0, 0, 0, 0, "stream", (casts[0], casts[0])))
        if casts[1]:
            head.append(Op("autocast weight casts", 0, 0, 0, 0, "stream", (casts[1], casts[1])))
    mats, biased, _, _ = block_matrices(m)
    if biased and not x.frozen:   # a bias's gradient sums its output's gradient over the tokens: one read of it
        block.append(Op("bias gradients", x.T * sum(mats[i][1] for i in biased), x.v, 0, 1, "stream",
                        (0, len(biased))))
    if x.frozen:   # no gradient for the frozen embeddings; the adapters' ops and QLoRA's dequantization instead
        head = [op for op in head if op.what != "embedding gradient"]
        block += adapter_ops(x, finetune.per_block(m, x.ft)) + dequantize_ops(m, x)
        head += adapter_ops(x, [(lin, lin.count) for lin in finetune.outside_blocks(m, x.ft)])
    return block, head + (loss_ops(x, t.loss) if x.L else [])


def adapter_ops(x, pairs) -> list[Op]:
    """PEFT's LoRA Linear.forward around the two adapter matmuls, for each (targeted module, how many): x cast to
    the adapter's dtype where it differs (and under autocast back to 16 bits for lora_A's matmul), dropout, the
    product scaled (`* scaling`) and added to the base's output; backward, each in reverse, and the adapter's
    input gradient added to the base's. Under autocast the fp32 A and B are cast to 16 bits each forward and
    their gradients back (small, but kernels)."""
    T, ft, a, v = x.T, x.ft, x.adapter, x.v
    compute = v if x.amp else a
    ops = []
    for lin, n in pairs:
        if n <= 0:
            continue
        stream = v if lin.stage in ("o", "down") else x.res   # the inner projections read the compute dtype
        one = (n, n)   # a kernel each way per module
        if stream != a:
            ops.append(Op("LoRA: input cast", n * T * lin.fan_in, (stream + a) / 2, 2, 2, "stream", one))
        if ft.dropout:
            ops.append(Op("LoRA: dropout", n * T * lin.fan_in, a, 2 + x.mask / a, 2 + x.mask / a, "stream", one))
        if x.amp and a != compute:
            ops.append(Op("LoRA: autocast casts", n * (T * lin.fan_in + ft.rank * (lin.fan_in + lin.fan_out)),
                          (a + compute) / 2, 2, 2, "stream", (3 * n, 3 * n)))
        ops += [Op("LoRA: scale", n * T * lin.fan_out, compute, 2, 2, "stream", one),
                Op("LoRA: add to the base's output", n * T * lin.fan_out, v, 3, 0, "stream", (n, 0)),
                Op("LoRA: input gradient add", n * T * lin.fan_in, v, 0, 3, "stream", (0, n))]
    return ops


def dequantize_ops(m, x) -> list[Op]:
    """QLoRA: bitsandbytes dequantizes each NF4 weight to the compute dtype before its matmul, in every forward
    (again in the recomputed one) and once in backward for the input's gradient (MatMul4Bit): reads the packed
    half byte and the block's absmax (double quantization: its uint8 and the nested scale), writes the weight; two
    kernels (the absmax's dequantization, then the weight's)."""
    if not x.ft.quantized:
        return []
    per = sum(lin.fan_in * lin.fan_out * lin.count for lin in finetune.quantized(m) if "*" in lin.name) / max(
        m.layers, 1)
    n = sum(lin.count for lin in finetune.quantized(m) if "*" in lin.name) / max(m.layers, 1)
    read = finetune.nf4_bytes(10 ** 6) / 10 ** 6
    return [Op("NF4 dequantize", per, 1, read + x.v, read + x.v, "stream", (2 * n, 2 * n))]


def forward_passes(t) -> int:
    """How often the blocks' forward runs per micro-step: twice under checkpointing (selective recomputes every
    elementwise op)."""
    return 2 if t.grad_checkpointing or t.selective else 1


def half_model(name: str, t) -> bool:
    """The strategy's model holds 16-bit weights itself (DeepSpeed's engine, FSDP's param dtype, --pure-16bit, a
    LoRA base loaded in the compute dtype), as gputopo.memory counts it: no autocast of the base."""
    return name not in ("single", "ddp") or t.pure16 or finetune.half_base(t.finetune, t)


def matmul_kernels(m, t, attention: str, device: str = "cuda") -> int:
    """Matmul kernels of a micro-step: each projection forward and its two matmuls backward (a bias's gradient a
    reduction more), the blocks' forward again under checkpointing; the scores' two batched matmuls forward and
    four backward (eager), or the fused kernel (one forward; FlashAttention-2's backward launches three: its
    preprocess, the main kernel, dQ's conversion); the LM head."""
    mats, biased, _, _ = block_matrices(m)
    eager = not attention_shapes(m, t, device)
    ft = t.finetune
    adapters = sum(n for _, n in finetune.per_block(m, ft))   # two matmuls forward, four backward each
    fwd = len(mats) + (2 if eager else 1) + 2 * adapters
    # a frozen base's projection computes its input's gradient only, and no bias gradient
    bwd = (1 if ft.peft else 2) * len(mats) + (0 if ft.peft else len(biased)) + (4 if eager else 3) + 4 * adapters
    outside = 6 * sum(lin.count for lin in finetune.outside_blocks(m, ft))
    return round(m.layers * (fwd * forward_passes(t) + bwd) + ((2 if ft.peft else 3) if m.logits else 0) + outside)


def kernels(m, t, attention: str, device: str = "cuda", half: bool = False) -> int:
    """Every kernel a micro-step launches: its matmuls and its elementwise ops' kernels."""
    block, head = elementwise_ops(m, t, attention, device, half)
    ew = (m.layers * sum(op.kernels[0] * forward_passes(t) + op.kernels[1] for op in block)
          + sum(op.kernels[0] + op.kernels[1] for op in head))
    return matmul_kernels(m, t, attention, device) + round(ew)
