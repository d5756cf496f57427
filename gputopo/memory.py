"""The memory of one training step on one device, phase by phase, as PyTorch and transformers run it. Pure.

A step's peak is not "model states + saved activations": it falls in one phase, and each phase holds its own
mix of gradients, tensors saved for backward and temporaries. Every term below names the tensor it stands
for; each was checked against what transformers' modeling code and PyTorch's autograd/autocast really keep
(`benchmarks/memory_accuracy.py` measures the whole step on CPU, tests/test_memory.py holds one
hand-computed case per term and the H100 measurements of docs/measurements/h100-2026-11.md).

Shapes: T = batch x seq tokens, h hidden, I intermediate, a heads of d, kv K/V heads, S = a x seq^2 x batch
attention scores, V vocabulary. Bytes: v = the compute dtype (4 fp32, 2 under autocast); the residual
stream, softmax, log-softmax and norms stay fp32 under autocast (embeddings are not autocast, softmax and
layer_norm are on autocast's fp32 list; HF's RMSNorm upcasts by hand).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from . import finetune
from .finetune import FULL, Finetune

# `auto` is what transformers does when not told: sdpa wherever the model class supports it
# (PreTrainedModel.get_correct_attn_implementation: None -> "sdpa", falling back to "eager").
ATTENTIONS = ("auto", "eager", "sdpa")
# Elementwise tanh GeLU written in Python (transformers' NewGELUActivation and kin): every intermediate is
# a tensor, four of them saved for backward plus the output the next projection keeps.
PYTHON_GELUS = ("gelu_new", "gelu_fast", "gelu_accurate", "gelu_python")


@dataclass(frozen=True)
class Phase:
    name: str
    grad_params: int      # parameters whose gradient exists at this moment
    activations: int      # bytes autograd keeps for backward (with autocast's 16-bit weight copies)
    temporaries: int      # bytes alive only around this moment (logits, their gradients, optimizer buffers)

    def to_dict(self) -> dict:
        return asdict(self)


def resolve_attention(m, attention: str) -> str:
    """auto -> what transformers itself picks for this architecture."""
    if attention == "auto":
        return "sdpa" if m.sdpa else "eager"
    return attention


@dataclass(frozen=True)
class Shape:
    """The sizes one step's tensors are made of."""
    T: int
    s: int
    b: int
    h: int
    I: int
    a: int
    d: int
    kv: int
    V: int
    v: int        # compute bytes
    mixed: bool
    mask: int     # bytes per dropout-mask element: 1 on CUDA (bool), the value size on CPU
    cuda: bool = True
    fused: bool = False   # one kernel per norm/activation on 16-bit activations (--kernels fused)
    loss: str = "hf"      # hf, fused or chunked (--loss)
    L: int = 0            # logit columns per token the loss reads (ModelSpec.logits: the vocabulary for an LM head)
    res: int = 4          # bytes of the residual stream: fp32 under autocast (fused kernels too: torch.compile and
                          # Liger keep it), the model's 16 bits when the model itself is (DeepSpeed, FSDP, 16-bit
                          # weights)
    ft: Finetune = FULL   # what is trained: under LoRA/QLoRA the base's weights need no gradient (frozen)
    amp: bool = False     # torch.autocast runs the step (plain torch in mixed precision without --pure-16bit)
    adapter: int = 4      # bytes of a LoRA adapter's weight (finetune.adapter_dtype_bytes)
    bnb_keeps_input: bool = False   # bitsandbytes < 0.43.2: each 4-bit matmul keeps its input (bnb_input_bytes)
    non_reentrant: bool = False     # checkpointing with use_reentrant=False: ctx attributes stay (ctx_held_bytes)
    keeps_graph: bool = False       # the loop names the last micro-batch's output into the next forward
    head_nf4: bool = False          # the output head quantized too (--quantizer lightning: finetune.quantizes_head)
    head_dequant: int = 0           # bytes its dequantization holds at each of its matmuls (head_dequant_bytes)

    @property
    def frozen(self) -> bool:
        """The base's weights need no gradient: a projection keeps no input for it (autograd saves a tensor only
        for the gradients that are needed), a norm no normalized input for its weight's."""
        return self.ft.peft

    @property
    def linear_out(self) -> int:
        """Bytes of a base projection's output: bitsandbytes' Linear4bit returns its input's dtype, so QLoRA under
        autocast over an fp32 stream (prepare_model_for_kbit_training's upcast) gets fp32 outputs (measured: the
        MLP's saved tensors twice their 16-bit size, tests/test_finetune.py); the compute dtype otherwise."""
        return 4 if self.ft.quantized and self.amp and self.res == 4 else self.v

    @property
    def S(self) -> int:
        return self.a * self.s * self.s * self.b


def shape(m, t, device: str = "cuda", half_model: bool = False, plain_torch: bool = True) -> Shape:
    """The step's sizes; half_model: the model's own weights are 16-bit (no autocast), so is its residual stream;
    plain_torch: torch runs the step (autocast in mixed precision), not DeepSpeed's 16-bit engine."""
    mixed = t.precision != "fp32"
    ft = getattr(t, "finetune", FULL)
    fused = getattr(t, "kernels", "hf") == "fused"
    v = t.value_bytes  # 16-bit in mixed precision: plan.Training owns the rule
    a = m.heads or 1
    d = m.head_dim or m.hidden_size // a
    return Shape(T=t.batch_size * t.seq_len, s=t.seq_len, b=t.batch_size, h=m.hidden_size,
                 I=m.intermediate_size or 4 * m.hidden_size, a=a, d=d, kv=m.kv_heads or a, V=m.vocab_size or 0,
                 L=m.logits,
                 v=v, mixed=mixed, mask=1 if device == "cuda" else v, cuda=device == "cuda",
                 fused=fused, loss=getattr(t, "loss", "hf"), res=v if mixed and half_model else 4, ft=ft,
                 amp=mixed and plain_torch and not t.pure16,
                 adapter=finetune.adapter_dtype_bytes(t, deepspeed=not plain_torch),
                 bnb_keeps_input=getattr(t, "bnb_keeps_input", False), head_nf4=finetune.quantizes_head(t),
                 non_reentrant=getattr(t, "non_reentrant", False), keeps_graph=getattr(t, "keeps_graph", False),
                 head_dequant=head_dequant_bytes(m, t))


def head_dequant_bytes(m, t) -> int:
    """The output head quantized as Lightning Fabric's BitsandbytesPrecision quantizes it (--quantizer lightning):
    its `quantize` casts the weight to fp16 before bitsandbytes' quantize_4bit (`weight.contiguous().to(device=
    device, dtype=torch.half)`), whose quant state records that dtype, so each of the head's matmuls, forward and
    backward, dequantizes the whole vocabulary x hidden weight to fp16 and casts it to the compute dtype
    (MatMul4Bit: `F.dequantize_4bit(B, quant_state).to(A.dtype)`, bitsandbytes 0.41 to 0.50): both copies at once
    where the compute dtype is not fp16 (bf16-true: 4 bytes an element), one where it is. litgpt runs its head
    chunk by chunk, each chunk's matmul dequantizing anew: the largest temporary at the loss."""
    if not finetune.quantizes_head(t):
        return 0
    return finetune.head_elements(m) * (2 + (0 if t.precision == "fp16" else t.value_bytes))


def norm_bytes(m, x: Shape, consumers: int) -> int:
    """A norm and the projections reading it: the fp32 residual it saves (LayerNorm: plus mean and rstd;
    RMSNorm: plus x*rsqrt and rstd), and its output as the projections keep it: once in fp32 (shared), one
    16-bit cast per projection under autocast (autocast caches casts of weights, not of activations)."""
    T, h = x.T, x.h
    kept = 0 if x.frozen else 1   # the output is kept for the projections' weight gradients (a frozen base: none)
    if x.fused:   # a fused norm keeps its input (the residual's width) and the per-row statistics; its output
        return T * h * x.res + 2 * T * 4 + kept * T * h * x.v   # once, shared
    # HF's RMSNorm upcasts to fp32 itself: pow and the normalization keep the fp32 input and rsqrt, the weight's
    # multiply the normalized input (for the weight's gradient: none when frozen)
    own = (T * h * 4 + kept * T * h * 4 + T * 4) if m.norm == "rmsnorm" else T * h * x.res + 2 * T * 4
    out = T * h * 2 * consumers if x.mixed else T * h * 4
    return own + kept * out


def attention_bytes(m, x: Shape, attention: str) -> int:
    """Q/K/V as the kernel keeps them, the scores (eager) or output + log-sum-exp (sdpa), the out-projection
    input and the dropout after it."""
    T, v, hq = x.T, x.v, x.a * x.d
    if attention == "eager":
        # matmul keeps contiguous copies of Q and K^T and V; HF's eager path repeats K/V to every head (repeat_kv).
        qkv = 3 * T * hq * v
        probs = x.S * (v if x.fused else 4)              # softmax output, fp32 (autocast's fp32 list / dtype=);
        #                                                  a fused softmax (Megatron's) keeps it in 16 bits
        if m.attn_dropout:
            probs += x.S * (eager_dropout_mask(m, x) + v)  # dropout mask and its output, kept by the matmul
        elif x.mixed:
            probs += x.S * v                             # the cast back to the value dtype, kept by the matmul
        core = qkv + probs
    elif attention == "math":
        core = math_sdpa_bytes(m, x)
    else:
        # SDPA (flash / memory-efficient / CPU flash) keeps Q, K, V at their own head counts (transformers
        # passes enable_gqa when there is no padding mask), its output and an fp32 log-sum-exp per row.
        core = T * hq * v + 2 * T * x.kv * x.d * v + T * hq * v + x.a * x.s * x.b * 4
    out_proj = 0 if x.frozen else T * hq * v   # the out-projection's input, for its weight's gradient
    drop = T * x.h * x.mask if m.hidden_dropout else 0
    return core + out_proj + drop


# Model types whose eager attention hands softmax's output to dropout as it is, with no cast back to the value's
# dtype: transformers v4.16.0's BertSelfAttention.forward (scores / sqrt(d) + the extended mask, softmax, dropout,
# matmul with V), and eager_attention_forward of bert, roberta, xlm-roberta, electra, camembert, distilbert, albert
# and t5 in transformers 5.25. Under autocast their scores reach softmax in fp32: the additive mask is built in the
# parameters' (4.16: get_extended_attention_mask's `.to(dtype=self.dtype)`) or the fp32 embeddings' dtype (5.x:
# masking_utils' eager_mask), and a 16-bit tensor plus an fp32 one is fp32 (type promotion); CUDA's autocast runs
# softmax in fp32 besides (its fp32 list). So dropout runs on fp32 probabilities, and autocast casts them to 16
# bits only for the probabilities @ V matmul. GPT-2 (`.type(value.dtype)`) and Llama (`softmax(..., dtype=float32)
# .to(query.dtype)`) cast before dropout.
FP32_PROBS = ("bert", "roberta", "xlm-roberta", "electra", "camembert", "distilbert", "albert", "t5")


def fp32_probabilities(m, x: Shape) -> bool:
    """Eager attention's probabilities stay fp32 through dropout: autocast over an fp32 residual stream (plain
    torch's mixed precision) and a model type whose attention casts nothing back (FP32_PROBS)."""
    return x.mixed and x.res == 4 and not x.fused and m.family in FP32_PROBS


def eager_dropout_mask(m, x: Shape) -> int:
    """Bytes per element of eager attention's dropout mask. CUDA: 1 (bool). CPU: the probabilities' dtype,
    which is the query's (transformers' eager_attention_forward: softmax(..., dtype=float32).to(query.dtype)).
    Under autocast a rotary model's query is fp32: the bf16 projection is multiplied by cos/sin that the
    rotary module casts to its input's dtype, the fp32 residual stream (LlamaRotaryEmbedding.forward returns
    cos.to(dtype=x.dtype), https://github.com/huggingface/transformers/blob/main/src/transformers/models/llama/
    modeling_llama.py), so the mask is fp32 there, as it is where the probabilities stay fp32 (fp32_probabilities:
    BERT); GPT-2 casts to the value's dtype (16-bit)."""
    if x.cuda:
        return x.mask
    return 4 if m.rotary or fp32_probabilities(m, x) else x.v


def math_sdpa_bytes(m, x: Shape) -> int:
    """What PyTorch's math SDPA kernel keeps, `_scaled_dot_product_attention_math` in
    https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/transformers/attention.cpp. It runs on
    CPU whenever attention dropout is on: the CPU flash kernel refuses dropout > 0 (TORCH_CHECK in
    `_scaled_dot_product_flash_attention_cpu`, same file). It first upcasts 16-bit Q, K and V to fp32 ("Keep
    query, key, value in high precision for accuracy"), so under autocast everything it saves is fp32, unlike
    eager attention: the scaled Q and K^T the first matmul keeps and V (K/V repeated to every head for GQA),
    the softmax output, and with dropout the mask (CPU dropout multiplies by a mask of its input's dtype) and
    the dropped-out probabilities the second matmul keeps. Its output is cast back to the value dtype.
    Listed with torch.autograd's saved tensors (grad_fn._saved_*) for gpt2 under CPU bf16 autocast."""
    fp32 = 4
    qkv = 3 * x.T * x.a * x.d * fp32
    probs = x.S * fp32 + (2 * x.S * fp32 if m.attn_dropout else 0)
    return qkv + probs


def mlp_bytes(m, x: Shape) -> int:
    """The MLP's saved tensors after its input projection(s), including what the output projection keeps."""
    TI, v = x.T * x.I, x.v
    act = (m.activation or "gelu").lower()
    # the output projection keeps its input (TI x v) for its weight's gradient, unless the base is frozen
    proj = 0 if x.frozen else TI * v
    if x.fused:
        body = (2 if m.gated_mlp else 1) * TI * v + proj  # fused SwiGLU: gate, up, product; fused GeLU: in, out
    elif m.gated_mlp:
        body = 3 * TI * x.linear_out + proj              # gate out, act(gate), up out, their product
    elif act in PYTHON_GELUS:
        # pow(x, 3) saves x, tanh its output, the last multiply both factors, the projection the result.
        # CUDA autocast runs pow in fp32 (a saved fp32 copy of x) and the chain after it stays fp32; CPU
        # autocast has no pow on its fp32 list, so there the chain stays 16-bit (measured: 189.5 MiB both).
        body = (TI * (4 + 4 + 2 + 4) if x.mixed and x.cuda else 4 * TI * v) + proj
    elif act == "relu":
        body = TI * v                                    # relu's output: its backward and the projection keep it
        if m.hidden_dropout and m.family == "t5":
            body += TI * x.mask + proj                   # T5 drops out between wi and wo
    else:
        body = TI * v + proj                             # a fused activation: its input and its output
    drop = x.T * x.h * x.mask if m.hidden_dropout else 0
    return body + drop


def block_bytes(m, x: Shape, attention: str) -> int:
    """Bytes one transformer block keeps for backward, its LoRA adapters' included; a norm after a sublayer's
    output (Gemma 2's) feeds the residual add, which keeps nothing."""
    return (norm_bytes(m, x, 1 if m.fused_qkv else 3) + qk_norm_bytes(m, x) + attention_bytes(m, x, attention)
            + norm_bytes(m, x, m.mlp_inputs) + mlp_bytes(m, x) + (m.norms - 2) * norm_bytes(m, x, 0)
            + adapter_bytes(m, x) + bnb_input_bytes(m, x))


def qk_norm_bytes(m, x: Shape) -> int:
    """Qwen3's RMSNorm on each head's Q and K (the projections' 16-bit outputs): the fp32 copy it squares and
    scales, the rstd per head, the cast back that its weight multiplies (fused: the input and the rstd)."""
    if not m.qk_norm:
        return 0
    n, heads = x.T * (x.a + x.kv) * x.d, x.T * (x.a + x.kv)
    return n * x.v + heads * 4 if x.fused else n * (4 + x.v) + heads * 4


def bnb_input_bytes(m, x: Shape) -> int:
    """QLoRA on bitsandbytes before 0.43.2 (--bnb-keeps-input): MatMul4Bit.forward stores each 4-bit matmul's input
    on its ctx whenever a gradient is wanted (`ctx.tensors = (A, B)`), and its backward never reads it; bitsandbytes
    #1270, first in 0.43.2, stores None (https://github.com/bitsandbytes-foundation/bitsandbytes/commit/9e75374,
    bitsandbytes/autograd/_functions.py). A is what Linear4bit.forward hands it, its input cast to the compute
    dtype (`x = x.to(self.compute_dtype)`): the very tensor where the input is in that dtype already (one per
    stage, shared by the projections reading it), a copy per projection where it is not (an fp32 stream under
    autocast). Counted where a frozen base keeps nothing else of it: the norms' outputs (attention and MLP inputs),
    the attention's output re-laid for the out-projection, the MLP's product for the down-projection (relu's
    output its own backward keeps already); nothing where a LoRA adapter on the stage keeps that same tensor (no
    dropout, no cast: finetune.saved_bytes). The output head is not quantized (finetune.quantized). A block's:
    every block keeps it without checkpointing, the recomputed one under reentrant checkpointing (its forward runs
    without grad, so nothing is stored); non-reentrant checkpointing's saved-tensor hooks never see ctx's
    attributes, so there every block's stays too (ctx_held_bytes)."""
    if not (x.ft.quantized and x.bnb_keeps_input):
        return 0
    norm_out = x.v if x.fused else x.res
    dtype = {"qkv": norm_out, "up": norm_out, "other": norm_out, "o": x.v,
             "down": x.linear_out if m.gated_mlp and not x.fused else x.v}
    lora_stream = {"qkv": x.res, "up": x.res, "other": x.res, "o": x.v, "down": x.v}
    lora_kept = {(lin.stage, lin.fan_in) for lin, _ in finetune.per_block(m, x.ft)
                 if not x.amp and not x.ft.dropout and lora_stream[lin.stage] == x.adapter == x.v}
    relu = (m.activation or "gelu").lower() == "relu" and not m.gated_mlp
    total, shared = 0.0, set()
    for lin in finetune.quantized(m):
        if "*" not in lin.name or lin.stage not in dtype:
            continue
        n = lin.count / max(m.layers, 1)
        if dtype[lin.stage] != x.v:
            total += n * x.T * lin.fan_in * x.v      # Linear4bit's own cast, one per projection
        elif (lin.stage, lin.fan_in) not in lora_kept and not (relu and lin.stage == "down"):
            shared.add((lin.stage, lin.fan_in))
    return int(total + sum(x.T * fan_in * x.v for _, fan_in in shared))


def ctx_held_bytes(m, x: Shape, ckpt: bool) -> tuple[int, int]:
    """(every block's, the head's) 4-bit matmul inputs that the step's autograd graph holds until the graph itself
    is freed, not only until each node's backward. Autograd frees what a node saved when its backward has run
    (`PyNode::release_variables` clears a custom Function's saved_variables, torch/csrc/autograd/python_function.cpp),
    but bitsandbytes before 0.43.2 keeps A as a ctx attribute (MatMul4Bit.forward, `ctx.tensors = (A, B)`,
    bitsandbytes/autograd/_functions.py line 523 at 0.42.0), which lives as long as its node: until the loss and
    the outputs that reference the graph are dropped. The blocks' are in the graph without checkpointing and under
    non-reentrant checkpointing (torch.utils.checkpoint with use_reentrant=False runs the forward with grad under
    saved-tensor hooks, which see save_for_backward only), not under reentrant checkpointing (its forward runs
    without grad; each recomputed block's graph is dropped once its backward ran). Measured on CPU with a Function
    storing ctx.tensors as 0.42.0 does: every block's input alive after the backward while the loss is named,
    none after `del loss`, under non-reentrant checkpointing every block's after the forward (docs/sources.md)."""
    if not (x.ft.quantized and x.bnb_keeps_input):
        return 0, 0
    blocks = m.layers * bnb_input_bytes(m, x) if (not ckpt or x.non_reentrant) else 0
    return blocks, (x.T * x.h * x.v if x.L and x.head_nf4 else 0)


def previous_graph_bytes(m, x: Shape, ckpt: bool) -> int:
    """What the last micro-batch's step still holds during the next forward where the training loop keeps naming
    its output and loss until the new ones replace them (--loop-keeps-graph: litgpt's finetune/lora.py, `logits =
    model(input_ids, lm_head_chunk_size=128)` ... `loss = chunked_cross_entropy(...)` in fit's loop, lit-gpt
    8641822 lines 216-219, litgpt 00af8b0 lines 304-307): its logits (16-bit, as the model returns them) and
    whatever its graph holds past the backward (ctx_held_bytes). The HF Trainer's training_step returns a detached
    loss and drops the outputs; fsdp_qlora's train.py sets `output = None; loss = None` after the backward."""
    blocks, head = ctx_held_bytes(m, x, ckpt)
    return x.T * x.L * x.v + blocks + head


def adapter_bytes(m, x: Shape, linears=None) -> int:
    """What the LoRA adapters of one block (or of `linears`) keep for backward (finetune.saved_bytes): each reads
    the block's stream (the norms' outputs: the residual's dtype) or an inner tensor (the attention's output, the
    MLP's product: the compute dtype)."""
    if not x.frozen:
        return 0
    stream = {"qkv": x.res, "up": x.res, "head": x.res, "other": x.res, "o": x.v, "down": x.v}
    return int(finetune.saved_bytes(m, x.ft, x.T, stream, x.amp, x.adapter, 1 if x.cuda else x.adapter, linears))


def block_backward_peak(m, x: Shape, attention: str) -> tuple[int, int]:
    """The most one block holds during its own backward, saved tensors included. Backward runs the MLP first:
    its widest gradients (~3 of batch x seq x I, fp32 at most) come on top of everything the block saved;
    by the attention's turn the MLP and second norm are freed, and eager attention adds the fp32 gradients of
    the probabilities and of the scores. The gradient flowing down the residual rides along.
    Returns (saved bytes still held, temporaries) at the worse of the two moments."""
    block = block_bytes(m, x, attention)
    mlp_half = (block, 3 * x.T * x.I * max(x.v, 4))
    attn_grads = attention_backward_grads(m, x, attention)
    attn_half = (block - mlp_bytes(m, x) - norm_bytes(m, x, m.mlp_inputs), attn_grads)
    saved, temp = max(mlp_half, attn_half, key=sum)
    return saved, temp + x.T * x.h * 4


def attention_backward_grads(m, x: Shape, attention: str) -> int:
    """The gradients the attention's backward holds on top of the tensors it saved, at its worst moment.
    Fused SDPA: dQ, dK, dV. Scores kept (eager, math): softmax's backward holds the fp32 gradients of the
    probabilities and of the scores while the probabilities are still saved. With attention dropout on CPU,
    autograd frees each node's saved tensors as soon as that node's backward ran (`fn.release_variables()` in
    https://github.com/pytorch/pytorch/blob/main/torch/csrc/autograd/engine.cpp), so a later gradient takes
    the place of the dropout's output (as the second matmul kept it) and of its mask: the worst moment is the
    dropout's backward (gradients of its output and input, both in its dtype, the matmul's copy freed) or
    softmax's (two fp32 gradients, copy and mask freed). Measured: gpt2 h64 L1 2x1024, eager and SDPA, fp32
    and bf16 (benchmarks/memory_accuracy.py). CUDA keeps the rule the H100 table holds."""
    if attention not in ("eager", "math"):
        return 3 * x.T * x.a * x.d * x.v
    if x.cuda or not m.attn_dropout:
        return 2 * x.S * 4
    drop = 4 if attention == "math" else eager_dropout_mask(m, x)   # the dropout's dtype (CPU: its mask's)
    kept = 4 if attention == "math" else x.v                         # what the second matmul keeps of its output
    return x.S * max(2 * drop - kept, 2 * 4 - drop - kept, kept)


def head_bytes(m, x: Shape) -> int:
    """Saved after the last block: the final norm, the LM head's input, what the loss keeps and the embedding
    dropout's mask."""
    if x.fused:
        final = x.T * x.h * x.res + 2 * x.T * 4
    else:
        final = x.T * x.h * 4 + (x.T * x.h * 4 if m.norm == "rmsnorm" and not x.frozen else 0)
    lm_in = x.T * x.h * x.v if x.L and not x.frozen else 0   # the head's input, for its weight's gradient
    if x.L and x.frozen and x.head_nf4 and x.bnb_keeps_input:
        lm_in = x.T * x.h * x.v                              # its 4-bit matmul keeps it (bnb_input_bytes)
    emb = x.T * x.h * x.mask if m.embd_dropout else 0
    outside = adapter_bytes(m, x, finetune.outside_blocks(m, x.ft))   # an adapter on the head itself
    return final + lm_in + loss_bytes(m, x)[0] + emb + outside


def loss_bytes(m, x: Shape) -> tuple[int, int, int]:
    """(kept for backward, temporaries at the loss in forward, in backward) of the loss over the logits.
    hf (transformers' ForCausalLMLoss): the lm_head's logits and their fp32 copy (logits.float()) live at the
    loss, log-softmax's fp32 output is kept, and backward holds the fp32 gradients of nll_loss and log_softmax
    at once. fused (flash-attn's cross_entropy): the 16-bit logits and an fp32 log-sum-exp per row are kept, and
    backward writes one gradient of the logits' size (inplace_backward is off by default). chunked (Liger's fused
    linear cross-entropy): the logits are never whole; a chunk of about batch x seq x hidden of them lives at a
    time (chunk_size = BT / ceil(V / H)), and the forward leaves the gradients of the head's input and weight
    for backward."""
    TV = x.T * x.L
    if x.loss == "fused":
        return TV * x.v + x.T * 4, 0, TV * x.v
    if x.loss == "chunked":
        return x.T * x.h * x.v + x.L * x.h * 4, x.T * x.h * 4, 0
    logits = TV * x.v + (TV * 4 if x.mixed else 0)   # lm_head output and HF's logits.float()
    return TV * 4, logits, 2 * TV * 4


def selective_bytes(m, x: Shape, attention: str = "sdpa") -> int:
    """What torchtitan's per-op selective checkpointing keeps of a block besides its input: every other matmul's
    output ("Per-op SAC's policy is to save every other mm") and the attention kernel's output and log-sum-exp
    (SDPA is among the ops always saved); the elementwise ops are recomputed (pytorch/torchtitan,
    torchtitan/distributed/activation_checkpoint.py and its tests)."""
    outputs = (x.a + 2 * x.kv) * x.d + x.h + (2 if m.gated_mlp else 1) * x.I + x.h   # per token, forward order
    sdpa = x.T * x.a * x.d * x.v + x.a * x.s * x.b * 4 if attention == "sdpa" else 0   # eager's are recomputed
    return x.T * outputs * x.v // 2 + sdpa


def param_split(m) -> tuple[int, int]:
    """(embedding parameters, parameters per block)."""
    emb = (m.vocab_size or 0) * m.hidden_size + m.output_embedding
    return emb, max(0, m.params - emb) // max(1, m.layers)


def optimizer_temporaries(m, t, device: str) -> int:
    """The optimizer step's own buffers. torch.optim.AdamW foreach (CUDA's default): one sqrt(v) for the whole
    group (_multi_tensor_adamw), in the states' dtype (fp32, 16-bit with --pure-16bit); for-loop (the CPU's
    default): sqrt and its division, for the largest tensor (_single_tensor_adamw); fused: none. SGD's momentum and
    8-bit Adam update in place."""
    ft = getattr(t, "finetune", FULL)
    w = finetune.adapter_dtype_bytes(t, deepspeed=False) if ft.peft else t.value_bytes if t.pure16 else 4
    largest = (finetune.largest_adapter(m, ft) if ft.peft else m.largest_layer_params or m.params) * w
    if t.optimizer == "adamw":
        return {"foreach": w * finetune.trainable(m, ft), "for-loop": 2 * largest, "fused": 0}[t.impl(device)]
    if t.optimizer == "adafactor":
        return 2 * largest
    return 0


# torchtune's activation offloading (torchtune/training/_activation_offloading.py at 1814feb, OffloadActivations):
# a saved_tensors_hooks whose pack copies every saved tensor of 1024 bytes or more (min_offload_size), not a
# Parameter or Buffer, to pinned host memory on a side stream and keeps the GPU tensor alive in its fwd_stash until
# the compute stream, packing tensor id n, waits for the copies of ids <= n - 5 (max_fwd_stash_size) and drops them.
# Beside checkpointing (which torchtune requires) the hook sees, per block, what torch.utils.checkpoint's
# non-reentrant frame saves outside its own hooks: _NoopSaveInputs' 0-element dummy (kept: under the size) and the
# block's input (offloaded), two ids a block, so the GPU keeps the last ceil(5 / 2) = 3 inputs in the forward, and
# them until backward's first unpack hook empties the stash. In backward each input comes back when its recompute
# unpacks it (on the side stream, the compute stream waiting: no prefetch), and is freed at the hook of the
# autograd node after the next one that unpacks: the input in use and the one before it.
OFFLOAD_FWD_STASH = 5
OFFLOAD_IDS_PER_BLOCK = 2


def offloads(t, plain_torch: bool, optimizer_share: float | None) -> bool:
    """--activation-offload applies here: torchtune's recipes (torch's loop: one GPU, DDP, FSDP), whole-block
    checkpointing; DeepSpeed's engine runs none of it."""
    return bool(getattr(t, "act_offload", False) and t.grad_checkpointing and not t.selective
                and (plain_torch or optimizer_share is not None))


def offload_kept_blocks(m) -> int:
    """Block inputs the forward keeps on the GPU under activation offloading: those whose copies it has not yet
    waited for."""
    return min(m.layers, -(-OFFLOAD_FWD_STASH // OFFLOAD_IDS_PER_BLOCK))


def step_shape(m, t, device: str, plain_torch: bool) -> Shape:
    """The step's Shape: a 16-bit model under DeepSpeed, --pure-16bit or a 16-bit frozen base, else fp32 weights
    under autocast."""
    half = not plain_torch or t.pure16 or finetune.half_base(getattr(t, "finetune", FULL), t)
    return shape(m, t, device, half_model=half, plain_torch=plain_torch)


def offloaded_bytes(m, t, plain_torch: bool = True, optimizer_share: float | None = None) -> int:
    """Pinned host bytes one GPU's process holds under activation offloading at the forward's end: every
    checkpointed block's input (the residual stream's width); 0 where it does not apply."""
    if not offloads(t, plain_torch, optimizer_share):
        return 0
    x = step_shape(m, t, "cuda", plain_torch)
    return m.layers * x.T * x.h * x.res


def phases(m, t, attention: str, device: str = "cuda", plain_torch: bool = True,
           optimizer_share: float | None = None) -> list[Phase]:
    """The candidate peaks of one micro-step, in order. `plain_torch` (one GPU, DDP): the model runs in fp32
    under torch.autocast, so 16-bit copies of its weights live from the forward until each layer's backward,
    and torch.optim steps on the GPU. DeepSpeed keeps the model itself in 16 bits and steps its own optimizer
    (fused, in place; its buffers are counted with the strategy's optimizer states)."""
    # torch's optimizer steps the whole model (plain torch) or this rank's shard (FSDP: optimizer_share 1/N);
    # DeepSpeed's fused optimizers step in place (their buffers are counted with its states)
    share = (1.0 if plain_torch else 0.0) if optimizer_share is None else optimizer_share
    ft = getattr(t, "finetune", FULL)
    x = step_shape(m, t, device, plain_torch)
    if ft.peft:
        return peft_phases(m, t, attention, x, plain_torch, optimizer_share, share, device)
    attention = resolve_attention(m, attention)
    if attention == "sdpa" and m.attn_dropout and device == "cpu":
        attention = "math"    # CPU SDPA has no fused dropout: its math kernel keeps fp32 scores (math_sdpa_bytes)
    P, L = m.params, m.layers
    emb, per_block = param_split(m)
    block = block_bytes(m, x, attention)
    ckpt = t.grad_checkpointing or t.selective
    # Checkpointing keeps each block's input (the residual stream's width) and what the blocks share (eager: the
    # 4D causal mask).
    shared = x.b * x.s * x.s * 4 if attention == "eager" else 0
    own = x.T * x.h * x.res + (selective_bytes(m, x, attention) if t.selective else 0)
    kept = L * own + shared if ckpt else L * block
    off = offloads(t, plain_torch, optimizer_share)
    on_gpu = offload_kept_blocks(m) * own + shared if off else kept    # the forward's end: the rest on the host
    head = head_bytes(m, x)
    lm = m.logits * m.hidden_size   # the output head's weight, cast by autocast like the blocks'
    copies = 0
    if x.mixed and plain_torch and not t.pure16:   # 16-bit weights need no autocast copies
        copies = 2 * (lm + (0 if ckpt else L * per_block))  # with checkpointing: recast per recomputed block
    block_copies = 2 * per_block if x.mixed and plain_torch and ckpt and not t.pure16 else 0
    # Earlier micro-steps' gradients stay alive, as do the last step's where torch's zero_grad() zeroes them
    # rather than freeing them (set_to_none=False, torch 1.x's default); DeepSpeed frees its own.
    kept_grads = t.grad_accum > 1 or (t.zero_grad == "zeros" and (plain_torch or optimizer_share is not None))
    g = lambda n: P if kept_grads else n                # noqa: E731
    _, logits, loss_grads = loss_bytes(m, x)
    # One block's backward, on top of what else is alive; with checkpointing its forward is first recomputed.
    saved, temp = block_backward_peak(m, x, attention)
    saved += block_copies
    top_grads = lm
    bottom_grads = P - emb - per_block + (lm if not m.tied else 0)
    tied_extra = lm * 4 if m.tied else 0                # the embedding's own gradient before it is added in
    return [
        Phase("forward, at the loss", g(0), on_gpu + head + copies, logits),
        Phase("backward, at the loss", g(0), on_gpu + head + copies, loss_grads),
        # (With checkpointing the recomputed block's input is the very tensor the checkpoint kept.)
        Phase("backward, last block", g(top_grads), on_gpu - (own if ckpt else block) + copies + saved, temp),
        Phase("backward, first block", g(min(P, bottom_grads)),
              (shared if ckpt else 2 * per_block if copies else 0) + (own if off else 0) + saved, temp),
        Phase("backward, embeddings", P, 0, tied_extra),
        Phase("optimizer step", P, 0, int(optimizer_temporaries(m, t, device) * share)),
    ]


def peft_phases(m, t, attention: str, x: Shape, plain_torch: bool, optimizer_share: float | None, share: float,
                device: str) -> list[Phase]:
    """phases() under LoRA/QLoRA: the frozen base keeps no input for weight gradients and gets none (the blocks'
    saved tensors without them, the adapters' own: block_bytes), only the adapters have gradients, filled from the
    last block down, and no embedding gradient is made (nothing below the first adapter needs one). Autocast casts
    the fp32 adapters (PEFT's default) and an fp32 head (prepare_model_for_kbit_training's) for each forward, kept
    until their backward; a 16-bit base needs no cast."""
    attention = resolve_attention(m, attention)
    if attention == "sdpa" and m.attn_dropout and device == "cpu":
        attention = "math"
    ft, L = x.ft, m.layers
    P = finetune.trainable(m, ft)
    in_block = finetune.block_adapters(m, ft)
    ckpt = t.grad_checkpointing or t.selective
    shared = x.b * x.s * x.s * 4 if attention == "eager" else 0
    own = x.T * x.h * x.res + (selective_bytes(m, x, attention) if t.selective else 0)
    block = block_bytes(m, x, attention)
    kept = L * own + shared if ckpt else L * block
    off = offloads(t, plain_torch, optimizer_share)
    on_gpu = offload_kept_blocks(m) * own + shared if off else kept    # the forward's end: the rest on the host
    head = head_bytes(m, x)
    lm = m.logits * m.hidden_size
    cast = 2 if x.amp and x.adapter == 4 else 0           # autocast's 16-bit copy of each fp32 adapter weight
    copies = (2 * lm if x.amp and x.res == 4 else 0) + cast * (P - (L * in_block if ckpt else 0))
    kept_grads = t.grad_accum > 1 or (t.zero_grad == "zeros" and (plain_torch or optimizer_share is not None))
    g = lambda n: P if kept_grads else n                # noqa: E731
    _, logits, loss_grads = loss_bytes(m, x)
    saved, temp = block_backward_peak(m, x, attention)
    saved += cast * in_block if ckpt else 0
    # 4-bit matmul inputs held until the graph is freed (ctx_held_bytes): under non-reentrant checkpointing every
    # block's beside the checkpoints, without checkpointing those of the blocks backward has passed too (`saved`
    # holds the current block's)
    held, _ = ctx_held_bytes(m, x, ckpt)
    one = held // L if held and L else 0
    fwd_held = held if ckpt else 0
    phases_ = [
        Phase("forward, at the loss", g(0), on_gpu + head + copies + fwd_held, logits + x.head_dequant),
        Phase("backward, at the loss", g(0), on_gpu + head + copies + fwd_held, loss_grads + x.head_dequant),
        Phase("backward, last block", g(P - L * in_block),
              on_gpu - (own if ckpt else block) + copies + saved + (held - one if ckpt else 0), temp),
        Phase("backward, first block", g(P - in_block),
              (shared if ckpt else 0) + (own if off else 0) + saved + held - one, temp),
        Phase("optimizer step", P, 0, int(optimizer_temporaries(m, t, device) * share)),
    ]
    if x.keeps_graph:   # the forward's end (its loss's as at the loss), before the new output replaces the old
        phases_.insert(0, Phase("forward, the last micro-batch's graph still named", g(0),
                                on_gpu + head + copies + fwd_held + previous_graph_bytes(m, x, ckpt),
                                x.head_dequant))
    return phases_


def peak(m, t, attention: str, grad_bytes: int, device: str = "cuda", plain_torch: bool = True,
         optimizer_share: float | None = None) -> dict:
    """The worst phase for a strategy whose gradients, all of them, take `grad_bytes` on this device (the trainable
    parameters': finetune.trainable), with every phase's total (so a change that moves a phase other than the
    worst one still shows)."""
    best, totals = None, []
    trainable = finetune.trainable(m, getattr(t, "finetune", FULL))
    for ph in phases(m, t, attention, device, plain_torch, optimizer_share):
        grads = int(grad_bytes * ph.grad_params / trainable) if trainable else 0
        total = grads + ph.activations + ph.temporaries
        totals.append({"phase": ph.name, "bytes": total})
        if best is None or total > best["bytes"]:
            best = {"phase": ph.name, "bytes": total, "gradients": grads, "activations": ph.activations,
                    "temporaries": ph.temporaries}
    return {**best, "phases": totals}
