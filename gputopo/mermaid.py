"""The topology drawing (graph.py) as a Mermaid flowchart that reads where it is pasted: a GitHub comment,
about 800 px wide, in a light or a dark theme. Pure, stdlib only.

What makes it read at that width (measured with real Mermaid: tests/test_mermaid_render.py):
- what every GPU shares (model, PCIe link) is said once in the title, so a GPU node is narrow;
- GPUs wrap into rows of at most ROW (invisible `~~~` links put the next row under the first), NUMA boxes
  sit side by side only while the row stays under BUDGET px, else they stack;
- NICs that hang off the same GPUs are one node listing them; a NIC is drawn in its box with no line to
  the box it sits in (membership says it);
- an NVLink island that covers whole boxes is a box around them, not a hub wired to every GPU; the class
  between boxes (SYS) is said in the title, not drawn as a line whose label would land on other lines;
- every class sets fill, stroke and text colour, so text keeps its contrast in a dark theme.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from .graph import Edge, Graph, Node, build

BUDGET = 760          # px a row of boxes may take (a comment is ~800 px; boxes add padding)
ROW = 4               # most GPUs side by side
# Mermaid's default 16 px font as chromium draws it with a fallback font (wider than a reader's Arial or
# Trebuchet, so estimates err on the narrow side): px per character, node padding, gap between nodes.
CHAR_PX, PAD_PX, GAP_PX = 8.8, 62, 50
NIC_LINE = 24         # characters per line of a merged NIC node

CLASSES = {  # fill, stroke, text colour: dark text on light fills in both themes
    "gpu": "fill:#e8f1fb,stroke:#1f5fa8,color:#0b2545",
    "sel": "fill:#fff2cc,stroke:#d62728,stroke-width:3px,color:#3b2300",
    "nic": "fill:#f4f4f4,stroke:#666666,color:#222222",
    "junction": "fill:#f3e5f5,stroke:#6a1b9a,color:#38006b",
    "hub": "fill:#e8f5e9,stroke:#2e7d32,color:#1b5e20",
}
NVLINK_STYLE = "stroke:#3d9a41,stroke-width:4px"
SHAPES = {"gpu": '["{}"]', "nic": '(["{}"])', "junction": '{{{{"{}"}}}}', "hub": '[["{}"]]'}
_ID = re.compile(r"[^A-Za-z0-9_]")


@dataclass
class _View:
    """The graph as Mermaid draws it: merged NICs, wrappers, invisible links, the title."""
    g: Graph
    title: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)       # node id -> label shown
    wrappers: list[tuple[str, str, list[str]]] = field(default_factory=list)  # id, title, box ids
    edges: list[tuple[str, str, str, str]] = field(default_factory=list)      # a, b, type, label
    hidden: list[tuple[str, str]] = field(default_factory=list)               # invisible links
    nic_edges: list[tuple[str, str, str, str]] = field(default_factory=list)  # drawn after the GPUs' own


def mid(x: str) -> str:
    """A Mermaid-safe node id."""
    return "n_" + _ID.sub("_", x)


def _text(s: str) -> str:
    """A label as Mermaid text: no double quotes, <br/> for new lines."""
    return s.replace('"', "'").replace("\n", "<br/>")


def _width(label: str) -> float:
    """Estimated px width of a node with this label (longest line)."""
    return max(len(line) for line in label.split("\n")) * CHAR_PX + PAD_PX


def _common_lines(v: _View) -> None:
    """Lines every GPU shares (model, memory, PCIe link) go to the title; each GPU keeps the rest."""
    gpus = [n for n in v.g.nodes.values() if n.kind == "gpu"]
    split = {n.id: n.label.split("\n") for n in gpus}
    shared = [x for x in split[gpus[0].id][1:] if all(x in lines[1:] for lines in split.values())] \
        if len(gpus) > 1 else []
    if shared:
        v.title.append(f"{len(gpus)}x " + " · ".join(shared))
    for n in gpus:
        v.labels[n.id] = "\n".join(x for x in split[n.id] if x not in shared)


def _hubs(v: _View) -> set[str]:
    """NVLink islands that are whole boxes become a box around them; returns the hub ids so drawn.
    With more than one island each is named by its GPUs ("between all 4 GPUs" twice would not say which)."""
    done = set()
    islands = [n for n in v.g.nodes.values() if n.kind == "hub" and n.members]
    gpus = sum(1 for n in v.g.nodes.values() if n.kind == "gpu")
    for n in islands:
        label = n.label
        if len(n.members) < gpus:
            label = label.replace(f" all {len(n.members)} GPUs", "\nGPUs " + ", ".join(m[3:] for m in n.members))
        boxes = [grp.id for grp in v.g.groups if set(grp.gpus) <= set(n.members)]
        covered = {x for grp in v.g.groups if grp.id in boxes for x in grp.gpus}
        if covered == set(n.members):
            v.wrappers.append((f"{n.id}_box", label.replace("between\n", "between ").replace("\n", " · "), boxes))
            done.add(n.id)
        else:
            v.labels[n.id] = label
    return done


def _nics(v: _View) -> dict[str, str]:
    """NICs with the same box, targets and class become one node; returns NIC id -> merged node id."""
    own = {}
    by_key: dict[tuple, list[Node]] = {}
    for n in v.g.nodes.values():
        if n.kind != "nic":
            continue
        out = [e for e in v.g.edges if e.a == n.id]
        # A line from a NIC to the box it sits in has no length: the box says it; keep the class in words.
        box = next((grp.gpus for grp in v.g.groups if grp.id == n.group), [])
        if len(box) > 1 and {e.b for e in out} == set(box) and {e.type for e in out} == {"NODE"}:
            out = [Edge(n.id, n.group, "NODE", "")]   # NODE to every GPU of its box: what the box means
        inside = [e for e in out if e.b == n.group]
        note = n.note or (f"{inside[0].type} to the GPUs here" if inside else "")
        targets = tuple((e.b, e.type) for e in out if e.b != n.group)
        by_key.setdefault((n.group, targets, note), []).append(n)
    for (_group, targets, note), nics in by_key.items():
        key = nics[0].id if len(nics) == 1 else f"nics_{nics[0].id}"
        names = [n.label.split(" · ")[0] + (f" ({n.label.split(' · ')[1]})" if " · " in n.label else "")
                 for n in nics]
        rows = _wrap(names)
        v.labels[key] = "\n".join(rows + ([note] if note else []))
        for n in nics:
            own[n.id] = key
        for t, typ in targets:  # NICs below what they hang off (TB ranks follow the edge's direction)
            v.nic_edges.append((t, key, typ, typ))
    return own


def _mesh(v: _View) -> set[int]:
    """A dense NVLink mesh (a GPU with 3+ NVLink edges, e.g. a hybrid cube-mesh) cannot be drawn narrow:
    each GPU lists its peers by class instead, the bandwidths go to the title. Returns the edges so told."""
    gpu = {n for n, x in v.g.nodes.items() if x.kind == "gpu"}
    nv = [i for i, e in enumerate(v.g.edges) if e.type.startswith("NV") and e.a in gpu and e.b in gpu]
    degree: dict[str, int] = {}
    for i in nv:
        for n in (v.g.edges[i].a, v.g.edges[i].b):
            degree[n] = degree.get(n, 0) + 1
    if max(degree.values(), default=0) < 3:
        return set()
    peers: dict[str, dict[str, list[str]]] = {}
    for i in nv:
        e = v.g.edges[i]
        peers.setdefault(e.a, {}).setdefault(e.type, []).append(e.b)
        peers.setdefault(e.b, {}).setdefault(e.type, []).append(e.a)
    for n, by in peers.items():
        lines = [f"{t}: {', '.join(sorted(by[t], key=list(v.labels).index))}"
                 for t in sorted(by, key=lambda t: -int(t[2:] or 1))]
        v.labels[n] += "\n" + "\n".join(lines)
    bws = dict.fromkeys(v.g.edges[i].label.replace(" · ", " ") for i in nv if " · " in v.g.edges[i].label)
    v.title.append("NVLink" + (f" per direction: {', '.join(bws)}" if bws else " peers listed per GPU"))
    return set(nv)


def _wrap(names: list[str]) -> list[str]:
    """Names joined by commas, a new line before one that would pass NIC_LINE characters."""
    rows = [names[0]]
    for x in names[1:]:
        if len(rows[-1]) + 2 + len(x) > NIC_LINE:
            rows[-1] += ","
            rows.append(x)
        else:
            rows[-1] += ", " + x
    return rows


def _edges(v: _View, hubs: set[str], nics: dict[str, str]) -> None:
    """GPU, junction and hub edges as drawn; the class between boxes is left to the title."""
    boxes = {grp.id for grp in v.g.groups}
    told = _mesh(v)
    for i, e in enumerate(v.g.edges):
        if i in told or e.a in nics or e.b in hubs or e.b == "between" or (e.a in boxes and e.b in boxes):
            continue
        hub = v.g.nodes.get(e.b)
        if hub and hub.kind == "hub" and v.g.nodes[e.a].group != v.g.nodes[hub.members[0]].group:
            v.edges.append((e.b, e.a, e.type, e.label))   # a hub across boxes: under the first, over the rest
            continue
        v.edges.append((e.a, e.b, e.type, e.label))
    if v.g.between_groups:
        v.title.append(f"GPUs in different boxes: {v.g.between_groups}")


def _ranks(nodes, edges) -> dict[str, int]:
    """Row of every node, as dagre ranks them (longest path: an edge goes one row down)."""
    row = {n: 0 for n in nodes}
    for _ in range(len(row)):
        moved = False
        for a, b in edges:
            if a in row and b in row and row[b] < row[a] + 1:
                row[b], moved = row[a] + 1, True
        if not moved:
            break
    return row


def _rows(v: _View) -> None:
    """Invisible links: GPUs wrap into rows that fit, boxes stack when side by side would not fit."""
    gpu_w = max(_width(v.labels[n]) for n in v.labels if v.g.nodes.get(n) and v.g.nodes[n].kind == "gpu")
    fit = max(1, min(ROW, int((BUDGET + GAP_PX) // (gpu_w + GAP_PX))))
    # Rows as even as they can be (4 GPUs in rows of at most 3: 2 + 2, not 3 + 1).
    per_row = max(-(-len(grp.gpus) // -(-len(grp.gpus) // fit)) for grp in v.g.groups)
    for grp in v.g.groups:
        v.hidden += [(a, b) for a, b in zip(grp.gpus, grp.gpus[per_row:])]
        # A node of the box on no line (NICs told by a note) goes under the GPUs, not beside them.
        last = grp.gpus[(len(grp.gpus) - 1) // per_row * per_row:]
        v.hidden += [(g, k) for k in v.labels if _group(v, k) == grp.id and k not in grp.gpus
                     and not any(k in (a, b) for a, b, _, _ in v.edges) for g in last]
    widths = {grp.id: _box_width(v, grp, gpu_w, per_row) for grp in v.g.groups}
    line, used, prev = [], 0.0, []
    for grp in v.g.groups:
        if line and used + GAP_PX + widths[grp.id] > BUDGET:
            prev, line, used = line, [], 0.0
        elif line:
            used += GAP_PX
        line.append(grp)
        used += widths[grp.id]
        if prev:  # under the box of the same column: a grid, not a diagonal
            v.hidden += _stack(v, _bottom(v, prev[min(len(line), len(prev)) - 1]), grp.gpus[:per_row])
    # Nodes in no box and on no line (NICs far from every GPU) go under the last row, not beside the first.
    free = [n for n in v.labels if _group(v, n) is None and not any(n in (a, b) for a, b, _, _ in v.edges)]
    v.hidden += [(_bottom(v, line[-1])[-1], n) for n in free if v.g.groups]


def _box_width(v: _View, grp, gpu_w: float, per_row: int) -> float:
    """Estimated px width of a box: its widest row of GPUs or of NIC/junction nodes, or its title."""
    n = min(len(grp.gpus), per_row)
    others = [k for k in v.labels if k not in grp.gpus and _group(v, k) == grp.id]
    return max(n * gpu_w + (n - 1) * GAP_PX, sum(_width(v.labels[k]) + GAP_PX for k in others),
               len(grp.title) * CHAR_PX) + 2 * 16


def _group(v: _View, node_id: str) -> str | None:
    """The box a (possibly merged) node sits in."""
    n = v.g.nodes.get(node_id) or v.g.nodes.get(node_id.removeprefix("nics_"))
    return n.group if n else None


def _bottom(v: _View, grp) -> list[str]:
    """A box's sinks, in order: its nodes with no line down to another of its nodes (the next box goes
    under all of them; linking only the lowest ones lets dagre set the boxes side by side or askew)."""
    inside = [k for k in v.labels if _group(v, k) == grp.id]
    down = {a for a, b, _, _ in v.edges if b in inside} | {a for a, b in v.hidden if b in inside}
    return [k for k in inside if k not in down]


def _stack(v: _View, above: list[str], top: list[str]) -> list[tuple[str, str]]:
    """Invisible links from every sink of the box above to the top row below, spread one to one (so the
    boxes line up), and from its lowest sink to each of the top row (so the row is under all of it)."""
    n = max(len(above), len(top))
    spread = [(above[min(i * len(above) // n, len(above) - 1)], top[min(i * len(top) // n, len(top) - 1)])
              for i in range(n)]
    row = _ranks(list(v.labels), [(a, b) for a, b, _, _ in v.edges] + v.hidden)
    low = max(above, key=lambda k: row[k])
    if all(row[k] == row[low] for k in above):  # one bottom row: the spread links put the box under it
        return spread
    return spread + [(low, t) for t in top if (low, t) not in spread]


def view(report: dict) -> _View:
    """The graph of a report, arranged for Mermaid."""
    v = _View(build(report))
    _common_lines(v)
    hubs = _hubs(v)
    for n in v.g.nodes.values():
        if n.kind == "junction":
            v.labels[n.id] = n.label
    nics = _nics(v)
    _edges(v, hubs, nics)
    v.edges += v.nic_edges
    v.title += [w[1] for w in v.wrappers if len(v.wrappers) == 1 and len(w[2]) == len(v.g.groups)]
    _rows(v)
    return v


def _node(v: _View, key: str, indent: str) -> str:
    """A node line: id, shape by kind, label."""
    n = v.g.nodes.get(key)
    kind = n.kind if n else "nic"
    return indent + mid(key) + SHAPES[kind].format(_text(v.labels[key]))


def _boxes(v: _View) -> list[str]:
    """Subgraphs: NUMA boxes with their nodes, inside an NVLink wrapper when one covers them."""
    out = []
    whole = [w for w in v.wrappers if len(v.wrappers) == 1 and len(w[2]) == len(v.g.groups)]
    wrapped = {b: w for w in v.wrappers if w not in whole for b in w[2]}
    for w in v.wrappers:
        if w not in whole:
            out.append(f'  subgraph {mid(w[0])}["{_text(w[1])}"]')
            out += _box(v, [grp for grp in v.g.groups if grp.id in w[2]], "    ")
            out.append("  end")
    out += _box(v, [grp for grp in v.g.groups if grp.id not in wrapped], "  ")
    return out


def _box(v: _View, groups, indent: str) -> list[str]:
    """NUMA boxes as subgraphs, laid out top to bottom inside."""
    out = []
    for grp in groups:
        title = grp.title + (f" · {grp.default} inside" if grp.default and grp.default != "NODE" else "")
        out.append(f'{indent}subgraph {mid(grp.id)}["{_text(title)}"]')
        out.append(f"{indent}  direction TB")  # a box with no line out is laid out alone: keep it TB
        out += [_node(v, k, indent + "  ") for k in v.labels if _group(v, k) == grp.id]
        out.append(f"{indent}end")
    return out


def block(report: dict) -> str:
    """The graph as a Mermaid flowchart (the body of a ```mermaid block; GitHub renders it)."""
    v = view(report)
    out = []
    if v.title:  # front matter: Mermaid draws the title above the chart
        out += ["---", "title: " + _yaml(" · ".join(v.title)), "---"]
    out.append("flowchart TB")
    out += _boxes(v)
    out += [_node(v, k, "  ") for k in v.labels if _group(v, k) is None]
    nv = []
    for i, (a, b, t, text) in enumerate(v.edges):
        arrow = "===" if t.startswith("NV") else ("-.-" if t in ("SYS", "NODE") else "---")
        out.append(f"  {mid(a)} {arrow}{f'|{chr(34)}{_text(text)}{chr(34)}|' if text else ''} {mid(b)}")
        if t.startswith("NV"):
            nv.append(str(i))
    out += [f"  {mid(a)} ~~~ {mid(b)}" for a, b in dict.fromkeys(v.hidden)]
    out += [f"  classDef {k} {s}" for k, s in CLASSES.items()]
    out += _classes(v)
    if nv:
        out.append(f"  linkStyle {','.join(nv)} {NVLINK_STYLE}")
    return "\n".join(out)


def _yaml(s: str) -> str:
    """A YAML double-quoted string."""
    return '"' + s.replace("\\", "\\\\").replace('"', "'") + '"'


def _classes(v: _View) -> list[str]:
    """`class` lines: each node's kind, selected GPUs highlighted."""
    by: dict[str, list[str]] = {}
    for k in v.labels:
        n = v.g.nodes.get(k)
        kind = "nic" if n is None else ("sel" if n.selected else n.kind)
        by.setdefault(kind, []).append(mid(k))
    return [f"  class {','.join(ids)} {kind}" for kind, ids in by.items()]
