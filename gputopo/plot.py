"""`gputopo inspect --plot`: the topology drawing (markdown.graph) as a PNG or SVG with matplotlib.

GPUs in one row, boxed by NUMA node; NVLink above the row (arcs, or a bar for an all-to-all island), PCIe
junctions and NICs below. Labels are placed where they overlap nothing already drawn.
matplotlib is imported only here, and only when --plot is given.
"""
from __future__ import annotations

import io
import textwrap

from .graph import Graph, build as graph, reading
from .markdown import summary
from .topology import rank

W, H = 1.35, 0.8            # GPU box, inches (the axes are drawn 1:1 in inches)
STEP, GAP = 1.75, 0.7       # GPU to GPU, extra between NUMA boxes
NIC_W, NIC_H = 1.25, 0.42
COLORS = {"NV": "#2e7d32", "PIX": "#1565c0", "PXB": "#1565c0", "PHB": "#6a1b9a", "NODE": "#ef6c00", "SYS": "#c62828"}


def style(t: str) -> dict:
    """Line style by link class: NV# thick (thicker with more links), PCIe thinner, NODE/SYS dashed."""
    if t.startswith("NV"):
        n = int(t[2:] or 1)
        return {"color": COLORS["NV"], "lw": min(1.8 + 1.0 * n, 7.0), "ls": "-"}
    return {"color": COLORS.get(t, "#555"), "lw": {"PIX": 2.2, "PXB": 1.8, "PHB": 1.4}.get(t, 1.0),
            "ls": {"NODE": (0, (5, 3)), "SYS": (0, (2, 2.5))}.get(t, "-")}


class _Placer:
    """Puts labels where their box meets no box already taken (node boxes and earlier labels)."""

    def __init__(self, fig, ax):
        self.fig, self.ax, self.taken = fig, ax, []
        self.renderer = fig.canvas.get_renderer()

    def block(self, x0, y0, x1, y1):
        self.taken.append((x0, y0, x1, y1))

    def extent(self, text):
        bb = text.get_window_extent(self.renderer).transformed(self.ax.transData.inverted())
        return bb.x0, bb.y0, bb.x1, bb.y1

    def free(self, box):
        pad = 0.03
        return all(box[2] + pad < t[0] or t[2] + pad < box[0] or box[3] + pad < t[1] or t[3] + pad < box[1]
                   for t in self.taken)

    def place(self, text, candidates):
        """Move `text` to the first free candidate point; the first one if none is free."""
        for x, y in candidates:
            text.set_position((x, y))
            box = self.extent(text)
            if self.free(box):
                self.taken.append(box)
                return True
        text.set_position(candidates[0])
        self.taken.append(self.extent(text))
        return False


def _mean(x: dict, names) -> float:
    return sum(x[n] for n in names) / len(names)


def _title(grp) -> str:
    return grp.title + (f" · {grp.default} inside" if grp.default and grp.default != "NODE" else "")


def _bezier(p0, p1, p2, t):
    return ((1 - t) ** 2 * p0[0] + 2 * (1 - t) * t * p1[0] + t ** 2 * p2[0],
            (1 - t) ** 2 * p0[1] + 2 * (1 - t) * t * p1[1] + t ** 2 * p2[1])


def render(report: dict, fmt: str) -> bytes:
    """The drawing as PNG or SVG bytes."""
    buf = io.BytesIO()
    figure(report).savefig(buf, format=fmt, dpi=110)
    return buf.getvalue()


def figure(report: dict):
    """The drawing as a matplotlib Figure (Agg canvas, no pyplot state)."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyBboxPatch
    from matplotlib.path import Path
    from matplotlib.patches import PathPatch

    g: Graph = graph(report)
    nodes = g.nodes
    longest = max((len(line) for n in nodes.values() if n.kind == "gpu" for line in n.label.split("\n")), default=0)
    W = max(1.35, 0.066 * longest + 0.2)   # GPU boxes as wide as their longest line (7.5 pt text)
    STEP = W + 0.4
    nics = [n for n in nodes.values() if n.kind == "nic"]
    # Each NUMA box: its GPUs in a row, its NICs in a row below, each as near as it can be to the mean of
    # its nearest GPUs without touching the next; boxes side by side. NICs near no one GPU go on the right.
    x, nic_pos, box_span, cursor = {}, {}, {}, 0.0
    for grp in g.groups:
        count = sum(1 for n in nics if n.group == grp.id)   # GPUs spread out when their NICs need the room
        local = {n: i * max(STEP, count / len(grp.gpus) * (NIC_W + 0.15)) for i, n in enumerate(grp.gpus)}
        mine = sorted((n for n in nics if n.group == grp.id), key=lambda n: _mean(local, n.members))
        want = [_mean(local, n.members) for n in mine]
        pos: list[float] = []
        for w in want:
            pos.append(max(w, pos[-1] + NIC_W + 0.15) if pos else w)
        shift = (sum(pos) - sum(want)) / len(pos) if pos else 0.0
        pos = [p - shift for p in pos]
        lo = min([-W / 2] + [p - NIC_W / 2 for p in pos]) - 0.25
        hi = max([local[grp.gpus[-1]] + W / 2] + [p + NIC_W / 2 for p in pos]) + 0.25
        hi = max(hi, lo + 0.068 * len(_title(grp)) + 0.3)   # the box's title fits in it
        for n, v in local.items():
            x[n] = v + cursor - lo
        for n, p in zip(mine, pos):
            nic_pos[n.id] = p + cursor - lo
        box_span[grp.id] = (cursor, cursor + hi - lo)
        cursor += hi - lo + GAP
    right = cursor - GAP
    hubs = [n for n in nodes.values() if n.kind == "hub" and n.members]
    nv_edges = [e for e in g.edges if e.type.startswith("NV") and e.a in x and e.b in x]
    span_max = max([abs(x[e.a] - x[e.b]) for e in nv_edges] + [0])
    top = H / 2 + 0.45 + 0.5 * len(hubs) + (0.32 * span_max / STEP + 0.4 if nv_edges else 0)
    depth = {"PIX": 0, "PXB": 1, "PHB": 2}
    junctions = [n for n in nodes.values() if n.kind == "junction"]
    levels = sorted({depth[j.label] for j in junctions})
    jy = {lv: -H / 2 - 0.55 - 0.55 * i for i, lv in enumerate(levels)}
    pcie_arcs = [abs(x[e.a] - x[e.b]) for e in g.edges if e.a in x and e.b in x and not e.type.startswith("NV")]
    floor = min([-H / 2] + list(jy.values()) + ([-H / 2 - 0.32 * max(pcie_arcs) / STEP - 0.55] if pcie_arcs else []))
    nic_top = floor - 0.75
    for n in nics:
        if n.id in nic_pos:
            nic_pos[n.id] = (nic_pos[n.id], nic_top)
    box_bottom = min([p[1] for p in nic_pos.values()] + [floor])
    box_bottom -= NIC_H / 2 + 0.45 if nic_pos else 0.5
    # NICs no nearer to one box than to another: a row (or rows) under the boxes.
    orphans = [n for n in nics if n.id not in nic_pos]
    per_row = max(1, int(right // (NIC_W + 0.15)))
    for i, n in enumerate(orphans):
        nic_pos[n.id] = (NIC_W / 2 + 0.1 + (i % per_row) * (NIC_W + 0.15),
                         box_bottom - 0.3 - NIC_H / 2 - (i // per_row) * (NIC_H + 0.15))
    bottom = min([p[1] for p in nic_pos.values()] + [box_bottom + NIC_H / 2]) - NIC_H / 2 - 0.35
    xmax = max(right, NIC_W + 0.4)
    xmin = -0.35
    legend_h = 1.45
    fig_w = max(xmax - xmin + 0.3, 7.5)
    title_lines = textwrap.wrap(summary(report), width=int(fig_w * 12))
    title_h = 0.28 * len(title_lines) + 0.4
    fig_h = top - bottom + title_h + legend_h
    fig = Figure(figsize=(fig_w, fig_h), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(xmin, xmin + fig_w)
    ax.set_ylim(bottom - legend_h, bottom - legend_h + fig_h)
    ax.set_axis_off()
    place = _Placer(fig, ax)

    # Boxes per NUMA node, GPUs, junctions, hubs, NICs.
    for grp in g.groups:
        x0, x1 = box_span[grp.id]
        ax.add_patch(FancyBboxPatch((x0, box_bottom), x1 - x0, H / 2 + 0.38 - box_bottom,
                                    boxstyle="round,pad=0,rounding_size=0.12", fc="#f7f7f2", ec="#999", lw=1,
                                    zorder=-1))
        t = ax.text(x0 + 0.08, box_bottom + 0.06, _title(grp), fontsize=7.5, va="bottom", ha="left", color="#444")
        place.taken.append(place.extent(t))
    for n, cx in x.items():
        node = nodes[n]
        sel = node.selected
        ax.add_patch(FancyBboxPatch((cx - W / 2, -H / 2), W, H, boxstyle="round,pad=0,rounding_size=0.08",
                                    fc="#fff2cc" if sel else "#e8f1fb", ec="#d62728" if sel else "#1f5fa8",
                                    lw=3 if sel else 1.3, zorder=3))
        ax.text(cx, 0, node.label, ha="center", va="center", fontsize=7.5, zorder=4,
                fontweight="bold" if sel else "normal", linespacing=1.25)
        place.block(cx - W / 2, -H / 2, cx + W / 2, H / 2)
    jpos = {}
    for j in junctions:
        cx = sum(x[m] for m in j.members) / len(j.members)
        jpos[j.id] = (cx, jy[depth[j.label]])
    for nid, (cx, cy) in jpos.items():
        ax.add_patch(FancyBboxPatch((cx - 0.22, cy - 0.13), 0.44, 0.26, boxstyle="round,pad=0,rounding_size=0.1",
                                    fc="white", ec=style(nodes[nid].label)["color"], lw=1.3, zorder=3))
        ax.text(cx, cy, nodes[nid].label, ha="center", va="center", fontsize=7, zorder=4,
                color=style(nodes[nid].label)["color"])
        place.block(cx - 0.22, cy - 0.13, cx + 0.22, cy + 0.13)
    hub_y = {}
    for i, h in enumerate(hubs):
        xs = [x[m] for m in h.members]
        cy = H / 2 + 0.55 + 0.5 * i
        hub_y[h.id] = cy
        ax.add_patch(FancyBboxPatch((min(xs) - W / 2, cy - 0.17), max(xs) - min(xs) + W, 0.34,
                                    boxstyle="round,pad=0,rounding_size=0.1", fc="#e8f5e9", ec=COLORS["NV"], lw=1.5,
                                    zorder=2))
        ax.text((min(xs) + max(xs)) / 2, cy, h.label.replace("\n", " · "), ha="center", va="center", fontsize=7.5,
                zorder=4, color="#1b5e20")
        place.block(min(xs) - W / 2, cy - 0.17, max(xs) + W / 2, cy + 0.17)
    for n in nics:
        cx, cy = nic_pos[n.id]
        t = [e for e in g.edges if e.a == n.id]
        cls = t[0].type if t else None
        ax.add_patch(FancyBboxPatch((cx - NIC_W / 2, cy - NIC_H / 2), NIC_W, NIC_H,
                                    boxstyle="round,pad=0,rounding_size=0.06", fc="#f4f4f4", ec="#777", lw=1, zorder=3))
        near = ",".join(m[3:] for m in n.members) if len(n.members) < 5 else f"{len(n.members)} GPUs"
        text = "\n".join(n.label.split(" · ")) + (f"\n{cls} to GPU {near}" if cls else "") + (
            f"\n{n.note}" if n.note else "")
        ax.text(cx, cy, text, ha="center", va="center", fontsize=6.3, zorder=4, linespacing=1.15)
        place.block(cx - NIC_W / 2, cy - NIC_H / 2, cx + NIC_W / 2, cy + NIC_H / 2)

    def line(p, q, t, z=1):
        s = style(t)
        ax.add_line(Line2D([p[0], q[0]], [p[1], q[1]], color=s["color"], lw=s["lw"], ls=s["ls"], zorder=z))

    def curve(p, c, q, t):
        s = style(t)
        ax.add_patch(PathPatch(Path([p, c, q], [Path.MOVETO, Path.CURVE3, Path.CURVE3]), fc="none", ec=s["color"],
                               lw=s["lw"], ls=s["ls"], zorder=1))

    def label(text, pts, color):
        t = ax.text(0, 0, text, ha="center", va="center", fontsize=6.8, color=color, zorder=5,
                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.9})
        place.place(t, pts)

    box_center = {grp.id: ((box_span[grp.id][0] + box_span[grp.id][1]) / 2, box_bottom) for grp in g.groups}
    # Arcs leave a GPU at spread points of its edge, ordered by where they go, so they do not start as one.
    arcs = [e for e in g.edges if e.a in x and e.b in x]
    ends = {}
    for n in x:
        for up in (True, False):
            mine = sorted((e for e in arcs if n in (e.a, e.b) and e.type.startswith("NV") == up),
                          key=lambda e: x[e.b if e.a == n else e.a])
            for i, e in enumerate(mine):
                ends[(id(e), n)] = x[n] + (0.7 * W * ((i + 0.5) / len(mine) - 0.5))
    pending = []
    for e in g.edges:
        if e.a in x and e.b in x:               # GPU-GPU: NVLink above, PCIe below, as arcs
            up = e.type.startswith("NV")
            xa, xb = sorted((ends[(id(e), e.a)], ends[(id(e), e.b)]))
            y0 = H / 2 if up else -H / 2
            h = (0.32 * (xb - xa) / STEP + 0.35) * (1 if up else -1)
            p, c, q = (xa, y0), ((xa + xb) / 2, y0 + 2 * h), (xb, y0)
            curve(p, c, q, e.type)
            pts = [_bezier(p, c, q, t) for t in (0.5, 0.38, 0.62, 0.27, 0.73, 0.18, 0.82, 0.44, 0.56)]
            pending.append((e.label, pts, style(e.type)["color"]))
        elif e.b in hub_y:                       # GPU to its NVLink bar
            line((x[e.a], H / 2), (x[e.a], hub_y[e.b] - 0.17), e.type, z=0)
        elif e.a in jpos or e.b in jpos:        # PCIe tree
            p = jpos.get(e.a) or (x[e.a], -H / 2)
            q = jpos[e.b] if e.b in jpos else (x[e.b], -H / 2)
            line(p, q, e.type)
        elif e.a in nic_pos:                    # NIC to GPU, junction or box
            p = (nic_pos[e.a][0], nic_pos[e.a][1] + NIC_H / 2)
            q = (x[e.b], -H / 2) if e.b in x else jpos.get(e.b) or box_center.get(e.b)
            if q is not None:
                line(p, q, e.type, z=0)
    for grp_a, grp_b in zip(g.groups, g.groups[1:]):   # the class between boxes, once between neighbours
        if g.between_groups:
            xa, xb = box_span[grp_a.id][1], box_span[grp_b.id][0]
            line((xa, box_bottom + 0.25), (xb, box_bottom + 0.25), g.between_groups)
            pending.append((g.between_groups, [((xa + xb) / 2, box_bottom + 0.45), ((xa + xb) / 2, box_bottom + 0.05)],
                            style(g.between_groups)["color"]))
    for text, pts, color in pending:
        if text:
            label(text, pts, color)

    # Title and legend.
    ytop = bottom - legend_h + fig_h
    ax.text(xmin + 0.2, ytop - 0.2, "\n".join(title_lines), fontsize=9, va="top", ha="left", fontweight="bold")
    shown = sorted({e.type for e in g.edges} | ({g.between_groups} if g.between_groups else set())
                   | {grp.default for grp in g.groups if grp.default}, key=rank, reverse=True)
    handles = [Line2D([], [], **{k: v for k, v in zip(("color", "lw", "ls"), style(t).values())}, label=t) for t in shown]
    if any(n.selected for n in nodes.values()):
        from matplotlib.patches import Patch
        handles.append(Patch(fc="#fff2cc", ec="#d62728", lw=2, label="selected (--gpu-ids/--best)"))
    if handles:
        fig.legend(handles=handles, loc="lower left", ncol=min(len(handles), 8), fontsize=7, frameon=False,
                   bbox_to_anchor=(0.01, 0.55 / fig_h))
    note = textwrap.fill(reading(g) + " Bandwidths are theoretical, per direction.", width=int(fig_w * 17))
    ax.text(xmin + 0.2, bottom - legend_h + 0.12, note, fontsize=6.5, va="bottom", ha="left", color="#444")
    return fig
