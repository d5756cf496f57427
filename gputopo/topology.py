"""Gpu, Nic, Link, Topology: what a machine is, in nvidia-smi's vocabulary. Stdlib only, pure."""
from __future__ import annotations

import itertools
import re
from dataclasses import asdict, dataclass, field

from .errors import BadInput

# nvidia-smi topo -m legend, slowest first. NV# ranks above all PCIe paths.
PCIE_KINDS = ("SYS", "NODE", "PHB", "PXB", "PIX")
EXPLAIN = {
    "X": "self",
    "SYS": "PCIe plus the SMP interconnect between NUMA nodes (QPI/UPI/Infinity Fabric): the slowest path",
    "NODE": "PCIe plus the interconnect between PCIe host bridges within one NUMA node",
    "PHB": "PCIe through a PCIe host bridge (typically the CPU)",
    "PXB": "PCIe through several PCIe bridges, without the host bridge",
    "PIX": "PCIe through at most one PCIe bridge",
    "NV": "a bonded set of {n} NVLink(s): direct GPU-to-GPU, the fastest path",
}
# Some drivers print "SOC" (older name of SYS) and "CPU" (older name of NODE/PHB).
ALIASES = {"SOC": "SYS", "CPU": "NODE"}
NV_RE = re.compile(r"^NV(\d+)$")

# Theoretical NVLink bandwidth per link per direction in GB/s, by GPU model (first match wins).
# Sources: NVIDIA architecture whitepapers (GA102: 4 x4 links, 14.0625 GB/s per link per direction).
NVLINK_GBPS_BY_MODEL = (
    (r"GB\d00|B200|B100|B300", 50.0, 5),
    (r"H100|H200|H800|H20\b|GH200", 25.0, 4),
    (r"A100|A800|A30\b", 25.0, 3),
    (r"RTX 3090|A6000|A40\b|A5000|A4500|RTX A\d|GA102", 14.0625, 3),
    (r"V100|TITAN V", 25.0, 2),
    (r"TITAN RTX|2080 Ti|RTX [68]000|Quadro RTX|RTX 2080|TU10", 25.0, 2),
    (r"P100|GP100", 20.0, 1),
)
NVLINK_GBPS_BY_VERSION = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}
# PCIe per lane per direction, GB/s, after line encoding.
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


def kind_of(link_type: str) -> str:
    """'NV12' -> 'NV', 'SOC' -> 'SYS', 'PIX' -> 'PIX'."""
    return "NV" if NV_RE.match(link_type or "") else ALIASES.get(link_type, link_type)


def nvlink_count(link_type: str) -> int | None:
    m = NV_RE.match(link_type or "")
    return int(m.group(1)) if m else None


def rank(link_type: str) -> tuple[int, int]:
    """Order links slowest to fastest: SYS < NODE < PHB < PXB < PIX < NV1 < NV2 < ... ."""
    n = nvlink_count(link_type)
    if n is not None:
        return (len(PCIE_KINDS), n)
    kind = kind_of(link_type)
    return (PCIE_KINDS.index(kind), 0) if kind in PCIE_KINDS else (-1, 0)


# No GPU has more than 18 NVLinks (H100 and B200 SXM: https://www.nvidia.com/en-us/data-center/nvlink/).
MAX_NVLINKS = 18


def link_type(text: str) -> str:
    """A link type as a user writes it ('nv12', 'SOC') -> as nvidia-smi prints it; ValueError if no GPU has it."""
    t = ALIASES.get(str(text).strip().upper(), str(text).strip().upper())
    n = nvlink_count(t)
    if n is not None and not 1 <= n <= MAX_NVLINKS:
        raise ValueError(f"{text}: no GPU has {n} NVLinks (NV1 to NV{MAX_NVLINKS})")
    if rank(t) == (-1, 0):
        raise ValueError(f"{text}: not a link type of nvidia-smi (NV#, PIX, PXB, PHB, NODE, SYS)")
    return t


def explain(link_type: str | None) -> str:
    if link_type is None:
        return "unknown: no `nvidia-smi topo -m` was given"
    n = nvlink_count(link_type)
    if n is not None:
        return EXPLAIN["NV"].format(n=n)
    return EXPLAIN.get(kind_of(link_type), "unknown link type (not in nvidia-smi's legend)")


def nvlink_gbps_per_link(model: str | None, version: int | None = None) -> float | None:
    """Theoretical NVLink bandwidth per link per direction, from the GPU model or else the NVLink version."""
    for pattern, gbps, _ in NVLINK_GBPS_BY_MODEL:
        if model and re.search(pattern, model, re.I):
            return gbps
    return NVLINK_GBPS_BY_VERSION.get(version) if version else None


@dataclass(frozen=True)
class NvLink:
    """One NVLink of one GPU, as NVML or `nvidia-smi nvlink -s` reports it."""
    link: int
    active: bool
    version: int | None = None
    remote: str | None = None          # PCI bus id of the far end (a GPU or an NVSwitch)
    remote_is_switch: bool | None = None
    speed_gbps: float | None = None    # as `nvidia-smi nvlink -s` prints it


@dataclass(frozen=True)
class Gpu:
    name: str                          # header label: "GPU0"
    index: int
    model: str | None = None           # "NVIDIA A100-SXM4-80GB"
    uuid: str | None = None
    pci_bus_id: str | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    cpu_affinity: str | None = None    # exactly as printed: "0-23,48-71"
    numa_affinity: str | None = None
    gpu_numa_id: str | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    temperature_c: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    throttle_reasons: tuple[str, ...] | None = None
    nvlinks: tuple[NvLink, ...] | None = None
    lost: bool = False                 # NVML says the GPU fell off the bus
    mig: tuple[str, ...] | None = None  # MIG instances' profiles ("3g.40gb"), when the GPU is in MIG mode

    def to_dict(self) -> dict:
        d = asdict(self)
        d["throttle_reasons"] = list(self.throttle_reasons) if self.throttle_reasons is not None else None
        d["nvlinks"] = [asdict(n) for n in self.nvlinks] if self.nvlinks is not None else None
        d["mig"] = list(self.mig) if self.mig is not None else None
        d["pcie_gbps"] = self.pcie_gbps()
        return d

    def pcie_gbps(self) -> float | None:
        """Theoretical PCIe bandwidth per direction at the link's maximum generation and width."""
        gen, width = self.pcie_gen_max or self.pcie_gen, self.pcie_width_max or self.pcie_width
        return round(PCIE_LANE_GBPS[gen] * width, 2) if gen in PCIE_LANE_GBPS and width else None


@dataclass(frozen=True)
class Nic:
    name: str                          # header label: "NIC0" or, from older drivers, "mlx5_0"
    device: str | None = None          # from the NIC Legend, or the label itself when it is a device name

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Link:
    a: str
    b: str
    type: str | None                   # exactly as nvidia-smi prints it: "NV12", "PIX", "SYS", ...; None: unknown
    p2p: dict[str, str] | None = None  # `topo -p2p` mode -> status ("OK", "CNS", ...), when known

    @property
    def nvlinks(self) -> int:
        return nvlink_count(self.type) or 0

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "type": self.type, "nvlinks": self.nvlinks,
                "rank": list(rank(self.type)), "p2p": self.p2p, "explanation": explain(self.type)}


@dataclass(frozen=True)
class Topology:
    gpus: tuple[Gpu, ...]
    nics: tuple[Nic, ...] = ()
    links: tuple[Link, ...] = ()       # one per unordered pair of header labels, header order
    source: str = "unknown"            # "nvml", "nvidia-smi", "file"
    driver: str | None = None          # NVIDIA driver version, when NVML or the pasted text says it
    notes: tuple[str, ...] = field(default=())

    def gpu(self, name: str) -> Gpu:
        return next(g for g in self.gpus if g.name == name)

    def link(self, a: str, b: str) -> Link | None:
        return next((l for l in self.links if {l.a, l.b} == {a, b}), None)

    def gpu_links(self, names: list[str] | None = None) -> list[Link]:
        """GPU-GPU links, among `names` when given."""
        chosen = set(names) if names is not None else {g.name for g in self.gpus}
        return [l for l in self.links if l.a in chosen and l.b in chosen]

    def model_of(self, names) -> str | None:
        """The GPU model the topology names for these GPUs (the first that has one), or None."""
        return next((self.gpu(n).model for n in names if self.gpu(n).model), None)

    def weakest(self, names: list[str] | None = None) -> Link | None:
        links = self.gpu_links(names)
        return min(links, key=lambda l: rank(l.type)) if links else None

    def islands(self) -> list[list[str]]:
        """Groups of GPUs joined (directly or through each other) by NVLink; singletons left out."""
        parent = {g.name: g.name for g in self.gpus}

        def find(x: str) -> str:
            while parent[x] != x:
                x = parent[x]
            return x
        for l in self.gpu_links():
            if l.nvlinks:
                parent[find(l.a)] = find(l.b)
        groups: dict[str, list[str]] = {}
        for g in self.gpus:
            groups.setdefault(find(g.name), []).append(g.name)
        return [grp for grp in groups.values() if len(grp) > 1]

    def best(self, k: int) -> list[str]:
        """The k GPUs whose weakest link is strongest; ties go to more bandwidth, then one NUMA node."""
        names = [g.name for g in self.gpus]
        if k >= len(names):
            return names

        def score(group: tuple[str, ...]):
            ranks = [rank(l.type) for l in self.gpu_links(list(group))]
            numas = {self.gpu(n).numa_affinity for n in group}
            return (min(ranks, default=(99, 0)), sorted(ranks), -len(numas))
        if len(names) <= 16:
            return list(max(itertools.combinations(names, k), key=score))
        # Beyond 16 GPUs the combinations explode: grow greedily from each start.
        best_group = None
        for start in names:
            group = [start]
            while len(group) < k:
                group.append(max((n for n in names if n not in group), key=lambda n: score(tuple(group + [n]))))
            if best_group is None or score(tuple(group)) > score(tuple(best_group)):
                best_group = group
        return sorted(best_group, key=names.index)

    def bandwidth_gbps(self, link: Link) -> tuple[float | None, str]:
        """Theoretical per-direction bandwidth of a GPU pair, and how it was derived."""
        a, b = self.gpu(link.a), self.gpu(link.b)
        if link.nvlinks:
            speeds = [n.speed_gbps for g in (a, b) for n in (g.nvlinks or ()) if n.active and n.speed_gbps]
            versions = [n.version for g in (a, b) for n in (g.nvlinks or ()) if n.version]
            per = nvlink_gbps_per_link(a.model or b.model, max(versions) if versions else None)
            if per is None and speeds:
                # `nvidia-smi nvlink -s` prints the raw signalling rate per link (25.781 on V100).
                per = min(speeds)
            if per is None:
                listed = [g.name for g in self.gpus if g.nvlinks]
                if listed and not (a.nvlinks and b.nvlinks):   # a paste of `nvlink -s` cut to some GPUs
                    return None, (f"NVLink generation unknown between GPUs the `nvidia-smi nvlink -s` text does not"
                                  f" list (it lists {', '.join(listed)}): paste all of it or give --gpu-model")
                return None, "NVLink generation unknown: give --gpu-model or paste `nvidia-smi nvlink -s`"
            return round(per * link.nvlinks, 2), f"theoretical: {link.nvlinks} NVLink(s) x {per:g} GB/s per direction"
        pcie = [g.pcie_gbps() for g in (a, b)]
        if None in pcie:
            return None, "PCIe generation and width unknown (known only from a live probe)"
        return min(pcie), "theoretical: PCIe generation x width, per direction; the path may be slower"


def select(topo: Topology, gpu_ids) -> list[str]:
    """`--gpu-ids 0,2,3` (indices, already parsed) -> ["GPU0", "GPU2", "GPU3"]; all GPUs when not given."""
    if not gpu_ids:
        return [g.name for g in topo.gpus]
    have = {g.name for g in topo.gpus}
    for i in gpu_ids:
        if f"GPU{i}" not in have:
            known = ",".join(str(g.index) for g in topo.gpus)
            raise BadInput(f"--gpu-ids: no GPU {i} in this topology (GPUs: {known})")
    return list(dict.fromkeys(f"GPU{i}" for i in gpu_ids))
