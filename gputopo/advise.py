"""Topology (+ later a model's memory plan) -> Advice: which distributed strategy to start from. Pure."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from .topology import Topology, explain


@dataclass(frozen=True)
class Advice:
    strategy: str | None        # "single", "ddp", or a plan strategy name once memory is known
    interconnect: str           # "nvlink", "pcie", "mixed", "unknown", "none"
    zero_traffic_cost: str      # "low", "high", "unknown"
    reasons: tuple[str, ...]
    basis: str = "interconnect"  # "interconnect" or "memory+interconnect"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["reasons"] = list(self.reasons)
        return d


def interconnect(topo: Topology, names: list[str]) -> Advice:
    """First advice from the links alone (seed 003: DDP tolerates a slow link, ZeRO-DP needs a fast one)."""
    links = topo.gpu_links(names)
    if len(names) < 2:
        return Advice("single", "none", "unknown", ("one GPU: no inter-GPU traffic; DeepSpeed helps only if the"
                                                    " model does not fit (CPU/NVMe offload)",))
    if any(l.type is None for l in links):
        return Advice(None, "unknown", "unknown", ("link types unknown: give `nvidia-smi topo -m` to get advice",))
    weakest = topo.weakest(names)
    nv = [l for l in links if l.nvlinks]
    if len(nv) == len(links):
        return Advice("ddp", "nvlink", "low", (
            f"every pair of the {len(names)} GPUs is joined by NVLink (weakest {weakest.type}): ZeRO's extra"
            " traffic (about 1.5x DDP's at stage 3) is cheap here, so shard (ZeRO-2/3) freely when memory asks for it;",
            "DDP stays the fastest choice while the model, its gradients and optimizer states fit on one GPU."))
    return Advice("ddp", "mixed" if nv else "pcie", "high", (
        f"the weakest link is {weakest.a}-{weakest.b} {weakest.type} ({explain(weakest.type)}): every all-reduce"
        " waits for it;",
        "DDP syncs gradients once per step and tolerates a slow link; ZeRO-DP communicates more, so prefer DDP"
        " and, if memory is short, gradient accumulation, ZeRO-1/2 or CPU offload before ZeRO-3."))


def recommend(topo: Topology, names: list[str]) -> Advice:
    """The recommendation for `names`. The memory-based plan (gputopo plan) refines this seam."""
    return interconnect(topo, names)
