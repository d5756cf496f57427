"""Options -> one planning request: the defaults and the rules that tie options together, in one place.

plan, inspect --model and deepspeed-config (with or without --auto) go through here, so the same flags give
the same model, layout and training everywhere (bench-nvlink asks `precision` for its own). The CLI only reads
options and renders; values arrive already checked one by one (sizes, counts, bandwidths, GPU models), and
what is checked here is how they relate:
- bf16 needs an Ampere or newer GPU;
- --global-batch = micro-batch x accumulation x GPUs per node x nodes, exactly; given or derived, at most
  MOST_COUNT;
- an explicit --cpu-mem / --nvme-free wins over what is measured on this machine (gputopo.nvme owns the folder);
  GPUs described (--gpus with --gpu-model/--gpu-mem, an example, a paste) inherit nothing of this host: their
  RAM, cores and NVMe are what the options say, else unknown;
- the link between described GPUs: --link, else what the GPU model's usual box has (usual_link): NVSwitch for
  parts sold only on SXM boards, PCIe for cards, and for parts sold both ways the SXM board, with the plan on
  PCIe cards priced beside it (Request.other_link);
- --seq-len fits the model's positions; --gpu-mem agrees with --gpu-model, or gets a note.
Options arrive in three groups (what model, how it trains, on what hardware), as the CLI's option groups.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace

from . import gpus as catalog
from . import nvme
from .errors import BadInput, NvmlUnavailable, exclusive
from .models import ModelSpec
from .plan import Layout, Training, layout_from_topology, link_bandwidth
from .topology import link_type, nvlink_count
from .units import MOST_COUNT, gib

DEFAULT_SEQ_CAP = 1024      # --seq-len default: the model's context, at most this
DEFAULT_MICRO = 4           # --batch-size where nothing is searched (deepspeed-config without --auto)
INTER_NODE_GBPS = 12.5      # --inter-node-gbps default: 100 Gb/s Ethernet or EDR InfiniBand, per direction
MEM_AGREES = 0.10           # --gpu-mem within 10 % of the catalog's size for --gpu-model agrees with it
# The link between GPUs described without --link: what the model's usual box has. Parts sold only on NVSwitch
# baseboards (HGX B200, GB200 NVL72) have every pair joined by all their NVLinks; data-center parts sold both on SXM
# boards (HGX/DGX: NVSwitch, every pair joined by the GPU's NVLinks) and as PCIe cards (bridged pairs at most) are
# planned on the SXM board and priced on PCIe beside it (SXM_OR_PCIE); every other card talks over PCIe.
NVSWITCH_ONLY = {"B200": "NV18", "GB200": "NV18"}
SXM_OR_PCIE = {"P100": "NV4", "V100": "NV6", "A100": "NV12", "A800": "NV8", "H100": "NV18", "H800": "NV8",
               "H200": "NV18", "H20": "NV18", "GH200": "NV18"}
PCIE_LINK = "PHB"   # PCIe under one CPU: what a card's box has unless told (NODE/SYS: two sockets)


@dataclass(frozen=True)
class ModelAsk:
    """Which model: --model NAME|PATH, or --params with its shape."""
    model: str | None = None
    params: str | None = None
    hidden_size: int | None = None
    layers: int | None = None
    vocab_size: int | None = None


@dataclass(frozen=True)
class TrainingAsk:
    """How it trains, as the options give it (None: the default)."""
    precision: str | None = None
    optimizer: str = "adamw"
    batch_size: int | None = None
    seq_len: int | None = None
    grad_accum: int | None = None
    global_batch: int | None = None
    grad_checkpointing: bool | None = None
    attention: str | None = None
    flash_attention: bool = False
    offload_params: bool | None = None
    kernels: str | None = None
    loss: str | None = None
    selective_checkpointing: bool = False
    pure_16bit: bool = False
    variable_length: bool = False  # batches padded to their longest sample, lengths varying step to step
    steps: int | None = None       # optimizer steps of the whole run (its time; the launch's --max_steps)
    cuda_module_loading: str | None = None   # lazy or eager: the CUDA context's size
    optimizer_impl: str | None = None        # foreach, for-loop or fused: torch's optimizer implementation
    zero_grad: str | None = None             # none or zeros: what zero_grad() leaves between steps
    sync_each_batch: bool | None = None      # accumulation reduces every micro-batch (no no_sync)
    fsdp_use_orig_params: bool | None = None  # FSDP units mix the frozen base and the adapters (LoRA)
    bnb_keeps_input: bool | None = None      # bitsandbytes < 0.43.2: each 4-bit matmul keeps its input (QLoRA)
    non_reentrant_checkpointing: bool | None = None   # torch.utils.checkpoint(use_reentrant=False)
    loop_keeps_graph: bool | None = None     # the loop names the last micro-batch's output into the next forward
    activation_offload: bool | None = None   # torchtune's OffloadActivations: saved tensors to pinned host memory
    quantizer: str | None = None             # transformers or lightning: what quantized QLoRA's base
    finetune: str | None = None              # full, lora or qlora: what is trained (gputopo.finetune)
    lora_rank: int | None = None
    lora_targets: tuple | None = None
    lora_dropout: float | None = None


@dataclass(frozen=True)
class HardwareAsk:
    """On what: the GPUs per node (or this machine's) and each node's host."""
    gpus: int | None = None
    gpu_mem: int | None = None
    gpu_model: object = None  # a gpus.GpuModel or a name
    link: str | None = None
    nodes: int = 1
    inter_node_gbps: float | None = None  # None: INTER_NODE_GBPS
    cpu_mem: int | None = None
    cpu_cores: int | None = None
    nvme_path: str | None = None
    nvme_free: int | None = None


def split(options: dict) -> tuple[ModelAsk, TrainingAsk, HardwareAsk]:
    """The CLI's options (by click name) as the three groups; an option no group knows is a programming error."""
    groups = (ModelAsk, TrainingAsk, HardwareAsk)
    known = {f.name: g for g in groups for f in fields(g)}
    unknown = set(options) - set(known)
    if unknown:
        raise TypeError(f"options no request group knows: {', '.join(sorted(unknown))}")
    return tuple(g(**{k: v for k, v in options.items() if known[k] is g and v is not None}) for g in groups)


@dataclass(frozen=True)
class Request:
    """What a command plans for: the model (None when not given), the layout (None when not needed), the
    training setup with every default filled, and notes saying where each default came from."""
    model: ModelSpec | None
    layout: Layout | None
    training: Training
    gpus_per_node: int
    nodes: int
    global_batch: int | None = None
    defaults: dict = field(default_factory=dict)   # option -> the note saying how its default was chosen
    notes_: tuple[str, ...] = ()                     # remarks that are not defaults (a disagreeing folder)
    gpus_assumed: bool = False                       # no --gpus and no GPU here: 1 per node, a guess
    searchable: frozenset = frozenset()              # gputopo.search's knobs the user left open (a plan only)
    elsewhere: bool = False                          # GPUs described (--gpus --gpu-model/--gpu-mem, a paste)
    steps: int | None = None                         # --steps: the whole run, in optimizer steps
    other_link: str | None = None                    # the link also priced: --link not given, the GPU model sold
                                                     # both on SXM boards and as PCIe cards (gputopo.search)

    @property
    def notes(self) -> tuple[str, ...]:
        return tuple(self.defaults.values()) + self.notes_

    @property
    def world(self) -> int:
        return self.gpus_per_node * self.nodes


def gpu_model_of(name) -> catalog.GpuModel | None:
    """A --gpu-model value (already a GpuModel from the CLI, or a name) as a catalog entry; unknown is refused."""
    if name is None or isinstance(name, catalog.GpuModel):
        return name
    try:
        return catalog.known(str(name))
    except ValueError as e:
        raise BadInput(f"--gpu-model {e}") from None


def precision(chosen: str | None, gpu_model: str | None, device: str = "cuda") -> tuple[str, str | None]:
    """(precision, note): the user's choice checked against the GPU, else the default for it.

    bf16 needs Ampere or newer (compute capability 8.0); older GPUs train in fp16, the CPU twin in fp32."""
    amp = catalog.supports_bf16(str(gpu_model)) if gpu_model else None
    if chosen == "bf16" and amp is False:
        raise BadInput(f"--precision bf16 needs an Ampere or newer GPU; {gpu_model} is older: use --precision fp16")
    if chosen == "tf32" and amp is False:   # TF32 came with Ampere's tensor cores, as bf16 did
        raise BadInput(f"--precision tf32 needs an Ampere or newer GPU; {gpu_model} is older: use --precision fp32")
    if chosen == "fp32" and amp:
        return chosen, (f"precision fp32: true fp32 matmuls; on {gpu_model} many stacks run them in TF32 (the HF"
                        " Trainer's --tf32, NGC containers; torch 1.7-1.11 by default): --precision tf32 plans that")
    if chosen:
        return chosen, None
    if device == "cpu":
        return "fp32", "precision fp32 (the CPU twin); --precision to change"
    if amp is False:
        return "fp16", f"precision fp16: {gpu_model} has no bf16 (older than Ampere)"
    return "bf16", ("precision bf16: " + (f"{gpu_model} is Ampere or newer" if amp else "GPU model unknown, assumed"
                                          " Ampere or newer (--precision fp16 for older GPUs)"))


def first_micro(micro: int | None, accum: int | None, global_batch: int | None, world: int) -> int:
    """--batch-size, else DEFAULT_MICRO or the largest power of two below it that --global-batch, and the bound on
    the global batch (bounded), allow (the plan's search then tries the others)."""
    if micro:
        return micro
    if global_batch and accum:
        if global_batch % (accum * world):
            raise BadInput(f"--global-batch {global_batch} is not a multiple of --grad-accum x GPUs ({accum} x {world}"
                           f" = {accum * world}): try {max(1, global_batch // (accum * world)) * accum * world}")
        return global_batch // (accum * world)
    if global_batch is None:   # the largest within the bound; past it at 1, bounded() names the product
        return next((b for b in (DEFAULT_MICRO, 2) if b * (accum or 1) * world <= MOST_COUNT), 1)
    fits = [b for b in (DEFAULT_MICRO, 2, 1) if global_batch % (b * world) == 0]
    if not fits and global_batch % world:   # no micro-batch can make it: the GPUs do not divide it
        near = " or ".join(str(x) for x in (global_batch // world * world, (global_batch // world + 1) * world)
                           if 0 < x <= MOST_COUNT)   # a value --global-batch takes
        raise BadInput(f"--global-batch {global_batch} is not a multiple of the {world} GPUs: try {near}")
    return fits[0] if fits else DEFAULT_MICRO


def accumulation(micro: int, accum: int | None, global_batch: int | None, world: int) -> int:
    """Gradient accumulation steps such that global = micro x accum x world exactly, or a one-line refusal."""
    if global_batch is None:
        return accum or 1
    per_step = micro * world
    if accum is not None:
        if micro * accum * world != global_batch:
            raise BadInput(f"--global-batch {global_batch} is not --batch-size x --grad-accum x GPUs"
                           f" ({micro} x {accum} x {world} = {micro * accum * world})")
        return accum
    if global_batch % per_step:
        lo, hi = global_batch // per_step * per_step, (global_batch // per_step + 1) * per_step
        near = " or ".join(str(x) for x in (lo, hi) if 0 < x <= MOST_COUNT)   # a value --global-batch takes
        raise BadInput(f"--global-batch {global_batch} is not a multiple of --batch-size x GPUs"
                       f" ({micro} x {world} = {per_step}): try {near}")
    return global_batch // per_step


def bounded(micro: int, accum: int, per_node: int, nodes: int) -> int:
    """The global batch micro-batch x accumulation x GPUs per node x nodes, held to MOST_COUNT (what a count may
    be: docs/options.md#limits), or a one-line refusal naming the product."""
    product = micro * accum * per_node * nodes
    if product > MOST_COUNT:
        raise BadInput(f"the global batch, micro-batch x accumulation x GPUs per node x nodes = {micro} x {accum} x"
                       f" {per_node} x {nodes} = {product}, is above {MOST_COUNT}, the most a count may be:"
                       " lower one of them")
    return product


def _live(gpus: int | None):
    """This machine's topology and the first --gpus of its GPUs, or (None, reason)."""
    from . import probe
    try:
        topo = probe.topology()
    except NvmlUnavailable as e:
        return None, None, str(e)
    names = [g.name for g in topo.gpus]
    if gpus and gpus > len(names):
        raise BadInput(f"--gpus {gpus}: this machine has {len(names)} GPU(s); give --gpu-mem (or --gpu-model) to plan"
                       " for another machine")
    return topo, names[: gpus or None], None


def _catalog_mem(gpu_model: catalog.GpuModel | None, notes: dict, why: str) -> int | None:
    if gpu_model is None or not gpu_model.memory_bytes:
        return None
    notes["gpu_mem"] = f"GPU memory {gib(gpu_model.memory_bytes)} from {why} {gpu_model} ({gpu_model.memory_basis})"
    return gpu_model.memory_bytes


def _mem_note(gpu_mem: int, gpu_model: catalog.GpuModel, notes: dict) -> None:
    """--gpu-mem that matches no size --gpu-model is sold in: used as given, with a note (a MIG slice, a typo)."""
    sizes = [gpu_model.memory_bytes] if gpu_model.memory_bytes else [v * 2 ** 30 for v in gpu_model.variants]
    sizes += [v * 2 ** 30 for v in catalog.ALSO_SOLD.get(gpu_model.key, ())]
    if all(abs(gpu_mem - s) > MEM_AGREES * s for s in sizes):
        sold = " or ".join(f"{v}GB" for v in gpu_model.variants)
        notes["gpu_mem_model"] = (f"--gpu-mem {gib(gpu_mem)} is used, but {gpu_model.key} is sold as {sold}:"
                                  " check --gpu-model (a MIG slice or a smaller card?)")


def _variants(gm: catalog.GpuModel) -> BadInput:
    """A GPU model sold in several memory sizes, named without one: which to name."""
    example = f"{gm.key}-{gm.variants[-1]}GB"
    return BadInput(f"--gpu-model {gm}: {gm.key} is sold as {' or '.join(f'{s}GB' for s in gm.variants)}: name one"
                    f" (e.g. --gpu-model {repr(example) if ' ' in example else example}) or give --gpu-mem")


def _given_gpus(hw: HardwareAsk, gm: catalog.GpuModel | None, host_facts: dict, notes: dict) -> Layout:
    """--gpus with --gpu-mem and/or --gpu-model: GPUs described, not probed."""
    mem = hw.gpu_mem if hw.gpu_mem is not None else _catalog_mem(gm, notes, "--gpu-model")
    if mem is None:
        raise _variants(gm)
    if gm is not None and hw.gpu_mem is not None:
        _mem_note(hw.gpu_mem, gm, notes)
    name = str(gm) if gm else None
    link = _link(hw.link)
    if link and hw.gpus == 1:
        raise BadInput(f"--link {link} describes the link between GPUs; --gpus 1 has none")
    has = _nvlinks_beyond(link, gm)
    if has:
        raise BadInput(f"--link {link}: {has}")
    if link is None and hw.gpus > 1 and gm is not None:
        link = usual_link(gm, hw.gpus, notes)
    gbps, basis = link_bandwidth(link, name) if link else (None, "unknown")
    return Layout(gpus_per_node=hw.gpus, gpu_mem_bytes=mem, gpu_model=name, link_type=link, link_gbps=gbps,
                  link_basis=basis, **host_facts)


def usual_link(gm: catalog.GpuModel, gpus: int, notes: dict) -> str:
    """The weakest link of `gpus` GPUs of this model in its usual box, with a note saying so (notes["link"]); for a
    part sold both on SXM boards and as PCIe cards, the SXM board's, and notes["_other_link"] the PCIe cards' link
    that the plan prices beside it (gputopo.search says what each gives)."""
    pcie = f"{PCIE_LINK} (NODE or SYS for GPUs on two sockets, PIX/PXB behind a PCIe switch)"
    if gm.key in NVSWITCH_ONLY:
        link = NVSWITCH_ONLY[gm.key]
        notes["link"] = (f"link {link} assumed: {gm.key} is sold on NVSwitch boards, every pair joined by {link}"
                         " (--link to change)")
        return link
    if gm.key in SXM_OR_PCIE:
        link = SXM_OR_PCIE[gm.key]
        notes["link"] = (f"link {link} assumed: {gm.key} on an SXM board (HGX/DGX), NVSwitch joining every pair;"
                         f" as PCIe cards (--link {PCIE_LINK}) the plan differs (--link to say which)")
        notes["_other_link"] = PCIE_LINK
        return link
    has = catalog.max_nvlinks(gm.key)
    why = (f"{gm.key} has no NVLink" if has == 0 else
           f"{gm.key} joins at most two cards with an NVLink bridge and most boxes have none"
           + (f" (--link NV{has} for a bridged pair)" if gpus == 2 else "") if has else
           f"gputopo knows of no NVLink on {gm.key}")
    notes["link"] = f"link {PCIE_LINK} assumed: {why}, so its GPUs talk over PCIe, under one CPU (--link {pcie})"
    return PCIE_LINK


def _nvlinks_beyond(link: str | None, gm: catalog.GpuModel | None) -> str | None:
    """What the GPU model has when `link` has more NVLinks than that (an RTX 4090 has none), else None: one rule
    for --link and for a topology's links (a paste of NV12 planned with --gpu-model "RTX 4090")."""
    cap = catalog.max_nvlinks(str(gm)) if gm else None
    n = nvlink_count(link) if link else None
    if n and cap is not None and n > cap:
        return f"{gm.key} has {cap} NVLinks" if cap else f"{gm.key} has no NVLink"
    return None


def _link(text: str | None) -> str | None:
    try:
        return link_type(text) if text else None
    except ValueError as e:
        raise BadInput(f"--link {e}") from None


def _described(hw: HardwareAsk, gm, topology) -> bool:
    """GPUs described by --gpus with --gpu-mem/--gpu-model, or read from a paste: another machine's, whose host
    this one's RAM, cores and disk do not describe (a topology probed here is this machine's)."""
    if topology is not None:
        return topology.source == "file"
    return hw.gpus is not None and (hw.gpu_mem is not None or gm is not None)


def _layout(hw: HardwareAsk, gm, host: dict, topology, selected, notes: dict) -> Layout:
    """The GPUs planned for: a given topology, else --gpus with --gpu-mem/--gpu-model, else this machine."""
    if hw.inter_node_gbps is not None and hw.nodes == 1:
        raise BadInput("--inter-node-gbps is the network between nodes; with --nodes 1 there is none")
    host_facts = dict(nodes=hw.nodes, inter_node_gbps=hw.inter_node_gbps or INTER_NODE_GBPS, **host)
    if hw.nodes > 1 and hw.inter_node_gbps is None:   # it sets the pace of every collective between nodes: said
        notes["inter_node_gbps"] = (f"network between nodes: {INTER_NODE_GBPS:g} GB/s per direction assumed (100 Gb/s"
                                    " InfiniBand or Ethernet; 3.2Tb/s for 8 x 400G NICs) (--inter-node-gbps to change)")
    if topology is None and _described(hw, gm, topology):
        return _given_gpus(hw, gm, host_facts, notes)
    if topology is None:
        topology, selected, reason = _live(hw.gpus)
        if topology is None:
            raise BadInput(f"no GPU visible here ({reason}): give --gpus N and --gpu-mem SIZE (or --gpu-model)")
    if hw.link:
        raise BadInput("--link describes GPUs given by --gpus and --gpu-mem; this topology has its own links")
    widest = max(topology.gpu_links(selected), key=lambda lk: lk.nvlinks, default=None)
    has = _nvlinks_beyond(widest.type, gm) if widest else None
    if has:
        raise BadInput(f"--gpu-model {gm}: {has}, but the topology shows {widest.type} between {widest.a} and"
                       f" {widest.b}: check --gpu-model")
    mem = hw.gpu_mem
    named = _named_model(topology, selected)
    if mem is not None and catalog.lookup(named):
        _mem_note(mem, catalog.lookup(named), notes)  # --gpu-mem over what the topology's GPUs are sold with
    if mem is None and not any(topology.gpu(n).memory_total_bytes for n in selected):
        # A paste rarely says how much memory: the GPU model (the paste's, else --gpu-model) does.
        model = catalog.lookup(named) if named else gm
        if gm is not None and model is not None and gm.key == model.key and gm.memory_bytes:
            model = gm   # the paste names an RTX 3080, --gpu-model says which: RTX3080-12GB
        mem = _catalog_mem(model, notes, "the GPU model")
        if mem is None and model is not None and model.variants:   # "A100": 40GB or 80GB
            raise _variants(gm) if gm is not None else BadInput(
                f"GPU memory unknown: the paste names {named}, sold as"
                f" {' or '.join(f'{v}GB' for v in model.variants)}: give --gpu-mem")
        if mem is None and model is None:   # the model gives the memory and the step times; a size only the memory
            raise BadInput("GPU memory unknown: the topology names no GPU model: give --gpu-model NAME (its memory,"
                           " and step times from its datasheet) or --gpu-mem SIZE (the memory alone)")
    return layout_from_topology(topology, selected, mem, **host_facts)


def _assumed_cores(layout: Layout, notes: dict) -> Layout:
    """A described machine's CPU cores per node, not given: assumed for its class (datasheets.host_cores: a DGX's
    share for SXM boards, else a workstation's), said with the range the step is then given over."""
    from .datasheets import host_cores
    cores, span, what = host_cores(layout.gpu_model, layout.gpu_mem_bytes, layout.gpus_per_node, layout.link_type)
    notes["cpu_cores"] = (f"{cores} CPU cores: per node, assumed (not given): {what}; the offload rows' step is"
                          f" given at {span[0]} and {span[1]} too (--cpu-cores N to change)")
    return replace(layout, cpu_cores=cores, cpu_cores_range=span)


def _host(hw: HardwareAsk, notes: dict, elsewhere: bool = False) -> dict:
    """Each node's CPU RAM, cores and NVMe free space: given, else measured here (gputopo.nvme owns the folder).
    GPUs described rather than seen (`elsewhere`) inherit nothing of this machine: their RAM, cores and NVMe free
    are unknown (None) unless the options give them, and the plan says what offload would need there."""
    cpu, cores = hw.cpu_mem, hw.cpu_cores
    if elsewhere:
        if cpu is None:
            notes["cpu_mem"] = ("CPU RAM per node not given: the machine planned is not this one, so each offload row"
                                " says the RAM it needs (--cpu-mem SIZE to check)")
        if hw.nvme_path is None and hw.nvme_free is None:
            return {"cpu_mem_bytes": cpu, "nvme_free_bytes": None, "cpu_cores": cores}
    else:
        from . import probe
        if cpu is None:
            cpu = probe.host()["ram_total_bytes"]
            notes["cpu_mem"] = f"CPU RAM: {gib(cpu)} per node, this machine's (--cpu-mem to change)"
        if cores is None:
            cores = probe.host()["cpus_physical"] or os.cpu_count() or 1
            notes["cpu_cores"] = f"CPU cores: {cores} per node, this machine's (--cpu-cores to change)"
    free, nvme_notes = nvme.free_space(hw.nvme_path, hw.nvme_free)
    notes.update(nvme_notes)
    return {"cpu_mem_bytes": cpu, "nvme_free_bytes": free, "cpu_cores": cores}


def _attention(spec: ModelSpec | None, attention: str | None, flash: bool, notes: dict) -> str:
    """--attention (--flash-attention is its old spelling of sdpa); auto is what transformers picks for the
    architecture (sdpa where its class supports it), so the plan matches a training script that does not ask."""
    from .memory import resolve_attention
    if flash:
        if attention not in (None, "sdpa"):
            raise BadInput(f"--flash-attention means --attention sdpa; it contradicts --attention {attention}")
        attention = "sdpa"
    if spec is None:
        return attention or "auto"
    if attention == "sdpa" and not spec.sdpa:
        raise BadInput(f"--attention sdpa: transformers runs {spec.name} with eager attention only (its class does"
                       " not support SDPA)")
    if attention in (None, "auto"):
        attention = resolve_attention(spec, "auto")
        notes["attention"] = (f"attention {attention}: what transformers picks for this architecture"
                              " (--attention eager|sdpa to change)")
    return attention


def _optimizer_impl(optimizer: str, impl: str | None) -> str | None:
    """--optimizer-impl, for the optimizers torch implements three ways (AdamW, SGD: fused since torch 2.3); None:
    torch's default for the device."""
    if impl is None:
        return None
    if optimizer not in ("adamw", "sgd"):
        raise BadInput(f"--optimizer-impl is torch's (AdamW, SGD): --optimizer {optimizer} has one implementation"
                       " (transformers' Adafactor and bitsandbytes' 8-bit Adam step tensor by tensor)")
    return impl


def _loss(kernels: str | None, loss: str | None, notes: dict) -> str:
    """--loss, else what the kernels run: a fused stack computes the loss in its own kernel (16-bit logits, the
    gradient written in place, as flash-attn's cross-entropy and torch.compile do), transformers on an fp32 copy."""
    if loss:
        return loss
    if kernels == "fused":
        notes["loss"] = "loss fused: the cross-entropy of a fused stack (--loss hf|chunked to change)"
        return "fused"
    return "hf"


def _seq_len(spec: ModelSpec | None, seq_len: int | None, notes: dict) -> int:
    """--seq-len, else the model's context capped at DEFAULT_SEQ_CAP; beyond a learned position table refused."""
    if spec is None:
        return seq_len or DEFAULT_SEQ_CAP
    if seq_len is None:
        seq = min(spec.max_positions or 512, DEFAULT_SEQ_CAP)  # 512: T5's relative positions were trained on it
        why = (f"the model's context, at most {DEFAULT_SEQ_CAP}" if spec.max_positions else
               "T5's relative positions were trained on 512" if spec.family == "t5" else
               "the model names no context length, so 512 is assumed")
        notes["seq_len"] = f"sequence length {seq}: {why} (--seq-len to change)"
        return seq
    if not spec.max_positions or seq_len <= spec.max_positions:
        return seq_len
    if not spec.rotary:
        raise BadInput(f"--seq-len {seq_len}: {spec.name} has {spec.max_positions} learned positions; a longer"
                       " sequence has no position embedding (index error in training)")
    notes["seq_len_rotary"] = (f"--seq-len {seq_len} is beyond {spec.name}'s {spec.max_positions} trained"
                               " positions: rotary positions run, but quality needs RoPE scaling or fine-tuning")
    return seq_len


def _per_node(hw: HardwareAsk, topology, selected, global_batch, notes: dict) -> tuple[int, bool, object, list]:
    """GPUs per node without a layout (deepspeed-config): --gpus, else this machine's, else 1 (assumed)."""
    if hw.gpus is not None:
        return hw.gpus, False, topology, selected
    if topology is None:
        topology, selected, _ = _live(None)
    if topology is None:
        if global_batch is not None:
            raise BadInput(f"--global-batch {global_batch} needs --gpus N (no GPU visible here to count)")
        return 1, True, None, []
    notes["gpus"] = f"GPUs per node: {len(selected)} (this machine's; --gpus to change)"
    return len(selected), False, topology, selected


def _named_model(topology, selected) -> str | None:
    """The GPU model the topology names for the selected GPUs (None: no topology, or it names none)."""
    return topology.model_of(selected) if topology is not None else None


def resolve(model: ModelAsk = ModelAsk(), training: TrainingAsk = TrainingAsk(),
            hardware: HardwareAsk = HardwareAsk(), *, need_model: bool = True, need_layout: bool = True,
            topology=None, selected=None) -> Request:
    """The three option groups -> a Request with every default filled and every rule checked.

    topology/selected: a pasted or bundled topology to plan on (inspect); else --gpus/--gpu-mem/--gpu-model
    describe the GPUs, else this machine's are probed. need_layout=False (deepspeed-config without --auto)
    needs only the number of GPUs; its notes then leave out what only the plan reads."""
    from . import finetune, models
    m, t, hw = model, training, hardware
    exclusive(model=m.model, params=m.params)
    if m.model and (m.hidden_size or m.layers or m.vocab_size):
        raise BadInput("--hidden-size, --layers and --vocab-size describe a --params model; --model brings its own")
    notes: dict = {}
    gm = gpu_model_of(hw.gpu_model)
    layout, assumed, elsewhere = None, False, _described(hw, gm, topology)
    if need_layout:  # before the model: a missing --gpus/--gpu-mem is refused before transformers loads
        layout = _layout(hw, gm, _host(hw, notes, elsewhere), topology, selected, notes)
        per_node, gpu_name = layout.gpus_per_node, layout.gpu_model
        if layout.cpu_cores is None:   # a described machine: its host assumed for its class, and said
            layout = _assumed_cores(layout, notes)
    else:
        per_node, assumed, topology, selected = _per_node(hw, topology, selected, t.global_batch, notes)
        gpu_name = str(gm) if gm else _named_model(topology, selected)
    spec = models.resolve(m.model, m.params, m.hidden_size, m.layers, m.vocab_size) \
        if need_model or m.model or m.params else None
    if spec is not None and spec.defaulted:   # the model planned is then transformers' guess, not the user's
        notes["model_defaulted"] = (f"{spec.name}/config.json does not give {', '.join(spec.defaulted)}: these are"
                                    f" transformers' defaults for {spec.model_type or spec.family}, planned as given")
    chosen, note = precision(t.precision, gpu_name)
    if note:
        notes["precision"] = note
    tf32 = chosen == "tf32"   # fp32 everywhere but the matmuls' math mode
    chosen = "fp32" if tf32 else chosen
    if t.selective_checkpointing and t.grad_checkpointing:
        raise BadInput("--selective-checkpointing recomputes part of what --grad-checkpointing recomputes whole:"
                       " give one")
    if t.pure_16bit and chosen == "fp32":
        raise BadInput(f"--pure-16bit keeps the weights in 16 bits; --precision {'tf32' if tf32 else 'fp32'} has"
                       " none: give --precision bf16 (or fp16)")
    if t.loss and spec is not None and not spec.vocab_size:
        raise BadInput(f"--loss {t.loss} is the loss over the logits; {spec.name} has no vocabulary to make them:"
                       " give --vocab-size")
    ft = finetune.resolve(spec, t.finetune or "full", t.lora_rank, t.lora_targets, t.lora_dropout, notes) \
        if spec is not None else finetune.checked(t.finetune, t.lora_rank, t.lora_targets, t.lora_dropout)
    if t.pure_16bit:
        notes["pure_16bit"] = ("--pure-16bit: single, ddp and fsdp keep 16-bit weights and optimizer states;"
                               " DeepSpeed's rows keep their own fp32 master copy, as DeepSpeed does")
    plan_notes: dict = {}  # what only the memory plan reads: said only when a plan is made
    world = per_node * hw.nodes
    micro = first_micro(t.batch_size, t.grad_accum, t.global_batch, world)
    accum = accumulation(micro, t.grad_accum, t.global_batch, world)
    bounded(micro, accum, per_node, hw.nodes)
    _stack(t, ft, world, accum, plan_notes)
    # What plan's search may change: what the user did not pin (gputopo.search); a config without --auto has none.
    open_ = {"batch_size": t.batch_size is None and not (t.global_batch and t.grad_accum),
             "offload_params": t.offload_params is None,
             "grad_checkpointing": t.grad_checkpointing is None and not t.selective_checkpointing}
    searchable = frozenset(k for k, v in open_.items() if v) if need_layout and spec is not None else frozenset()
    training_ = Training(precision=chosen, optimizer=t.optimizer, batch_size=micro,
                         seq_len=_seq_len(spec, t.seq_len, plan_notes), grad_checkpointing=bool(t.grad_checkpointing),
                         grad_accum=accum,
                         attention=_attention(spec, t.attention, t.flash_attention, plan_notes),
                         offload_params=t.offload_params is not False, kernels=t.kernels or "hf",
                         selective=t.selective_checkpointing, pure16=t.pure_16bit, varlen=t.variable_length,
                         loss=_loss(t.kernels, t.loss, plan_notes), cuda_loading=t.cuda_module_loading or "lazy",
                         optimizer_impl=_optimizer_impl(t.optimizer, t.optimizer_impl),
                         zero_grad=t.zero_grad or "none", finetune=ft, tf32=tf32,
                         sync_each_batch=bool(t.sync_each_batch), fsdp_orig_params=bool(t.fsdp_use_orig_params),
                         bnb_keeps_input=bool(t.bnb_keeps_input), quantizer=t.quantizer or "transformers",
                         non_reentrant=bool(t.non_reentrant_checkpointing), keeps_graph=bool(t.loop_keeps_graph),
                         act_offload=bool(t.activation_offload))
    notes.update(plan_notes if need_layout else {})
    other_link = notes.pop("_other_link", None)
    remarks = tuple(notes.pop(k) for k in [k for k in notes if k in ("nvme_disagrees", "gpu_mem_model",
                                                                     "seq_len_rotary")])
    return Request(spec, layout, training_, per_node, hw.nodes, t.global_batch, notes, remarks, gpus_assumed=assumed,
                   searchable=searchable, elsewhere=elsewhere, steps=t.steps, other_link=other_link)


def _stack(t: TrainingAsk, ft, world: int, accum: int, notes: dict) -> None:
    """The options that describe the training stack's own ways, refused where there is nothing of the kind to
    change: how GPUs reduce and hold gradients (--sync-each-batch, --fsdp-use-orig-params; the no_sync assumed
    said), how QLoRA's base was quantized (--bnb-keeps-input, --quantizer)."""
    given = [f"--{k.replace('_', '-')}" for k in ("sync_each_batch", "fsdp_use_orig_params") if getattr(t, k)]
    if given and world == 1:
        raise BadInput(f"{' and '.join(given)} describe{'s' if len(given) == 1 else ''} how GPUs share gradients;"
                       " one GPU shares none: plan for two or more, or drop it")
    if t.fsdp_use_orig_params and not ft.peft:
        raise BadInput("--fsdp-use-orig-params changes what FSDP keeps for a frozen base; full fine-tuning freezes"
                       " nothing: give --finetune lora|qlora, or drop it")
    searched = t.global_batch and t.batch_size is None and not t.grad_accum   # plan's search sets the accumulation
    if t.sync_each_batch and accum == 1 and not searched:
        raise BadInput("--sync-each-batch changes how an accumulation reduces its gradients; nothing accumulates"
                       " here (accumulation 1): give --grad-accum N (2 or more), or a --global-batch above micro-batch"
                       " x GPUs, or drop it")
    _stack_notes(t, world, accum, notes)
    for flag, given in (("--bnb-keeps-input", t.bnb_keeps_input), (f"--quantizer {t.quantizer}", t.quantizer)):
        if given and not ft.quantized:
            raise BadInput(f"{flag} describes how QLoRA's base is quantized; --finetune {ft.mode} quantizes"
                           " nothing: give --finetune qlora, or drop it")
    _graph_options(t, ft)


def _graph_options(t: TrainingAsk, ft) -> None:
    """--non-reentrant-checkpointing and --loop-keeps-graph, refused where they change nothing the plan prices:
    the only tensor non-reentrant checkpointing keeps that reentrant does not is one a custom Function stores on
    its ctx (old bitsandbytes' 4-bit matmul input, --bnb-keeps-input); the previous micro-batch's graph is priced
    for LoRA/QLoRA's phases."""
    if t.non_reentrant_checkpointing and not t.bnb_keeps_input:
        raise BadInput("--non-reentrant-checkpointing changes what checkpointing keeps only for a 4-bit matmul's"
                       " input that old bitsandbytes stores on its ctx: give --finetune qlora --bnb-keeps-input, or"
                       " drop it")
    if t.non_reentrant_checkpointing and t.grad_checkpointing is False and not t.selective_checkpointing:
        raise BadInput("--non-reentrant-checkpointing describes how blocks are checkpointed; nothing is"
                       " checkpointed here: give --grad-checkpointing, or drop it")
    if t.loop_keeps_graph and not ft.peft:
        raise BadInput("--loop-keeps-graph is planned for --finetune lora|qlora (litgpt's finetune loops); give one,"
                       " or drop it")
    # torchtune's recipes refuse offloading without checkpointing (recipes/lora_finetune_single_device.py at
    # 1814feb, lines 165-173: "should only be True when enable_activation_checkpointing is True", and on CUDA only)
    if t.activation_offload and (not t.grad_checkpointing or t.selective_checkpointing):
        raise BadInput("--activation-offload moves what checkpointing keeps (each block's input) to the host, as"
                       " torchtune runs it only beside activation checkpointing: give --grad-checkpointing (whole"
                       " blocks, not --selective-checkpointing), or drop it")


def _stack_notes(t: TrainingAsk, world: int, accum: int, notes: dict) -> None:
    """What the stack options (and the no_sync they leave) make the plan assume, said in its notes."""
    if accum > 1 and world > 1 and not t.sync_each_batch:
        notes["no_sync"] = (f"accumulation under no_sync: as the HF Trainer, accelerate and Lightning run its {accum}"
                            " micro-batches, DDP reduces once a step and FSDP keeps every unit's whole gradient until"
                            " the last; reduced on each, it keeps shards only (--sync-each-batch to change)")
    if t.sync_each_batch:
        notes["sync_each_batch"] = ("accumulation reduced on every micro-batch (--sync-each-batch): DDP all-reduces"
                                    " and FSDP reduce-scatters each one, and FSDP keeps only its gradients' shards")
    if t.fsdp_use_orig_params:
        notes["fsdp_orig_params"] = ("FSDP use_orig_params=True (--fsdp-use-orig-params): each block's unit holds"
                                     " its frozen base and its adapters in one flat parameter, whose gradient covers"
                                     " the whole block, as though nothing were frozen")
    if t.variable_length:
        notes["variable_length"] = ("lengths varying step to step (--variable-length): reserved and nvidia-smi add the"
                                    " caching allocator's segments of an earlier longest step, a floor, at most what"
                                    " the GPU has free; allocated and the verdict do not change")
    if t.non_reentrant_checkpointing:
        notes["non_reentrant"] = ("non-reentrant checkpointing (--non-reentrant-checkpointing): its saved-tensor hooks"
                                  " never see what bitsandbytes stores on ctx, so every block keeps its 4-bit"
                                  " matmuls' inputs until the backward ends")
    if t.loop_keeps_graph:
        notes["keeps_graph"] = ("the loop names the last micro-batch's output and loss until the next forward"
                                " replaces them (--loop-keeps-graph): its logits, and what its graph holds past the"
                                " backward, beside the new forward")
    if t.activation_offload:
        notes["act_offload"] = ("activations offloaded (--activation-offload, torchtune's OffloadActivations): each"
                                " checkpointed block's input is copied to pinned host RAM on a side stream in the"
                                " forward, the GPU keeping the last 3 (max_fwd_stash_size 5 saved tensors, 2 a"
                                " block), and copied back when its backward needs it, the compute stream waiting"
                                " (no prefetch); torch strategies only (single, DDP, FSDP): DeepSpeed's rows are"
                                " priced without it")
    if t.quantizer == "lightning":
        notes["qlora"] = ("QLoRA as Lightning's BitsandbytesPrecision quantizes it (--quantizer lightning): every"
                          " Linear in 4-bit NF4 from fp16, the output head too (dequantized whole at the loss);"
                          " the norms and embeddings unquantized")


def runs_here(training: Training, option: str) -> None:
    """--calibrate and --measure run transformers' modeling code on this machine as the HF Trainer runs it: a
    plan for another stack (fused kernels, a fused loss, selective checkpointing, 16-bit weights) is refused,
    not compared with what it did not run."""
    other = training.stack()
    if other:
        raise BadInput(f"{option} runs transformers' own modeling code here, as the HF Trainer does; {', '.join(other)}"
                       f" describe{'s' if len(other) == 1 else ''} another stack: drop {option} or"
                       f" {'it' if len(other) == 1 else 'them'}")


def from_options(options: dict, **how) -> Request:
    """resolve() for the CLI's options by click name (see split)."""
    return resolve(*split(options), **how)
