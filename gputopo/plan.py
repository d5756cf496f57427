"""Model + layout + training setup -> memory per GPU and traffic per step for each strategy. Pure arithmetic.

Sources: the memory anatomy of docs/sources.md#memory-per-parameter (AdamW 8 B/param, 8-bit 2, SGD+momentum 4,
Adafactor ~4; fp32 weights and gradients 4 B), DeepSpeed's own estimators for ZeRO model states
(deepspeed.runtime.zero.stage_1_and_2 / stage3 estimate_*_model_states_mem_needs), and gputopo.memory for
the step itself (activations, temporaries and the phase the peak falls in).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

from . import finetune, memory
from .errors import BadInput
from .finetune import FULL, Finetune
from .models import ModelSpec, factored_elements
from .units import gib

STRATEGIES = ("single", "ddp", "zero1", "zero2", "zero2_offload_cpu", "zero3", "fsdp", "zero3_offload_cpu",
              "fsdp_offload_cpu", "zero3_offload_nvme")
# Strategies that run plain PyTorch (no DeepSpeed config): DDP, and FSDP's full shard (with CPUOffload(offload_params=
# True) its shards, gradients and optimizer live on the host: the fsdp_qlora recipe).
TORCH_STRATEGIES = ("single", "ddp", "fsdp", "fsdp_offload_cpu")
KERNELS = ("hf", "fused")
LOSSES = ("hf", "fused", "chunked")
OPTIMIZER_BYTES = {"adamw": 8, "adamw-8bit": 2, "adafactor": 4, "sgd": 4}
# ZeRO-Offload steps the optimizer on the host with DeepSpeed's CPU Adam; a client optimizer (8-bit Adam,
# Adafactor, SGD) is refused there unless forced (zero_force_ds_cpu_optimizer), and runs on the GPU anyway.
OFFLOAD_OPTIMIZERS = ("adamw",)
# CUDA context: 520 MiB by NVML right after the first CUDA tensor, torch 2.11 + CUDA 13.0 on an H100
# (docs/measurements/h100-2026-11.md); the 1343 MiB of docs/sources.md#memory-per-parameter came from an older stack.
CUDA_CONTEXT_BYTES = 520 * 2 ** 20
# ... on a stack that loads every CUDA module at start (CUDA_MODULE_LOADING=EAGER, the only way before CUDA 11.7):
# "GPU memory occupied: 1343 MB" after torch.ones((1, 1)).to("cuda") on the single-GPU guide's V100 (CUDA 11.2)
CUDA_CONTEXT_EAGER_BYTES = 1343 * 2 ** 20
# What nvidia-smi shows beyond the context and the allocated peak: the caching allocator's reserve and cuBLAS
# workspaces. Same record: NVML's per-process figure was about the allocated peak + 1.4 GB.
ALLOCATOR_RESERVE_BYTES = 1_400_000_000 - CUDA_CONTEXT_BYTES
HEADROOM = 0.9                       # fit within 90 %: the allocator fragments, temporaries come and go
BUFFER_FACTOR = 1.5                  # DeepSpeed's additional_buffer_factor for CPU memory
NVME_SUB_GROUP = 10 ** 8             # the sub_group_size gputopo writes for NVMe offload (DeepSpeed's 1e9 OOMs CPUs)
DS_SUB_GROUP = 10 ** 9               # DeepSpeed's default sub_group_size
PARAM_BUFFER = 10 ** 8              # DeepSpeed's smallest NVMe parameter buffer (elements): max(1e8, largest layer)


def value_bytes(precision: str) -> int:
    """Bytes of a weight, gradient or activation in the compute dtype: 16-bit in mixed precision, else fp32."""
    return 4 if precision == "fp32" else 2


def weight_bytes(t) -> int:
    """Bytes of a weight (and of its gradient) in plain PyTorch and FSDP: fp32 under autocast, the compute dtype
    when the weights themselves are 16-bit (--pure-16bit: the optimizer's states follow their dtype too)."""
    return t.value_bytes if t.pure16 else 4


def zero3_buckets(hidden_size: int) -> tuple[int, int]:
    """(prefetch, reduce) bucket elements at ZeRO-3: 0.9 h^2 and h^2, what the HF Trainer fills for "auto"
    (transformers/integrations/deepspeed.py) and what gputopo writes; the plan counts them in 16-bit."""
    h2 = hidden_size * hidden_size
    return int(0.9 * h2), h2
# Per-direction bandwidth assumed when the link's generation is unknown (GB/s).
ASSUMED_GBPS = {"NV": 25.0, "PCIE": 15.75}


@dataclass(frozen=True)
class Layout:
    gpus_per_node: int
    gpu_mem_bytes: int
    nodes: int = 1
    gpu_model: str | None = None
    cpu_mem_bytes: int | None = None      # per node
    nvme_free_bytes: int | None = None    # per node, at --nvme-path
    link_type: str | None = None          # weakest link among the GPUs of a node
    link_gbps: float | None = None        # its per-direction bandwidth
    link_basis: str = "unknown"
    inter_node_gbps: float = 12.5         # 100 Gb/s InfiniBand/Ethernet unless told
    cpu_cores: int | None = None          # per node: DeepSpeed's CPU Adam runs on them (offload)
    cpu_cores_range: tuple | None = None  # (fewest, most) when cpu_cores is assumed (datasheets.host_cores)

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    def to_dict(self) -> dict:
        return {**asdict(self), "gpus": self.gpus}


@dataclass(frozen=True)
class Training:
    precision: str = "bf16"               # fp32, fp16, bf16 (mixed precision)
    optimizer: str = "adamw"
    batch_size: int = 8                   # micro-batch per GPU
    seq_len: int = 1024
    grad_checkpointing: bool = False
    grad_accum: int = 1
    attention: str = "auto"               # auto (what transformers picks), eager, sdpa
    offload_params: bool = True           # ZeRO-3 offload: parameters too, not only optimizer states
    kernels: str = "hf"                   # hf: transformers' modeling code op by op; fused: one kernel per op
    selective: bool = False               # torchtitan's per-op checkpointing: every other matmul's output kept
    pure16: bool = False                  # the weights themselves 16-bit (no fp32 master): plain torch and FSDP
    loss: str = "hf"                      # hf: an fp32 copy of the logits; fused: 16-bit, in place; chunked: none whole
    cuda_loading: str = "lazy"            # CUDA_MODULE_LOADING: lazy, or eager (all modules at start: more context)
    optimizer_impl: str | None = None     # torch's optimizer: foreach, for-loop, fused; None: the device's default
    zero_grad: str = "none"               # zero_grad(set_to_none=True) frees the gradients; zeros keeps them
    finetune: Finetune = FULL             # what is trained: the whole model, or LoRA/QLoRA adapters (gputopo.finetune)
    tf32: bool = False                    # fp32 with its matmuls in TF32 (--precision tf32): Ampere's tensor cores
    sync_each_batch: bool = False         # accumulation reduces every micro-batch; else DDP and FSDP use no_sync
    fsdp_orig_params: bool = False        # FSDP use_orig_params=True: a LoRA unit's flat gradient covers its base
    varlen: bool = False                  # batches padded to their longest sample: lengths vary from step to step
    quantizer: str = "transformers"       # what quantized QLoRA's base: transformers, or lightning (the head too)
    bnb_keeps_input: bool = False         # bitsandbytes < 0.43.2: each 4-bit matmul keeps its input for backward
    non_reentrant: bool = False           # checkpointing with use_reentrant=False: those inputs kept for every block
    keeps_graph: bool = False             # the loop names the last micro-batch's output into the next forward
    act_offload: bool = False             # torchtune's OffloadActivations: checkpointed blocks' inputs to pinned host

    def __post_init__(self):
        if isinstance(self.finetune, dict):   # read back from JSON (plan --measure's child)
            object.__setattr__(self, "finetune", Finetune(**self.finetune))

    def optimizer_kwargs(self) -> dict:
        """torch.optim's arguments for --optimizer-impl (none: the device's default), as --measure and --calibrate
        build the optimizer."""
        return {"foreach": {"foreach": True}, "for-loop": {"foreach": False},
                "fused": {"fused": True}}.get(self.optimizer_impl or "", {})

    def impl(self, device: str) -> str:
        """How torch's optimizer steps on `device`: as asked, else its default (foreach for CUDA tensors, the
        for-loop otherwise: torch/optim/optimizer.py, _default_to_fused_or_foreach); Adafactor and 8-bit Adam
        step tensor by tensor."""
        if self.optimizer not in ("adamw", "sgd"):
            return "for-loop"
        return self.optimizer_impl or ("foreach" if device == "cuda" else "for-loop")

    @property
    def context_bytes(self) -> int:
        """The CUDA context this stack takes on each GPU."""
        return CUDA_CONTEXT_EAGER_BYTES if self.cuda_loading == "eager" else CUDA_CONTEXT_BYTES

    @property
    def value_bytes(self) -> int:
        return value_bytes(self.precision)

    def stack(self) -> list[str]:
        """The options that describe a training stack other than transformers' code as the HF Trainer runs it."""
        return ([f"--kernels {self.kernels}"] if self.kernels != "hf" else []) + \
               ([f"--loss {self.loss}"] if self.loss != ("fused" if self.kernels == "fused" else "hf") else []) + \
               (["--selective-checkpointing"] if self.selective else []) + (["--pure-16bit"] if self.pure16 else []) + \
               (["--bnb-keeps-input"] if self.bnb_keeps_input else []) + \
               (["--non-reentrant-checkpointing"] if self.non_reentrant else []) + \
               (["--loop-keeps-graph"] if self.keeps_graph else []) + \
               (["--activation-offload"] if self.act_offload else []) + \
               ([f"--quantizer {self.quantizer}"] if self.quantizer != "transformers" else [])

    def to_dict(self) -> dict:
        # flash_attention: kept from schema 1's first fields (true when the attention is a fused SDPA kernel)
        return {**asdict(self), "flash_attention": self.attention == "sdpa"}


@dataclass
class Strategy:
    name: str
    per_gpu_bytes: dict
    cpu_bytes: int
    nvme_bytes: int
    comm_bytes_per_step: int
    comm_seconds_per_step: float | None       # gputopo.speed's comm_s (latency and bus efficiency)
    peak: dict = field(default_factory=dict)   # the worst phase of the step and what it holds
    nvidia_smi_bytes: int = 0                  # total + the allocator's reserve: what nvidia-smi will show
    allocated_bytes: int = 0                   # total less the CUDA context: torch.cuda.max_memory_allocated()
    reserved_bytes: int = 0                    # allocated + the allocator's reserve: max_memory_reserved()
    fits: bool = False
    why_not: list[str] = field(default_factory=list)
    short_bytes: dict = field(default_factory=dict)  # {"gpu"|"cpu"|"nvme": bytes missing}; empty when it fits
    tight: bool = False                        # fits, but in the last 10 % of GPU memory kept for fragmentation
    condition: str | None = None               # fits if this holds (the RAM and NVMe the target must have)

    def to_dict(self) -> dict:
        return asdict(self)


def model_states(name: str, m: ModelSpec, lay: Layout, t: Training) -> tuple[dict, int, int]:
    """(weights, gradients, optimizer) bytes per GPU, CPU bytes per node, NVMe bytes per node."""
    if t.finetune.peft:
        return _adapter_states(name, m, lay, t)
    P, N, L = m.params, lay.gpus, m.largest_layer_params or 0
    K = OPTIMIZER_BYTES[t.optimizer]
    p16 = t.value_bytes                # DeepSpeed's model copy: 16-bit in mixed precision
    load_cpu = weight_bytes(t) * P * lay.gpus_per_node * BUFFER_FACTOR  # every rank loads its weights on the host
    if name in ("single", "ddp"):
        # Plain PyTorch AMP: fp32 weights and gradients (4 B each); autocast's 16-bit weight copies (the guide's
        # extra 2 B) live only from the forward to each layer's backward, so gputopo.memory counts them there.
        w = weight_bytes(t)
        return {"weights": w * P, "gradients": w * P, "optimizer": torch_optimizer_bytes(m, t)}, load_cpu, 0
    if name == "zero1":
        return {"weights": p16 * P, "gradients": p16 * P + 4 * P // N, "optimizer": (4 + K) * P // N}, load_cpu, 0
    if name == "zero2":
        # = DeepSpeed's estimate: 2P + 18P/N (16-bit params; 16-bit + fp32 grads, fp32 master + moments /N)
        return {"weights": p16 * P, "gradients": (p16 + 4) * P // N, "optimizer": (4 + K) * P // N}, load_cpu, 0
    if name == "zero2_offload_cpu":
        cpu = P * max(4 * N, 8 + K) * BUFFER_FACTOR  # DeepSpeed: P * max(4 * gpus, 16) * 1.5
        return {"weights": p16 * P, "gradients": 0, "optimizer": 0}, int(cpu), 0
    if name == "fsdp":
        return fsdp_states(m, lay, t), load_cpu, 0
    if name == "fsdp_offload_cpu":
        # the shards, their gradients and the optimizer's states on the host (each rank's, so the node holds them
        # all); on the GPU only the units gathered (fsdp_states') and the running block's gradients (under no_sync
        # every unit's: FSDP offloads gradients only at the sync)
        block, root = fsdp_units(m)
        cpu = (2 * weight_bytes(t) * P + torch_optimizer_bytes(m, t, flat=True)) / lay.nodes
        grads = p16 * (P + block) if accumulates_unsharded(t) else p16 * (root + block)
        return {"weights": p16 * (root + 2 * block), "gradients": grads, "optimizer": 0}, int(cpu), 0
    # ZeRO-3 gathers whole layers: 4 B x the largest layer (16-bit, fetched + prefetched), as DeepSpeed counts.
    gathered = 4 * L
    if name == "zero3":
        # 16-bit param and grad partitions, fp32 grads of the sub-group being stepped, fp32 master + moments.
        # DeepSpeed's estimate (4L + 18P/N) leaves out the 16-bit parameter partition (2P/N).
        sub = min(DS_SUB_GROUP, math.ceil(P / N))
        zero_init_cpu = L * 4 * lay.gpus_per_node * BUFFER_FACTOR
        return ({"weights": gathered + p16 * P // N, "gradients": p16 * P // N + 4 * sub,
                 "optimizer": (4 + K) * P // N}, int(zero_init_cpu), 0)
    if name == "zero3_offload_cpu":
        if t.offload_params:
            return ({"weights": gathered, "gradients": 0, "optimizer": 0},
                    int(P * (8 + K + 2) / lay.nodes * BUFFER_FACTOR), 0)
        return ({"weights": gathered + 2 * P // N, "gradients": 0, "optimizer": 0},
                int(P * (8 + K) / lay.nodes * BUFFER_FACTOR), 0)
    if name == "zero3_offload_nvme":
        # Swapped to NVMe: 16-bit params, fp32 master + moments, fp32 grads. The host keeps pinned swap buffers:
        # 5 parameter buffers of max(1e8, largest layer) and two optimizer sub-groups in flight, per rank.
        nvme = nvme_bytes(m, t, lay.nodes)
        buffers = 5 * max(PARAM_BUFFER, L) * p16 + 2 * NVME_SUB_GROUP * (4 + K + 4)
        if not t.offload_params:   # the 16-bit parameters stay on the GPUs, partitioned: only the optimizer swaps
            return ({"weights": gathered + p16 * P // N, "gradients": 0, "optimizer": 0},
                    int(2 * NVME_SUB_GROUP * (4 + K + 4) * lay.gpus_per_node), nvme - p16 * P // lay.nodes)
        return {"weights": gathered, "gradients": 0, "optimizer": 0}, int(buffers * lay.gpus_per_node), nvme
    raise BadInput(f"unknown strategy {name}")


def _adapter_states(name: str, m: ModelSpec, lay: Layout, t: Training) -> tuple[dict, int, int]:
    """model_states under LoRA/QLoRA: the frozen base (finetune.base_bytes: 16-bit, or NF4 and its unquantized
    rest) without gradients or optimizer states, beside the adapters, which have both. Plain torch keeps the
    adapters in PEFT's dtype (fp32 unless --pure-16bit) and steps them with torch's optimizer; DeepSpeed casts the
    model to 16 bits and keeps an fp32 master of the adapters only, partitioned at stage 1 and up (frozen parameters
    are not partitioned below stage 3: stage_1_and_2.py takes only those with requires_grad); FSDP and ZeRO-3 shard
    base and adapters alike."""
    ft, N = t.finetune, lay.gpus
    A = finetune.trainable(m, ft)
    K, p16 = OPTIMIZER_BYTES[t.optimizer], t.value_bytes
    # QLoRA's unquantized rest: upcast to fp32 by prepare_model_for_kbit_training where TRL and the QLoRA recipe call it
    # (one GPU, DDP); in the 16-bit storage sharding needs (FSDP, ZeRO-3: TRL skips the upcast for a sharded QLoRA)
    # and in DeepSpeed's engine, which casts the model to its 16-bit dtype
    kept = 4 if name in ("single", "ddp") and not t.pure16 else p16
    head = finetune.quantizes_head(t)
    base = finetune.base_bytes(m, ft, p16, kept=kept, head=head)
    a = finetune.adapter_dtype_bytes(t, deepspeed=name not in TORCH_STRATEGIES)
    load_cpu = int(finetune.base_bytes(m, ft, t.value_bytes, head=head) * lay.gpus_per_node * BUFFER_FACTOR)
    opt = int(OPTIMIZER_BYTES[t.optimizer] * A * (1.0 if t.optimizer == "adamw-8bit" else a / 4))
    if name in ("single", "ddp"):
        return {"weights": base + a * A, "gradients": a * A, "optimizer": opt}, load_cpu, 0
    if name in ("fsdp", "fsdp_offload_cpu"):
        block, root = fsdp_units(m)
        base_block, base_root = finetune.unit_bytes(m, ft, base, block, root, kept, head=head)
        unsharded = base_root + 2 * base_block + p16 * finetune.block_adapters(m, ft) * 2
        # A flat parameter's gradient is as large as it: the adapters' own units (use_orig_params=False, PEFT's
        # wrap policy), or with --fsdp-use-orig-params the whole unit, base and adapters, as if nothing were frozen
        # (torch's FSDP docstring: mixing frozen and trainable parameters raises the gradient memory)
        flat, unit = a * A, a * finetune.block_adapters(m, ft)
        if t.fsdp_orig_params:   # the root's flat parameter too where an adapter is in it (a targeted head)
            flat = m.layers * base_block + (base_root if finetune.outside_blocks(m, ft) else 0) + a * A
            unit += base_block
        # the running unit's, before their reduce-scatter; under no_sync every unit's, unsharded
        grads = flat + unit if accumulates_unsharded(t) else unit
        if name == "fsdp":
            return ({"weights": base // N + a * A // N + unsharded,
                     "gradients": grads + (0 if accumulates_unsharded(t) else flat // N), "optimizer": opt // N},
                    load_cpu, 0)
        return {"weights": unsharded, "gradients": grads, "optimizer": 0}, int((base + 2 * a * A + opt) / lay.nodes), 0
    whole = base + p16 * A             # ZeRO-1/2: the frozen base and the 16-bit adapters on every GPU
    if name == "zero1":
        return {"weights": whole, "gradients": p16 * A + 4 * A // N, "optimizer": (4 + K) * A // N}, load_cpu, 0
    if name == "zero2":
        return {"weights": whole, "gradients": (p16 + 4) * A // N, "optimizer": (4 + K) * A // N}, load_cpu, 0
    if name == "zero2_offload_cpu":
        return {"weights": whole, "gradients": 0, "optimizer": 0}, int(A * max(4 * N, 8 + K) * BUFFER_FACTOR), 0
    gathered = 4 * (m.largest_layer_params or 0)
    if name == "zero3":
        sub = min(DS_SUB_GROUP, math.ceil(A / N))
        return ({"weights": gathered + base // N + p16 * A // N, "gradients": p16 * A // N + 4 * sub,
                 "optimizer": (4 + K) * A // N}, load_cpu, 0)
    if name == "zero3_offload_cpu":
        if t.offload_params:
            return ({"weights": gathered, "gradients": 0, "optimizer": 0},
                    int((base + A * (8 + K + 2)) / lay.nodes * BUFFER_FACTOR), 0)
        return ({"weights": gathered + base // N + p16 * A // N, "gradients": 0, "optimizer": 0},
                int(A * (8 + K) / lay.nodes * BUFFER_FACTOR), 0)
    if name == "zero3_offload_nvme":
        nvme = nvme_bytes(m, t, lay.nodes)
        buffers = 5 * max(PARAM_BUFFER, m.largest_layer_params or 0) * p16 + 2 * NVME_SUB_GROUP * (4 + K + 4)
        if not t.offload_params:
            return ({"weights": gathered + base // N + p16 * A // N, "gradients": 0, "optimizer": 0},
                    int(2 * NVME_SUB_GROUP * (4 + K + 4) * lay.gpus_per_node), nvme - base // lay.nodes)
        return {"weights": gathered, "gradients": 0, "optimizer": 0}, int(buffers * lay.gpus_per_node), nvme
    raise BadInput(f"unknown strategy {name}")


def torch_optimizer_bytes(m: ModelSpec, t: Training, flat: bool = False) -> int:
    """The states of a torch optimizer stepping the model's own tensors (one GPU, DDP), or flat 1-D shards (FSDP):
    OPTIMIZER_BYTES per parameter, in the weights' dtype where the states follow it (AdamW, SGD, Adafactor: 16-bit
    with --pure-16bit), 8-bit Adam's whatever the weights. Adafactor as the HF Trainer runs it (no first moment:
    beta1=None) keeps a row and a column per weight matrix (models.factored_elements); flat shards, as DeepSpeed's
    ZeRO and FSDP hand it, cannot be factored: a full second moment, 4 B per parameter."""
    scale = 1.0 if t.optimizer == "adamw-8bit" else weight_bytes(t) / 4
    if t.optimizer == "adafactor" and not flat:
        return int(4 * factored_elements(m) * scale)
    return int(OPTIMIZER_BYTES[t.optimizer] * scale * m.params)


def fsdp_units(m: ModelSpec) -> tuple[int, int]:
    """(parameters of one FSDP unit, of the root unit) when each transformer block is wrapped (accelerate's
    TRANSFORMER_BASED_WRAP, llm-foundry's and torchtitan's wrapping): the root holds the embeddings, the head and
    the final norm."""
    root = (m.vocab_size or 0) * m.hidden_size + m.output_embedding
    return max(0, m.params - root) // max(1, m.layers), root


def fsdp_states(m: ModelSpec, lay: Layout, t: Training) -> dict:
    """PyTorch FSDP FULL_SHARD with mixed precision (torch/distributed/fsdp/api.py): each rank keeps 1/N of the
    fp32 parameters, of the gradients (upcast to full precision after backward) and of the optimizer states.
    Unsharded, in the compute dtype: the root unit from forward to backward (the root does not reshard after
    forward), and at most two blocks at once (the one running and the one prefetched: BACKWARD_PRE, the default,
    and limit_all_gathers) with the running block's gradients before their reduce-scatter."""
    P, N, p16, w = m.params, lay.gpus, t.value_bytes, weight_bytes(t)
    block, root = fsdp_units(m)
    # under no_sync every unit's unsharded gradient stays until the last micro-batch, the running unit's new one
    # beside it before it is added in
    grads = p16 * (P + block) if accumulates_unsharded(t) else w * P // N + p16 * (root + block)
    return {"weights": w * P // N + p16 * (root + 2 * block), "gradients": grads,
            "optimizer": torch_optimizer_bytes(m, t, flat=True) // N}


def accumulates_unsharded(t: Training) -> bool:
    """FSDP accumulating under no_sync, as the HF Trainer, accelerate (unless sync_each_batch) and Lightning's
    no_backward_sync do: each unit keeps its whole, unsharded gradient until the last micro-batch reduce-scatters
    it ("FSDP will accumulate the full model gradients (instead of gradient shards) until the eventual sync":
    torch's FullyShardedDataParallel.no_sync)."""
    return t.grad_accum > 1 and not t.sync_each_batch


def reductions(name: str, t: Training) -> int:
    """How often an optimizer step reduces its gradients: every micro-batch for ZeRO-2 and ZeRO-3 (DeepSpeed's
    engine), and for DDP and FSDP with --sync-each-batch; once, at the last, for ZeRO-1 and under no_sync."""
    if name.startswith(("zero2", "zero3")) or (name.startswith(("ddp", "fsdp")) and t.sync_each_batch):
        return t.grad_accum
    return 1


def nvme_bytes(m: ModelSpec, t: Training, nodes: int = 1) -> int:
    """NVMe space per node for ZeRO-3 NVMe offload: 16-bit params, fp32 master, moments and fp32 grads (of the
    trainable parameters; a frozen base swaps its 16-bit or NF4 weights only)."""
    ft = t.finetune
    if ft.peft:
        base = finetune.base_bytes(m, ft, t.value_bytes, kept=t.value_bytes, head=finetune.quantizes_head(t))
        return (base + (t.value_bytes + 4 + OPTIMIZER_BYTES[t.optimizer] + 4) * finetune.trainable(m, ft)) // nodes
    return (t.value_bytes + 4 + OPTIMIZER_BYTES[t.optimizer] + 4) * m.params // nodes


def length_segments(m, t: Training, pk: dict, name: str, gpus: int) -> int:
    """The caching allocator's segments left from an earlier, shorter step when batches are padded to their longest
    sample (--variable-length). PyTorch's CUDA caching allocator gives a large request (over 10 MB) a segment of its
    own size, rounded to 2 MiB, reuses a cached block only for a request no larger than it, and gives segments back
    only when a cudaMalloc fails or on empty_cache() (docs, "Optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF",
    expandable_segments: "if it runs at size N + 1, then it will have to make new allocations that are slightly
    larger"). So the step that meets the longest batch makes new segments for its length-sized tensors while those
    of the previous longest step, nearly as long, stay reserved: counted once, as the peak phase's bytes that scale
    with the tokens (the same phase at one token taken off). A floor: runs with more such records hold more."""
    one = replace(t, seq_len=1, batch_size=1)
    opt = {"fsdp": 1 / gpus, "fsdp_offload_cpu": 0.0}.get(name)
    small = memory.peak(m, one, one.attention, 0, plain_torch=name in ("single", "ddp"), optimizer_share=opt)
    at_one = {p["phase"]: p["bytes"] for p in small["phases"]}
    return max(0, pk["activations"] + pk["temporaries"] - (at_one[pk["phase"]] if pk["phase"] in at_one else 0))


def _overhead(name: str, m: ModelSpec, t: Training) -> int:
    """CUDA context plus communication buffers."""
    h2, context = m.hidden_size ** 2, t.context_bytes
    if name in ("single", "fsdp", "fsdp_offload_cpu"):   # FSDP's unsharded buffers are counted with its states
        return context
    if name == "ddp":
        # DDP's reducer keeps a flat copy of the gradients (gradient_as_bucket_view=False, the default).
        ft = t.finetune
        grad = finetune.adapter_dtype_bytes(t, deepspeed=False) if ft.peft else weight_bytes(t)
        return context + grad * finetune.trainable(m, ft)
    if name.startswith("zero3"):
        # prefetch bucket 0.9 h^2 and reduce bucket h^2, 16-bit (the sizes the HF Trainer and gputopo write)
        return context + 2 * sum(zero3_buckets(m.hidden_size))
    return context + 2 * 2 * h2  # reduce and all-gather buckets of h^2, 16-bit


def comm_bytes(name: str, m: ModelSpec, lay: Layout, t: Training) -> int:
    """Bytes each GPU sends per optimizer step, all collectives together (comm_split's sum)."""
    return sum(comm_split(name, m, lay, t).values())


def comm_split(name: str, m: ModelSpec, lay: Layout, t: Training) -> dict[str, int]:
    """Bytes each GPU sends per optimizer step, by collective ("all_reduce", "reduce_scatter", "all_gather"),
    counted as ring collectives move them: (n-1)/n of the buffer per pass, an all-reduce two passes.

    ZeRO-1/2 all-reduce their gradient buckets in the 16-bit reduce dtype (DeepSpeed's average_tensor hands
    every bucket to allreduce_and_scatter while use_multi_rank_bucket_allreduce is true, its default, even with
    "reduce_scatter": true; deepspeed/runtime/zero/stage_1_and_2.py), then all-gather the updated parameters:
    3 passes, where DDP (torch AMP) makes 2 in fp32. ZeRO-3 reduce-scatters gradients and all-gathers the
    parameters in forward and again in backward, and once more in the recomputed forward of checkpointing."""
    n = lay.gpus
    if n == 1 or name == "single":
        return {}
    ring = (n - 1) / n
    ft = t.finetune
    P, p16 = finetune.trainable(m, ft), t.value_bytes
    if name == "ddp":
        # One all-reduce (2 passes) of the gradients (fp32 unless --pure-16bit; the adapters' under LoRA: PEFT's
        # dtype); accumulation steps use no_sync.
        grad = finetune.adapter_dtype_bytes(t, deepspeed=False) if ft.peft else weight_bytes(t)
        return {"all_reduce": int(2 * ring * grad * P) * reductions(name, t)}
    gather = int(ring * p16 * P)
    # A frozen base is gathered, never reduced: FSDP and ZeRO-3 gather it (16-bit, or NF4 packed in 16-bit
    # storage) beside the adapters; ZeRO-1/2 keep it whole on every GPU
    frozen = int(ring * finetune.base_bytes(m, ft, p16, kept=p16, head=finetune.quantizes_head(t))) if ft.peft else 0
    if name.startswith("zero1"):
        # Stage 1 keeps whole gradients and reduces them only at the accumulation boundary (DeepSpeed's
        # reduce_ready_partitions_and_remove_grads), then all-gathers the updated parameters: once per step.
        return {"all_reduce": 2 * gather, "all_gather": gather}
    if name.startswith("zero2"):
        # Stage 2 partitions gradients, so it all-reduces on every micro-step; parameters once per step.
        return {"all_reduce": 2 * gather * t.grad_accum, "all_gather": gather}
    if name.startswith("fsdp"):
        # FSDP gathers each unit before its forward and before its backward; a checkpointed block recomputes
        # inside its backward, with the parameters already gathered. Gradients are reduce-scattered in the
        # compute dtype (MixedPrecision's reduce_dtype is param_dtype unless set), at the last micro-batch under
        # no_sync, on every one with --sync-each-batch; with use_orig_params a LoRA unit's whole flat gradient.
        reduced = gather + (frozen if t.fsdp_orig_params else 0)
        return {"reduce_scatter": reduced * reductions(name, t), "all_gather": 2 * (gather + frozen) * t.grad_accum}
    gathers = 3 if t.grad_checkpointing else 2
    return {"reduce_scatter": gather * t.grad_accum, "all_gather": gathers * (gather + frozen) * t.grad_accum}


def strategies(m: ModelSpec, lay: Layout, t: Training) -> list[Strategy]:
    """Every strategy for this model, layout and setup, with its memory, traffic and whether it fits."""
    if lay.gpus < 1:
        raise BadInput("the layout has no GPU: give --gpus N (1 or more)")
    out = []
    for name in STRATEGIES:
        if name == "single" and lay.gpus > 1:
            continue
        if name != "single" and lay.gpus == 1 and name in ("ddp", "zero1", "zero2", "zero3", "fsdp"):
            continue  # sharding over one GPU buys nothing
        states, cpu, nvme = model_states(name, m, lay, t)
        # FSDP gathers 16-bit parameters itself (no autocast copies) and steps torch's optimizer on its shard
        # FSDP steps torch's optimizer on its shard (on the host with CPU offload, where the gradients go too)
        # (FSDP's offload keeps the gradients on the host, but under no_sync only from the sync on)
        offloaded = name == "fsdp_offload_cpu" and not accumulates_unsharded(t)
        share = {"fsdp": 1 / lay.gpus, "fsdp_offload_cpu": 0.0}.get(name)
        pk = memory.peak(m, t, t.attention, 0 if offloaded else states["gradients"],
                         plain_torch=name in ("single", "ddp"), optimizer_share=share)
        # --activation-offload: every rank's checkpointed inputs in its pinned host memory
        cpu += lay.gpus_per_node * memory.offloaded_bytes(m, t, name in ("single", "ddp"), share)
        per = {**states, "activations": pk["activations"], "temporaries": pk["temporaries"],
               "overhead": _overhead(name, m, t)}
        # The gradients are all alive only from the end of backward; the peak phase holds pk["gradients"].
        per["total"] = states["weights"] + states["optimizer"] + per["overhead"] + pk["bytes"]
        comm = comm_bytes(name, m, lay, t)
        # comm_seconds_per_step is gputopo.speed's (report.plan_for fills it): one owner for time.
        reserve = ALLOCATOR_RESERVE_BYTES
        if t.varlen:   # at most what the GPU has left: a cudaMalloc that fails frees the cache and retries
            reserve += min(length_segments(m, t, pk, name, lay.gpus),
                           max(0, lay.gpu_mem_bytes - per["total"] - ALLOCATOR_RESERVE_BYTES))
        st = Strategy(name, per, int(cpu), int(nvme), comm, None, peak=pk,
                      nvidia_smi_bytes=per["total"] + reserve,
                      allocated_bytes=per["total"] - t.context_bytes,
                      reserved_bytes=per["total"] - t.context_bytes + reserve)
        # Within 90 % it fits; up to 100 % it is tight: runs at 96 % have trained (TinyLlama on an RTX 4090,
        # benchmarks/gpu_public.json), but fragmentation may tip them over.
        if per["total"] > lay.gpu_mem_bytes:
            st.short_bytes["gpu"] = int(per["total"] - lay.gpu_mem_bytes)
            st.why_not.append(f"needs {gib(per['total'])} per GPU of {gib(lay.gpu_mem_bytes)}"
                              f" ({gib(st.short_bytes['gpu'])} short)")
        tight = HEADROOM * lay.gpu_mem_bytes < per["total"] <= lay.gpu_mem_bytes
        # Only offload needs the host during training; the others need it to load (reported, not judged).
        if "offload" in name and lay.cpu_mem_bytes is not None and cpu > HEADROOM * lay.cpu_mem_bytes:
            st.short_bytes["cpu"] = int(cpu - HEADROOM * lay.cpu_mem_bytes)
            # short of what training may take: 90 % of the RAM, the rest the OS's and the loader's (GPU memory is
            # short of all of it: 90-100 % is tight, not refused)
            st.why_not.append(f"needs {gib(cpu)} of CPU RAM, above 90 % of {gib(lay.cpu_mem_bytes)}"
                              f" ({gib(st.short_bytes['cpu'])} short of {gib(HEADROOM * lay.cpu_mem_bytes)})")
        if name.startswith("zero") and "offload" in name and t.optimizer not in OFFLOAD_OPTIMIZERS:
            st.why_not.append(f"needs --optimizer adamw (ZeRO-Offload runs DeepSpeed's CPU Adam, not {t.optimizer})")
        if nvme and lay.nvme_free_bytes is not None and nvme > lay.nvme_free_bytes:
            st.short_bytes["nvme"] = int(nvme - lay.nvme_free_bytes)
            st.why_not.append(f"needs {gib(nvme)} on NVMe of {gib(lay.nvme_free_bytes)} free")
        # Another machine's host, not given: it fits if that host holds what offload keeps there.
        held = ([f"{gib(cpu / HEADROOM)} of RAM per node (--cpu-mem SIZE to check)"]
                if "offload" in name and lay.cpu_mem_bytes is None else []) + \
            ([f"{gib(nvme)} free on each node's NVMe (--nvme-free SIZE to check)"]
             if nvme and lay.nvme_free_bytes is None else [])
        st.condition = " and ".join(held) or None
        st.fits = not st.why_not
        st.tight = st.fits and tight
        out.append(st)
    return out


def link_bandwidth(link_type: str | None, gpu_model: str | None) -> tuple[float | None, str]:
    """Per-direction GB/s of a link type when no live probe measured the PCIe generation."""
    from .topology import nvlink_count, nvlink_gbps_per_link
    if link_type is None:
        return None, "unknown"
    n = nvlink_count(link_type)
    if n:
        from .gpus import lookup
        known = lookup(gpu_model) if gpu_model else None   # "RTX-3090" is the catalog's "RTX 3090"
        per = nvlink_gbps_per_link(gpu_model) or (nvlink_gbps_per_link(known.key) if known else None)
        if per:
            return per * n, f"theoretical, {n} x {per:g} GB/s NVLink"
        return ASSUMED_GBPS["NV"] * n, f"assumed {ASSUMED_GBPS['NV']:g} GB/s per NVLink (GPU model unknown)"
    from .datasheets import pcie_gbps, sheet
    gbps, what = pcie_gbps(sheet(gpu_model))
    if gbps:
        return round(gbps, 2), f"{what}, the GPU's host link (datasheet)"
    return ASSUMED_GBPS["PCIE"], "assumed PCIe gen3 x16 (generation unknown)"


def layout_from_topology(topo, names: list[str], gpu_mem: int | None, **rest) -> Layout:
    """The layout of the selected GPUs of a (live or pasted) topology; --gpu-mem fills what a paste lacks."""
    gpus = [topo.gpu(n) for n in names]
    mems = [g.memory_total_bytes for g in gpus if g.memory_total_bytes]
    mem = gpu_mem or (min(mems) if mems else None)
    if mem is None:
        raise BadInput("GPU memory unknown from this topology: give --gpu-mem (e.g. 24GiB)")
    weakest = topo.weakest(names)
    model = next((g.model for g in gpus if g.model), None)
    gbps, basis = (None, "unknown")
    if weakest is not None:
        gbps, basis = topo.bandwidth_gbps(weakest)
        if gbps is None:
            gbps, basis = link_bandwidth(weakest.type, model)
    return Layout(gpus_per_node=len(names), gpu_mem_bytes=mem, gpu_model=model,
                  link_type=weakest.type if weakest else None, link_gbps=gbps, link_basis=basis, **rest)
