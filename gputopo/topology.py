"""Gpu, Nic, Link, Topology: what a machine is, in nvidia-smi's vocabulary. Stdlib only, pure."""
from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from functools import cached_property

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
# At most 9 digits: a longer count is no NV# (no GPU has near that many NVLinks, and int() refuses 4,301 digits).
NV_RE = re.compile(r"^NV([0-9]{1,9})$")   # ASCII digits: int() would read "NV٣" as 3

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
    """A link type as a user writes it ('nv12', 'SOC') -> as nvidia-smi prints it; ValueError if no GPU has it.
    ASCII only: upper() makes 'ſys' SYS and a digit of another script is no NV count nvidia-smi prints."""
    if not str(text).isascii():
        raise ValueError(f"{text}: not a link type of nvidia-smi (NV#, PIX, PXB, PHB, NODE, SYS; in ASCII letters"
                         " and digits)")
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
    """One GPU as NVML or a paste describes it; None where it does not say."""
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
    """One NIC of `nvidia-smi topo -m`'s header."""
    name: str                          # header label: "NIC0" or, from older drivers, "mlx5_0"
    device: str | None = None          # from the NIC Legend, or the label itself when it is a device name

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Link:
    """The path between two devices of the matrix (at least one a GPU), as nvidia-smi names it."""
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
    """A machine's GPUs, NICs and the links between them, as read once."""
    gpus: tuple[Gpu, ...]
    nics: tuple[Nic, ...] = ()
    links: tuple[Link, ...] = ()       # one per unordered pair of header labels, header order
    source: str = "unknown"            # "nvml", "nvidia-smi", "file"
    driver: str | None = None          # NVIDIA driver version, when NVML or the pasted text says it
    notes: tuple[str, ...] = field(default=())

    # Indexes built once per topology (it is frozen): a paste of 256 GPUs has 32,640 links, and a lookup that walks
    # them for each GPU or pair made `inspect` cubic in the GPUs.
    @cached_property
    def _by_name(self) -> dict[str, Gpu]:
        return {g.name: g for g in self.gpus}

    @cached_property
    def _by_pair(self) -> dict[frozenset, Link]:
        out: dict[frozenset, Link] = {}
        for l in self.links:
            out.setdefault(frozenset((l.a, l.b)), l)   # the first, as a search in order finds it
        return out

    @cached_property
    def _gpu_links(self) -> tuple[Link, ...]:
        return tuple(l for l in self.links if l.a in self._by_name and l.b in self._by_name)

    @cached_property
    def _links_of(self) -> dict[str, tuple[Link, ...]]:
        out: dict[str, list[Link]] = {g.name: [] for g in self.gpus}
        for l in self._gpu_links:
            out[l.a].append(l)
            if l.b != l.a:
                out[l.b].append(l)
        return {k: tuple(v) for k, v in out.items()}

    def gpu(self, name: str) -> Gpu:
        return self._by_name[name]

    def link(self, a: str, b: str) -> Link | None:
        return self._by_pair.get(frozenset((a, b)))

    def gpu_links(self, names: list[str] | None = None) -> list[Link]:
        """GPU-GPU links, among `names` when given."""
        if names is None:
            return list(self._gpu_links)
        chosen = set(names)
        return [l for l in self._gpu_links if l.a in chosen and l.b in chosen]

    def links_of(self, name: str) -> tuple[Link, ...]:
        """The GPU-GPU links of one GPU."""
        return self._links_of.get(name, ())

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
        """The k GPUs whose weakest link is strongest; ties go to more bandwidth (the fewest pairs on the slowest class,
        then on the next), then fewer NUMA nodes, then the lowest indices: what trying every k-subset gives, found by
        a search that proves it (_cheapest). BadInput past BEST_GPUS or BEST_WORK."""
        names = [g.name for g in self.gpus]
        n = len(names)
        if k >= n:
            return names
        if n > BEST_GPUS:
            raise BadInput(f"--best {k}: {n} GPUs are more than it searches (at most {BEST_GPUS}, more than any machine"
                           " holds); is the paste one machine's?")
        at = {name: i for i, name in enumerate(names)}
        ranks = {frozenset((at[l.a], at[l.b])): rank(l.type) for l in self.gpu_links()}
        levels = sorted(set(ranks.values()) | {(-1, 0)})
        # A pair's price: a class costs more than all pairs (at most k(k-1)/2) of the faster ones together, and the
        # cheapest pair more than the NUMA nodes (at most k): the sum orders subsets as the rule above does.
        base = k * (k - 1) // 2 + 1
        price = {r: base ** (len(levels) - 1 - i) * (k + 1) for i, r in enumerate(levels)}
        cost = [[price[ranks.get(frozenset((i, j)), (-1, 0))] if i != j else 0 for j in range(n)] for i in range(n)]
        found = _cheapest(cost, [g.numa_affinity for g in self.gpus], k)
        if found is None:
            raise BadInput(f"--best {k}: the best {k} of these {n} GPUs is not proven within the search's bound (about"
                           " a second: the matrix lacks the switches and NVLink islands of alike GPUs machines have);"
                           " choose GPUs with --gpu-ids")
        return [names[i] for i in found]

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


# `--best K`'s bounds: the work of its lower bounds (GPUs x kinds of GPU, summed over the partial subsets it weighs),
# about a second here; and 256 GPUs, more than any machine holds. Machines as built (PCIe switches, NVLink islands,
# alike GPUs) take a small part of it even at 64 GPUs, k from 2 to 63; a random matrix of 64 is answered at k=8 and
# refused beyond, rather than answered with a subset that may not be the best.
BEST_WORK = 40_000_000
BEST_GPUS = 256


def _cheapest(cost: list[list[int]], numa: list, k: int) -> list[int] | None:
    """The k indices whose pairs cost least in all (cost[i][j]), then with the fewest NUMA nodes, then the lowest
    indices; None past BEST_WORK. Two depth-first searches that leave a branch once a lower bound says it holds
    nothing better: one that tries the GPUs nearest those taken first finds the least total, then one in index order
    (as itertools.combinations lists subsets) stops at the first subset with it. Once a GPU is left out, so are its
    twins (GPUs with its NUMA node and links): eight alike GPUs behind a switch are one choice of how many, not 8 of
    which."""
    n = len(cost)
    twin = list(range(n))   # the first GPU alike to each
    for j in range(n):
        twin[j] = next((i for i in range(j) if twin[i] == i and _twins(cost, numa, i, j)), j)
    rows = [sorted((cost[x][y], y) for y in range(n) if y != x) for x in range(n)]
    work = [0]

    def lower(free: list[int], spent: int, margin: list[int], numas: frozenset, r: int) -> int:
        """No r of `free` added to those taken cost less. Pairs: each of the r pays its pairs to those taken (margin)
        and half its r-1 cheapest among the free; or all the free are taken, less what leaving the others out saves at
        most (the tighter when r is most of them). NUMA nodes: those r more GPUs must add, at the least."""
        each, row, within = {}, {}, set(free)
        for x in free:
            if twin[x] in each:   # twins pay alike
                continue
            d, need = 0, r - 1
            for c, y in rows[x]:
                if not need:
                    break
                if y in within:
                    d, need = d + c, need - 1
            each[twin[x]] = 2 * margin[x] + d
            row[twin[x]] = margin[x] + sum(cost[x][y] for y in free)
        pairs = max(sum(sorted(each[twin[x]] for x in free)[:r]) // 2,
                    sum(margin[x] for x in free) + sum(row[twin[x]] - margin[x] for x in free) // 2
                    - sum(sorted((row[twin[x]] for x in free), reverse=True)[:len(free) - r]))
        have = sum(numa[x] in numas for x in free)
        sizes = sorted(Counter(numa[x] for x in free if numa[x] not in numas).values(), reverse=True)
        new = next(i for i, most in enumerate(itertools.accumulate([have] + sizes)) if most >= r)
        return spent + pairs + len(numas) + new

    def search(most: int, first: bool) -> tuple[int, list[int]] | None:
        """The least total up to `most` and its indices; `first`: the first subset of total `most` in index order."""
        found: list = []

        def step(free: list[int], taken: list[int], spent: int, margin: list[int], numas: frozenset):
            """Extend `taken` by r of `free`; margin[x]: x's pairs to those taken."""
            r, limit = k - len(taken), found[0][0] - 1 if found else most
            if r == 0:
                if spent + len(numas) <= limit:
                    found[:] = [(spent + len(numas), taken)]
                return
            if len(free) < r:
                return
            work[0] += (n + len(free)) * len({twin[x] for x in free}) + n   # what lower() and a child cost
            if work[0] > BEST_WORK:
                raise _Unproven
            if lower(free, spent, margin, numas, r) > limit:
                return
            if not first:
                free = sorted(free, key=margin.__getitem__)
            left_out: set = set()   # twins of GPUs left out from here on
            for i, c in enumerate(free):
                if len(free) - i < r or (first and found):
                    break
                if twin[c] not in left_out:
                    step([x for x in free[i + 1:] if twin[x] not in left_out], taken + [c], spent + margin[c],
                         [m + cost[c][x] for x, m in enumerate(margin)], numas | {numa[c]})
                    left_out.add(twin[c])
        step(list(range(n)), [], 0, [0] * n, frozenset())
        return found[0] if found else None

    try:
        least = search(sum(map(sum, cost)) + n, False)   # its first subset is the greedy one: a bound from there on
        return sorted(search(least[0], True)[1])
    except _Unproven:
        return None


class _Unproven(Exception):
    """_cheapest went past BEST_WORK."""


def _twins(cost: list[list[int]], numa: list, i: int, j: int) -> bool:
    """GPUs i and j are alike: one NUMA node, and the same price to every other GPU."""
    return numa[i] == numa[j] and all(a == b for x, (a, b) in enumerate(zip(cost[i], cost[j])) if x != i and x != j)


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
