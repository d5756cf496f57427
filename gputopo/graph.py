"""The topology drawing as a graph: GPUs in NUMA boxes, NVLink edges or hubs, PCIe junctions, NICs.

One model for both pictures: the Mermaid block of `inspect --markdown` (markdown.py) and the matplotlib
figure of `inspect --plot` (plot.py). Pure, stdlib only; it reads the inspect report dict (report.py).

Reading rule, checked for every GPU pair: two GPUs are as close as their NVLink edge, else the first PCIe
junction that joins them, else their box's class (NODE, usually) or the class between boxes (SYS); a pair
that breaks the rule gets its own edge, so nothing is drawn wrong.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from .topology import PCIE_KINDS, rank

# Link classes drawn as junctions (a switch or a host bridge the GPUs share). NODE and SYS are not drawn
# per pair: a NUMA node's box says NODE, the space between boxes SYS (nvidia-smi's legend).
JUNCTIONS = ("PIX", "PXB", "PHB")


@dataclass
class Node:
    id: str
    kind: str                          # "gpu", "nic", "junction" (PIX/PXB/PHB), "hub" (NVLink or SYS)
    label: str
    group: str | None = None           # the NUMA box it sits in
    members: tuple[str, ...] = ()      # GPUs a junction or hub joins; a NIC's nearest GPUs
    selected: bool = False
    note: str = ""                     # a NIC's class to GPUs it has no edge to ("SYS to all GPUs")


@dataclass
class Edge:
    a: str                             # node or group ids
    b: str
    type: str                          # link class as nvidia-smi prints it: NV12, PIX, PHB, SYS ...
    label: str


@dataclass
class Group:
    id: str
    title: str
    gpus: list[str]
    default: str | None = None         # class of the pairs in this box that no junction joins (NODE, usually)


@dataclass
class Graph:
    groups: list[Group]
    nodes: dict[str, Node]
    edges: list[Edge]
    between_groups: str | None = None  # class of the pairs in different boxes (SYS, usually)
    notes: list[str] = field(default_factory=list)


class _Links:
    """The report's link matrix, asked by pair."""

    def __init__(self, report: dict):
        """Index the report's links both ways round."""
        self.gpus = [g["name"] for g in report["gpus"]]
        self.by_pair = {}
        for l in report["links"]:
            self.by_pair[(l["a"], l["b"])] = self.by_pair[(l["b"], l["a"])] = l

    def type(self, a: str, b: str) -> str | None:
        """The class of a pair (NV12, PIX, SYS ...), None when unknown."""
        return (self.by_pair.get((a, b)) or {}).get("type")

    def pcie(self, a: str, b: str) -> bool:
        """Whether a pair is joined by PCIe only."""
        return self.type(a, b) in PCIE_KINDS

    def pairs(self):
        """Every GPU pair once, in index order."""
        return [(a, b) for i, a in enumerate(self.gpus) for b in self.gpus[i + 1:]]

    def edge(self, a: str, b: str) -> Edge:
        """A GPU-GPU edge labelled with its class and bandwidth."""
        t = self.type(a, b)
        return Edge(a, b, t, label(t, self.by_pair[(a, b)]))


def bandwidth(link: dict) -> str:
    """A link's theoretical bandwidth per direction as text, else ""."""
    return f"{link['bandwidth_gbps']:g} GB/s" if link.get("bandwidth_gbps") else ""


def label(t: str, link: dict | None = None) -> str:
    """An edge label: the class, and the bandwidth when known."""
    bw = bandwidth(link) if link else ""
    return f"{t} · {bw}" if bw else t


def short_model(model: str | None) -> str | None:
    """A GPU model without the vendor words (A100-SXM4-80GB)."""
    return re.sub(r"^NVIDIA\s+|^Tesla\s+|GeForce\s+", "", model).strip() if model else None


def _components(names: list[str], joined) -> list[list[str]]:
    """Connected components of `names` under `joined(a, b)` (union-find)."""
    parent = {n: n for n in names}

    def find(x):
        """The root of x's set."""
        while parent[x] != x:
            x = parent[x]
        return x
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if joined(a, b):
                parent[find(a)] = find(b)
    out: dict[str, list[str]] = {}
    for n in names:
        out.setdefault(find(n), []).append(n)
    return list(out.values())


def _commonest(types: list[str]) -> str | None:
    """The most frequent class; a tie goes to the slower one, so the drawing never depends on set order."""
    return max(sorted(set(types), key=rank), key=types.count) if types else None


def _boxes(report: dict) -> list[Group]:
    """One box per NUMA node, else per CPU affinity (a socket), else one box."""
    by = {g["name"]: g for g in report["gpus"]}

    def key(g):
        """What puts a GPU in a box."""
        return ("numa", g["numa_affinity"]) if g["numa_affinity"] is not None else (
            ("cpus", g["cpu_affinity"]) if g["cpu_affinity"] is not None else ("none", ""))
    keys = list(dict.fromkeys(key(g) for g in report["gpus"]))
    groups = []
    for i, k in enumerate(keys):
        members = [g["name"] for g in report["gpus"] if key(g) == k]
        cpus = {by[n]["cpu_affinity"] for n in members} - {None}
        title = f"NUMA node {k[1]}" if k[0] == "numa" else "NUMA node N/A"
        if len(cpus) == 1:
            title += f" · CPUs {cpus.pop()}"
        groups.append(Group(id=f"box{i}", title=title, gpus=members))
    return groups


def _gpu_node(g: dict, group: str, selected: bool) -> Node:
    """A GPU: name, short model, memory, and (live only) the PCIe link's generation x width."""
    lines = [g["name"]] + [x for x in (short_model(g["model"]),) if x]
    if g.get("memory_total_bytes"):
        lines.append(f"{g['memory_total_bytes'] / 2 ** 30:.0f} GiB")
    if g.get("pcie_gbps"):  # theoretical per direction
        lines.append(f"PCIe gen{g['pcie_gen_max'] or g['pcie_gen']} x{g['pcie_width_max'] or g['pcie_width']}"
                     f" · {g['pcie_gbps']:g} GB/s")
    return Node(id=g["name"], kind="gpu", label="\n".join(lines), group=group, selected=selected)


def _nvlink(report: dict, links: _Links, nodes: dict, edges: list) -> None:
    """One hub for an island of 4+ GPUs where every pair has the same NV#, else one edge per NVLink pair."""
    in_hub = set()
    for k, island in enumerate(report["islands"]):
        types = {links.type(a, b) for i, a in enumerate(island) for b in island[i + 1:]}
        t = next(iter(types), None)
        if len(island) >= 4 and len(types) == 1 and t.startswith("NV"):
            bw = bandwidth(links.by_pair[(island[0], island[1])])
            hub = Node(id=f"nvl{k}", kind="hub", members=tuple(island),
                       label=f"NVLink {t} between all {len(island)} GPUs"
                       + (f"\n{bw} per pair, per direction" if bw else ""))
            nodes[hub.id] = hub
            edges += [Edge(n, hub.id, t, "") for n in island]
            in_hub |= {frozenset((a, b)) for i, a in enumerate(island) for b in island[i + 1:]}
    edges += [links.edge(a, b) for a, b in links.pairs()
              if (links.type(a, b) or "").startswith("NV") and frozenset((a, b)) not in in_hub]


def _clusters(links: _Links) -> tuple[list[tuple[str, list[str]]], dict[int, int | None]]:
    """GPU sets whose every PCIe pair is at least PIX, PXB, PHB (finest first), and each one's parent set."""
    clusters: list[tuple[str, list[str]]] = []
    for level in JUNCTIONS:
        r = rank(level)
        for comp in _components(links.gpus, lambda a, b, r=r: links.pcie(a, b) and rank(links.type(a, b)) >= r):
            if len(comp) > 1 and not any(set(comp) == set(c) for _, c in clusters):
                clusters.append((level, comp))
    parent_of = {}
    for i, (_, comp) in enumerate(clusters):
        sup = [j for j, (_, c) in enumerate(clusters) if j != i and set(comp) < set(c)]
        parent_of[i] = min(sup, key=lambda j: len(clusters[j][1])) if sup else None
    return clusters, parent_of


def _junctions(links: _Links, clusters, parent_of, group_of: dict, nodes: dict, edges: list) -> dict[int, str]:
    """A junction node per cluster (a lone pair is an edge instead), wired to its loose GPUs and its parent."""
    jid = {}
    for i, (level, comp) in enumerate(clusters):
        children = [j for j, p in parent_of.items() if p == i]
        loose = [n for n in comp if not any(n in clusters[j][1] for j in children)]
        groups_in = {group_of[n] for n in comp}
        if len(comp) == 2 and parent_of[i] is None:
            edges.append(links.edge(*comp))
            continue
        jid[i] = f"j{i}"
        nodes[jid[i]] = Node(id=jid[i], kind="junction", label=level, members=tuple(comp),
                             group=groups_in.pop() if len(groups_in) == 1 else None)
        edges += [Edge(n, jid[i], level, "") for n in loose]
    for i, j in parent_of.items():
        if j is not None and i in jid:
            edges.append(Edge(jid[i], jid[j], clusters[j][0], ""))
    return jid


def _leftovers(links: _Links, clusters, groups: list[Group], group_of: dict, edges: list) -> str | None:
    """Set each box's class and return the class between boxes; pairs that disagree get their own edge."""
    def joined(a, b):
        """The finest junction class joining a pair, else None."""
        levels = [level for level, comp in clusters if a in comp and b in comp]
        return max(levels, key=rank) if levels else None
    left = [(a, b) for a, b in links.pairs() if links.pcie(a, b) and joined(a, b) is None]
    for g in groups:
        g.default = _commonest([links.type(a, b) for a, b in left if group_of[a] == group_of[b] == g.id])
    between = _commonest([links.type(a, b) for a, b in left if group_of[a] != group_of[b]])
    default = {g.id: g.default for g in groups}
    for a, b in left:
        if links.type(a, b) != (default[group_of[a]] if group_of[a] == group_of[b] else between):
            edges.append(links.edge(a, b))
    # A matrix that is not a tree (rare): say the real class on the pair itself.
    edges += [links.edge(a, b) for a, b in links.pairs()
              if links.pcie(a, b) and joined(a, b) and joined(a, b) != links.type(a, b)]
    return between


def _between(groups: list[Group], between: str | None, nodes: dict, edges: list) -> None:
    """The class between boxes: a hub for 3+ boxes, an edge for two (plot.py draws it its own way)."""
    if between and len(groups) > 2:
        nodes["between"] = Node(id="between", kind="hub", label=f"{between}: between NUMA nodes")
        edges += [Edge(g.id, "between", between, "") for g in groups]
    elif between:
        edges.append(Edge(groups[0].id, groups[1].id, between, between))


def _nic(nic: dict, links: _Links, groups, group_of, junction_of: dict, nodes: dict, edges: list) -> None:
    """A NIC next to its nearest GPUs: a whole box, one junction, or the GPUs themselves."""
    name, gpus = nic["name"], links.gpus
    near = [(n, links.type(name, n)) for n in gpus if links.type(name, n)]
    text = name + (f" · {nic['device']}" if nic.get("device") and nic["device"] != name else "")
    note = ""
    if not near:
        nodes[name] = Node(id=name, kind="nic", label=text)
        return
    best = max((t for _, t in near), key=rank)
    s = {n for n, t in near if t == best}
    whole = [g for g in groups if set(g.gpus) <= s]
    if len(s) == len(gpus) > 2:  # as near to one GPU as to any: say so rather than draw a line to each
        note, targets = f"{best} to all GPUs", []
    elif whole and set().union(*(g.gpus for g in whole)) == s and len(s) > 2:
        targets = [g.id for g in whole]
    elif frozenset(s) in junction_of:
        targets = [junction_of[frozenset(s)]]
    else:
        targets = [n for n in gpus if n in s]
    in_group = {group_of[n] for n in s}
    nodes[name] = Node(id=name, kind="nic", label=text, members=tuple(sorted(s, key=gpus.index)),
                       group=in_group.pop() if len(in_group) == 1 else None, note=note)
    edges += [Edge(name, t, best, best) for t in targets]


def build(report: dict) -> Graph:
    """The drawing of an inspect report: boxes, GPU/junction/hub/NIC nodes, and edges (see the module doc)."""
    links = _Links(report)
    chosen = set(report["selected"]) if len(report["selected"]) < len(links.gpus) else set()
    chosen |= set((report.get("best") or {}).get("gpus") or [])
    groups = _boxes(report)
    group_of = {n: g.id for g in groups for n in g.gpus}
    nodes: dict[str, Node] = {g["name"]: _gpu_node(g, group_of[g["name"]], g["name"] in chosen)
                              for g in report["gpus"]}
    edges: list[Edge] = []
    _nvlink(report, links, nodes, edges)
    clusters, parent_of = _clusters(links)
    jid = _junctions(links, clusters, parent_of, group_of, nodes, edges)
    between = _leftovers(links, clusters, groups, group_of, edges)
    _between(groups, between, nodes, edges)
    junction_of = {frozenset(clusters[i][1]): j for i, j in jid.items()}
    for nic in report["nics"]:
        _nic(nic, links, groups, group_of, junction_of, nodes, edges)
    notes = []
    if any(links.type(a, b) is None for a, b in links.pairs()):
        notes.append("link types unknown for some GPU pairs (no `nvidia-smi topo -m`): not drawn")
    return Graph(groups=groups, nodes=nodes, edges=edges, between_groups=between, notes=notes)


def reading(g: Graph) -> str:
    """One sentence on how to read the drawing."""
    parts = ["Thick lines are NVLink (class and theoretical bandwidth per direction)",
             "PIX/PXB/PHB junctions are PCIe switches or host bridges the GPUs behind them share"]
    inside = sorted({x.default for x in g.groups if x.default}, key=rank)
    if inside:
        parts.append(f"other GPUs in one box are {'/'.join(inside)} apart")
    if g.between_groups:
        parts.append(f"GPUs in different boxes {g.between_groups}")
    parts.append("a pair that differs has its own edge; NICs hang off their nearest GPUs")
    return "; ".join(parts) + "."
