"""Model + layout + training + rates -> seconds per optimizer step for each strategy. Pure arithmetic.

A step is
- compute: every matmul of forward and backward (the blocks' projections, attention scores and values, the
  LM head; the blocks' forward again under checkpointing), each at the device's rate on its own shape, plus
  the elementwise work op by op as transformers runs it (norms, residual adds, casts, softmax, activations,
  the loss), as bytes read and written at the rate memory (or, on a CPU, the arithmetic) allows;
- communication: plan.comm_bytes at the all-reduce bus bandwidth of the weakest link, plus a latency per
  collective, less what hides behind backward;
- offload: gradients and parameters over the host link, the optimizer step on the CPU, NVMe reads and writes;
- the optimizer step on the device: bytes touched / memory bandwidth.
Where each rate comes from is in Rates.basis: a GPU's datasheet (gpus.PEAKS) or this machine's calibration
(gputopo.calibrate). The figures here only combine them.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

from . import finetune, memory, ops
from .models import block_tensors, embedding_tensors, param_tensors
from .plan import TORCH_STRATEGIES, comm_split, reductions, value_bytes, weight_bytes, zero3_buckets

DDP_BUCKET = 25 * 2 ** 20          # torch DDP's bucket_cap_mb default (the first bucket is 1 MB)
DS_BUCKET = 5 * 10 ** 8            # DeepSpeed's reduce/allgather bucket default (elements)
# Bytes each optimizer touches per parameter per step. torch.optim.AdamW (foreach): lerp m, mul+addcmul v,
# sqrt, two divisions, eps, addcdiv p and the decoupled weight decay: about 20 fp32 passes (torch/optim/adamw.py,
# _multi_tensor_adamw). DeepSpeed's fused Adam reads p, g, m, v and writes p, m, v (28 B) and the 16-bit copy.
TORCH_OPTIMIZER_BYTES = {"adamw": 80, "adamw-8bit": 24, "adafactor": 48, "sgd": 20}
FUSED_ADAM_BYTES = 30
# torch's fused optimizers (fused=True) read and write each fp32 tensor once: AdamW reads p, g, m, v and writes p, m,
# v (28 B); SGD with momentum reads p, g, the buffer and writes p and the buffer (20 B).
FUSED_TORCH_BYTES = {"adamw": 28, "sgd": 20}
# Kernels a tensor-by-tensor optimizer launches per parameter tensor, read from the code that steps it:
# torch's _single_tensor_adamw (weight decay, lerp, mul + addcmul, sqrt, division, eps, addcdiv: 8;
# transformers' own AdamW of 2022 as many) and _single_tensor_sgd (momentum mul + add, the update: 3), transformers'
# Adafactor.step with beta1=None as the Trainer runs it (the RMS of the weight, grad^2 + eps, the row and column
# means and their two moving averages, _approx_sq_grad's mean, division and two rsqrt, their product, the update's
# RMS clip, lr, the step: about 24), bitsandbytes' 8-bit Adam (one optimizer_update_8bit_blockwise kernel).
KERNELS_PER_TENSOR = {"adamw": 8, "sgd": 3, "adafactor": 24, "adamw-8bit": 1}
@dataclass(frozen=True)
class Rates:
    """What the devices and links deliver, in bytes or FLOPs per second, and where each figure came from."""
    matmul_flops: float | None             # dense matmuls in the compute dtype (peak x efficiency)
    mem_bytes_per_s: float | None          # device memory, as elementwise kernels reach it
    busbw: float | None = None             # all-reduce bus bandwidth among a node's GPUs, P2P allowed
    busbw_no_p2p: float | None = None      # the same with NCCL_P2P_DISABLE=1 (through host memory)
    inter_node: float | None = None        # between nodes
    latency_s: float = 0.0                 # per collective
    host_link: float | None = None         # device <-> host (PCIe), for offload
    cpu_adam: float | None = None          # parameters per second DeepSpeed's CPU Adam steps
    nvme: float | None = None              # NVMe, reads and writes alike
    overlap: bool = False                  # collectives and copies run beside compute (NCCL's own stream on a
                                           # GPU): hidden where the step allows (exposed_comm); the CPU twin's
                                           # gloo shares the cores with compute, so calibration keeps False
    sms: int | None = None                 # streaming multiprocessors: a matmul runs in waves of tiles over them
    attention_flops: float | None = None   # fused attention's ops.matmuls (FlashAttention in SDPA) on a GPU
    k_half: float | None = None            # the K at which a tensor-core matmul reaches half its rate (k_factor)
    matmul_seconds: dict | None = None     # calibrated: "MxNxK" -> seconds, the model's own shapes
    elementwise: dict | None = None        # calibrated: elements -> {"stream", "math", "inplace"} bytes/s
    sampled: dict | None = None            # calibrated: {"block_s", "head_s"} of one micro-step, the model's own
    optimizer_params_per_s: float | None = None   # calibrated: torch's optimizer on this device
    zero3_module_s: float | None = None    # calibrated: DeepSpeed's stage-3 hooks and gathers per module per step
    collective_cost: dict | None = None    # calibrated: "reduce_scatter"/"all_gather" -> a ring pass's time over
                                           # an all-reduce pass's at the same size (None: 1, as NCCL's rings)
    deepspeed_sampled: dict | None = None  # calibrated: strategy -> {"one_s", "more_s", "blocks", "processes"},
                                           # its DeepSpeed step on the model cut to 1 and `blocks` blocks
    attention_bwd_flops: float | None = None   # fused attention's backward (its 5 matmuls) on a GPU
    attention_s: tuple | None = None       # calibrated: (forward, backward) seconds of one block's fused attention
                                           # at the step's shape (SDPA timed on the GPU)
    kernel_s: float = 0.0                  # a GPU's time per kernel beyond its work (launch, ramp, tail)
    host_op_s: float = 0.0                 # the host's time to dispatch one kernel (eager PyTorch, autograd, launch)
    overlap_slowdown: float = 0.0          # compute slowed by collectives running beside it (shared SMs, memory)
    flash_curve: bool = False              # fused attention is FlashAttention-2 (16 bits, Ampere or newer): its
                                           # rate follows the sequence length and head dim (flash_share)
    unaligned: float = 1.0                 # a matmul with a contiguous dimension not a multiple of ALIGN: this
                                           # many times slower (16-bit tensor cores)
    basis: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("matmul_seconds")
        d.pop("elementwise")
        return d


@dataclass(frozen=True)
class Time:
    step_s: float | None
    compute_s: float | None
    comm_s: float | None
    exposed_comm_s: float | None
    offload_s: float | None
    optimizer_s: float | None
    tokens_per_s: float | None
    basis: str
    run_s: float | None = None
    sampled_extra_s: float = 0.0   # DeepSpeed's time beyond the parts, measured on the model's sample (in step_s)
    threads_per_rank: int | None = None   # the host's threads each rank's CPU Adam is priced on (offload only)

    def to_dict(self) -> dict:
        d = asdict(self)
        for key in ("run_s", "threads_per_rank"):
            if d[key] is None:
                d.pop(key)
        return d


def threads_per_rank(name: str, lay) -> int | None:
    """The threads each rank steps its share of an offloaded optimizer on, as offload_seconds prices it: CPU Adam's
    node rate is the node's cores' (rates.cpu_adam), shared by the node's ranks, so each gets cores / ranks (the
    launch's OMP_NUM_THREADS, gputopo.launch). None: no host step (no offload), or the cores are unknown."""
    if "offload" not in name or not lay.cpu_cores:
        return None
    return max(1, lay.cpu_cores // lay.gpus_per_node)


TILE = 128   # cuBLAS's common 16-bit tile edge (NVIDIA's matrix multiplication guide: 256x128, 128x128, 64x128...)


def wave_factor(M: int, N: int, K: int, sms: int | None) -> float:
    """How much longer a matmul with an M x N output takes than its FLOPs at full rate: it runs in tiles of
    TILE x TILE, one per SM at a time, and a wave costs the same full or not (tile and wave quantization, NVIDIA's
    matrix multiplication guide, as ml-engineering's training/performance page quotes it). A matmul with fewer
    tiles than SMs, or whose K is longer than its output's sides (a weight's gradient: the tokens are K), is split
    along K to fill the SMs (cuBLAS's split-K), so only its tiles' padding counts."""
    if not sms:
        return 1.0
    tiles = math.ceil(M / TILE) * math.ceil(N / TILE)
    slots = tiles if tiles < sms or K > max(M, N) else math.ceil(tiles / sms) * sms
    return slots * TILE * TILE / (M * N)


def k_factor(K: int, rates: Rates) -> float:
    """The share of its rate a tensor-core matmul reaches with a K-loop of length K: each output tile pays a fixed
    cost (loading, the epilogue's write) beside a loop that grows with K, so the rate is K / (K + K0). XLA's
    measured sm_90 (H100) bf16 table (tensorflow/tensorflow third_party/xla/xla/service/gpu/model/
    matmul_interpolator_data.h @9bebee8e) at m = n = 4096: 505.1 TFLOPS at K=256 (b=4), 621.6 at K=512 (b=4),
    681.1 at K=1024, 764.1 at K=4096 (n=2048): K0 = 145 and an asymptote of 791 TFLOPS, MAMF's 794.5."""
    return K / (K + rates.k_half) if rates.k_half else 1.0


def matmul_seconds(shapes, rates: Rates, elem: int) -> float:
    """Each shape at its calibrated time, else by the roofline: the larger of FLOPs / rate (in waves over the
    SMs) and bytes / bandwidth."""
    total = 0.0
    for c, M, N, K in shapes:
        known = (rates.matmul_seconds or {}).get(ops.key(M, N, K))
        if known is None:
            flops = 2 * M * N * K / rates.matmul_flops * wave_factor(M, N, K, rates.sms) / k_factor(K, rates)
            if N % ALIGN or K % ALIGN:
                flops *= rates.unaligned
            known = max(flops, (M * K + K * N + M * N) * elem / rates.mem_bytes_per_s)
        total += c * known
    return total


# FlashAttention-2's backward recomputes the scores: "5 matrix multiples in the backward pass, compared to just 2
# matrix multiples in the forward pass" (arXiv 2307.08691, section 3.1.2), at "up to 73% of the theoretical maximum
# FLOPs/s in the forward pass, and up to 63% in the backward pass" (section 4.1, A100); on an H100 its best
# backward is 322 TFLOPS against 370 forward (FLASH_H100), the same share.
FLASH_BWD_MATMULS = 5 / 2
FLASH_BWD_SHARE = 63 / 73
# FlashAttention-2 on an H100 SXM5 in 16 bits, TFLOPS by sequence length (512, 1k, 2k, 4k, 8k, 16k), head dim 64 and
# 128, causal or not: the FA2 bars of the FlashAttention-3 paper's Figures 5 and 6 (arXiv 2407.08608; 16k tokens a
# batch, 2048 wide; FLOPs counted 4 b s^2 h d, halved when causal, backward 2.5x: as attention_seconds counts
# them). The backward was charted without a causal mask only (flash-attention PR #1791 printed 287 causal and
# 291 not at 8k, head dim 128). flash-attention PR #2688 printed 294.78 forward, 238.75 backward at 1k, head dim
# 64, not causal. A fused kernel's rate at the step's shape is the GPU's best (Rates.attention_flops) times the
# curve's value there over its best.
FLASH_SEQ = (512, 1024, 2048, 4096, 8192, 16384)
FLASH_H100 = {("fwd", 64, False): (282, 306, 318, 321, 322, 324), ("fwd", 64, True): (180, 229, 262, 284, 295, 299),
              ("fwd", 128, False): (309, 350, 362, 368, 370, 370), ("fwd", 128, True): (191, 260, 298, 319, 333, 335),
              ("bwd", 64, False): (198, 238, 264, 279, 287, 291), ("bwd", 128, False): (214, 260, 291, 310, 318, 322)}


def flash_share(direction: str, seq: int, head_dim: int, causal: bool) -> float:
    """FlashAttention-2's rate at this shape over its best (FLASH_H100): in log sequence length and head dim
    between the measured ones, the nearest beyond them."""
    def at(d):
        ys = FLASH_H100[(direction, d, causal and direction == "fwd")]
        x = min(max(math.log2(seq), math.log2(FLASH_SEQ[0])), math.log2(FLASH_SEQ[-1]))
        i = min(int(x - math.log2(FLASH_SEQ[0])), len(ys) - 2)
        w = x - math.log2(FLASH_SEQ[i])
        return ys[i] + w * (ys[i + 1] - ys[i])
    w = min(max((head_dim - 64) / 64, 0.0), 1.0)
    best = max(max(v) for (d, _, _), v in FLASH_H100.items() if d == direction)
    return (at(64) * (1 - w) + at(128) * w) / best


def attention_parts(m, t, rates: Rates, device: str = "cuda") -> tuple[float, float]:
    """A fused attention kernel's (SDPA on a GPU) (forward, backward) seconds in one micro-step: its forward's two
    ops.matmuls (the blocks' forward again under full checkpointing; selective keeps SDPA's output) at the forward's
    rate, its backward's five at the backward's; a calibration's own timing of the kernel at the step's shape where
    there is one."""
    fused = ops.attention_shapes(m, t, device)
    if not fused:
        return 0.0, 0.0
    forwards = 2 if t.grad_checkpointing else 1
    if rates.attention_s:
        return m.layers * forwards * rates.attention_s[0], m.layers * rates.attention_s[1]
    flops = sum(2 * c * M * N * K for c, M, N, K in ops.matmuls(m, t, t.attention, device) if ops.key(M, N, K) in fused)
    x = memory.shape(m, t, device)
    fwd = (rates.attention_flops or rates.matmul_flops) * (flash_share("fwd", x.s, x.d, True) if rates.flash_curve
                                                           else 1.0)
    bwd = (rates.attention_bwd_flops or rates.attention_flops or rates.matmul_flops) * (
        flash_share("bwd", x.s, x.d, True) if rates.flash_curve else 1.0)
    return flops * forwards / fwd, flops * FLASH_BWD_MATMULS / bwd


def attention_seconds(m, t, rates: Rates, device: str = "cuda") -> float:
    """A fused attention kernel's time in one micro-step, forward and backward (attention_parts)."""
    return sum(attention_parts(m, t, rates, device))


# ---- elementwise work, op by op as transformers runs the model ----------------------------------------------
# An op is what, elements, bytes per element, forward and backward passes (a pass reads or writes the whole tensor
# once), kind, and the kernels it launches forward and backward. kind "stream" (add, multiply, copy, cast) or
# "math" (tanh, softmax, norms): both are memory-bound on a GPU; on a CPU core the math kind is bound by its
# arithmetic, so calibration times each. The kernels are counted from the ops transformers and torch's autograd
# run (each a launch: a GPU pays its per-kernel time, Rates.kernel_s, and the host its dispatch, Rates.host_op_s).


def elementwise_seconds(m, t, attention: str, rates: Rates, device: str, half: bool = False) -> float:
    """Every elementwise op of a micro-step (the blocks' forward twice under checkpointing) at its rate, each of
    its kernels paying the device's per-kernel time besides its bytes."""
    block, head = ops.elementwise_ops(m, t, attention, device, half)
    total = 0.0
    for group, times, forwards in ((block, m.layers, ops.forward_passes(t)), (head, 1, 1)):
        for op in group:
            bytes_ = op.n * op.bpe * (op.fwd * forwards + op.bwd)
            kernels = op.kernels[0] * forwards + op.kernels[1]
            total += times * (bytes_ / elementwise_rate(rates, op.n, op.kind) + kernels * rates.kernel_s)
    return total


def elementwise_rate(rates: Rates, n: int, kind: str) -> float:
    """Bytes per second of an op on n elements: calibrated at the nearest size measured, else the memory's."""
    if not rates.elementwise:
        return rates.mem_bytes_per_s
    size = min(rates.elementwise, key=lambda k: abs(math.log(int(k) / max(n, 1))))
    at = rates.elementwise[size]
    return at.get(kind) or at["stream"]   # calibrations saved before "inplace" was timed


def copy_bytes(name: str, m, t, gpus: int = 1) -> float:
    """Bytes per micro-step the framework copies into buffers that live across steps, besides the model's own
    work. DDP copies gradients into its buckets and back (gradient_as_bucket_view=False: 16 B). DeepSpeed, each
    a read and a write of the reduce dtype: the gradients that fit a bucket are copied into it, every bucket is
    divided by the world size before its collective, and this rank's slices are copied out into the
    partition's gradient, twice at stage 1/2 (stage_1_and_2.py: reduce_independent_p_g_buckets_and_remove_
    grads, average_tensor, allreduce_and_copy_with_multiple_ranks, copy_grads_in_partition; stage3.py:
    __add_grad_to_ipg_bucket, reduce_scatter_coalesced interleaving a bucket's tensors, partition_grads)."""
    P = trained(m, t)
    if name in TORCH_STRATEGIES:   # FSDP gathers into and reduces from its flat buffers: no copy beyond them
        return P * (4 * grad_bytes(t) if name == "ddp" else 0)
    bucket = m.hidden_size ** 2 or DS_BUCKET
    bucketed = P if t.finetune.peft else sum(n for n in gradient_order(m) if n <= bucket)   # adapters are small
    return 2 * value_bytes(t.precision) * (bucketed + P + 2 * P / gpus)


def trained(m, t) -> int:
    """Parameters that get gradients, are reduced and stepped: the model's, or under LoRA/QLoRA its adapters'."""
    return finetune.trainable(m, t.finetune)


def grad_bytes(t) -> int:
    """Bytes of a gradient plain torch reduces: the weights' dtype, the adapters' under LoRA (PEFT: fp32 unless
    --pure-16bit)."""
    return finetune.adapter_dtype_bytes(t, deepspeed=False) if t.finetune.peft else weight_bytes(t)


def cast_bytes(name: str, m, t) -> float:
    """Plain torch under autocast casts every fp32 weight to 16 bits in each forward (read 4, write 2), into a
    fresh tensor, and the cast's backward the 16-bit gradient back to fp32 (read 2, write 4); the blocks' weights
    again in checkpointing's recomputed forward, which re-enters autocast with a fresh cache (ops.weight_casts);
    DeepSpeed's 16-bit weights need no cast."""
    if name not in ("single", "ddp") or t.precision == "fp32" or t.pure16:
        return 0.0
    if not t.finetune.peft:
        again = sum(n for n, mat in block_tensors(m) if mat) * m.layers if t.grad_checkpointing else 0
        return m.params * 12 + again * 6
    # LoRA's base is 16-bit already; QLoRA's fp32 output head (prepare_model_for_kbit_training) is cast forward,
    # with no gradient to cast back
    head = (m.vocab_size or 0) * m.hidden_size if t.finetune.quantized and m.logits else 0
    return trained(m, t) * 12 + head * 6


def sampled_training(sample: dict, t):
    """The Training a calibration sample was timed at: t with the sample's micro-batch, sequence and
    checkpointing (calibrate.sample_shape); t itself for a sample that does not say."""
    if not sample.get("shape"):
        return t
    batch, seq, ckpt = sample["shape"]
    return replace(t, batch_size=int(batch), seq_len=int(seq), grad_checkpointing=bool(ckpt))


def _zero3_hooks(name: str, m, t, rates: Rates, gpus: int) -> float:
    """DeepSpeed's hooks and gathers per module at ZeRO-3, measured per forward + backward; the recomputed
    forward of checkpointing runs the forward half again."""
    if name.startswith("zero3") and rates.zero3_module_s and gpus > 1:
        return zero3_modules(m) * rates.zero3_module_s * (1.5 if t.grad_checkpointing else 1.0)
    return 0.0


def compute_seconds(m, t, attention: str, rates: Rates, device: str = "cuda", name: str = "single",
                    gpus: int = 1) -> float:
    """One micro-step's forward and backward on one device, with the framework's copies."""
    copies = copy_bytes(name, m, t, gpus) / elementwise_rate(rates, m.params, "inplace") \
        + _zero3_hooks(name, m, t, rates, gpus)
    if rates.sampled:   # the model's own block and head, timed by calibration (autocast's casts in)
        sampled = rates.sampled["head_s"] + m.layers * rates.sampled["block_s"]
        at = sampled_training(rates.sampled, t)
        if at == t:
            return sampled + copies
        # Another micro-batch or checkpointing (plan's search): the sample's measured time, in proportion to
        # what the kernels' rates give for each shape; what the sample caught beyond them scales with the work.
        bare = replace(rates, sampled=None)
        return sampled * (compute_seconds(m, t, attention, bare, device, name, gpus) - copies) / (
            compute_seconds(m, at, attention, bare, device, name, gpus) - copy_bytes(name, m, at, gpus)
            / elementwise_rate(rates, m.params, "inplace") - _zero3_hooks(name, m, at, rates, gpus)) + copies
    copies += cast_bytes(name, m, t) / elementwise_rate(rates, m.params, "stream")
    fused = ops.attention_shapes(m, t, device)
    mm = matmul_seconds([s for s in ops.training_matmuls(m, t, attention, device) if ops.key(*s[1:]) not in fused],
                        rates, value_bytes(t.precision))
    gpu = (mm + attention_seconds(m, t, rates, device) + copies + elementwise_seconds(m, t, attention, rates, device,
                                                                                     ops.half_model(name, t))
           + ops.matmul_kernels(m, t, attention, device) * rates.kernel_s)
    # the host dispatches every kernel in turn: a GPU that runs them faster than that waits for it
    return max(gpu, host_seconds(m, t, attention, rates, device, ops.half_model(name, t)))


def host_seconds(m, t, attention: str, rates: Rates, device: str = "cuda", half: bool = False) -> float:
    """The host's time to dispatch a micro-step's ops.kernels (0 where the rates do not say: a calibration's sample
    has it in)."""
    return ops.kernels(m, t, attention, device, half) * rates.host_op_s


def sample_blocks(m) -> int:
    """Blocks of the calibration's larger sample (the smaller has 1): enough that the blocks' difference weighs
    about as much as the embeddings and head, each timing's noise being a share of the whole step. gpt2 (head
    5.4 blocks' parameters) gets 6, where 3 left two blocks' difference under the noise of a head 3x larger;
    Llama-7B (head 0.65 blocks) gets 3. At most 6: the sample's time and memory."""
    block = sum(n for n, _ in block_tensors(m)) or 1
    head = sum(embedding_tensors(m))
    return max(3, min(6, 1 + math.ceil(head / block)))


def weight_matrices(m) -> list[int]:
    """Elements of each weight matrix: the blocks' projections, the embeddings and an untied head."""
    return [n for n, mat in block_tensors(m) if mat] * m.layers + embedding_tensors(m)


def gradient_order(m) -> list[int]:
    """Every parameter tensor in the order backward hands out their gradients, the reverse of the forward's:
    the head, the final norm, the blocks from the last, the embeddings (a tied head's gradient is complete
    only then)."""
    emb = embedding_tensors(m)
    head = emb[1:2] if not m.tied and len(emb) > 1 else []
    first = [e for i, e in enumerate(emb) if i != 1 or m.tied or len(emb) == 1]
    norm = [m.hidden_size] * (2 if m.norm == "layernorm" else 1)
    block = [n for n, _ in reversed(block_tensors(m))]
    return head + norm + block * m.layers + first


def bucket_reduces(sizes: list[int], bucket: int) -> int:
    """DeepSpeed's ZeRO-1/2 reduce calls for gradients arriving in this order
    (reduce_independent_p_g_buckets_and_remove_grads): the bucket is reduced when the next gradient would
    overflow it, so a tensor larger than the bucket is reduced alone and small ones share."""
    calls, filled = 0, 0
    for n in sizes:
        if filled and filled + n > bucket:
            calls, filled = calls + 1, 0
        filled += n
    return calls + (1 if filled else 0)


def collectives(name: str, m, lay, t) -> int:
    """Collective calls per optimizer step, each paying the latency. DDP: its 25 MB buckets. ZeRO-1/2: the
    bucket reduces (bucket_reduces: 35 for llama-h256-L4, the 35 all-reduces a profile of its step shows), per
    micro-step at stage 2, the gradient norm's all-reduce (gradient clipping) and one all-gather of the updated
    partitions (all_gather_into_tensor_dp_groups in deepspeed/runtime/utils.py). ZeRO-3: each module's parameters
    gathered in forward and again in backward (and in the recomputed forward under checkpointing), per
    micro-step, and the reduce buckets."""
    if lay.gpus == 1 or name == "single":
        return 0
    P = trained(m, t)
    if name == "ddp":
        return math.ceil(grad_bytes(t) * P / DDP_BUCKET) * reductions(name, t)
    if name.startswith("fsdp"):   # per micro-step: each block's two gathers, the root's gather; each unit's
        return t.grad_accum * (2 * m.layers + 1) + reductions(name, t) * (m.layers + 1)   # reduce-scatter
    if name.startswith(("zero1", "zero2")):
        bucket = m.hidden_size ** 2 or DS_BUCKET    # what gputopo's configs write (dsconfig)
        reduces = math.ceil(P / bucket) if t.finetune.peft else bucket_reduces(gradient_order(m), bucket)
        return reduces * (t.grad_accum if name.startswith("zero2") else 1) + 2
    return zero3_gathers(m, t) + t.grad_accum * math.ceil(P / zero3_buckets(m.hidden_size)[1])


def zero3_modules(m) -> int:
    """Modules whose parameters ZeRO-3 gathers: each projection, the embeddings and an untied head (a tied head
    is the embedding's weight); norms and biases stay whole below stage3_param_persistence_threshold (10 h)."""
    return len(weight_matrices(m)) + 1


def zero3_gathers(m, t) -> int:
    """ZeRO-3's parameter gathers per optimizer step: each module before forward and before backward, and
    before the recomputed forward under checkpointing."""
    return t.grad_accum * (3 if t.grad_checkpointing else 2) * zero3_modules(m)


def p2p_used(lay, p2p: bool = True) -> bool:
    """Whether NCCL takes P2P between the layout's GPUs: allowed (not NCCL_P2P_DISABLE=1), and a link over which
    NCCL uses it by default (gputopo.health.expected_transport, what `inspect --nccl-log` expects too). A link
    not described (this machine's CPU twin) is the one calibration measured."""
    from .health import expected_transport
    return p2p and (not lay.link_type or expected_transport(lay.link_type, {}) == "P2P")


def link_busbw(lay, rates: Rates, p2p: bool) -> float | None:
    """The bus bandwidth the collectives run at: between nodes the network, else the link with or without P2P."""
    if lay.nodes > 1:
        return rates.inter_node
    return rates.busbw if p2p_used(lay, p2p) else rates.busbw_no_p2p


def comm_seconds(name: str, m, lay, t, rates: Rates, p2p: bool = True) -> tuple[float | None, float | None]:
    """(all communication, the part not hidden behind backward) per optimizer step."""
    split = comm_split(name, m, lay, t)
    if not any(split.values()):
        return 0.0, 0.0
    bw = link_busbw(lay, rates, p2p)
    if not bw:
        return None, None
    # comm_split counts what each GPU sends in ring passes; bus bandwidth is per GPU and direction in the same
    # units (nccl-tests' busbw), so time = bytes sent / busbw, times what a pass of each collective costs
    # against an all-reduce's (1 for NCCL's rings; gloo's reduce-scatter is slower, calibration measures it)
    cost = rates.collective_cost or {}
    sent = sum(b * cost.get(kind, 1.0) for kind, b in split.items())
    calls = collectives(name, m, lay, t)
    if name.startswith("zero3") and rates.zero3_module_s:   # the gathers' latency is in the measured module cost
        calls -= zero3_gathers(m, t)
    total = sent / bw + calls * rates.latency_s
    return total, total


def exposed_comm(name: str, m, lay, t, rates: Rates, total: float, compute: float, p2p: bool) -> float:
    """The communication the step waits for when collectives run beside compute (rates.overlap: NCCL on its
    own stream). ZeRO-3 and FSDP gather each module's parameters ahead of its forward and backward (prefetch)
    and reduce-scatter behind backward: all of it hides behind the micro-step's compute but the first gather,
    before any compute, and the last reduce-scatter, after it. DDP and ZeRO-1/2 reduce gradient buckets as
    backward produces them (torch's Reducer; DeepSpeed's overlap_comm, which gputopo's configs set), every
    micro-step at ZeRO-2 and at the last one otherwise (DDP's no_sync, ZeRO-1's boundary): hidden behind that
    backward but the bucket of the first layers' gradients, the embeddings among them, which is complete only
    when backward ends; ZeRO-1/2's all-gather of the updated parameters follows the optimizer and stays exposed.
    Backward is 2/3 of a micro-step's compute (a matmul's backward is two matmuls of its size), 3/4 with
    checkpointing (the forward runs again in it). Through host memory (SHM: no P2P between the GPUs) nothing
    hides: the reference experiment's DDP without P2P paid 0.147 s a step more than with it, where the whole
    all-reduce through host memory takes 0.115 s (docs/sources.md#ddp-nvlink-benchmark)."""
    if not rates.overlap or not total or (lay.nodes == 1 and not p2p_used(lay, p2p)):
        return total
    split = comm_split(name, m, lay, t)
    cost = rates.collective_cost or {}
    weight = {k: b * cost.get(k, 1.0) for k, b in split.items()}
    part = {k: total * w / sum(weight.values()) for k, w in weight.items()}
    bw = link_busbw(lay, rates, p2p)
    ring = (lay.gpus - 1) / lay.gpus
    micro = compute / t.grad_accum
    if name.startswith(("zero3", "fsdp")):
        # the first gather and the last reduce-scatter are the embeddings' (ZeRO-3: the embedding module; FSDP: the
        # root unit with the embeddings and head), or a block's where that is larger
        first = max(embedding_tensors(m), default=0) if name.startswith("zero3") else sum(embedding_tensors(m))
        block = max(n for n, _ in block_tensors(m)) if name.startswith("zero3") else sum(n for n, _ in block_tensors(m))
        edges = 2 * ring * max(first, block) * value_bytes(t.precision) / bw
        return t.grad_accum * max(total / t.grad_accum - micro, edges)
    backward = micro * (0.75 if t.grad_checkpointing or t.selective else 2 / 3)
    reduces = reductions(name, t)
    per = part.get("all_reduce", 0.0) / reduces
    reduced = grad_bytes(t) if name == "ddp" else value_bytes(t.precision)
    bucket = DDP_BUCKET / 4 if name == "ddp" else (m.hidden_size ** 2 or DS_BUCKET)
    embedding = 0 if t.finetune.peft else max(embedding_tensors(m), default=0)   # frozen: never reduced
    last = min(per, 2 * ring * max(bucket, embedding) * reduced / bw)
    return reduces * max(per - backward, last) + total - part.get("all_reduce", 0.0)


def optimizer_seconds(name: str, m, lay, t, rates: Rates) -> float:
    """The optimizer step on the device (offloaded ones run on the host: offload_seconds)."""
    if "offload" in name:
        return 0.0
    P = trained(m, t)
    share = P if name in ("single", "ddp") else P / lay.gpus
    if name in TORCH_STRATEGIES and rates.optimizer_params_per_s:
        return share / rates.optimizer_params_per_s
    torch_bytes = (FUSED_TORCH_BYTES if t.optimizer_impl == "fused" else TORCH_OPTIMIZER_BYTES)[t.optimizer]
    per = torch_bytes * weight_bytes(t) // 4 if name in TORCH_STRATEGIES else FUSED_ADAM_BYTES
    device_s = share * per / elementwise_rate(rates, int(share), "inplace")
    if name not in ("single", "ddp") or t.impl("cuda") != "for-loop" or not rates.host_op_s:
        return device_s
    # Tensor by tensor, each of a tensor's kernels is dispatched by the host: a step of many small tensors waits
    # for it (FSDP's flat shards are few).
    launches = (finetune.trainable_tensors(m, t.finetune) or param_tensors(m)) * KERNELS_PER_TENSOR[t.optimizer]
    return max(device_s + launches * rates.kernel_s, launches * HOST_OP_S["fp32"])


def zero_step_seconds(name: str, m, lay, t, rates: Rates) -> float:
    """DeepSpeed's own passes over this rank's partition around the optimizer (ZeRO, offloaded or not): the
    gradient norm for clipping (read 4 B), the clipping's scale (read and write 4 B), the updated fp32 master
    copied to the model's weights (read 4, write the weight dtype), and in 16-bit the gradient cast to fp32
    (stage_1_and_2.py: step, scaled_global_norm, unscale_and_clip_grads; stage3.py does the same per
    sub-group)."""
    if not name.startswith("zero"):
        return 0.0
    share, p = trained(m, t) / lay.gpus, value_bytes(t.precision)
    passes = 4 + 8 + (4 + p) + (p + 4 if p == 2 else 0)
    return share * passes / elementwise_rate(rates, int(share), "inplace")


def offload_seconds(name: str, m, lay, t, rates: Rates, compute: float = 0.0) -> float | None:
    """The host's part: 16-bit gradients down and parameters up over PCIe (ZeRO-3 with offloaded parameters
    fetches them in forward, in backward and in the recomputed forward; from NVMe, read from the drive each time),
    DeepSpeed's CPU Adam on this node's share, NVMe swaps.
    Where copies run beside compute (rates.overlap: DeepSpeed's copy streams on a GPU), the gradients' and the
    fetches' copies hide behind the micro-steps' compute, and the upload of the updated parameters is part of the
    host step that CPU Adam's rate was measured on (the ZeRO-Offload tutorial's "optimizer" time)."""
    if "offload" not in name:
        return 0.0
    P, p16, n = trained(m, t), value_bytes(t.precision), lay.gpus
    share = P / n
    # the whole model's bytes as it is fetched: the frozen base (NF4 under QLoRA) beside the trained parameters
    fetched = (finetune.base_bytes(m, t.finetune, p16, kept=p16, head=finetune.quantizes_head(t))
               if t.finetune.peft else 0) + p16 * P
    moved = p16 * share * t.grad_accum + p16 * share         # gradients each micro-step, parameters once
    passes = 3 if t.grad_checkpointing else 2   # forward, backward, and the recomputed forward (comm_split's gathers)
    params_off = name.startswith("zero3") and t.offload_params
    if params_off:   # each rank copies up its own partition, then all-gathers (comm_split counts that)
        moved = fetched / n * passes * t.grad_accum + p16 * share * t.grad_accum
    if name == "fsdp_offload_cpu":   # each rank uploads its shard before every gather, downloads its gradients
        moved = fetched / n * passes * t.grad_accum + p16 * share * reductions(name, t)
    if not rates.host_link or not rates.cpu_adam:
        return None
    gpus_per_node = lay.gpus_per_node
    # On NVMe the offloaded partitions are read back for every fetch, the node's ranks' from its drive (DeepSpeed's
    # AsyncPartitionedParameterSwapper, prefetching): read and PCIe copy run as a pipeline, the slower sets the pace.
    reads = (fetched / n * gpus_per_node * passes * t.grad_accum / rates.nvme
             if params_off and name.endswith("nvme") and rates.nvme else 0)
    copies = max(moved / rates.host_link, reads)
    if rates.overlap:
        copies = max(0.0, max((moved - p16 * share) / rates.host_link, reads) - compute)
    # FSDP steps torch's AdamW on the host (foreach over its flat shard), not DeepSpeed's vectorized CPU Adam
    adam = rates.cpu_adam / (TORCH_CPU_ADAM_SLOWDOWN if name.startswith("fsdp") else 1)
    out = copies + share * gpus_per_node / adam
    if name.endswith("nvme"):
        if not rates.nvme:
            return None
        out += 2 * (4 + 4 + 4) * share * gpus_per_node / rates.nvme  # fp32 master + moments: read, then written
    return out


def activation_offload_seconds(name: str, m, t, rates: Rates, compute: float) -> float | None:
    """--activation-offload's exposed copies (memory.offloads: torchtune's OffloadActivations), per optimizer step;
    None where the host link is unknown. Forward: each block's input is copied down on the side stream, and the
    compute stream waits only for copies 3 blocks back (max_fwd_stash_size), so a block's copy shows only where it
    outlasts a block's forward (compute spread over the forward, the recomputed forward and the backward: twice the
    forward's matmuls with weight gradients, once under LoRA/QLoRA's frozen base). Backward: each input is copied up
    when its recompute unpacks it and the compute stream waits for it at once (s0.wait_stream(s1), no prefetch):
    every upload shows."""
    plain = name in ("single", "ddp")
    if not memory.offloads(t, plain, 0.0 if name.startswith("fsdp") else None):
        return 0.0
    if not rates.host_link:
        return None
    L = m.layers
    per_block = memory.offloaded_bytes(m, t, plain, 0.0 if name.startswith("fsdp") else None) / L
    copy = per_block / rates.host_link
    forward_block = compute / t.grad_accum / L / (3 if t.finetune.peft else 4)
    return t.grad_accum * L * (copy + max(0.0, copy - forward_block))


def step(name: str, m, lay, t, rates: Rates, *, p2p: bool = True, steps: int | None = None,
         device: str = "cuda") -> Time:
    """One optimizer step of one strategy (all micro-steps of gradient accumulation): the parts, and what
    DeepSpeed took beyond them on the model's sample when calibration ran this strategy there."""
    parts = replace(_parts(name, m, lay, t, rates, p2p, device), threads_per_rank=threads_per_rank(name, lay))
    extra = sampled_extra(name, m, lay, t, rates, device) if parts.step_s else 0.0
    # a surplus measured low (noise, carried over many blocks) never takes the step below its own compute
    extra = max(extra, parts.compute_s - parts.step_s) if extra else 0.0
    if not extra:
        return replace(parts, run_s=parts.step_s * steps if steps and parts.step_s else None)
    total = parts.step_s + extra
    return replace(parts, step_s=total, tokens_per_s=parts.tokens_per_s * parts.step_s / total,
                   run_s=total * steps if steps else None, sampled_extra_s=extra)


def sample_spec(m, layers: int):
    """The model cut to `layers` blocks, as calibration builds its sample (num_hidden_layers changed)."""
    block = sum(n for n, _ in block_tensors(m))
    return replace(m, layers=layers, params=m.params - (m.layers - layers) * block)


def sampled_extra(name: str, m, lay, t, rates: Rates, device: str = "cuda") -> float:
    """What DeepSpeed's step took beyond the parts on the model's own sample, carried to the whole model: its
    Python per gradient bucket and hook, and each collective inside backward waiting for the slower rank
    (neither is in the parts). Calibration ran the strategy's config on the model cut to 1 and k blocks in as
    many processes as the layout has; what each measured beyond the parts' prediction for it gives a cost per
    block and the rest, as the compute's sample does. Negative when the parts overestimate. 0 without it.
    Against the parts over the link the sample ran on (P2P allowed): the same surplus in both of
    bench-nvlink's arms, whose difference the link model gives."""
    s = (rates.deepspeed_sampled or {}).get(name)
    if not s or s["processes"] != lay.gpus or lay.nodes > 1 or t.grad_accum != 1:
        return 0.0
    k = int(s["blocks"])
    # Against the parts at the shape the sample ran at: the surplus, in seconds, carried to another micro-batch
    # or checkpointing as it is (DeepSpeed's Python per bucket and hook does not grow with the batch).
    at = sampled_training(s, t)
    parts = {n: _parts(name, sample_spec(m, n), lay, at, rates, True, device).step_s for n in {1, k}}
    if None in parts.values():   # the parts themselves unknown (a rate missing): nothing to measure beyond
        return 0.0
    one = s["one_s"] - parts[1]
    per_block = (s["more_s"] - parts[k] - one) / (k - 1) if k > 1 else 0.0
    return one + (m.layers - 1) * per_block


def parts(name: str, m, lay, t, rates: Rates, *, p2p: bool = True, device: str = "cuda") -> dict[str, float]:
    """Where one optimizer step's predicted time goes, by the parts a GPU profile can show
    (benchmarks/gpu_truth.py --compare): each projection's ops.matmuls (forward, backward, recomputed), the fused
    attention forward and backward, the elementwise ops by what they do (with their kernels' fixed time), the
    matmuls' fixed time, the framework's copies, the optimizer, offload and the communication the step waits for;
    "waiting for the host" where the host dispatches slower than the GPU runs. Their sum is the step without
    DeepSpeed's sampled surplus. Empty when the rates cannot time the compute."""
    whole = _parts(name, m, lay, t, rates, p2p, device)
    if whole.compute_s is None or rates.sampled:
        return {}
    out: dict[str, float] = {}
    elem, fused = value_bytes(t.precision), ops.attention_shapes(m, t, device)
    for mm in ops.forward_matmuls(m, t, t.attention, device):
        if ops.key(mm.M, mm.N, mm.K) in fused:
            continue
        block = mm.kind != "head"   # the output head is not recomputed
        again = 1 if t.grad_checkpointing and block else 0.5 if t.selective and block else 0
        shapes = [(mm.count * (1 + again), mm.M, mm.N, mm.K)] + [
            (mm.count, *b) for b in ops.backward_of(mm, t.finetune.peft)]
        part = f"matmul: {mm.what}"
        out[part] = out.get(part, 0.0) + matmul_seconds(shapes, rates, elem)
    if fused:
        out["attention forward"], out["attention backward"] = attention_parts(m, t, rates, device)
    out["matmul kernels' fixed time"] = ops.matmul_kernels(m, t, t.attention, device) * rates.kernel_s
    half = ops.half_model(name, t)
    block, head = ops.elementwise_ops(m, t, t.attention, device, half)
    for group, times, forwards in ((block, m.layers, ops.forward_passes(t)), (head, 1, 1)):
        for op in group:
            part = f"elementwise: {op.what.split(':')[0]}"
            bytes_ = op.n * op.bpe * (op.fwd * forwards + op.bwd)
            out[part] = out.get(part, 0.0) + times * (bytes_ / elementwise_rate(rates, op.n, op.kind)
                                                      + (op.kernels[0] * forwards + op.kernels[1]) * rates.kernel_s)
    host = host_seconds(m, t, t.attention, rates, device, half)
    out["framework copies"] = compute_seconds(m, t, t.attention, rates, device, name, lay.gpus) - max(
        sum(out.values()), host)
    if host > sum(out.values()):
        out["waiting for the host"] = host - sum(out.values())
    out = {k: v * t.grad_accum for k, v in out.items()}
    out.update({"optimizer": whole.optimizer_s, "offload": whole.offload_s or 0.0,
                "communication (exposed)": whole.exposed_comm_s or 0.0})
    return out


def _parts(name: str, m, lay, t, rates: Rates, p2p: bool, device: str) -> Time:
    """The step from its parts: compute, exposed communication, offload, optimizer."""
    comm, exposed = comm_seconds(name, m, lay, t, rates, p2p)
    if rates.matmul_flops is None and not rates.matmul_seconds:  # the link alone still times the traffic
        return Time(None, None, comm, exposed, None if "offload" in name else 0.0, None, None,
                    rates.basis.get("device", "device unknown"))
    compute = t.grad_accum * compute_seconds(m, t, t.attention, rates, device, name, lay.gpus)
    if exposed is not None:
        exposed = exposed_comm(name, m, lay, t, rates, comm, compute, p2p)
        # what communication costs the step: the part not hidden, and the compute it slows while hidden
        exposed += rates.overlap_slowdown * min(comm - exposed, compute)
    off = offload_seconds(name, m, lay, t, rates, compute)
    acts = activation_offload_seconds(name, m, t, rates, compute)
    off = None if off is None or acts is None else off + acts
    opt = optimizer_seconds(name, m, lay, t, rates) + zero_step_seconds(name, m, lay, t, rates)
    if exposed is None or off is None:
        missing = "link bandwidth unknown" if exposed is None else "host link, CPU Adam or NVMe rate unknown"
        return Time(None, compute, comm, exposed, off, opt, None, missing)
    total = compute + exposed + off + opt
    tokens = t.batch_size * t.seq_len * t.grad_accum * lay.gpus
    return Time(total, compute, comm, exposed, off, opt, tokens / total, rates.basis.get("summary", ""))


# ---- a GPU's rates from its datasheet (gputopo.datasheets) ---------------------------------------------------
# A GPU without a measured matmul efficiency (datasheets.GEMM) gets this share of its peak: cuBLAS SGEMM reaches
# 85-90 % at M=7000 (openai-gemm's table: 9.6-10.1 of 11 TFLOPS on a TITAN X (Pascal)); elementwise kernels
# stream at about 0.8 of the memory bandwidth (STREAM-like copies on GPUs).
GEMM_EFFICIENCY = 0.8
MEMORY_EFFICIENCY = 0.8
# A GPU without a measured per-kernel time (datasheets.KERNEL_S) gets the A100's and H200's: 2.5 us a kernel queued
# behind the one before it, beyond its bytes (gpu-benches' gpu-small-kernels).
KERNEL_S = 2.5e-6
# The host's time per kernel of an eager HF forward and backward (Python, transformers' modules, torch's
# dispatcher, autograd), measured by benchmarks/host_dispatch.py on this project's 2-vCPU VM (torch 2.13,
# transformers 5.24, CPU tensors 64 wide, two runs): GPT-2 10.2-11.0 us and Llama 7.7-8.7 in fp32, 16.9-18.8 and
# 13.2-13.6 under autocast (bf16) over the kernels ops.kernels counted then; the means taken. Those autocast steps
# also ran autocast's weight casts, which ops.kernels now counts (ops.weight_casts: 1204 kernels where it counted
# 1010 for that GPT-2, 2005 where 1779 for that Llama), so the same steps over them: 14.2-15.8 and 11.7-12.1 us,
# their mean 13.4. A machine described, not at hand, is taken to dispatch as fast; a GPU's launch adds to it (Meta's
# Holistic Trace Analysis docs put a launch's CPU side at "between 5-20 microseconds").
HOST_OP_S = {"fp32": 9.4e-6, "mixed": 13.4e-6}
# Compute running beside collectives is slowed by them (NCCL's kernels take SMs and memory bandwidth): "average
# computational slowdown of 18.9%, with a maximum of 40.0%" over A100, H100, MI250 and MI210 (Characterizing
# Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning, arXiv 2507.03114).
OVERLAP_SLOWDOWN = 0.189
# A 16-bit tensor-core matmul whose contiguous dimension (N, the output's row; K, the inner one) is not a multiple of
# 8 elements (16 bytes) cannot take the vectorized (Ampere) or TMA (Hopper: strides a multiple of 16 bytes) kernels:
# padding nanoGPT's LM head from 50257 to 50304 "achieves nearly a 3x speedup" of those matmuls on an A100 SXM4
# 80GB (PyTorch blog, "Accelerating Large Language Models with Accelerated Transformers", 2023-04-18).
UNALIGNED_SLOWDOWN = 3.0
ALIGN = 8
# Fused attention (FlashAttention-2 behind PyTorch's SDPA) runs its matmuls below a plain matmul's rate: "50-73%
# of the theoretical maximum FLOPs/s on A100" (FlashAttention-2, arXiv 2307.08691; the middle taken), "only 35%
# utilization on the H100 GPU" (FlashAttention-3, arXiv 2407.08608), never above the GPU's own matmul rate.
FLASH_EFFICIENCY = {"Hopper": 370 / 989.4}   # FLASH_H100's best forward over the H100 SXM's peak
FLASH_ARCHS = ("Ampere", "Ada", "Hopper", "Blackwell")   # FlashAttention-2 needs Ampere or newer, in 16 bits
FLASH_EFFICIENCY_OTHER = 0.6
# A tensor-core matmul's K at half rate on an H100 SXM (k_factor); another GPU's in proportion to its 16-bit rate
# per SM (a tile's fixed cost taken as the same time, its K-loop running at the SM's rate): A100 56, RTX 4090 25.
K_HALF_H100 = 145
H100_PER_SM = 989.4 / 132
# All-reduce bus bandwidth as a share of the weakest link's per-direction bandwidth, from nccl-tests pastes
# (docs/sources.md#busbw): NVLink ~0.8 (NCCL's own model: 20 of 25 GB/s per link), PCIe P2P 0.6-0.8.
NVLINK_BUSBW = 0.8
PCIE_P2P_BUSBW = 0.7
# P2P disabled: NCCL's SHM transport through host memory, 3.9 GB/s busbw between 2 GPUs on PCIe gen3 x16
# (https://github.com/NVIDIA/nccl/issues/384): that share of the PCIe link's 15.75 GB/s.
SHM_BUSBW = 3.9 / 15.75
NCCL_LATENCY_S = 10e-6         # an 8-byte all-reduce between 2 GPUs: 7.2 us (NVLink), 12 us (host memory)
# DeepSpeed's host-side optimizer step of an offloaded optimizer (ZeRO-Offload: the gradient norm and clipping,
# CPU Adam, the updated fp32 weights copied to the 16-bit model, and the host's side of the copies), as training
# runs it. It streams the fp32 weights, gradients and moments through the node's memory, so past a few cores the
# memory, not the cores, sets its pace: the ZeRO-Offload tutorial's log times it at 7612 ms for its 10.28B-parameter
# GPT-2 on one V100-SXM3, whose host is a DGX-2 (48 Xeon Platinum 8168 cores; docs/sources.md#cpu-adam): 1.35G
# parameters a second for the node, 28M a core (the paper's Table 4 times the CPU Adam kernel alone at 2.57 s for
# 10B on the same kind of host: the step around it takes 3x the kernel). The H200 record's 16-core host stepped
# gpt2-xl (1.56B) at about the same rate (1.372 s a step with the GPU's share in it). Below that node's rate, each
# core steps what benchmarks/cpu_adam_rate.py --training measured here in ZeRO-2 CPU-offload training (bf16, a
# 355M GPT-2, 2 cores of an AVX-512 VM): 376-398M parameters a second per core, the lowest taken.
CPU_ADAM_NODE = 10.28e9 / 7.612
CPU_ADAM_PER_CORE = 376e6
# torch's AdamW on the host (its default for-loop there: foreach is for CUDA tensors) against DeepSpeed's CPU Adam on
# one flat fp32 shard: 14x and 18x slower in two runs (benchmarks/torch_cpu_adam.py,
# docs/measurements/torch_cpu_adam.json); the lower one, FSDP's CPU offload steps it
TORCH_CPU_ADAM_SLOWDOWN = 14
# How the datasheet predictions fared against the published GPU runs of benchmarks/gpu_public.json (held equal
# to what that corpus computes by tests/test_gpu_public.py): the median of predicted / published - 1, and how
# many of the runs were within 25 %.
GPU_TRUTH = {"runs": 49, "median": -0.198, "within_25": 30}
# ... and against gputopo's own steps on a real GPU (benchmarks/gpu_record.json: the H200 record's), the same way.
GPU_RECORD = {"runs": 7, "median": -0.054, "gpu": "H200"}
HOST_LINK_PCIE = 0.8           # pinned host<->device copies reach ~80 % of the PCIe link
NVME_BYTES_PER_S = 2e9         # one PCIe gen3/4 NVMe drive under DeepSpeed's aio


def gpu_rates(lay, t) -> Rates:
    """The layout's GPU at its datasheet peaks (the variant its name and memory pick) and measured matmul
    efficiency, its links and its host; what is unknown stays None (the link alone still times the traffic when
    the GPU model is not known). Every figure is said in basis."""
    from .datasheets import sheet
    fig = sheet(lay.gpu_model, lay.gpu_mem_bytes)
    links, basis = _links_and_host(lay, fig)
    if fig is None:
        return Rates(None, None, **links,
                     basis={"device": "GPU model unknown: give --gpu-model to predict step times", **basis})
    b16 = t.precision != "fp32" and bool(fig["b16"])
    tf32 = t.tf32 and bool(fig["tf32"])   # the same tensor cores at TF32's rate, their measured efficiency
    cores = b16 or tf32
    peak = fig["b16"] if b16 else fig["tf32"] if tf32 else fig["fp32"]
    measured = (fig["gemm"] or {}).get("b16" if cores else "fp32")
    eff = measured[0] if measured else GEMM_EFFICIENCY
    stream = fig["stream"]
    mem_eff = stream[0] if stream else MEMORY_EFFICIENCY
    kernel_s = fig["kernel"][0] if fig["kernel"] else KERNEL_S
    host_s = HOST_OP_S["fp32" if t.precision == "fp32" else "mixed"]
    arch = fig["arch"]
    flash = min(eff, FLASH_EFFICIENCY.get(arch, FLASH_EFFICIENCY_OTHER))
    what = "16-bit tensor cores" if b16 else "TF32 tensor cores" if tf32 else "fp32 CUDA cores"
    basis = {"device": f"{fig['variant']}: {peak:g} TFLOPS ({what}), {fig['mem_gbps']:g} GB/s, datasheet"
                       f" ({fig['source']})",
             "matmul": (f"{eff:.0%} of the peak, measured: {measured[1]} ({measured[2]})"
                        + (" on its 16-bit tensor cores, the TF32 ones' too" if tf32 else "") if measured else
                        f"{eff:.0%} of the peak (no measurement of this GPU: assumed)")
                       + f"; in waves of {TILE}x{TILE} tiles over its {fig['sms']} SMs",
             "memory": (f"{mem_eff:.0%} of the bandwidth, measured: {stream[1]} ({stream[2]})" if stream else
                        f"{mem_eff:.0%} of the bandwidth (no measurement of this GPU: assumed)")
                       + f"; each kernel {kernel_s * 1e6:.1f} us beyond its bytes ("
                       + (f"measured: {fig['kernel'][1]}, gpu-benches" if fig["kernel"] else
                          "the A100's and H200's, measured by gpu-benches") + ")",
             "host": (f"the host dispatches a kernel in {host_s * 1e6:.1f} us (eager PyTorch, measured on a 2-vCPU"
                      " VM: benchmarks/host_dispatch.py); a step whose kernels run faster waits for it"),
             "kernels": ("fused: one kernel per norm, activation and rotary, 16-bit activations" if t.kernels == "fused"
                         else "hf: transformers' modeling code, op by op") + f"; loss {t.loss}",
             **basis,
             "accuracy": (f"against {GPU_TRUTH['runs']} published GPU runs these figures predicted a median"
                          f" {GPU_TRUTH['median']:+.0%} of the measured step ({GPU_TRUTH['within_25']} within 25 %;"
                          " benchmarks/gpu_public.py, docs/sources.md#gpu-truth), and against gputopo's own"
                          f" {GPU_RECORD['runs']} steps on one {GPU_RECORD['gpu']} a median {GPU_RECORD['median']:+.0%}"
                          " (docs/sources.md#gpu-record): expect the real step slower, most on many GPUs"),
             "summary": f"{fig['variant']} datasheet x measured efficiencies (docs/sources.md#step-time)"}
    if t.attention == "sdpa":
        kernel = ("FlashAttention-2 in SDPA" if b16 and arch in FLASH_ARCHS else
                  "SDPA's memory-efficient kernel (FlashAttention-2 needs Ampere or newer, in 16 bits), taken at"
                  " FlashAttention-2's rate")
        which = ("FlashAttention-2's best on an H100 in the FlashAttention-3 paper" if arch in FLASH_EFFICIENCY else
                 "the FlashAttention-2 paper's A100 figure" + ("" if arch in ("Ampere", "Ada") else
                                                               f", no measurement on {arch}"))
        at = (f"; at {t.seq_len} tokens, causal: {flash_share('fwd', t.seq_len, 64, True):.0%} of it forward at head"
              f" dim 64, {flash_share('fwd', t.seq_len, 128, True):.0%} at 128, as FlashAttention-2 measured on an"
              " H100" if b16 and arch in FLASH_ARCHS else "")
        basis["attention"] = (f"fused attention ({kernel}) at {flash:.0%} of the peak at best ({which},"
                              f" docs/sources.md#step-time), its backward's 5 ops.matmuls (the scores recomputed) at"
                              f" {FLASH_BWD_SHARE:.0%} of that (FlashAttention-2's 63 % against 73 %){at}")
    k_half = K_HALF_H100 * peak / fig["sms"] / H100_PER_SM if cores else None
    if k_half:
        basis["matmul"] += (f"; a K-loop of K reaches K / (K + {k_half:.0f}) of it (XLA's measured H100 table,"
                            " in proportion to the rate per SM)")
    if cores:
        basis["matmul"] += (f"; {UNALIGNED_SLOWDOWN:g}x the time where a contiguous dimension is not a multiple of"
                            f" {ALIGN} (an odd vocabulary: the PyTorch blog's nanoGPT LM head on an A100)")
    if lay.gpus > 1:
        basis["overlap"] += (f"; compute beside collectives {OVERLAP_SLOWDOWN:.1%} slower while they run"
                             " (arXiv 2507.03114's average over A100, H100, MI250, MI210)")
    return Rates(matmul_flops=peak * 1e12 * eff, mem_bytes_per_s=fig["mem_gbps"] * 1e9 * mem_eff,
                 sms=fig["sms"], attention_flops=peak * 1e12 * flash, attention_bwd_flops=peak * 1e12 * flash
                 * FLASH_BWD_SHARE, k_half=k_half, kernel_s=kernel_s, host_op_s=host_s,
                 overlap_slowdown=OVERLAP_SLOWDOWN, unaligned=UNALIGNED_SLOWDOWN if cores else 1.0,
                 flash_curve=b16 and arch in FLASH_ARCHS, **links, basis=basis)


def _links_and_host(lay, fig) -> tuple[dict, dict]:
    """The layout's links (NVLink or PCIe, P2P or through host memory, between nodes), its host link, CPU Adam and
    NVMe as Rates' keyword arguments, and the basis saying each."""
    from .datasheets import pcie_gbps
    link, nv = lay.link_gbps, (lay.link_type or "").startswith("NV")
    pcie, pcie_what = pcie_gbps(fig)
    busbw = link * (NVLINK_BUSBW if nv else PCIE_P2P_BUSBW) * 1e9 if link else None
    no_p2p = pcie * 1e9 * SHM_BUSBW if pcie else None
    cores = lay.cpu_cores
    cpu_adam = min(cores * CPU_ADAM_PER_CORE, CPU_ADAM_NODE) if cores else None
    links = dict(busbw=busbw, busbw_no_p2p=no_p2p, inter_node=lay.inter_node_gbps * 1e9, latency_s=NCCL_LATENCY_S,
                 overlap=True, cpu_adam=cpu_adam, nvme=NVME_BYTES_PER_S,
                 host_link=pcie * 1e9 * HOST_LINK_PCIE if pcie else None)
    shm = f"through host memory (SHM): {SHM_BUSBW:.0%} of {pcie_what}" if pcie else "unknown"
    if link and p2p_used(lay):
        used = f"{lay.link_type}: {NVLINK_BUSBW if nv else PCIE_P2P_BUSBW:.0%} of {link:g} GB/s per direction"
    elif link:
        used = f"{lay.link_type}: NCCL takes no P2P over it by default, so {shm}"
    else:
        used = "link unknown"
    basis = {"link": used, "no_p2p": shm,
             "overlap": "collectives and copies on their own stream, hidden behind compute where the step allows:"
                        " gradient reduction behind backward (not DDP's last bucket, nor ZeRO-1/2's parameter"
                        " all-gather after the step), ZeRO-3/FSDP gathers behind forward and backward; nothing"
                        " through host memory (SHM), as the reference experiment measured",
             "host_link": f"{HOST_LINK_PCIE:.0%} of {pcie_what}, {pcie:g} GB/s per direction (offload's copies)"
                          if pcie else "unknown",
             "cpu_adam": (f"{cpu_adam / 1e9:.2f}G params/s per node: DeepSpeed's host step of an offloaded optimizer"
                          f" as training runs it, {cores} cores x {CPU_ADAM_PER_CORE / 1e6:.0f}M (measured in training:"
                          f" benchmarks/cpu_adam_rate.py --training) up to the node's memory-bound"
                          f" {CPU_ADAM_NODE / 1e9:.2f}G (the ZeRO-Offload tutorial's 48-core DGX-2;"
                          " docs/sources.md#cpu-adam)") if cores else "unknown (give --cpu-cores)",
             "nvme": f"{NVME_BYTES_PER_S / 1e9:g} GB/s per node (one PCIe gen3/4 NVMe under DeepSpeed's aio)"}
    if lay.nodes > 1:
        basis["inter_node"] = f"{lay.inter_node_gbps:g} GB/s per direction between nodes (--inter-node-gbps)"
    return links, basis
