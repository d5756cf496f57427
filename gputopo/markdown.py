"""The inspect report as markdown for a GitHub issue (summary, matrix, Mermaid graph, findings, the source
text), the drawing both Mermaid and --plot use, and reading such a report back. Pure, stdlib only.

The report keeps the `nvidia-smi` text it was made from in fenced blocks, so `gputopo inspect -f report.md`
reads back the same topology, also after e-mail/quote mangling ("> " before every line).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from . import __version__, parse
from .errors import BadInput
from .topology import PCIE_KINDS, rank

# Link classes drawn as junctions (a switch or a host bridge the GPUs share). NODE and SYS are not drawn
# per pair: a NUMA node's box says NODE, the space between boxes SYS (nvidia-smi's legend).
JUNCTIONS = ("PIX", "PXB", "PHB")
MARK = {"error": "❌", "warn": "⚠️", "info": "ℹ️"}


# ---------------------------------------------------------------- the drawing shared by Mermaid and --plot

@dataclass
class Node:
    id: str
    kind: str                          # "gpu", "nic", "junction" (PIX/PXB/PHB), "hub" (NVLink or SYS)
    label: str
    group: str | None = None           # the NUMA box it sits in
    members: tuple[str, ...] = ()      # GPUs a junction or hub joins
    selected: bool = False


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


def _bw(link: dict) -> str:
    return f"{link['bandwidth_gbps']:g} GB/s" if link.get("bandwidth_gbps") else ""


def _label(t: str, link: dict | None = None) -> str:
    bw = _bw(link) if link else ""
    return f"{t} · {bw}" if bw else t


def _short_model(model: str | None) -> str | None:
    return re.sub(r"^NVIDIA\s+|^Tesla\s+|GeForce\s+", "", model).strip() if model else None


def _components(names: list[str], joined) -> list[list[str]]:
    parent = {n: n for n in names}

    def find(x):
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


def graph(report: dict) -> Graph:
    """GPUs in NUMA boxes, NVLink edges (a hub for an all-to-all island), PCIe junctions, NICs by their nearest GPUs.

    Reading rule, checked here for every pair: two GPUs are as close as their NVLink edge, else the first
    PCIe junction that joins them, else their box's class (NODE) or the class between boxes (SYS); a pair
    that breaks the rule gets its own edge, so nothing is drawn wrong.
    """
    gpus = [g["name"] for g in report["gpus"]]
    by = {g["name"]: g for g in report["gpus"]}
    link = {}
    for l in report["links"]:
        link[(l["a"], l["b"])] = link[(l["b"], l["a"])] = l
    ltype = lambda a, b: (link.get((a, b)) or {}).get("type")  # noqa: E731
    pcie = lambda a, b: ltype(a, b) in PCIE_KINDS  # noqa: E731
    chosen = set(report["selected"]) if len(report["selected"]) < len(gpus) else set()
    chosen |= set((report.get("best") or {}).get("gpus") or [])
    nodes: dict[str, Node] = {}
    edges: list[Edge] = []

    # Boxes: NUMA node, else the CPU affinity (a socket), else one box.
    def key(g):
        return ("numa", g["numa_affinity"]) if g["numa_affinity"] is not None else (
            ("cpus", g["cpu_affinity"]) if g["cpu_affinity"] is not None else ("none", ""))
    keys = list(dict.fromkeys(key(by[n]) for n in gpus))
    groups = []
    for i, k in enumerate(keys):
        members = [n for n in gpus if key(by[n]) == k]
        cpus = {by[n]["cpu_affinity"] for n in members} - {None}
        title = {"numa": f"NUMA node {k[1]}", "cpus": "NUMA node N/A", "none": "NUMA node N/A"}[k[0]]
        if len(cpus) == 1:
            title += f" · CPUs {cpus.pop()}"
        groups.append(Group(id=f"box{i}", title=title, gpus=members))
    group_of = {n: g.id for g in groups for n in g.gpus}

    for n in gpus:
        g = by[n]
        lines = [n] + [x for x in (_short_model(g["model"]),) if x]
        if g.get("memory_total_bytes"):
            lines.append(f"{g['memory_total_bytes'] / 2 ** 30:.0f} GiB")
        if g.get("pcie_gbps"):  # live only: the link's generation x width, theoretical per direction
            lines.append(f"PCIe gen{g['pcie_gen_max'] or g['pcie_gen']} x{g['pcie_width_max'] or g['pcie_width']}"
                         f" · {g['pcie_gbps']:g} GB/s")
        nodes[n] = Node(id=n, kind="gpu", label="\n".join(lines), group=group_of[n], selected=n in chosen)

    # NVLink: one hub for an island where every pair has the same NV#, else one edge per pair.
    nv_pairs = [(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1:] if (ltype(a, b) or "").startswith("NV")]
    in_hub = set()
    for k, island in enumerate(report["islands"]):
        types = {ltype(a, b) for i, a in enumerate(island) for b in island[i + 1:]}
        if len(island) >= 4 and len(types) == 1 and next(iter(types)).startswith("NV"):
            t = next(iter(types))
            l = link[(island[0], island[1])]
            hub = Node(id=f"nvl{k}", kind="hub", members=tuple(island),
                       label=f"NVLink {t} between all {len(island)} GPUs" + (f"\n{_bw(l)} per pair, per direction"
                                                                              if _bw(l) else ""))
            nodes[hub.id] = hub
            edges += [Edge(n, hub.id, t, "") for n in island]
            in_hub |= {frozenset((a, b)) for i, a in enumerate(island) for b in island[i + 1:]}
    edges += [Edge(a, b, ltype(a, b), _label(ltype(a, b), link[(a, b)])) for a, b in nv_pairs
              if frozenset((a, b)) not in in_hub]

    # PCIe junctions: clusters of GPUs whose every PCIe pair is at least PIX, PXB, PHB (finest first).
    clusters: list[tuple[str, list[str]]] = []
    for level in JUNCTIONS:
        r = rank(level)
        for comp in _components(gpus, lambda a, b: pcie(a, b) and rank(ltype(a, b)) >= r):
            if len(comp) > 1 and not any(set(comp) == set(c) for _, c in clusters):
                clusters.append((level, comp))
    parent_of = {}
    for i, (_, comp) in enumerate(clusters):
        sup = [j for j, (_, c) in enumerate(clusters) if j != i and set(comp) < set(c)]
        parent_of[i] = min(sup, key=lambda j: len(clusters[j][1])) if sup else None
    jid = {}
    for i, (level, comp) in enumerate(clusters):
        children = [j for j, p in parent_of.items() if p == i]
        loose = [n for n in comp if not any(n in clusters[j][1] for j in children)]
        groups_in = {group_of[n] for n in comp}
        if len(comp) == 2 and parent_of[i] is None:
            a, b = comp
            edges.append(Edge(a, b, level, _label(level, link[(a, b)])))
            continue
        jid[i] = f"j{i}"
        nodes[jid[i]] = Node(id=jid[i], kind="junction", label=level, members=tuple(comp),
                             group=groups_in.pop() if len(groups_in) == 1 else None)
        edges += [Edge(n, jid[i], level, "") for n in loose]
    for i, j in parent_of.items():
        if j is not None and i in jid:
            edges.append(Edge(jid[i], jid[j], clusters[j][0], ""))

    # What the boxes say for the pairs left over; pairs that disagree get their own edge.
    def joined(a, b):
        best = None
        for level, comp in clusters:
            if a in comp and b in comp:
                best = level if best is None or rank(level) > rank(best) else best
        return best
    leftovers = [(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1:] if pcie(a, b) and joined(a, b) is None]
    for g in groups:
        inside = [ltype(a, b) for a, b in leftovers if group_of[a] == group_of[b] == g.id]
        g.default = _commonest(inside)
    across = [ltype(a, b) for a, b in leftovers if group_of[a] != group_of[b]]
    between = _commonest(across)
    for a, b in leftovers:
        expect = next(g.default for g in groups if g.id == group_of[a]) if group_of[a] == group_of[b] else between
        if ltype(a, b) != expect:
            edges.append(Edge(a, b, ltype(a, b), _label(ltype(a, b), link[(a, b)])))
    wrong = [(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1:] if pcie(a, b) and joined(a, b)
             and joined(a, b) != ltype(a, b)]
    for a, b in wrong:  # a matrix that is not a tree (rare): say the real class on the pair itself
        edges.append(Edge(a, b, ltype(a, b), _label(ltype(a, b), link[(a, b)])))
    if between and len(groups) > 2:
        nodes["between"] = Node(id="between", kind="hub", label=f"{between}: between NUMA nodes")
        edges += [Edge(g.id, "between", between, "") for g in groups]
    elif between:
        edges.append(Edge(groups[0].id, groups[1].id, between, between))

    # NICs next to their nearest GPUs: one box, one junction, or the GPUs themselves.
    for nic in report["nics"]:
        name = nic["name"]
        near = [(n, ltype(name, n)) for n in gpus if ltype(name, n)]
        label = name + (f" · {nic['device']}" if nic.get("device") and nic["device"] != name else "")
        if not near:
            nodes[name] = Node(id=name, kind="nic", label=label)
            continue
        best = max((t for _, t in near), key=rank)
        s = {n for n, t in near if t == best}
        whole = [g for g in groups if set(g.gpus) <= s]
        junction = next((jid[i] for i, (_, c) in enumerate(clusters) if i in jid and set(c) == s), None)
        if len(s) == len(gpus) > 2:  # as near to one GPU as to any: say so rather than draw a line to each
            label += f" · {best} to all GPUs"
            targets = []
        elif whole and set().union(*(g.gpus for g in whole)) == s and len(s) > 2:
            targets = [g.id for g in whole]
        elif junction:
            targets = [junction]
        else:
            targets = [n for n in gpus if n in s]
        in_group = {group_of[n] for n in s}
        nodes[name] = Node(id=name, kind="nic", label=label, members=tuple(sorted(s, key=gpus.index)),
                           group=in_group.pop() if len(in_group) == 1 else None)
        edges += [Edge(name, t, best, best) for t in targets]

    notes = []
    if any(ltype(a, b) is None for i, a in enumerate(gpus) for b in gpus[i + 1:]):
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


# ---------------------------------------------------------------- Mermaid

_ID = re.compile(r"[^A-Za-z0-9_]")


def _mid(x: str) -> str:
    return "n_" + _ID.sub("_", x)


def _text(s: str) -> str:
    return s.replace('"', "'").replace("\n", "<br/>")


def mermaid(report: dict) -> str:
    """The graph as a Mermaid `graph` block body (GitHub renders it in issues and READMEs)."""
    g = graph(report)
    out = ["graph TB"]

    def node(n: Node, indent: str) -> str:
        shape = {"gpu": '["{}"]', "nic": '(["{}"])', "junction": '{{{{"{}"}}}}', "hub": '[["{}"]]'}[n.kind]
        return indent + _mid(n.id) + shape.format(_text(n.label))
    for grp in g.groups:
        title = grp.title + (f" · {grp.default} inside" if grp.default and grp.default != "NODE" else "")
        out.append(f'  subgraph {_mid(grp.id)}["{_text(title)}"]')
        out += [node(n, "    ") for n in g.nodes.values() if n.group == grp.id]
        out.append("  end")
    out += [node(n, "  ") for n in g.nodes.values() if n.group is None]
    styles = []
    for i, e in enumerate(g.edges):
        nv = e.type.startswith("NV")
        arrow = "===" if nv else ("-.-" if e.type in ("SYS", "NODE") else "---")
        text = f'|"{_text(e.label)}"|' if e.label else ""
        out.append(f"  {_mid(e.a)} {arrow}{text} {_mid(e.b)}")
        if nv:
            styles.append(str(i))
    out.append("  classDef gpu fill:#e8f1fb,stroke:#1f5fa8")
    out.append("  classDef nic fill:#f4f4f4,stroke:#888,font-size:11px")
    out.append("  classDef sel fill:#fff2cc,stroke:#d62728,stroke-width:3px")
    for kind in ("gpu", "nic"):
        ids = [_mid(n.id) for n in g.nodes.values() if n.kind == kind and not n.selected]
        if ids:
            out.append(f"  class {','.join(ids)} {kind}")
    sel = [_mid(n.id) for n in g.nodes.values() if n.selected]
    if sel:
        out.append(f"  class {','.join(sel)} sel")
    if styles:
        out.append(f"  linkStyle {','.join(styles)} stroke:#2e7d32,stroke-width:4px")
    return "\n".join(out)


# ---------------------------------------------------------------- the whole report

def _fence(text: str, info: str = "text") -> str:
    """A fence longer than any backtick run inside (a paste may carry its own ```)."""
    runs = [len(r) for r in re.findall(r"`{3,}", text)]
    f = "`" * max([3] + [r + 1 for r in runs])
    return f"{f}{info}\n{text.rstrip()}\n{f}"


def _cell(v) -> str:
    return "N/A" if v is None else str(v).replace("|", "\\|")


def matrix_table(report: dict) -> str:
    """The link matrix as a markdown table, NVLink in bold."""
    labels = [g["name"] for g in report["gpus"]] + [n["name"] for n in report["nics"]]
    cell = {}
    for l in report["links"]:
        t = l["type"] or "?"
        cell[(l["a"], l["b"])] = cell[(l["b"], l["a"])] = f"**{t}**" if t.startswith("NV") else t
    rows = [["", *labels, "CPU Affinity", "NUMA Affinity"], ["---"] * (len(labels) + 3)]
    for g in report["gpus"]:
        rows.append([f"**{g['name']}**", *("X" if g["name"] == c else cell.get((g["name"], c), "") for c in labels),
                     _cell(g["cpu_affinity"]), _cell(g["numa_affinity"])])
    for n in report["nics"]:
        name = n["name"] + (f" ({n['device']})" if n.get("device") and n["device"] != n["name"] else "")
        rows.append([name, *("X" if n["name"] == c else cell.get((n["name"], c), "") for c in labels), "", ""])
    return "\n".join("| " + " | ".join(r) + " |" for r in rows)


def summary(report: dict) -> str:
    """One line: GPUs and model, driver, link classes, islands, NICs, NUMA nodes."""
    gpus = report["gpus"]
    models = list(dict.fromkeys(g["model"] for g in gpus if g["model"]))
    what = f"{len(gpus)}x {' + '.join(models)}" if models else f"{len(gpus)} GPU(s), model unknown"
    types: dict[str, int] = {}
    for l in report["links"]:
        if l["a"].startswith("GPU") and l["b"].startswith("GPU"):
            types[l["type"] or "unknown"] = types.get(l["type"] or "unknown", 0) + 1
    order = sorted(types, key=lambda t: rank(t if t != "unknown" else None), reverse=True)
    links = ", ".join(f"{t} ({n} pair{'s' * (n != 1)})" for t, n in ((t, types[t]) for t in order)) or "none"
    isl = report["islands"]
    islands = ("NVLink islands: " + " ".join("{" + ",".join(n[3:] for n in i) + "}" for i in isl)) if isl else "no NVLink"
    numa = {g["numa_affinity"] for g in gpus} - {None}
    parts = [what, f"driver {report.get('driver') or 'N/A'}", f"links: {links}", islands,
             f"{len(report['nics'])} NIC(s)", f"{len(numa)} NUMA node(s)" if numa else "NUMA N/A"]
    return " · ".join(parts)


def report(data: dict, pasted: list[tuple[str, str]]) -> str:
    """The inspect report as GitHub-flavoured markdown. `pasted`: (name, text) of the texts read, else []."""
    src = ", ".join(data["inputs"]) if data["inputs"] else data["source"]
    out = [f"### GPU topology (gputopo {__version__}, from {src})", "", "**" + summary(data) + "**", ""]
    if len(data["selected"]) < len(data["gpus"]):
        out += [f"Selected: {', '.join(data['selected'])} (highlighted)", ""]
    if data.get("best"):
        b = data["best"]
        out += [f"Best {b['k']} GPU(s): {', '.join(b['gpus'])} (highlighted) — `{b['command']}`", ""]
    out += [matrix_table(data), ""]
    g = graph(data)
    out += ["```mermaid", mermaid(data), "```", "", f"<sub>{reading(g)}</sub>", ""]
    if data.get("links_note"):
        out += [data["links_note"], ""]
    out.append("#### Findings")
    out += [f"- {MARK[f['level']]} **{f['subject']}**: {f['message']}" for f in data["findings"]] or ["- none"]
    out += [f"- ℹ️ {n}" for n in data["notes"] + g.notes]
    r = data["recommendation"]
    if r:
        out += ["", f"**Recommendation ({r['basis']}): {r['strategy'] or 'none yet'}**"] + [f"- {x}" for x in r["reasons"]]
    out += ["", "<details><summary>Source text (<code>gputopo inspect -f</code> reads this report back)</summary>", ""]
    for name, text in source_texts(data, pasted):
        out += [name, "", _fence(text), ""]
    out.append("</details>")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- nvidia-smi text from the report

def source_texts(data: dict, pasted: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """What goes in the fenced blocks: the pasted texts as given, else `topo -m` (and more) regenerated."""
    out = []
    listed = set()
    for _, text in pasted:
        try:
            if parse.kind(text) == "nvlink":
                listed |= {g.name for g in parse.gpu_list(text) if g.model}
        except BadInput:
            pass
    named = [g for g in data["gpus"] if g["model"] and g["name"] not in listed]
    if named:
        # Placed first: a pasted `nvlink -s` read after it keeps its own NVLink states.
        out.append((f"GPU models{' (from --gpu-model or the example)' if pasted else ''}, as `nvidia-smi -L` prints them:",
                    gpu_list_text(data)))
    if pasted:
        out += [(f"`{name}` as given:", "\n".join(parse.clean(text))) for name, text in pasted]
        return out
    out.append((f"`nvidia-smi topo -m`, regenerated by gputopo from {data['source']}:", topo_text(data)))
    modes = sorted({m for l in data["links"] for m in (l["p2p"] or {})})
    out += [(f"`nvidia-smi topo -p2p {m}`, regenerated by gputopo:", p2p_text(data, m)) for m in modes]
    return out


def gpu_list_text(data: dict) -> str:
    """`nvidia-smi -L` lines. Command line equivalent: `nvidia-smi -L`."""
    return "\n".join(f"GPU {g['index']}: {g['model'] or ''}" + (f" (UUID: {g['uuid']})" if g["uuid"] else "")
                     for g in data["gpus"])


def topo_text(data: dict) -> str:
    """`nvidia-smi topo -m` text equal to the report's topology (NIC-NIC cells unknown: N/A)."""
    gpus, nics = data["gpus"], data["nics"]
    labels = [g["name"] for g in gpus] + [n["name"] for n in nics]
    cell = {}
    for l in data["links"]:
        cell[(l["a"], l["b"])] = cell[(l["b"], l["a"])] = l["type"] or "N/A"
    numa_id = any(g.get("gpu_numa_id") is not None for g in gpus)
    trailers = ["CPU Affinity", "NUMA Affinity"] + (["GPU NUMA ID"] if numa_id else [])
    head = f"# nvidia-smi topo -m   (regenerated by gputopo {__version__}"
    head += f"; Driver Version: {data['driver']})" if data.get("driver") else ")"
    lines = [head, "\t" + "\t".join(labels + trailers)]

    def row(name):
        return [" X " if c == name else cell.get((name, c), "N/A") for c in labels]
    for g in gpus:
        extra = [g["cpu_affinity"], g["numa_affinity"]] + ([g.get("gpu_numa_id")] if numa_id else [])
        lines.append("\t".join([g["name"], *row(g["name"]), *(_cell(v) for v in extra)]))
    lines += ["\t".join([n["name"], *row(n["name"])]) for n in nics]
    legend = [n for n in nics if n.get("device") and n["device"] != n["name"]]
    if legend:
        lines += ["", "NIC Legend:", ""] + [f"  {n['name']}: {n['device']}" for n in legend]
    return "\n".join(lines)


def p2p_text(data: dict, mode: str) -> str:
    """`nvidia-smi topo -p2p MODE` text from the P2P statuses the report holds."""
    names = [g["name"] for g in data["gpus"]]
    cell = {}
    for l in data["links"]:
        if l["p2p"] and mode in l["p2p"]:
            cell[(l["a"], l["b"])] = cell[(l["b"], l["a"])] = l["p2p"][mode]
    lines = [f"# nvidia-smi topo -p2p {mode}   (regenerated by gputopo)", "\t" + "\t".join(names)]
    lines += ["\t".join([a, *(("X" if a == b else cell.get((a, b), "U")) for b in names)]) for a in names]
    return "\n".join(lines)
