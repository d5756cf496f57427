"""Options -> one planning request: the defaults and the rules that tie options together, in one place.

plan, inspect --model, deepspeed-config (with or without --auto) and bench-nvlink all go through here, so
the same flags give the same model, layout and training everywhere. The CLI only reads options and
renders; values arrive already checked one by one (sizes, counts, bandwidths, GPU models), and what is
checked here is how they relate:
- bf16 needs an Ampere or newer GPU;
- --global-batch = micro-batch x accumulation x GPUs per node x nodes, exactly;
- --example and --from-file exclude each other;
- an explicit --cpu-mem / --nvme-free wins over what is measured on this machine (with a note when the
  --nvme-path folder measured here disagrees).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field

from . import gpus as catalog
from .errors import BadInput, NvmlUnavailable
from .models import ModelSpec
from .plan import Layout, Training, link_bandwidth
from .topology import rank
from .units import gib

DEFAULT_SEQ_CAP = 1024      # --seq-len default: the model's context, at most this
DISAGREE = 0.10             # a measured folder "disagrees" with --nvme-free beyond 10 %


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
        raise BadInput(f"--gpu-model {e}")


def precision(chosen: str | None, gpu_model: str | None, device: str = "cuda") -> tuple[str, str | None]:
    """(precision, note): the user's choice checked against the GPU, else the default for it.

    bf16 needs Ampere or newer (compute capability 8.0); older GPUs train in fp16, the CPU twin in fp32."""
    from .advise import is_ampere_or_newer
    amp = is_ampere_or_newer(str(gpu_model)) if gpu_model else None
    if chosen == "bf16" and amp is False:
        raise BadInput(f"--precision bf16 needs an Ampere or newer GPU; {gpu_model} is older: use --precision fp16")
    if chosen:
        return chosen, None
    if device == "cpu":
        return "fp32", "precision fp32 (the CPU twin); --precision to change"
    if amp is False:
        return "fp16", f"precision fp16: {gpu_model} has no bf16 (older than Ampere)"
    return "bf16", ("precision bf16: " + (f"{gpu_model} is Ampere or newer" if amp else "GPU model unknown, assumed"
                                          " Ampere or newer (--precision fp16 for older GPUs)"))


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
        near = " or ".join(str(x) for x in (lo, hi) if x > 0)
        raise BadInput(f"--global-batch {global_batch} is not a multiple of --batch-size x GPUs"
                       f" ({micro} x {world} = {per_step}): try {near}")
    return global_batch // per_step


def exclusive(**given) -> None:
    """Options that exclude each other: exclusive(example=..., from_file=...) refuses both at once."""
    names = [f"--{k.replace('_', '-')}" for k, v in given.items() if v]
    if len(names) > 1:
        raise BadInput(f"{' and '.join(names)} exclude each other: give one")


def default_nvme_dir() -> str:
    """Where NVMe offload goes without --nvme-path: the folder deepspeed-config would write into (the NVMe mount
    with the most free space, see gputopo.system.pick_offload_dir), else the temp dir."""
    from . import system
    picked = system.default_offload_dir()
    return picked[0] if picked else tempfile.gettempdir()


def _nvme_free(nvme_free: int | None, nvme_path: str | None, notes: dict) -> int:
    """--nvme-free wins; else the free space measured at --nvme-path (default: default_nvme_dir())."""
    folder = nvme_path or (default_nvme_dir() if nvme_free is None else None)
    if nvme_path and not os.path.isdir(nvme_path):
        raise BadInput(f"--nvme-path {nvme_path}: not an existing directory")
    if nvme_free is not None:
        if nvme_path:
            measured = shutil.disk_usage(nvme_path).free
            if abs(measured - nvme_free) > DISAGREE * nvme_free:
                notes["nvme_disagrees"] = (f"--nvme-free {gib(nvme_free)} is used; {nvme_path} has {gib(measured)}"
                                           " free on this machine (plan for the machine you train on)")
        return nvme_free
    free = shutil.disk_usage(folder).free
    notes["nvme_free"] = (f"NVMe free: {gib(free)} measured at {folder}"
                          + ("" if nvme_path else " (--nvme-path/--nvme-free to change)"))
    return free


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


def _layout(gpus, gpu_mem, gpu_model, link, nodes, inter_node_gbps, host: dict, topology, selected,
            notes: dict) -> Layout:
    """The GPUs planned for: a given topology, else --gpus with --gpu-mem/--gpu-model, else this machine."""
    from .report import layout_from_topology
    if link and rank(link) == (-1, 0):
        raise BadInput(f"--link {link}: not a link type of nvidia-smi (NV#, PIX, PXB, PHB, NODE, SYS)")
    host_facts = dict(nodes=nodes, inter_node_gbps=inter_node_gbps, **host)
    if topology is None and gpus is not None and (gpu_mem is not None or gpu_model is not None):
        mem = gpu_mem if gpu_mem is not None else _catalog_mem(gpu_model, notes, "--gpu-model")
        if mem is None:
            raise BadInput(f"--gpu-model {gpu_model}: {gpu_model.key} is sold as"
                           f" {' or '.join(f'{s}GB' for s in gpu_model.variants)}: name one"
                           f" (e.g. --gpu-model {gpu_model.key}-{gpu_model.variants[-1]}GB) or give --gpu-mem")
        name = str(gpu_model) if gpu_model else None
        gbps, basis = link_bandwidth(link, name) if link else (None, "unknown")
        return Layout(gpus_per_node=gpus, gpu_mem_bytes=mem, gpu_model=name, link_type=link, link_gbps=gbps,
                      link_basis=basis, **host_facts)
    if topology is None:
        topology, selected, reason = _live(gpus)
        if topology is None:
            raise BadInput(f"no GPU visible here ({reason}): give --gpus N and --gpu-mem SIZE (or --gpu-model)")
    if link:
        raise BadInput("--link describes GPUs given by --gpus and --gpu-mem; this topology has its own links")
    mem = gpu_mem
    if mem is None and not any(topology.gpu(n).memory_total_bytes for n in selected):
        # A paste rarely says how much memory: the GPU model (the paste's, else --gpu-model) does.
        named = next((topology.gpu(n).model for n in selected if topology.gpu(n).model), None)
        mem = _catalog_mem(catalog.lookup(named) if named else gpu_model, notes, "the GPU model")
    return layout_from_topology(topology, selected, mem, **host_facts)


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


def resolve(*, model=None, params=None, hidden_size=None, layers=None, vocab_size=None, gpus=None, gpu_mem=None,
            gpu_model=None, link=None, nodes=1, inter_node_gbps=12.5, precision_=None, optimizer="adamw",
            batch_size=4, seq_len=None, grad_accum=None, global_batch=None, grad_checkpointing=False,
            attention=None, flash_attention=False, offload_params=None, cpu_mem=None, nvme_path=None, nvme_free=None,
            need_model=True, need_layout=True, topology=None, selected=None, **unknown) -> Request:
    """Every shared option (by its click name) -> a Request with every default filled and every rule checked.

    topology/selected: a pasted or bundled topology to plan on (inspect); else --gpus/--gpu-mem/--gpu-model
    describe the GPUs, else this machine's are probed. need_layout=False (deepspeed-config without --auto)
    needs only the number of GPUs."""
    if unknown:
        raise TypeError(f"resolve() got options it does not know: {', '.join(unknown)}")
    from . import models, probe
    exclusive(model=model, params=params)
    if model and (hidden_size or layers or vocab_size):
        raise BadInput("--hidden-size, --layers and --vocab-size describe a --params model; --model brings its own")
    notes: dict = {}
    spec = None
    if need_model or model or params:
        spec = models.resolve(model, params, hidden_size, layers, vocab_size)
    gm = gpu_model_of(gpu_model)
    micro = batch_size or 4
    layout = None
    assumed = False
    if need_layout:
        cpu = cpu_mem
        if cpu is None:
            cpu = probe.host()["ram_total_bytes"]
            notes["cpu_mem"] = f"CPU RAM: {gib(cpu)} per node, this machine's (--cpu-mem to change)"
        nvme = _nvme_free(nvme_free, nvme_path, notes)
        layout = _layout(gpus, gpu_mem, gm, link, nodes, inter_node_gbps,
                         {"cpu_mem_bytes": cpu, "nvme_free_bytes": nvme}, topology, selected, notes)
        per_node = layout.gpus_per_node
        model_name = layout.gpu_model
    else:
        per_node = gpus
        if per_node is None:
            if topology is None:
                topology, selected, _ = _live(None)
            per_node = len(selected) if topology is not None else 1
            assumed = topology is None
            if assumed and global_batch is not None:
                raise BadInput(f"--global-batch {global_batch} needs --gpus N (no GPU visible here to count)")
            if not assumed:
                notes["gpus"] = f"GPUs per node: {per_node} (this machine's; --gpus to change)"
        model_name = str(gm) if gm else None
        if model_name is None and topology is not None:
            model_name = next((topology.gpu(n).model for n in selected if topology.gpu(n).model), None)
    chosen, note = precision(precision_, model_name)
    if note:
        notes["precision"] = note
    if spec is not None and seq_len is None:
        seq = min(spec.max_positions or 512, DEFAULT_SEQ_CAP)
        if need_layout:  # the sequence length matters only to the memory plan
            notes["seq_len"] = (f"sequence length {seq}: the model's context, at most {DEFAULT_SEQ_CAP}"
                                " (--seq-len to change)")
    else:
        seq = seq_len or DEFAULT_SEQ_CAP
    accum = accumulation(micro, grad_accum, global_batch, per_node * nodes)
    training = Training(precision=chosen, optimizer=optimizer, batch_size=micro, seq_len=seq,
                        grad_checkpointing=grad_checkpointing, grad_accum=accum,
                        attention=_attention(spec, attention, flash_attention, notes),
                        offload_params=offload_params is not False)
    remarks = tuple(notes.pop(k) for k in [k for k in notes if k == "nvme_disagrees"])
    return Request(spec, layout, training, per_node, nodes, global_batch, notes, remarks,
                   gpus_assumed=need_layout is False and gpus is None and assumed)
