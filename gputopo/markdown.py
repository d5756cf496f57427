"""The inspect report as markdown for a GitHub issue (summary, matrix, Mermaid graph, findings, the source
text), and reading such a report back. Pure, stdlib only; the drawing's model is graph.py's.

The report keeps the `nvidia-smi` text it was made from in fenced blocks, so `gputopo inspect -f report.md`
reads back the same topology, also after e-mail/quote mangling ("> " before every line).
"""
from __future__ import annotations

import re

from . import __version__, graph, parse
from . import mermaid as _mermaid
from .errors import BadInput
from .report import affinity_columns
from .topology import rank

MARK = {"error": "❌", "warn": "⚠️", "info": "ℹ️"}


def mermaid(report: dict) -> str:
    """The topology drawing as a Mermaid block body (mermaid.py lays it out for a comment's width)."""
    return _mermaid.block(report)


# ---------------------------------------------------------------- the whole report

def _fence(text: str, info: str = "text") -> str:
    """A fence longer than any backtick run inside (a paste may carry its own ```)."""
    runs = [len(r) for r in re.findall(r"`{3,}", text)]
    f = "`" * max([3] + [r + 1 for r in runs])
    return f"{f}{info}\n{text.rstrip()}\n{f}"


def _code(text: str) -> str:
    """An inline code span that holds any text: fenced by more backticks than any run inside (CommonMark), so a
    name with a backtick cannot end it early and turn the rest of a command line into markdown."""
    ticks = "`" * (max([0] + [len(r) for r in re.findall(r"`+", text)]) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _cell(v) -> str:
    """A table cell: N/A for None, pipes escaped."""
    return "N/A" if v is None else str(v).replace("|", "\\|")


def matrix_table(report: dict, nic_cells: dict | None = None) -> str:
    """The link matrix as a markdown table, NVLink in bold; every cell of the paste: the NIC-to-NIC ones from
    `nic_cells` (gputopo.report.nic_cells), as the report's links all have a GPU."""
    labels = [g["name"] for g in report["gpus"]] + [n["name"] for n in report["nics"]]
    cell = {}
    for l in report["links"]:
        t = l["type"] or "?"
        cell[(l["a"], l["b"])] = cell[(l["b"], l["a"])] = f"**{t}**" if t.startswith("NV") else t
    for (a, b), t in (nic_cells or {}).items():
        cell[(a, b)] = cell[(b, a)] = t
    cols = affinity_columns(report["gpus"])
    rows = [["", *labels, *(t for t, _ in cols)], ["---"] * (len(labels) + 1 + len(cols))]
    for g in report["gpus"]:
        rows.append([f"**{g['name']}**", *("X" if g["name"] == c else cell.get((g["name"], c), "") for c in labels),
                     *(_cell(g.get(k)) for _, k in cols)])
    for n in report["nics"]:
        name = n["name"] + (f" ({n['device']})" if n.get("device") and n["device"] != n["name"] else "")
        rows.append([name, *("X" if n["name"] == c else cell.get((n["name"], c), "") for c in labels),
                     *[""] * len(cols)])
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
    islands = ("NVLink islands: " + " ".join("{" + ",".join(n[3:] for n in i) + "}" for i in isl)) if isl \
        else "no NVLink"
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
        out += [f"Best {b['k']} GPU(s): {', '.join(b['gpus'])} (highlighted) — {_code(b['command'])}", ""]
    from .report import nic_cells
    out += [matrix_table(data, nic_cells(pasted)), ""]
    if len(data["nics"]) > 1 and not pasted:
        out += ["NIC-to-NIC cells are not known here (read live, nvidia-smi gives gputopo only the NICs' links to"
                " GPUs): `nvidia-smi topo -m` shows them.", ""]
    g = graph.build(data)
    out += ["```mermaid", mermaid(data), "```", "", f"<sub>{graph.reading(g)}</sub>", ""]
    if data.get("links_note"):
        out += [data["links_note"], ""]
    out.append("#### Findings")
    out += [f"- {MARK[f['level']]} **{f['subject']}**: {f['message']}" for f in data["findings"]] or ["- none"]
    out += [f"- ℹ️ {n}" for n in data["notes"] + g.notes]
    r = data["recommendation"]
    if r:
        out += ["", f"**Recommendation ({r['basis']}): {r['strategy'] or 'none yet'}**"]
        out += [f"- {x}" for x in r["reasons"]]
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
        out.append((f"GPU models{' (from --gpu-model or the example)' if pasted else ''},"
                    " as `nvidia-smi -L` prints them:",
                    gpu_list_text(data)))
    if pasted:
        out += [(f"{_code(name)} as given:", "\n".join(parse.clean(text))) for name, text in pasted]
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
    cols = affinity_columns(gpus)
    head = f"# nvidia-smi topo -m   (regenerated by gputopo {__version__}"
    head += f"; Driver Version: {data['driver']})" if data.get("driver") else ")"
    lines = [head, "\t" + "\t".join(labels + [t for t, _ in cols])]

    def row(name):
        """One matrix row of `topo -m` cells."""
        return [" X " if c == name else cell.get((name, c), "N/A") for c in labels]
    for g in gpus:
        lines.append("\t".join([g["name"], *row(g["name"]), *(_cell(g.get(k)) for _, k in cols)]))
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


# ---------------------------------------------------------------- inspect --nccl-log

def nccl_report(data: dict, lines: list[str], pasted: list[tuple[str, str]]) -> str:
    """`inspect --nccl-log --markdown`: the summary, settings, connections, the check against a topology and the
    findings; folded away at the end, the NCCL lines read (`inspect --nccl-log report.md` reads them back) and
    the topology text given."""
    n = data["nccl"]
    yes = {True: "yes", False: "no", None: "unknown"}
    kinds = ", ".join(f"{k} {c}" for k, c in n["transports"].items()) or "no connection lines"
    out = [f"### NCCL log (gputopo {__version__}, from {', '.join(data['inputs'])})", "",
           f"**NCCL {n['version'] or 'version not in the log'} · {len(n['hosts'])} host(s) · {kinds} · GPUDirect"
           f" RDMA: {yes[n['gdrdma']]} · NVLS: {yes[n['nvls']]} · CollNet: {yes[n['collnet']]}**", ""]
    if n["settings"]:
        out += ["#### Settings that change NCCL's choice"]
        env = n["env"]
        out += [f"- {_code(f'{k}={env[k]}')}: {v}" for k, v in n["settings"].items()] + [""]
    if n["pairs"]:
        rows = [[p["from"], p["to"], p["transport"], p["detail"] + (f" [{p['side']}]" if p["side"] else "")]
                for p in n["pairs"]]
        out += [f"<details><summary>Connections ({len(rows)} distinct)</summary>", "",
                _table(["from", "to", "transport", "detail"], rows), "", "</details>", ""]
    check = n.get("cross_check")
    if check and check["pairs"]:
        rows = [[r["host"] or "", r["from"], r["to"], r["link"], r["transport"], r["expected"]] for r in check["pairs"]]
        out += [f"<details><summary>Against the topology ({len(rows)} pairs)</summary>", "",
                _table(["host", "from", "to", "link", "used", "expected"], rows), "", "</details>", ""]
    out += ["#### Findings"] + ([f"- {f}" for f in n["findings"]] or ["- none"])
    out += ["", "<details><summary>The NCCL lines read (<code>gputopo inspect --nccl-log</code> reads this report"
            " back)</summary>", "", _fence("\n".join(lines)), ""]
    out += [x for name, text in pasted
            for x in (f"{_code(name)} as given:", "", _fence("\n".join(parse.clean(text))), "")]
    return "\n".join(out + ["</details>"]) + "\n"


def _table(header: list[str], rows: list[list]) -> str:
    """A markdown table, cells escaped."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows])


def fleet(fleet: dict) -> str:
    """The fleet report for an issue or a ticket: the groups' table, then what differs, health, no report."""
    from .fleet import grouped, said
    from .render import fleet_rows
    header, body = fleet_rows(fleet)
    esc = lambda c: str(c).replace("|", "\\|")   # noqa: E731
    out = ["### gputopo fleet report", "",
           f"{len(fleet['nodes']) - len(fleet['unreachable'])} of {len(fleet['nodes'])} node(s) answered.", ""]
    if body:
        out += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in body] + [""]
    for title, items in (("What differs from the norm", said(fleet)),
                         ("Health", grouped([(h["node"], f"{h['level']}: {h['message']}") for h in fleet["health"]])),
                         ("No report", grouped([(u["node"], u["reason"]) for u in fleet["unreachable"]])),
                         ("Recommendation", fleet["recommendation"])):
        if items:
            out += [f"**{title}**", ""] + [f"- {_code(i)}" if i.startswith("scontrol ") else f"- {esc(i)}"
                                           for i in items] + [""]
    return "\n".join(out)
