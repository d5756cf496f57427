"""`gputopo inspect --plot` and `bench-nvlink --plot`: the topology drawing (graph.py) as a PNG or SVG, and
the benchmark's step times and bus bandwidth, with matplotlib.

GPUs in one row, boxed by NUMA node; NVLink above the row (arcs, or a bar for an all-to-all island), PCIe
junctions and NICs below. Labels are placed where they overlap nothing already drawn.
matplotlib is imported only here (no other module of gputopo imports it), inside the functions that draw,
so the CLI starts fast and `inspect`/`--markdown` work without it.
"""
from __future__ import annotations

import io
import textwrap

from .graph import Graph, reading
from .graph import build as graph
from .markdown import summary
from .topology import rank

W, H = 1.35, 0.8            # GPU box, inches (the axes are drawn 1:1 in inches)
STEP, GAP = 1.75, 0.7       # GPU to GPU, extra between NUMA boxes
NIC_W, NIC_H = 1.25, 0.42
DEPTH = {"PIX": 0, "PXB": 1, "PHB": 2}   # junction rows under the GPUs, finest first
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
        """Nothing taken yet; the renderer measures texts as they will be drawn."""
        self.fig, self.ax, self.taken = fig, ax, []
        self.renderer = fig.canvas.get_renderer()

    def block(self, x0, y0, x1, y1):
        """Mark a node's box as taken."""
        self.taken.append((x0, y0, x1, y1))

    def extent(self, text):
        """A text's box in data coordinates, as drawn."""
        bb = text.get_window_extent(self.renderer).transformed(self.ax.transData.inverted())
        return bb.x0, bb.y0, bb.x1, bb.y1

    def free(self, box):
        """Whether a box meets nothing taken (with a small margin)."""
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
    """Mean x of the named GPUs."""
    return sum(x[n] for n in names) / len(names)


def _title(grp) -> str:
    """A box's title, with its class when not NODE."""
    return grp.title + (f" · {grp.default} inside" if grp.default and grp.default != "NODE" else "")


def _bezier(p0, p1, p2, t):
    """The point at t on a quadratic Bezier curve."""
    return ((1 - t) ** 2 * p0[0] + 2 * (1 - t) * t * p1[0] + t ** 2 * p2[0],
            (1 - t) ** 2 * p0[1] + 2 * (1 - t) * t * p1[1] + t ** 2 * p2[1])


def render(report: dict, fmt: str) -> bytes:
    """The drawing as PNG or SVG bytes."""
    buf = io.BytesIO()
    figure(report).savefig(buf, format=fmt, dpi=110)
    return buf.getvalue()


def figure(report: dict):
    """The drawing as a matplotlib Figure (Agg canvas, no pyplot state)."""
    d = _Drawing(report)
    d.place_row()
    d.place_below()
    d.canvas()
    d.draw_boxes_and_gpus()
    d.draw_junctions_and_hubs()
    d.draw_nics()
    d.draw_edges()
    d.draw_title_and_legend()
    return d.fig


class _Drawing:
    """One figure being laid out (in inches, y up, GPU row at y=0) and drawn; each step one method."""

    def __init__(self, report: dict):
        """The graph, GPU box width (from the longest label) and the node lists the steps share."""
        self.report = report
        self.g: Graph = graph(report)
        nodes = self.g.nodes
        longest = max((len(line) for n in nodes.values() if n.kind == "gpu" for line in n.label.split("\n")),
                      default=0)
        self.W = max(W, 0.066 * longest + 0.2)   # GPU boxes as wide as their longest line (7.5 pt text)
        self.STEP = self.W + 0.4
        self.nics = [n for n in nodes.values() if n.kind == "nic"]
        self.hubs = [n for n in nodes.values() if n.kind == "hub" and n.members]
        self.junctions = [n for n in nodes.values() if n.kind == "junction"]
        self.x, self.nic_pos, self.box_span = {}, {}, {}
        self.pending = []                         # edge labels, placed last, where they overlap nothing

    # ---------------------------------------------------------------- layout

    def place_row(self) -> None:
        """Each NUMA box: its GPUs in a row, its NICs in a row below, each as near as it can be to the mean
        of its nearest GPUs without touching the next; boxes side by side."""
        cursor = 0.0
        for grp in self.g.groups:
            local, mine, pos = self._box_row(grp)
            lo = min([-self.W / 2] + [p - NIC_W / 2 for p in pos]) - 0.25
            hi = max([local[grp.gpus[-1]] + self.W / 2] + [p + NIC_W / 2 for p in pos]) + 0.25
            hi = max(hi, lo + 0.068 * len(_title(grp)) + 0.3)   # the box's title fits in it
            for n, v in local.items():
                self.x[n] = v + cursor - lo
            for n, p in zip(mine, pos):
                self.nic_pos[n.id] = p + cursor - lo
            self.box_span[grp.id] = (cursor, cursor + hi - lo)
            cursor += hi - lo + GAP
        self.right = cursor - GAP

    def _box_row(self, grp):
        """GPU x positions in a box (from 0) and its NICs' x positions, pushed apart so they do not touch."""
        count = sum(1 for n in self.nics if n.group == grp.id)   # GPUs spread out when their NICs need room
        local = {n: i * max(self.STEP, count / len(grp.gpus) * (NIC_W + 0.15)) for i, n in enumerate(grp.gpus)}
        mine = sorted((n for n in self.nics if n.group == grp.id), key=lambda n: _mean(local, n.members))
        want = [_mean(local, n.members) for n in mine]
        pos: list[float] = []
        for w in want:
            pos.append(max(w, pos[-1] + NIC_W + 0.15) if pos else w)
        shift = (sum(pos) - sum(want)) / len(pos) if pos else 0.0   # centred again on what they want
        return local, mine, [p - shift for p in pos]

    def place_below(self) -> None:
        """Heights: NVLink room above the row; junction levels, NICs, the boxes' bottom and orphans below."""
        x, g = self.x, self.g
        nv_edges = [e for e in g.edges if e.type.startswith("NV") and e.a in x and e.b in x]
        span_max = max([abs(x[e.a] - x[e.b]) for e in nv_edges] + [0])
        self.top = H / 2 + 0.45 + 0.5 * len(self.hubs) + (0.32 * span_max / self.STEP + 0.4 if nv_edges else 0)
        levels = sorted({DEPTH[j.label] for j in self.junctions})
        self.jy = {lv: -H / 2 - 0.55 - 0.55 * i for i, lv in enumerate(levels)}
        pcie_arcs = [abs(x[e.a] - x[e.b]) for e in g.edges if e.a in x and e.b in x and not e.type.startswith("NV")]
        floor = min([-H / 2] + list(self.jy.values())
                    + ([-H / 2 - 0.32 * max(pcie_arcs) / self.STEP - 0.55] if pcie_arcs else []))
        for n in self.nics:
            if n.id in self.nic_pos:
                self.nic_pos[n.id] = (self.nic_pos[n.id], floor - 0.75)
        bottom = min([p[1] for p in self.nic_pos.values()] + [floor])
        self.box_bottom = bottom - (NIC_H / 2 + 0.45 if self.nic_pos else 0.5)
        # NICs no nearer to one box than to another: a row (or rows) under the boxes.
        orphans = [n for n in self.nics if n.id not in self.nic_pos]
        per_row = max(1, int(self.right // (NIC_W + 0.15)))
        for i, n in enumerate(orphans):
            self.nic_pos[n.id] = (NIC_W / 2 + 0.1 + (i % per_row) * (NIC_W + 0.15),
                                  self.box_bottom - 0.3 - NIC_H / 2 - (i // per_row) * (NIC_H + 0.15))
        self.bottom = min([p[1] for p in self.nic_pos.values()] + [self.box_bottom + NIC_H / 2]) - NIC_H / 2 - 0.35

    def canvas(self) -> None:
        """The Figure and its one axes, 1:1 in inches, with room for the title above and the legend below."""
        import matplotlib
        matplotlib.use("Agg")
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        self.xmin, legend_h = -0.35, 1.45
        self.fig_w = max(max(self.right, NIC_W + 0.4) - self.xmin + 0.3, 7.5)
        self.title_lines = textwrap.wrap(summary(self.report), width=int(self.fig_w * 12))
        self.fig_h = self.top - self.bottom + 0.28 * len(self.title_lines) + 0.4 + legend_h
        self.fig = Figure(figsize=(self.fig_w, self.fig_h), dpi=110)
        FigureCanvasAgg(self.fig)
        self.ax = ax = self.fig.add_axes((0, 0, 1, 1))
        self.y0 = self.bottom - legend_h
        ax.set_xlim(self.xmin, self.xmin + self.fig_w)
        ax.set_ylim(self.y0, self.y0 + self.fig_h)
        ax.set_axis_off()
        self.place = _Placer(self.fig, ax)

    # ---------------------------------------------------------------- nodes

    def _box(self, x0, y0, w, h, rounding, **kw):
        """A rounded box patch."""
        from matplotlib.patches import FancyBboxPatch
        self.ax.add_patch(FancyBboxPatch((x0, y0), w, h, boxstyle=f"round,pad=0,rounding_size={rounding}", **kw))

    def draw_boxes_and_gpus(self) -> None:
        """A box per NUMA node with its title; the GPUs, selected ones highlighted."""
        ax, place = self.ax, self.place
        for grp in self.g.groups:
            x0, x1 = self.box_span[grp.id]
            self._box(x0, self.box_bottom, x1 - x0, H / 2 + 0.38 - self.box_bottom, 0.12, fc="#f7f7f2", ec="#999",
                      lw=1, zorder=-1)
            t = ax.text(x0 + 0.08, self.box_bottom + 0.06, _title(grp), fontsize=7.5, va="bottom", ha="left",
                        color="#444")
            place.taken.append(place.extent(t))
        W = self.W
        for n, cx in self.x.items():
            sel = self.g.nodes[n].selected
            self._box(cx - W / 2, -H / 2, W, H, 0.08, fc="#fff2cc" if sel else "#e8f1fb",
                      ec="#d62728" if sel else "#1f5fa8", lw=3 if sel else 1.3, zorder=3)
            ax.text(cx, 0, self.g.nodes[n].label, ha="center", va="center", fontsize=7.5, zorder=4,
                    fontweight="bold" if sel else "normal", linespacing=1.25)
            place.block(cx - W / 2, -H / 2, cx + W / 2, H / 2)

    def draw_junctions_and_hubs(self) -> None:
        """PCIe junctions under the mean of their GPUs; an NVLink bar over each all-to-all island."""
        ax, x = self.ax, self.x
        self.jpos = {j.id: (sum(x[m] for m in j.members) / len(j.members), self.jy[DEPTH[j.label]])
                     for j in self.junctions}
        for nid, (cx, cy) in self.jpos.items():
            color = style(self.g.nodes[nid].label)["color"]
            self._box(cx - 0.22, cy - 0.13, 0.44, 0.26, 0.1, fc="white", ec=color, lw=1.3, zorder=3)
            ax.text(cx, cy, self.g.nodes[nid].label, ha="center", va="center", fontsize=7, zorder=4, color=color)
            self.place.block(cx - 0.22, cy - 0.13, cx + 0.22, cy + 0.13)
        self.hub_y = {}
        for i, h in enumerate(self.hubs):
            xs = [x[m] for m in h.members]
            cy = self.hub_y[h.id] = H / 2 + 0.55 + 0.5 * i
            self._box(min(xs) - self.W / 2, cy - 0.17, max(xs) - min(xs) + self.W, 0.34, 0.1, fc="#e8f5e9",
                      ec=COLORS["NV"], lw=1.5, zorder=2)
            ax.text((min(xs) + max(xs)) / 2, cy, h.label.replace("\n", " · "), ha="center", va="center",
                    fontsize=7.5, zorder=4, color="#1b5e20")
            self.place.block(min(xs) - self.W / 2, cy - 0.17, max(xs) + self.W / 2, cy + 0.17)

    def draw_nics(self) -> None:
        """NIC boxes: name, device, the class to their nearest GPUs (or to all)."""
        for n in self.nics:
            cx, cy = self.nic_pos[n.id]
            t = [e for e in self.g.edges if e.a == n.id]
            cls = t[0].type if t else None
            self._box(cx - NIC_W / 2, cy - NIC_H / 2, NIC_W, NIC_H, 0.06, fc="#f4f4f4", ec="#777", lw=1, zorder=3)
            near = ",".join(m[3:] for m in n.members) if len(n.members) < 5 else f"{len(n.members)} GPUs"
            text = "\n".join(n.label.split(" · ")) + (f"\n{cls} to GPU {near}" if cls else "") + (
                f"\n{n.note}" if n.note else "")
            self.ax.text(cx, cy, text, ha="center", va="center", fontsize=6.3, zorder=4, linespacing=1.15)
            self.place.block(cx - NIC_W / 2, cy - NIC_H / 2, cx + NIC_W / 2, cy + NIC_H / 2)

    # ---------------------------------------------------------------- edges

    def _line(self, p, q, t, z=1):
        """A straight edge in its class's style."""
        from matplotlib.lines import Line2D
        s = style(t)
        self.ax.add_line(Line2D([p[0], q[0]], [p[1], q[1]], color=s["color"], lw=s["lw"], ls=s["ls"], zorder=z))

    def _curve(self, p, c, q, t):
        """A curved edge in its class's style."""
        from matplotlib.patches import PathPatch
        from matplotlib.path import Path
        s = style(t)
        self.ax.add_patch(PathPatch(Path([p, c, q], [Path.MOVETO, Path.CURVE3, Path.CURVE3]), fc="none",
                                    ec=s["color"], lw=s["lw"], ls=s["ls"], zorder=1))

    def _ends(self, arcs) -> dict:
        """Arcs leave a GPU at spread points of its edge, ordered by where they go, so they do not start as one."""
        x, ends = self.x, {}
        for n in x:
            for up in (True, False):
                mine = sorted((e for e in arcs if n in (e.a, e.b) and e.type.startswith("NV") == up),
                              key=lambda e: x[e.b if e.a == n else e.a])
                for i, e in enumerate(mine):
                    ends[(id(e), n)] = x[n] + (0.7 * self.W * ((i + 0.5) / len(mine) - 0.5))
        return ends

    def _arc(self, e, ends) -> None:
        """GPU to GPU: NVLink above the row, PCIe below, as a curve whose height grows with its span."""
        up = e.type.startswith("NV")
        xa, xb = sorted((ends[(id(e), e.a)], ends[(id(e), e.b)]))
        y0 = H / 2 if up else -H / 2
        h = (0.32 * (xb - xa) / self.STEP + 0.35) * (1 if up else -1)
        p, c, q = (xa, y0), ((xa + xb) / 2, y0 + 2 * h), (xb, y0)
        self._curve(p, c, q, e.type)
        pts = [_bezier(p, c, q, t) for t in (0.5, 0.38, 0.62, 0.27, 0.73, 0.18, 0.82, 0.44, 0.56)]
        self.pending.append((e.label, pts, style(e.type)["color"]))

    def draw_edges(self) -> None:
        """Every edge by what it joins; the class between boxes once between neighbours; then the labels."""
        x, jpos, g = self.x, self.jpos, self.g
        box_center = {grp.id: ((self.box_span[grp.id][0] + self.box_span[grp.id][1]) / 2, self.box_bottom)
                      for grp in g.groups}
        ends = self._ends([e for e in g.edges if e.a in x and e.b in x])
        for e in g.edges:
            if e.a in x and e.b in x:
                self._arc(e, ends)
            elif e.b in self.hub_y:                 # GPU to its NVLink bar
                self._line((x[e.a], H / 2), (x[e.a], self.hub_y[e.b] - 0.17), e.type, z=0)
            elif e.a in jpos or e.b in jpos:        # PCIe tree
                p = jpos.get(e.a) or (x[e.a], -H / 2)
                self._line(p, jpos[e.b] if e.b in jpos else (x[e.b], -H / 2), e.type)
            elif e.a in self.nic_pos:               # NIC to GPU, junction or box
                p = (self.nic_pos[e.a][0], self.nic_pos[e.a][1] + NIC_H / 2)
                q = (x[e.b], -H / 2) if e.b in x else jpos.get(e.b) or box_center.get(e.b)
                if q is not None:
                    self._line(p, q, e.type, z=0)
        self._between()
        for text, pts, color in self.pending:
            if text:
                t = self.ax.text(0, 0, text, ha="center", va="center", fontsize=6.8, color=color, zorder=5,
                                 bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.9})
                self.place.place(t, pts)

    def _between(self) -> None:
        """The class between boxes (SYS), a short line between each pair of neighbouring boxes."""
        between, yb = self.g.between_groups, self.box_bottom
        for grp_a, grp_b in zip(self.g.groups, self.g.groups[1:]):
            if between:
                xa, xb = self.box_span[grp_a.id][1], self.box_span[grp_b.id][0]
                self._line((xa, yb + 0.25), (xb, yb + 0.25), between)
                self.pending.append((between, [((xa + xb) / 2, yb + 0.45), ((xa + xb) / 2, yb + 0.05)],
                                     style(between)["color"]))

    # ---------------------------------------------------------------- title and legend

    def draw_title_and_legend(self) -> None:
        """The summary line on top; the line styles in use, the selection, how to read it, at the bottom."""
        from matplotlib.lines import Line2D
        g, ax, fig_w, fig_h = self.g, self.ax, self.fig_w, self.fig_h
        ax.text(self.xmin + 0.2, self.y0 + fig_h - 0.2, "\n".join(self.title_lines), fontsize=9, va="top",
                ha="left", fontweight="bold")
        shown = sorted({e.type for e in g.edges} | ({g.between_groups} if g.between_groups else set())
                       | {grp.default for grp in g.groups if grp.default}, key=rank, reverse=True)
        handles = [Line2D([], [], **dict(zip(("color", "lw", "ls"), style(t).values())), label=t) for t in shown]
        if any(n.selected for n in g.nodes.values()):
            from matplotlib.patches import Patch
            handles.append(Patch(fc="#fff2cc", ec="#d62728", lw=2, label="selected (--gpu-ids/--best)"))
        if handles:
            self.fig.legend(handles=handles, loc="lower left", ncol=min(len(handles), 8), fontsize=7,
                            frameon=False, bbox_to_anchor=(0.01, 0.55 / fig_h))
        note = textwrap.fill(reading(g) + " Bandwidths are theoretical, per direction.", width=int(fig_w * 17))
        ax.text(self.xmin + 0.2, self.y0 + 0.12, note, fontsize=6.5, va="bottom", ha="left", color="#444")


def bench(data: dict) -> bytes:
    """`bench-nvlink --plot`: step times per arm and all_reduce bus bandwidth per size, as one PNG; a half that
    did not run (--allreduce-only, --train-only) gets no panel."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    panels = [p for p, rows in (("steps", data["runs"]), ("allreduce", data["allreduce"])) if rows]
    fig = Figure(figsize=(5.5 * max(1, len(panels)), 4))   # no pyplot: nothing global to close
    FigureCanvasAgg(fig)
    axes = dict(zip(panels, fig.subplots(1, len(panels), squeeze=False)[0])) if panels else {}
    if "steps" in axes:
        ax = axes["steps"]
        for r in data["runs"]:
            ax.plot(r["step_times_s"], marker=".", label=f"{r['label']} (median {r['step_time_s']['median']:.3f} s)")
        ax.set(title="step time per timed step", xlabel="step", ylabel="seconds")
        ax.legend()
    if "allreduce" in axes:
        ax = axes["allreduce"]
        for p2p in (True, False):
            pts = sorted((r["bytes"], r["busbw_gbps"]) for r in data["allreduce"] if r["p2p"] == p2p)
            if pts:
                ax.plot([p[0] / 2 ** 20 for p in pts], [p[1] for p in pts], marker="o",
                        label="P2P" if p2p else "no P2P")
        ax.set(title="all_reduce bus bandwidth", xlabel="MiB", ylabel="GB/s", xscale="log")
        ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, dpi=100, format="png")
    return buf.getvalue()
