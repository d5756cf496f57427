"""Model + layout + training + rates -> seconds per optimizer step for each strategy. Pure arithmetic.

A step is
- compute: every matmul of forward and backward (the blocks' projections, attention scores and values, the
  LM head; the blocks' forward again under checkpointing), each at the device's rate on its own shape, plus
  the elementwise work, counted as bytes moved through memory (the activations each written in forward, read
  in backward, their gradients written and read);
- communication: plan.comm_bytes at the all-reduce bus bandwidth of the weakest link, plus a latency per
  collective, less what hides behind backward;
- offload: gradients and parameters over the host link, the optimizer step on the CPU, NVMe reads and writes;
- the optimizer step on the device: bytes touched / memory bandwidth.
Where each rate comes from is in Rates.basis: a GPU's datasheet (gpus.PEAKS) or this machine's calibration
(gputopo.calibrate). The figures here only combine them.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from . import memory
from .plan import comm_bytes, value_bytes, zero3_buckets

DDP_BUCKET = 25 * 2 ** 20          # torch DDP's bucket_cap_mb default (the first bucket is 1 MB)
DS_BUCKET = 5 * 10 ** 8            # DeepSpeed's reduce/allgather bucket default (elements)
# Bytes each optimizer touches per parameter per step. torch.optim.AdamW (foreach): lerp m, mul+addcmul v,
# sqrt, two divisions, eps, addcdiv p and the decoupled weight decay: about 20 fp32 passes (torch/optim/adamw.py,
# _multi_tensor_adamw). DeepSpeed's fused Adam reads p, g, m, v and writes p, m, v (28 B) and the 16-bit copy.
TORCH_OPTIMIZER_BYTES = {"adamw": 80, "adamw-8bit": 24, "adafactor": 48, "sgd": 20}
FUSED_ADAM_BYTES = 30
# Elementwise traffic per byte of saved activation: written in forward, read in backward, its gradient
# written and read (docstring above); the logits add log-softmax's passes (forward and backward, fp32).
ACTIVATION_PASSES = 4
LOGIT_PASSES = 6


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
    overlap: float = 0.0                   # share of DDP's all-reduce that hides behind backward
    matmul_seconds: dict | None = None     # calibrated: "MxNxK" -> seconds, the model's own shapes
    optimizer_params_per_s: float | None = None   # calibrated: torch's optimizer on this device
    basis: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("matmul_seconds")
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

    def to_dict(self) -> dict:
        d = asdict(self)
        if d["run_s"] is None:
            d.pop("run_s")
        return d


def matmuls(m, t, attention: str, device: str = "cuda") -> list[tuple[int, int, int, int]]:
    """The forward matmuls of one micro-step: (count, M, N, K) for out[M, N] = a[M, K] @ b[K, N]."""
    x = memory.shape(m, t)
    hq, hkv = x.a * x.d, x.kv * x.d
    qkv = [(1, x.T, hq + 2 * hkv, x.h)] if m.fused_qkv else [(1, x.T, hq, x.h), (2, x.T, hkv, x.h)]
    up = [(2 if m.gated_mlp else 1, x.T, x.I, x.h)]                  # SwiGLU: gate and up projections
    # Fused attention kernels skip the masked half of causal scores; eager and the math kernel (CPU SDPA with
    # dropout, see gputopo.memory) compute all of it.
    fused = memory.resolve_attention(m, attention) == "sdpa" and (device == "cuda" or not m.attn_dropout)
    causal = 0.5 if fused else 1.0
    scores = [(round(x.b * x.a * causal), x.s, x.s, x.d), (round(x.b * x.a * causal), x.s, x.d, x.s)]
    block = qkv + [(1, x.T, x.h, hq)] + up + [(1, x.T, x.h, x.I)] + scores
    out = [(c * m.layers, M, N, K) for c, M, N, K in block]
    if x.V:
        out.append((1, x.T, x.V, x.h))
    return out


def backward_shapes(M: int, N: int, K: int) -> list[tuple[int, int, int]]:
    """The two matmuls of a matmul's backward: da = dc @ b^T and db = a^T @ dc."""
    return [(M, K, N), (K, N, M)]


def key(M: int, N: int, K: int) -> str:
    """A matmul shape as calibration names it."""
    return f"{M}x{N}x{K}"


def training_matmuls(m, t, attention: str, device: str = "cuda") -> list[tuple[int, int, int, int]]:
    """Every matmul of a micro-step's forward and backward (and the blocks' recomputed forward)."""
    fwd = matmuls(m, t, attention, device)
    out = list(fwd)
    for c, M, N, K in fwd:
        out += [(c, *s) for s in backward_shapes(M, N, K)]
    if t.grad_checkpointing:  # the blocks' forward runs again in backward; the LM head (last) does not
        out += fwd[:-1] if m.vocab_size else fwd
    return out


def matmul_seconds(shapes, rates: Rates, elem: int) -> float:
    """Each shape at its calibrated time, else by the roofline: the larger of FLOPs / rate and bytes / bandwidth."""
    total = 0.0
    for c, M, N, K in shapes:
        known = (rates.matmul_seconds or {}).get(key(M, N, K))
        if known is None:
            known = max(2 * M * N * K / rates.matmul_flops, (M * K + K * N + M * N) * elem / rates.mem_bytes_per_s)
        total += c * known
    return total


def traffic_bytes(m, t, attention: str, device: str) -> int:
    """Bytes the elementwise work of a micro-step moves: ACTIVATION_PASSES x the activations (as if nothing
    were checkpointed; checkpointing writes the blocks' again) and LOGIT_PASSES x the fp32 logits."""
    x = memory.shape(m, t, device)
    att = memory.resolve_attention(m, attention)
    if att == "sdpa" and m.attn_dropout and device == "cpu":
        att = "math"
    blocks = m.layers * memory.block_bytes(m, x, att)
    acts = blocks + memory.head_bytes(m, x)
    redo = 2 * blocks if t.grad_checkpointing else 0   # the recomputed forward writes and reads them again
    return ACTIVATION_PASSES * acts + redo + LOGIT_PASSES * x.T * x.V * 4


def copy_bytes(name: str, m, t) -> int:
    """Bytes per micro-step the framework copies besides the model's own work. Plain torch under autocast casts
    every fp32 weight to 16 bits in each forward (read 4, write 2) and DDP copies gradients into its buckets and
    back (gradient_as_bucket_view=False: 16 B); DeepSpeed (stage 1/2) copies 16-bit gradients into its reduce
    buckets and the reduced partition to fp32 (about 3 x 2 B)."""
    P, mixed = m.params, t.precision != "fp32"
    if name in ("single", "ddp"):
        return P * ((6 if mixed else 0) + (16 if name == "ddp" else 0))
    return 3 * value_bytes(t.precision) * P if name.startswith(("zero1", "zero2")) else 0


def compute_seconds(m, t, attention: str, rates: Rates, device: str = "cuda", name: str = "single") -> float:
    """One micro-step's forward and backward on one device, with the framework's copies."""
    mm = matmul_seconds(training_matmuls(m, t, attention, device), rates, value_bytes(t.precision))
    return mm + (traffic_bytes(m, t, attention, device) + copy_bytes(name, m, t)) / rates.mem_bytes_per_s


def collectives(name: str, m, lay, t) -> int:
    """Collective calls per optimizer step, each paying the latency."""
    if lay.gpus == 1 or name == "single":
        return 0
    P = m.params
    if name == "ddp":
        return math.ceil(4 * P / DDP_BUCKET)
    bucket = m.hidden_size ** 2 or DS_BUCKET    # what gputopo's configs write (dsconfig)
    if name.startswith(("zero1", "zero2")):
        reduces = math.ceil(P / bucket) * (t.grad_accum if name.startswith("zero2") else 1)
        return reduces + math.ceil(P / bucket)
    modules = m.layers * ((1 if m.fused_qkv else 3) + 1 + (3 if m.gated_mlp else 2) + 2) + 3
    return t.grad_accum * (2 * modules + math.ceil(P / zero3_buckets(m.hidden_size)[1]))


def link_busbw(lay, rates: Rates, p2p: bool) -> float | None:
    """The bus bandwidth the collectives run at: between nodes the network, else the link with or without P2P."""
    if lay.nodes > 1:
        return rates.inter_node
    return rates.busbw if p2p else rates.busbw_no_p2p


def comm_seconds(name: str, m, lay, t, rates: Rates, p2p: bool = True) -> tuple[float | None, float | None]:
    """(all communication, the part not hidden behind backward) per optimizer step."""
    sent = comm_bytes(name, m, lay, t)
    if not sent:
        return 0.0, 0.0
    bw = link_busbw(lay, rates, p2p)
    if not bw:
        return None, None
    # comm_bytes counts what each GPU sends in ring passes; bus bandwidth is per GPU and direction in the same
    # units (nccl-tests' busbw), so time = bytes sent / busbw.
    total = sent / bw + collectives(name, m, lay, t) * rates.latency_s
    hidden = rates.overlap * total if name == "ddp" else 0.0
    return total, total - hidden


def optimizer_seconds(name: str, m, lay, t, rates: Rates) -> float:
    """The optimizer step on the device (offloaded ones run on the host: offload_seconds)."""
    if "offload" in name:
        return 0.0
    share = m.params if name in ("single", "ddp") else m.params / lay.gpus
    if name in ("single", "ddp") and rates.optimizer_params_per_s:
        return share / rates.optimizer_params_per_s
    per = TORCH_OPTIMIZER_BYTES[t.optimizer] if name in ("single", "ddp") else FUSED_ADAM_BYTES
    return share * per / rates.mem_bytes_per_s


def offload_seconds(name: str, m, lay, t, rates: Rates) -> float | None:
    """The host's part: 16-bit gradients down and parameters up over PCIe (ZeRO-3 with offloaded parameters
    fetches them in forward and again in backward), DeepSpeed's CPU Adam on this node's share, NVMe swaps."""
    if "offload" not in name:
        return 0.0
    P, p16, n = m.params, value_bytes(t.precision), lay.gpus
    share = P / n
    moved = p16 * share * t.grad_accum + p16 * share         # gradients each micro-step, parameters once
    if name.startswith("zero3") and t.offload_params:
        moved = p16 * P * 2 * t.grad_accum + p16 * share * t.grad_accum
    if not rates.host_link or not rates.cpu_adam:
        return None
    gpus_per_node = lay.gpus_per_node
    out = moved / rates.host_link + share * gpus_per_node / rates.cpu_adam
    if name.endswith("nvme"):
        if not rates.nvme:
            return None
        out += 2 * (4 + 4 + 4) * share * gpus_per_node / rates.nvme  # fp32 master + moments: read, then written
    return out


def step(name: str, m, lay, t, rates: Rates, *, p2p: bool = True, steps: int | None = None,
         device: str = "cuda") -> Time:
    """One optimizer step of one strategy (all micro-steps of gradient accumulation)."""
    comm, exposed = comm_seconds(name, m, lay, t, rates, p2p)
    if rates.matmul_flops is None and not rates.matmul_seconds:  # the link alone still times the traffic
        return Time(None, None, comm, exposed, None if "offload" in name else 0.0, None, None,
                    rates.basis.get("device", "device unknown"))
    compute = t.grad_accum * compute_seconds(m, t, t.attention, rates, device, name)
    off = offload_seconds(name, m, lay, t, rates)
    opt = optimizer_seconds(name, m, lay, t, rates)
    if exposed is None or off is None:
        missing = "link bandwidth unknown" if exposed is None else "host link, CPU Adam or NVMe rate unknown"
        return Time(None, compute, comm, exposed, off, opt, None, missing)
    total = compute + exposed + off + opt
    tokens = t.batch_size * t.seq_len * t.grad_accum * lay.gpus
    return Time(total, compute, comm, exposed, off, opt, tokens / total, rates.basis.get("summary", ""),
                run_s=total * steps if steps else None)


# ---- a GPU's rates from its datasheet (gputopo.datasheets) ---------------------------------------------------
# cuBLAS reaches about 85-90 % of the FP32 peak on large GEMMs (openai-gemm's table of cuBLAS SGEMM at
# M=7000: 9.6-10.1 TFLOPS on a TITAN X (Pascal), 11 TFLOPS peak: https://github.com/openai/openai-gemm);
# gputopo takes 0.8 for the mix of a model's shapes. Elementwise kernels stream at about 0.8 of the
# memory bandwidth (STREAM-like copies on GPUs).
GEMM_EFFICIENCY = 0.8
MEMORY_EFFICIENCY = 0.8
# All-reduce bus bandwidth as a share of the weakest link's per-direction bandwidth, from nccl-tests pastes
# (docs/sources.md#busbw): NVLink ~0.8 (NCCL's own model: 20 of 25 GB/s per link), PCIe P2P 0.6-0.8.
NVLINK_BUSBW = 0.8
PCIE_P2P_BUSBW = 0.7
# P2P disabled: NCCL's SHM transport through host memory, 3.9 GB/s busbw between 2 GPUs on PCIe gen3 x16
# (https://github.com/NVIDIA/nccl/issues/384): that share of the PCIe link's 15.75 GB/s.
SHM_BUSBW = 3.9 / 15.75
NCCL_LATENCY_S = 10e-6         # an 8-byte all-reduce between 2 GPUs: 7.2 us (NVLink), 12 us (host memory)
# DeepSpeed's CPU Adam, parameters per second per node: the H100 record's ZeRO-2 CPU-offload step
# (gpt2, 0.22 s/step, 16 host cores) is almost all CPU Adam (docs/measurements/h100-2026-11.md).
CPU_ADAM_PARAMS_PER_S = 124e6 / 0.2
HOST_LINK_PCIE = 0.8           # pinned host<->device copies reach ~80 % of the PCIe link
NVME_BYTES_PER_S = 2e9         # one PCIe gen3/4 NVMe drive under DeepSpeed's aio


def gpu_rates(lay, t) -> Rates:
    """The layout's GPU at its datasheet peaks and its links, scaled by the efficiencies above; what is unknown
    stays None (the link alone still times the traffic when the GPU model is not known)."""
    from .datasheets import PEAKS
    from .gpus import lookup
    from .topology import PCIE_LANE_GBPS
    link, nv = lay.link_gbps, (lay.link_type or "").startswith("NV")
    busbw = link * (NVLINK_BUSBW if nv else PCIE_P2P_BUSBW) * 1e9 if link else None
    links = dict(busbw=busbw, inter_node=lay.inter_node_gbps * 1e9, latency_s=NCCL_LATENCY_S)
    basis = {"link": f"{lay.link_type}: {NVLINK_BUSBW if nv else PCIE_P2P_BUSBW:.0%} of {link:g} GB/s per direction"
                     if link else "link unknown"}
    g = lookup(lay.gpu_model)
    sheet = PEAKS.get(g.key) if g else None
    if sheet is None:
        return Rates(None, None, **links,
                     basis={"device": "GPU model unknown: give --gpu-model to predict step times", **basis})
    peak = sheet["fp32"] if t.precision == "fp32" else sheet["b16"] or sheet["fp32"]
    gen, lanes = sheet["pcie"] or (None, None)
    pcie = PCIE_LANE_GBPS.get(gen, 0) * (lanes or 0) * 1e9 or None
    what = "fp32 CUDA cores" if t.precision == "fp32" else "16-bit tensor cores"
    basis = {"device": f"{g.key}: {peak:g} TFLOPS ({what}), {sheet['mem_gbps']:g} GB/s, datasheet ({sheet['source']})",
             "matmul": f"{GEMM_EFFICIENCY:.0%} of the peak", "memory": f"{MEMORY_EFFICIENCY:.0%} of the bandwidth",
             **basis,
             "no_p2p": f"through host memory: {SHM_BUSBW:.0%} of PCIe gen{gen} x{lanes}" if pcie else "unknown",
             "summary": f"{g.key} datasheet x efficiencies (docs/sources.md#step-time)"}
    return Rates(matmul_flops=peak * 1e12 * GEMM_EFFICIENCY,
                 mem_bytes_per_s=sheet["mem_gbps"] * 1e9 * MEMORY_EFFICIENCY, **links,
                 busbw_no_p2p=pcie * SHM_BUSBW if pcie else None,
                 host_link=pcie * HOST_LINK_PCIE if pcie else None, cpu_adam=CPU_ADAM_PARAMS_PER_S,
                 nvme=NVME_BYTES_PER_S, basis=basis)
