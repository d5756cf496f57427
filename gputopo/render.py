"""Report dicts -> readable text tables, or JSON. Text is drawn from the same dict as JSON.

Every command's text opens with its answer, in at most 5 lines, read from the dict its tables print; then the
tables; then what was assumed, in a line or two. Every line fits WIDTH columns: prose is cut at spaces, a
command line before an option (` \\`, as a shell joins it), and a table too wide moves the columns that do not
fit into a second table under the first, its key column repeated. `wide` prints the tables and prose at full
width, as gputopo did before; `explain` adds the reasons in words, every figure's source and every note.
"""
from __future__ import annotations

import re
import textwrap

from .report import affinity_columns, ranked_types
from .topology import rank
from .units import size

MARK = {"error": "!!", "warn": "! ", "info": "- "}
WIDTH = 100   # a terminal's columns: the default text fits them


def to_json(data: dict) -> str:
    """The report dict as indented JSON, keys sorted (stable for diffs)."""
    import json  # only for --json: the text output never needs it
    return json.dumps(data, indent=2, sort_keys=True)


def wrap(text: str, indent: str = "", first: str = "", width: int | None = WIDTH) -> list[str]:
    """Prose cut at spaces into lines of at most `width` columns (None: one line). The first line starts with
    `first`, the others with `indent`; a word longer than a line (a path, a URL) stays whole."""
    if width is None:
        return [first + text]
    return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False) or [first.rstrip()]


def wrap_items(head: str, items: list[str], sep: str = "  ", indent: str = "  ",
               width: int | None = WIDTH) -> list[str]:
    """`head` and the items after it, cut between items (an item is never split) into lines within `width`."""
    glue = "\x00"   # not whitespace: textwrap keeps an item's own spaces inside it
    lines = wrap(head + sep.join(i.replace(" ", glue) for i in items), indent, width=width)
    return [line.replace(glue, " ") for line in lines]


SHELL_WORD = re.compile(r"""(?:[^\s'"\\]|'[^']*'|"(?:[^"\\]|\\.)*"|\\.)+""", re.S)


def shell_lines(command, first: str = "", indent: str = "    ", width: int | None = WIDTH) -> list[str]:
    """A command line (its words, each quoted for the shell, or the line as printed) cut before an option into
    lines that end in ` \\`, so a shell pasted them reads one command; a quoted word is never split."""
    if isinstance(command, str):
        # Words as the shell reads them, kept as written: shlex(posix=False) cut shlex.quote's it'"'"'s into three
        words = SHELL_WORD.findall(command)
        if SHELL_WORD.sub("", command).strip():
            return [first + command]   # an unbalanced quote: shown as it is
    else:
        words = list(command)
    units: list[list[str]] = []
    for w in words:   # an option and the values after it stay on one line
        if not units or w.startswith("-"):
            units.append([])
        units[-1].append(w)
    if width is None:
        return [first + " ".join(words)]
    lines, line = [], first + " ".join(units[0]) if units else first
    for k, u in enumerate(units[1:], 2):
        part = " ".join(u)
        if len(line) + 1 + len(part) + (2 if k < len(units) else 0) > width:   # room for " \" but on the last
            lines.append(line + " \\")
            line = indent + part
        else:
            line += " " + part
    return lines + [line]


def table(rows: list[list[str]], header: list[str] | None = None, width: int | None = None, key: int = 1,
          wrap_last: bool = False, fold: bool = True) -> str:
    """Left-aligned columns separated by two spaces. Wider than `width`: with wrap_last (a column of prose) the
    last column is cut at spaces within its room, its further lines under it; else the columns that do not fit
    move into a table of their own under the first, which repeats the first `key` columns (and wraps the last
    column, with wrap_last)."""
    allrows = ([header] if header else []) + [[("N/A" if c is None else str(c)) for c in r] for r in rows]
    n = max(map(len, allrows))
    widths = [max(len(r[i]) for r in allrows if i < len(r)) for i in range(n)]

    def line(r, cols) -> str:
        """One row's cells in `cols`, padded."""
        return "  ".join(r[i].ljust(widths[i]) for i in cols if i < len(r)).rstrip()
    if width is None or sum(widths) + 2 * (n - 1) <= width or n <= key:
        return "\n".join(line(r, range(n)) for r in allrows)
    start = sum(widths[:-1]) + 2 * (n - 1)
    if wrap_last and width - start >= 20:
        out = []
        for r in allrows:
            cell = r[-1] if len(r) == n else ""
            lead = " " * (len(cell) - len(cell.lstrip()))
            parts = textwrap.wrap(cell, width - start, subsequent_indent=lead, break_long_words=False,
                                  break_on_hyphens=False) or [""]
            out.append(line(r[:-1] + [parts[0]] if len(r) == n else r, range(n)))
            out += [" " * start + p for p in parts[1:]]
        return "\n".join(out)
    if not fold:
        return "\n".join(line(r, range(n)) for r in allrows)
    blocks, rest, base = [], list(range(key, n)), sum(widths[:key]) + 2 * (key - 1)
    while rest:
        used, take = base, []
        for i in rest:
            if take and used + 2 + widths[i] > width:
                break
            used += 2 + widths[i]
            take.append(i)
        rest = rest[len(take):]
        cols = [*range(key), *take]
        blocks.append(table([[r[i] for i in cols if i < len(r)] for r in allrows], None, width, key,
                            wrap_last and not rest, fold=False))
    return "\n".join(blocks)


def in_short(notes: list[str], more: list[str] = (), width: int | None = WIDTH, also: str = "") -> list[str]:
    """What was assumed, in a line or two: the subject of each note (its words before the first colon or
    parenthesis) and `more`, then what --explain adds (`also`, and each in full)."""
    import re

    def subject(note: str) -> str:
        """The note's subject, and the option that gives it."""
        cut = min([i for i in (note.find(": "), note.find(" (")) if i > 0] or [len(note)])
        head = note[:cut] if cut <= 60 else note[:57].rsplit(" ", 1)[0] + "..."
        option = re.search(r"\((--[\w-]+)[^()]* to change\)", note)   # "(--cpu-mem to change)": how to give it
        return head + (f" ({option.group(1)})" if option and option.group(1) not in head else "")
    said = [subject(n) for n in list(notes) + list(more)]
    hint = f"--explain: each{', and ' + also if also else ''}"
    if not said:
        return wrap(hint, "  ", width=width) if also else []
    return wrap("Assumed: " + "; ".join(said) + f" ({hint})", "  ", width=width)


def matrix(report: dict, nic_cells: dict | None = None, width: int | None = None) -> str:
    """The link matrix as `nvidia-smi topo -m` prints it, every cell: the GPU rows with their affinities, then the
    NIC rows, NIC-to-NIC cells from the paste (`nic_cells`, gputopo.report.nic_cells). Wider than `width`: the GPU
    rows without the NIC columns (each GPU-NIC cell is in the NIC rows below), columns that do not fit moved under."""
    gpus, nics = [g["name"] for g in report["gpus"]], [n["name"] for n in report["nics"]]
    cell = {}
    for l in report["links"]:
        cell[(l["a"], l["b"])] = cell[(l["b"], l["a"])] = l["type"] or "?"
    for (a, b), v in (nic_cells or {}).items():
        cell[(a, b)] = cell[(b, a)] = v

    def row(name: str, cols: list[str]) -> list[str]:
        """A device's cells in `cols` (X for itself)."""
        return ["X" if name == c else cell.get((name, c), "") for c in cols]
    labels = gpus + nics
    cols = affinity_columns(report["gpus"])
    titles = [t for t, _ in cols]
    rows = [[g["name"], *row(g["name"], labels), *(g[k] for _, k in cols)] for g in report["gpus"]]
    whole = table(rows + [[n, *row(n, labels)] for n in nics], ["", *labels, *titles])
    if width is None or max(map(len, whole.split("\n"))) <= width:
        return whole
    out = table([[g["name"], *row(g["name"], gpus), *(g[k] for _, k in cols)] for g in report["gpus"]],
                ["", *gpus, *titles], width)
    if nics:
        out += "\n\n" + table([[n, *row(n, labels)] for n in nics], ["", *labels], width)
    return out


def _nics(report: dict, nic_cells: dict | None, width: int | None) -> list[str]:
    """The NIC legend (NIC0: mlx5_0), and a word where the NIC-to-NIC cells are not known."""
    out = []
    named = [f"{n['name']} {n['device']}" for n in report["nics"] if n.get("device") and n["device"] != n["name"]]
    if named:
        out += wrap_items("NIC Legend: ", named, ", ", width=width)
    if len(report["nics"]) > 1 and not nic_cells:
        out += wrap("NIC-to-NIC cells: not known here (read live, nvidia-smi gives gputopo only the NICs' links to"
                    " GPUs): `nvidia-smi topo -m` shows them", "  ", width=width)
    return out


def _machine(report: dict) -> str:
    """What the machine is, in one line: its GPUs (those in view), their link classes, NICs and NUMA nodes."""
    gpus = [g for g in report["gpus"] if g["name"] in report["selected"]] or report["gpus"]
    models: dict = {}
    for g in gpus:
        models[g["model"]] = models.get(g["model"], 0) + 1
    what = " + ".join(f"{k} x {m}" for m, k in models.items() if m)
    unnamed = models.get(None)
    if unnamed:
        what += (" + " if what else "") + f"{unnamed} GPU(s) (model not named: --gpu-model names it)"
    if len(gpus) < len(report["gpus"]):
        what += f", {len(gpus)} of this machine's {len(report['gpus'])} in view"
    total = len(gpus) * (len(gpus) - 1) // 2
    links = ", ".join(f"{t} (all {total} pairs)" if len(p) == total > 1 else f"{t} ({len(p)} pair{'s' * (len(p) != 1)})"
                      for t, p, _ in reversed(ranked_types(report)))
    numa = {g["numa_affinity"] for g in report["gpus"]} - {None}
    parts = [what] + ([f"links {links}"] if links else []) + (
        [f"{len(report['nics'])} NIC(s)"] if report["nics"] else []) + ([f"{len(numa)} NUMA node(s)"] if numa else [])
    return "Machine: " + " · ".join(parts)


def _health(report: dict) -> str:
    """The findings counted: errors and warnings, or none."""
    n = {lvl: sum(1 for f in report["findings"] if f["level"] == lvl) for lvl in ("error", "warn")}
    if not n["error"] and not n["warn"]:
        return "health: no problems found"
    return "health: " + ", ".join(f"{k} {w}{'s' * (k != 1)}" for w, k in (("error", n["error"]), ("warning", n["warn"]))
                                  if k) + " (Findings below)"


def inspect_answer(report: dict, width: int | None = WIDTH) -> list[str]:
    """inspect's answer: what the machine is, its weakest link and health, the first strategy (the plan's with
    --model), the best GPUs with --best."""
    out = wrap(_machine(report), "  ", width=width)
    w = report["weakest_link"]
    if w:
        link = next((l for l in report["links"] if {l["a"], l["b"]} == {w["a"], w["b"]}), w)
        bw = f", {link['bandwidth_gbps']:g} GB/s per direction" if link.get("bandwidth_gbps") else ""
        first = f"Weakest link in use: {w['a']}-{w['b']} {w['type'] or 'unknown'}{bw}"
    elif len(report["selected"]) < 2:
        first = "One GPU: no GPU-to-GPU interconnect to judge"
    else:
        first = "Weakest link in use: unknown"
    out += wrap(f"{first}; {_health(report)}", "  ", width=width)
    if report.get("plan"):
        out += plan_answer(report["plan"], width=width)
    elif report["recommendation"]:
        r = report["recommendation"]
        out += wrap(f"Recommendation ({r['basis']}): {r['strategy'] or 'none yet'} (--model NAME: the memory and"
                    " step time of each strategy)", "  ", width=width)
    if report["best"]:
        b = report["best"]
        out += wrap(f"Best {b['k']} GPU(s): {', '.join(b['gpus'])} (weakest link"
                    f" {b['weakest_link']['type'] if b['weakest_link'] else 'none'})", "  ", width=width)
        out.append(f"  {b['command']}")
    return out


def inspect(report: dict, *, wide: bool = False, explain: bool = False, nic_cells: dict | None = None) -> str:
    """Human text for `gputopo inspect`: the answer, the GPUs, the matrix, the links, findings; the plan with
    --model. nic_cells: the paste's NIC-to-NIC cells (gputopo.report.nic_cells), which the report does not hold."""
    width = None if wide else WIDTH
    if not report["gpu_status"]["visible"]:
        out = wrap(f"No NVIDIA GPU visible: {report['gpu_status']['reason']}", "  ", width=width)
        out += wrap("Try `gputopo inspect --from-file topo.txt` with a saved `nvidia-smi topo -m`, or `gputopo inspect"
                    " --example list` to see bundled real machines.", "  ", width=width)
        return "\n".join(out + _host(report, width))
    out = inspect_answer(report, width) + [""]
    out += wrap(f"Source: {report['source']}" + (f" ({', '.join(report['inputs'])})" if report["inputs"] else ""),
                "  ", width=width)
    out += _host(report, width)
    rows = [[g["name"], g["model"], size(g["memory_total_bytes"]) if g["memory_total_bytes"] else None,
             g["pci_bus_id"], _pcie(g), None if g["temperature_c"] is None else f"{g['temperature_c']:g} C",
             _power(g)] for g in report["gpus"]]
    header = ["GPU", "model", "memory", "bus id", "PCIe", "temp", "power"]
    keep = [i for i in range(len(header)) if i == 0 or any(r[i] is not None for r in rows)]
    if len(keep) > 1:  # a paste without `nvlink -s`/`-L` says nothing per GPU beyond the matrix
        out += ["", table([[r[i] for i in keep] for r in rows], [header[i] for i in keep], width)]
    out += ["", matrix(report, nic_cells, width)] + _nics(report, nic_cells, width) + _links(report, width)
    out += ["", "Findings:"] + [x for f in report["findings"]
                                for x in wrap(f"{MARK[f['level']]}{f['subject']}: {f['message']}", "  ", width=width)]
    if not any(f["level"] != "info" for f in report["findings"]):
        out.append("  no health problems found")
    out += [x for n in report["notes"] for x in wrap(f"Note: {n}", "  ", width=width)]
    if report.get("plan"):
        return "\n".join(out + ["", plan(report["plan"], wide=wide, explain=explain, answer=False)])
    r = report["recommendation"]
    if r and explain:
        out += ["", f"Recommendation ({r['basis']}): {r['strategy'] or 'none yet'}"]
        out += [x for reason in r["reasons"] for x in wrap(reason, "    ", "  ", width)]
    elif r and r["reasons"]:
        out += ["", f"--explain: why {r['strategy'] or 'none yet'}, in words"]
    return "\n".join(out)


def _host(report: dict, width: int | None = WIDTH) -> list[str]:
    """The host line, and blocking host problems from `gputopo doctor`, briefly."""
    out = []
    h = report["host"]
    if h:
        out += wrap(f"Host: {h['cpus_logical']} CPUs ({h['cpus_physical']} cores), {h['numa_nodes'] or 'N/A'} NUMA"
                    f" node(s), RAM {size(h['ram_total_bytes'])} ({size(h['ram_available_bytes'])} free),"
                    f" {h['tmp_dir']} {size(h['tmp_free_bytes'])} free", "  ", width=width)
    for c in report.get("host_checks") or []:
        out += wrap(f"!! {c['subject']}: {c['found']}" + (f" (fix: {c['fix']})" if c["fix"] else ""), "   ",
                    width=width)
    if report.get("host_checks"):
        out.append("   `gputopo doctor` explains these and checks the rest")
    return out


def _links(report: dict, width: int | None = WIDTH) -> list[str]:
    """The selected GPUs' link classes slowest first, islands, nearest NICs."""
    if report.get("links_note"):
        out = [""] + wrap(report["links_note"], "  ", width=width)
    else:
        out = [""] + wrap(f"Links among {', '.join(report['selected'])}, slowest first:", "  ", width=width)
        rows = []
        for t, pairs, l in ranked_types(report):
            bw = f"{l['bandwidth_gbps']:g} GB/s" if l.get("bandwidth_gbps") else "N/A"
            total = len(report["selected"]) * (len(report["selected"]) - 1) // 2
            shown = f"all {total} pairs" if len(pairs) == total > 1 else _short(pairs, 6 if width is None else 3)
            rows.append([t, shown, bw, l["explanation"]])
        out.append(table(rows, ["link", "pairs", "theoretical/dir", "meaning"], width, wrap_last=True))
        nv_basis = {l["bandwidth_basis"] for l in report["links"] if l.get("bandwidth_basis")}
        out += [x for b in sorted(nv_basis) for x in wrap(f"bandwidth: {b}", "    ", "  ", width)]
    if report["islands"]:
        out += wrap_items("NVLink islands: ", ["{" + ", ".join(i) + "}" for i in report["islands"]], width=width)
    nic = _nearest_nics(report)
    if nic:
        out += wrap_items("Nearest NIC per GPU: ", nic, width=width)
    return out


def _pcie(g: dict) -> str | None:
    """PCIe generation and width, current/max (live only)."""
    if not g["pcie_gen"]:
        return None
    return f"gen{g['pcie_gen']}/{g['pcie_gen_max']} x{g['pcie_width']}/{g['pcie_width_max']}"


def _power(g: dict) -> str | None:
    """Power draw, over the limit when known (live only)."""
    if g["power_draw_w"] is None:
        return None
    return f"{g['power_draw_w']:.0f}/{g['power_limit_w']:.0f} W" if g["power_limit_w"] else f"{g['power_draw_w']:.0f} W"


def _short(pairs: list[str], most: int = 6) -> str:
    """The first few pairs and how many more."""
    return ", ".join(pairs[:most]) + (f" (+{len(pairs) - most} more)" if len(pairs) > most else "")


def _nearest_nics(report: dict) -> list[str]:
    """Per selected GPU, its nearest NIC(s) and their class."""
    out = []
    for g in report["selected"]:
        nics = [(l["b"] if l["a"] == g else l["a"], l["type"]) for l in report["links"]
                if g in (l["a"], l["b"]) and not (l["a"].startswith("GPU") and l["b"].startswith("GPU"))]
        if nics:
            near = max((t for _, t in nics), key=rank)
            out.append(f"{g}->{'/'.join(n for n, t in nics if t == near)} ({near})")
    return out


def _recommended(data: dict) -> str:
    """The recommendation's headline: strategy, micro-batch, accumulation, checkpointing, parameter offload."""
    r = data["recommendation"]
    if not r["strategy"]:
        return "Recommendation: none fits"
    ckpt = (", gradient checkpointing" if r["grad_checkpointing"] else ", selective checkpointing"
            if data["training"].get("selective") else ", no checkpointing")
    params = "" if r.get("offload_params") is None else ", parameters offloaded" if r["offload_params"] else \
        ", parameters on the GPU"
    return (f"Recommendation: {r['strategy']}, micro-batch {r['micro_batch']} x {r['grad_accum']} accumulation"
            + ckpt + params)


def _setup(w: dict) -> str:
    """A config's pick in a few words: strategy, micro-batch x accumulation, checkpointing."""
    return (f"{w['strategy']} at micro-batch {w['micro_batch']} x {w['grad_accum']}"
            + (", gradient checkpointing" if w["grad_checkpointing"] else ", no checkpointing"))


def peft_line(data: dict) -> str:
    """Where full fine-tuning needs offload or does not fit: what LoRA (or QLoRA) would need and how fast."""
    a = data["peft_alternative"]
    if not a["strategy"]:
        return f"with --finetune {a['mode']}: none fits either"
    step = f", {_s(a['step_s'])}/step" if a["step_s"] else ""
    return f"with --finetune {a['mode']}: {a['strategy']}, {size(a['per_gpu_bytes'])} per GPU{step}"


def peft_basis(data: dict) -> str:
    """--explain: what the answer's LoRA line planned, and why it is there."""
    a = data["peft_alternative"]
    return (f"{peft_line(data)}: the same question planned with --finetune {a['mode']} (PEFT's default targets"
            f" {','.join(a['targets'])}, rank {a['rank']}, no dropout; micro-batch {a['micro_batch']} x"
            f" {a['grad_accum']}"
            + (", gradient checkpointing" if a["grad_checkpointing"] else "")
            + "), shown because full fine-tuning fits here only by offloading, or not at all. LoRA trains adapters"
            " beside the frozen model, not the model: gputopo never switches by itself. `gputopo plan --finetune"
            f" {a['mode']}` with these options shows every strategy.")


def plan_answer(data: dict, width: int | None = WIDTH) -> list[str]:
    """plan's answer: the configuration to use; its memory per GPU of the card and its step (and run) time on the
    machine planned; the command to run next (data["next"]: deepspeed-config --auto with the same options), and
    what it writes where that is not this configuration."""
    r, lay = data["recommendation"], data["layout"]
    out = wrap(_recommended(data), "  ", width=width)
    if not r["strategy"]:
        return out + [x for reason in r["reasons"][:1] for x in wrap(reason, "  ", width=width)] + (
            wrap(peft_line(data), "  ", width=width) if data.get("peft_alternative") else [])
    s = next(x for x in data["strategies"] if x["name"] == r["strategy"])
    t = s["time"]
    n = lay["gpus_per_node"]
    where = (f"{lay['nodes']} x " if lay["nodes"] > 1 else "") + (f"{n} x {lay['gpu_model']}" if lay["gpu_model"] else
                                                                  f"{n} GPU{'s' * (n > 1)}") \
        + (f" ({lay['link_type']})" if lay["link_type"] and lay["gpus"] > 1 else "")
    said = f"{size(s['per_gpu_bytes']['total'])} per GPU of {size(lay['gpu_mem_bytes'])}" \
        + (" (tight)" if s.get("tight") else "") + f" on {where}" \
        + (f", if the host has {s['condition']}" if s.get("condition") else "") + "; "
    if t["step_s"]:
        said += f"step {_s(t['step_s'])}, {t['tokens_per_s']:,.0f} tokens/s"
        spread = data.get("host_spread")
        if spread and all(spread["step_s"]):
            (lo, hi), (s_lo, s_hi) = spread["cores"], spread["step_s"]
            said += (f" (assuming {data['layout']['cpu_cores']} CPU cores per node, --cpu-cores: "
                     + (f"{_s(s_lo)} at {lo} .. {_s(s_hi)} at {hi})" if abs(s_lo - s_hi) > 0.01 * s_hi else
                        f"the same at {lo} .. {hi})"))
        if t.get("run_s"):
            said += f"; {round(t['run_s'] / t['step_s']):,} steps: {_s(t['run_s'])}"
    else:
        said += f"no step time: {t['basis']}"
    out += wrap(said, "  ", width=width)
    ds, nxt = data.get("deepspeed_config"), data.get("next")
    if nxt:
        w = nxt["writes"]
        if not nxt["same"]:   # the pick is --calibrate's: deepspeed-config plans from the datasheet
            out += wrap("Next (deepspeed-config cannot repeat --calibrate: this writes "
                        + (_setup(w) if w["strategy"] else f"nothing ({w['why']})")
                        + "; --json's deepspeed_config holds the calibrated config):", "  ", width=width)
            out += shell_lines(nxt["command"], "  ", "      ", width)
        elif ds["strategy"] != r["strategy"]:
            out += wrap(f"Next ({r['strategy']} is not DeepSpeed; this writes the fastest DeepSpeed setup,"
                        f" {ds['strategy']} at micro-batch {ds['micro_batch']} x {ds['grad_accum']}):", "  ",
                        width=width)
            out += shell_lines(nxt["command"], "  ", "      ", width)
        else:
            out += shell_lines(nxt["command"], "Next: ", "      ", width)
    elif ds and ds["why"]:
        out += wrap(f"DeepSpeed: {ds['why']}", "  ", width=width)
    return out + (wrap(peft_line(data), "  ", width=width) if data.get("peft_alternative") else [])


def _if(condition: str | None) -> str:
    """A row's condition (what the host planned for must have: RAM, NVMe or both) in a few words for its fits cell;
    the condition itself says how much (--json, and --explain under the table)."""
    if not condition:
        return ""
    what = [w for w, said in (("RAM", " of RAM "), ("NVMe", " NVMe ")) if said in condition]
    return ", if enough " + ("+".join(what) or "host")


def _memory(data: dict, width: int | None, explain: bool = False) -> str:
    """Each strategy's memory per GPU, host and NVMe per node, and traffic. At full width one table in the order of
    the arithmetic; within `width` what decides the fit, and with `explain` the parts that add up to it and the
    bytes each GPU sends per step in a second table."""
    where = {"gpu": "GPU", "cpu": "CPU", "nvme": "NVMe"}
    rows = []
    for s in data["strategies"]:
        b = s["per_gpu_bytes"]
        comm = "-" if not s["comm_bytes_per_step"] else size(s["comm_bytes_per_step"]) + (
            f" {_s(s['comm_seconds_per_step'])}" if s["comm_seconds_per_step"] is not None else " (link unknown)")
        fits = ("tight" if s.get("tight") else "yes") + _if(s.get("condition")) if s["fits"] else "no: " + ", ".join(
            f"{where[k]} {size(v)} short" for k, v in s.get("short_bytes", {}).items()) if s.get("short_bytes") else (
            "yes" if s["fits"] else "no")
        rows.append([s["name"], fits, size(b["weights"]), size(b["gradients"]),
                     size(b["optimizer"]), size(b["activations"]), size(b["temporaries"]), size(b["overhead"]),
                     size(b["total"]), size(s["nvidia_smi_bytes"]), s["peak"]["phase"],
                     size(s["cpu_bytes"]), size(s["nvme_bytes"]) if s["nvme_bytes"] else "-", comm])
    header = ["strategy", "fits", "weights", "grads", "optim", "activ", "temps", "overhead", "total/GPU",
              "nvidia-smi", "peak falls", "CPU/node", "NVMe/node", "comm/step"]
    if width is None:
        return table(rows, header)
    fit, parts = [0, 1, 8, 10, 11, 12], [0, 2, 3, 4, 5, 6, 7, 9, 13]
    out = table([[r[i] for i in fit] for r in rows], [header[i] for i in fit], width)
    if explain:
        out += "\n" + table([[r[i] for i in parts] for r in rows], [header[i] for i in parts], width)
        out += "".join("\n" + x for s in data["strategies"] if s["fits"] and s.get("condition")
                       for x in wrap(f"{s['name']} fits only with {s['condition']}", "    ", "  ", width))
    return out


# What the training stack does beside transformers' code under the HF Trainer with torch 2.x, as plan's Training
# line names it: (the training field, the value that says it, the words)
STACK_WORDS = (("zero_grad", "zeros", ", zero_grad keeps the gradients (zeros)"),
               ("cuda_loading", "eager", ", CUDA modules loaded eagerly"),
               ("fsdp_orig_params", True, ", FSDP use_orig_params"),
               ("varlen", True, ", lengths varying step to step"),
               ("bnb_keeps_input", True, ", bitsandbytes keeps each 4-bit matmul's input (before 0.43.2)"),
               ("quantizer", "lightning", ", quantized by Lightning (the head too)"),
               ("non_reentrant", True, ", non-reentrant checkpointing"),
               ("keeps_graph", True, ", the last micro-batch's graph named into the next forward"),
               ("act_offload", True, ", activations offloaded to the host (torchtune)"))


def plan(data: dict, *, wide: bool = False, explain: bool = False, answer: bool = True) -> str:
    """Human text for `gputopo plan`: the answer (unless `answer` is False: inspect --model gives its own), what was
    planned, the memory and step tables, the search, and what was assumed."""
    width = None if wide else WIDTH
    m, lay, t = data["model"], data["layout"], data["training"]
    out = plan_answer(data, width) + [""] if answer else []
    out += wrap(f"Model: {m['name']} ({m['params'] / 1e6:,.0f}M params, hidden {m['hidden_size']}, {m['layers']}"
                f" layers; {m['source']})", "  ", width=width)
    out += wrap(f"Layout: {lay['nodes']} node(s) x {lay['gpus_per_node']} GPU(s) of {size(lay['gpu_mem_bytes'])}"
                + (f" ({lay['gpu_model']})" if lay["gpu_model"] else "")
                + (f", weakest link {lay['link_type']}" if lay["link_type"] else "")
                + "; CPU RAM " + (f"{size(lay['cpu_mem_bytes'])}/node" if lay["cpu_mem_bytes"] is not None else
                                  "not given")
                + ", NVMe free " + (f"{size(lay['nvme_free_bytes'])}/node" if lay["nvme_free_bytes"] is not None
                                    else "not given")
                + (" (another machine)" if None in (lay["cpu_mem_bytes"], lay["nvme_free_bytes"]) else ""),
                "  ", width=width)
    impl = f" ({t['optimizer_impl']})" if t.get("optimizer_impl") else ""
    stack = "".join(said for key, value, said in STACK_WORDS if t.get(key) == value)
    accum = (" (reduced every micro-batch)" if t.get("sync_each_batch") else " (no_sync)") if t["grad_accum"] > 1 \
        else ""
    precision = "tf32" if t.get("tf32") else t["precision"]
    out += wrap(f"Training: {precision}, {t['optimizer']}{impl}, micro-batch {t['batch_size']} x"
                f" {t['seq_len']} tokens, accumulation {t['grad_accum']}{accum}"
                + (", gradient checkpointing" if t["grad_checkpointing"] else "")
                + (", selective checkpointing" if t.get("selective") else "") + f", {t['attention']} attention"
                + stack
                + (f" ({', '.join(k.replace('_', '-') for k in data['search']['searched'])} searched: below)"
                   if data.get("search") else ""), "  ", width=width)
    out += ["", _memory(data, width, explain)]
    if explain:
        first = data["strategies"][0]
        out += wrap("total/GPU = weights + optimizer + overhead + the step's peak (the gradients alive then,"
                    " activations kept for backward, temporaries); nvidia-smi adds the allocator's reserve (about"
                    f" {size(first['nvidia_smi_bytes'] - first['per_gpu_bytes']['total'])}).", "    ", "  ", width)
        out += wrap("CPU/node = DeepSpeed's own estimate (estimate_zero2/3_model_states_mem_needs) with its 1.5x margin"
                    " (additional_buffer_factor), for CPU offload and for loading fp32 weights on every rank (NVMe: its"
                    " pinned swap buffers): what DeepSpeed allocates has not been measured, so the margin stays.",
                    "    ", "  ", width)
    out += ["", step_times(data, width=width, explain=explain)]
    if data.get("measured"):
        out += ["", measured(data["measured"], width)]
    if data.get("search"):
        out += ["", searched(data["search"], width)]
    r = data["recommendation"]
    basis = data.get("rates", {}).get("basis", {})
    link_assumed = data["layout"].get("link_basis", "").startswith("assumed")
    if explain:
        out += [""] + wrap(_recommended(data), "  ", width=width)
        out += [x for reason in r["reasons"] for x in wrap(reason, "    ", "  ", width)]
        if link_assumed:
            out += wrap(f"(link bandwidth {data['layout']['link_basis']})", "    ", "  ", width)
        ds, nxt = data.get("deepspeed_config"), data.get("next")
        if ds:
            calibrated = nxt is not None and not nxt["same"]
            out += wrap(f"DeepSpeed: {ds['why']}" if not ds["config"] else
                        ("DeepSpeed: this calibrated plan's config is" if calibrated else
                         "DeepSpeed: `gputopo deepspeed-config --auto` with these options writes")
                        + f" {ds['strategy']}'s config" + ("" if ds["strategy"] == r["strategy"] else
                                     f" at micro-batch {ds['micro_batch']} x {ds['grad_accum']} ({r['strategy']} is"
                                     " not DeepSpeed)")
                        + f" (ZeRO stage {ds['config']['zero_optimization']['stage']}"
                        + "".join(f", {what} offloaded to {v['device']}"
                                  for k, what in (("offload_optimizer", "optimizer"), ("offload_param", "parameters"))
                                  for v in [ds["config"]["zero_optimization"].get(k)] if v)
                        + "; --json: deepspeed_config)" + (
                            "; `gputopo deepspeed-config --auto` cannot calibrate: it plans from the GPU's datasheet"
                            " and writes " + (_setup(nxt["writes"]) if nxt["writes"]["strategy"] else "nothing")
                            if calibrated else " and the launch line with --launcher") + ".", "  ", width=width)
        out += wrap(peft_basis(data), "  ", width=width) if data.get("peft_alternative") else []
        out += [x for n in data.get("notes", []) for x in wrap(f"Note: {n}", "  ", width=width)]
    else:
        more = ([f"step times from {basis['summary'].split(' (')[0]}"] if basis.get("summary") else []) + (
            [f"link bandwidth {data['layout']['link_basis']}"] if link_assumed else [])
        out += [""] + in_short(data.get("notes", []), more, width,
                               also=f"why {r['strategy'] or 'nothing fits'}")
    return "\n".join(out)


def _configuration(c: dict, why: str) -> list[str]:
    """One row of the search's table."""
    ckpt = "yes" if c["grad_checkpointing"] else "selective" if c.get("selective") else "no"
    return [c["strategy"], str(c["micro_batch"]), str(c["grad_accum"]), ckpt,
            {True: "yes", False: "no", None: "-"}[c["offload_params"]], size(c["per_gpu_bytes"]), _s(c["step_s"]),
            f"{c['tokens_per_s']:,.0f}" if c["tokens_per_s"] else "?", why]


def searched(found: dict, width: int | None = WIDTH) -> str:
    """plan's search: what was open, how many configurations fit, the winner and the best of the rest."""
    open_ = ", ".join(k.replace("_", "-") for k in found["searched"])
    head = wrap(f"Search ({open_} open; {found['priced']} configurations fit and were priced"
                + (f", at global batch {found['global_batch']}" if found["global_batch"] else
                   "; the samples per step follow the micro-batch: --global-batch N holds them"
                   if "batch_size" in found["searched"] else "") + "):", "  ", width=width)
    if not found["chosen"]:
        return "\n".join(head + wrap("none fits: the tables above are the leanest of what was open (the least"
                                     " micro-batch, checkpointing where open)", "  ", width=width))
    rows = [_configuration(found["chosen"], "chosen")] + [_configuration(c, c["why"]) for c in found["next"]]
    header = ["strategy", "micro", "accum", "ckpt", "offload params", "total/GPU", "step", "tokens/s", "why not"]
    if width is not None and all(r[4] == "-" for r in rows):   # no ZeRO-3 offload among them: an empty column
        rows, header = [r[:4] + r[5:] for r in rows], header[:4] + header[5:]
    text = table(rows, header, width, key=2, wrap_last=True)   # strategy and micro-batch name a row
    if not found["timed"]:
        text += "\n" + "\n".join(wrap("no step time (the link is unknown): ranked by HF's decision tree, then no"
                                      " recomputation, then the largest micro-batch", "    ", "  ", width))
    return "\n".join(head + [text])


def _s(v) -> str:
    """Seconds as every table and answer prints them (advise.run_words), "?" when unknown."""
    from .advise import run_words
    return "?" if v is None else run_words(v)


def step_times(data: dict, width: int | None = WIDTH, explain: bool = True) -> str:
    """The predicted step of each strategy, its parts, what the link buys; with `explain` what the figures assume."""
    runs = any("run_s" in s["time"] for s in data["strategies"])
    extra = any(s["time"].get("sampled_extra_s") for s in data["strategies"])
    rows = [[s["name"], _s(t["step_s"]), _s(t["compute_s"]),
             f"{_s(t['comm_s'])} ({_s(t['exposed_comm_s'])})" if t["comm_s"] else "-", _s(t["offload_s"]) if
             t["offload_s"] != 0 else "-", _s(t["optimizer_s"])]
            + ([f"{t['sampled_extra_s']:+.3f} s" if t.get("sampled_extra_s") else "-"] if extra else [])
            + [f"{t['tokens_per_s']:,.0f}" if t["tokens_per_s"] else "?"] + ([_s(t.get("run_s"))] if runs else [])
            for s in data["strategies"] for t in [s["time"]]]
    out = ["Predicted step time (per optimizer step):",
           table(rows, ["strategy", "step", "compute", "comm (exposed)", "offload", "optimizer"]
                 + (["DeepSpeed beyond (sampled)"] if extra else []) + ["tokens/s"] + (["run"] if runs else []), width)]
    ab = data.get("interconnect_ab")
    if ab and ab["ratio"] and ab.get("p2p_used") is False:
        out += wrap(f"NCCL does not use P2P over {ab['link']} by default (it goes through host memory, SHM, as"
                    " `inspect --nccl-log` expects): NCCL_P2P_DISABLE=1 changes nothing here.", "    ", "  ", width)
    elif ab and ab["ratio"]:
        out += wrap(f"The link buys {ab['strategy']}: {ab['step_s']:.3f} s/step over {ab['link'] or 'the link'} vs"
                    f" {ab['step_s_without_p2p']:.3f} s with NCCL_P2P_DISABLE=1 ({ab['ratio']:.2f}x);"
                    " `gputopo bench-nvlink` measures both.", "    ", "  ", width)
    if explain:
        basis = data.get("rates", {}).get("basis", {})
        out += [x for k, v in basis.items() if k != "summary" for x in wrap(f"assumes {k}: {v}", "    ", "  ", width)]
    return "\n".join(out)


def measured(m: dict, width: int | None = WIDTH) -> str:
    """plan --measure: predicted vs measured, per component."""
    rows = [[r["component"], size(r["predicted"]), size(r["measured"]) if r["measured"] is not None else "N/A",
             f"{r['error']:+.1%}" if r["error"] is not None else "N/A"] for r in m["rows"]]
    out = wrap(f"Measured on this machine ({m['device']}, {m['attention']} attention, torch {m['torch']}, transformers"
               f" {m['transformers']}): {m['method']}", "  ", width=width)
    out += [table(rows, ["component", "predicted", "measured", "error"], width),
            f"  predicted peak phase: {m['predicted_phase']}"]
    t = m.get("time")
    if t:
        steps = ", ".join(f"{x:.3f}" for x in t["step_times_s"])
        out += [""] + wrap("Step time of this one process (predicted from this machine's calibration; measured: median"
                           f" of {len(t['step_times_s'])} steps after 2 warm-up, {steps} s)", "  ", width=width)
        out.append(table([["step", f"{t['predicted_s']:.3f} s", f"{t['measured_s']:.3f} s", f"{t['error']:+.1%}"]],
                         ["", "predicted", "measured", "error"], width))
        out += [x for k, v in t["basis"].items() if k != "summary" for x in wrap(f"assumes {k}: {v}", "    ", "  ",
                                                                                  width)]
    return "\n".join(out + [x for n in m["notes"] for x in wrap(f"note: {n}", "    ", "  ", width)])


def bench_answer(data: dict, width: int | None = WIDTH) -> list[str]:
    """bench-nvlink's answer: the measured ratio of the arms and the verdict, and the predicted ratio; for a sweep
    alone, its largest size's bus bandwidth with and without P2P."""
    cmp_ = data.get("comparison")
    if cmp_:
        out = wrap(f"no-P2P / P2P median step: {cmp_['ratio']:.3f}x. Verdict: {cmp_['message']}", "  ", width=width)
        if data.get("predicted_ratio"):
            out.append(f"predicted no-P2P / P2P: {data['predicted_ratio']:.3f}x"
                       f" ({data['predicted_ratio'] / cmp_['ratio'] - 1:+.1%} from measured)")
        return out
    if data["allreduce"]:
        top = max(r["bytes"] for r in data["allreduce"])
        arms = {r["p2p"]: r for r in data["allreduce"] if r["bytes"] == top}
        said = ", ".join(f"{'P2P' if p2p else 'no-P2P'} {arms[p2p]['busbw_gbps']:.3f} GB/s" for p2p in (True, False)
                         if p2p in arms)
        return wrap(f"all_reduce of {size_text(top)}: bus bandwidth {said} (the sweep below)", "  ", width=width)
    runs = data["runs"]
    if runs:
        return wrap(f"{runs[0]['label']}: median step {runs[0]['step_time_s']['median']:.4f} s (one arm: no"
                    " comparison)", "  ", width=width)
    return []


def bench(data: dict, *, wide: bool = False, explain: bool = False) -> str:
    """Human text for `gputopo bench-nvlink`: the verdict, then what ran, laid out like the reference table."""
    width = None if wide else WIDTH
    st = data["settings"]
    answer = bench_answer(data, width)
    out = answer + ([""] if answer else [])
    where = f"{data['nnodes']} node(s) x {data['nproc']} process(es) on {data['device']} ({data['backend']})"
    if st is None:
        out += wrap(f"{where}; all-reduce sweep only (--allreduce-only: no training)", "  ", width=width)
    else:
        out += wrap(f"{where}; model {data['model']['name'] if data['model'] else 'N/A'}; data"
                    f" {data['dataset'] or 'N/A'}", "  ", width=width)
        out += wrap(f"{st['steps']} steps per arm ({st['warmup_steps']} warm-up not timed), batch {st['batch_size']}"
                    f" x {st['seq_len']} per process, {st['precision']}, {st['repeat']} run(s) per arm", "  ",
                    width=width)
    link = data.get("link")
    out.append(f"GPUs share: {link['type']} ({link['a']}-{link['b']}, the weakest link)" if link else
               "GPUs share: no GPU link here")
    if data["runs"]:
        rows = [["Y" if r["env"]["NCCL_P2P_DISABLE"] is None else "N", f"{r['timed_runtime_s']:.2f} s",
                 f"{r['samples_per_second']:.2f}", f"{r['step_time_s']['median']:.4f} s",
                 f"{r['step_time_s']['p10']:.4f}-{r['step_time_s']['p90']:.4f} s", _predicted(r)]
                for r in data["runs"]]
        out += ["", table(rows, ["P2P/NVLink", "time (timed steps)", "samples/s", "median step", "p10-p90",
                                 "predicted step (error)"], width)]
    cmp_ = data.get("comparison")
    if cmp_:
        ref = data["reference"]
        basis = data.get("prediction_basis", {}) if data.get("predicted_ratio") else {}
        if explain:
            out += [x for k, v in basis.items() for x in wrap(f"assumes {k}: {v}", "    ", "  ", width)]
        elif basis:
            said = [k for k in basis if k != "summary"]
            out += wrap("the prediction: " + (f"{basis['summary']}; " if basis.get("summary") else "")
                        + f"its {', '.join(said)} (--explain says each)", "    ", "  ", width)
        out += wrap(f"(reference {ref['hardware']}, {ref['model']} on {ref['dataset']}, {ref['steps']} steps:"
                    f" {ref['p2p_s']:.1f} s with P2P vs {ref['no_p2p_s']:.1f} s without,"
                    f" {ref['no_p2p_s'] / ref['p2p_s']:.2f}x)", " ", width=width)
    if data["allreduce"]:
        by = {}
        for r in data["allreduce"]:
            by.setdefault(r["bytes"], {})[r["p2p"]] = r
        rows = []
        for nbytes, arms in sorted(by.items()):
            row = [size_text(nbytes)]
            for p2p in (True, False):
                r = arms.get(p2p)
                row += [f"{r['algbw_gbps']:.3f}", f"{r['busbw_gbps']:.3f}"] if r else ["", ""]
            frac = (arms.get(True) or {}).get("busbw_fraction_of_theoretical")
            row.append(f"{frac:.0%}" if frac is not None else "N/A")
            rows.append(row)
        out += ["", "all_reduce (GB/s; busbw = algbw x 2(n-1)/n as nccl-tests):",
                table(rows, ["size", "P2P algbw", "P2P busbw", "no-P2P algbw", "no-P2P busbw", "busbw/theoretical"],
                      width)]
    out += _nccl_paths(data, width)
    if explain:
        out += [x for n in data["notes"] for x in wrap(f"Note: {n}", "  ", width=width)]
    else:
        out += in_short(data["notes"], width=width)
    if data.get("log_dir"):
        out += wrap(f"Logs (every rank's stdout/stderr): {data['log_dir']}", "  ", width=width)
    return "\n".join(out)


def _nccl_paths(data: dict, width: int | None = WIDTH) -> list[str]:
    """Per arm, the path NCCL said it took (its NCCL_DEBUG=INFO log), and whether the A/B tested its claim."""
    arms = [(r["label"], r.get("nccl")) for r in data["runs"]]
    arms += [(f"all-reduce {k}", v) for k, v in (data.get("allreduce_nccl") or {}).items()]
    rows = [[label, n["version"] or "?", ", ".join(f"{k} {v}" for k, v in n["transports"].items()) or "none printed",
             ", ".join(sorted({p["detail"] for p in n["pairs"]}))[:60], str(n["channels"] or "?"),
             ", ".join(f"{k}={v}" for k, v in n["env"].items()) or "-"] for label, n in arms if n]
    if not rows:
        return []
    out = ["", "Paths NCCL took (its NCCL_DEBUG=INFO log, connection lines per transport):",
           table(rows, ["arm", "NCCL", "transports", "as printed", "channels", "NCCL_* seen"], width)]
    check = data.get("nccl_check")
    out += wrap(f"Paths: {check}" if check else "Paths: each arm took the path it claims (P2P on, then off).", "  ",
                width=width)
    return out


def _predicted(run: dict) -> str:
    """A run's predicted step next to its measured median, or '-' when nothing was predicted."""
    p = run.get("predicted_step_s")
    if p is None:
        return "-"
    return f"{p:.4f} s ({p / run['step_time_s']['median'] - 1:+.1%})"


def size_text(n: int) -> str:
    """A size without a needless ".0" (1 MiB, not 1.0 MiB)."""
    return size(n).replace(".0 ", " ")


VALIDATED = ("validated by ", "deepspeed is not installed")   # the note saying who checked the config


def deepspeed_config(d: dict, files: list[str], *, wide: bool = False, explain: bool = False) -> dict:
    """Text for `gputopo deepspeed-config`, read from its --json dict, in four parts the command places on stdout
    or stderr: "said" (what was written, or printed, and who checked it), "run" (the first launch command, or how
    to get one), "launch" (the launcher's files when printed, its other commands, notes and what the script
    needs) and "notes" (what the plan assumed, briefly; with `explain` every note whole). `files`: the files
    written (none: the config goes to stdout)."""
    width = None if wide else WIDTH
    cfg = d["config"]
    z = cfg.get("zero_optimization") or {}
    what = [f"ZeRO stage {z.get('stage', 0)}"] + [f"{w} offloaded to {z[k]['device']}" for k, w in
                                                   (("offload_optimizer", "optimizer"), ("offload_param", "parameters"))
                                                   if isinstance(z.get(k), dict)]
    what += [p for p in ("bf16", "fp16") if (cfg.get(p) or {}).get("enabled") is True]
    if cfg.get("train_micro_batch_size_per_gpu") == "auto":
        what.append('"auto" for the HF Trainer')
    checked = [n for n in d["warnings"] if n.startswith(VALIDATED)]
    said = ("wrote " + ", ".join(files) + ": " if files else "The config, on stdout (-o PATH writes it): ") \
        + ", ".join(what) + "".join(f"; {n}" for n in checked[:1])
    out = {"said": wrap(said, "  ", width=width), "run": [], "launch": [], "notes": []}
    launch = d["launch"]
    if launch and launch["run"]:
        first, *rest = launch["run"]
        out["run"] = wrap(f"# on {first['where']}:", "#   ", width=width) + shell_lines(first["command"], "", "    ",
                                                                                   width)
    else:
        rest = []
        out["run"] = wrap("# launch: --launcher torchrun|deepspeed|accelerate|slurm prints the command", "#   ",
                          width=width)
    if launch:
        if not files:
            out["launch"] += [x for name, content in launch["files"].items()
                              for x in (f"--- {name}", content.rstrip("\n"))]
        for r in rest:
            out["launch"] += wrap(f"# on {r['where']}:", "#   ", width=width) + shell_lines(r["command"], "", "    ",
                                                                                      width)
        out["launch"] += [x for n in launch["notes"] for x in wrap(f"# {n}", "#   ", width=width)]
        out["launch"].append("# the training script needs:")
        out["launch"] += [x for n in launch["script_needs"] for x in wrap(f"#   {n}", "#     ", width=width)]
    assumed = set((d.get("plan") or {}).get("notes") or [])
    shown = [n for n in d["warnings"] if explain or n not in assumed and not n.startswith(VALIDATED)]
    rec = (d.get("plan") or {}).get("recommendation")
    if explain and rec:   # --auto: why the plan picked what it did, as `plan --explain` says it
        out["notes"] += wrap(f"Why {rec['strategy']} (gputopo plan's reasons):", "  ", width=width)
        out["notes"] += [x for reason in rec["reasons"] for x in wrap(reason, "    ", "  ", width)]
    out["notes"] += [x for n in shown for x in wrap(f"note: {n}", "  ", width=width)]
    if not explain:
        out["notes"] += in_short([n for n in d["warnings"] if n in assumed], width=width)
    return out


DOCTOR_MARK = {"fail": "FAIL", "warn": "WARN", "unknown": "????", "info": "info", "ok": "ok"}


def doctor(data: dict, *, wide: bool = False, explain: bool = False) -> str:
    """Human text for `gputopo doctor`: the counts and the verdict, then the checks worst first, why and fix under
    the ones that need action (with `explain` under every one)."""
    width = None if wide else WIDTH
    c = data["counts"]
    out = [f"gputopo doctor: {c['fail']} blocking, {c['warn']} warning(s), {c['unknown']} not checkable"
           + (f"; DeepSpeed config {data['config']}" if data.get("config") else "")
           + f" ({data['elapsed_s']:.2f} s)",
           "Exit 1: something below will break a run." if c["fail"] else "Nothing blocks a run here.", ""]
    rows = []
    for ch in data["checks"]:
        rows.append([DOCTOR_MARK[ch["status"]], ch["id"], ch["found"]])
        if explain or ch["status"] in ("fail", "warn", "unknown"):
            if ch["why"]:
                rows.append(["", "", f"  why: {ch['why']}"])
            if ch["fix"]:
                rows.append(["", "", f"  fix: {ch['fix']}"])
    out.append(table(rows, ["status", "check", "found"], width, wrap_last=True))
    if data["disks"]:
        rows = [[d["mountpoint"], d["fstype"], d["kind"], d["block"], size(d["free_bytes"]), size(d["total_bytes"])]
                for d in data["disks"] if d["kind"] != "ram" or d["mountpoint"] == "/dev/shm"]
        out += ["", table(rows, ["mount", "fs", "kind", "disk", "free", "size"], width)]
    if not explain:
        out += ["", "--explain: why each check matters, also where it passes"]
    return "\n".join(out)


def _yes(value) -> str:
    """true/false/null as yes/no/unknown."""
    return "unknown" if value is None else "yes" if value else "no"


def nccl(data: dict, most: int = 30) -> str:
    """Human text for `gputopo inspect --nccl-log`: what the log shows, the settings behind it, the pairs of
    GPUs (the first `most`), the check against a topology, and the findings."""
    n = data["nccl"]
    hosts = _short([f"{h} ({k} rank{'s' * (k != 1)})" for h, k in n["ranks_per_host"].items()], 8)
    out = [f"NCCL {n['version'] or '(version not in the log)'}, from {data['inputs'][0]}"
           + (f"; topology from {', '.join(data['inputs'][1:])}" if len(data["inputs"]) > 1 else ""),
           f"{len(n['hosts'])} host(s)" + (f": {hosts}" if hosts else " named (the lines carry no host prefix)")
           + (f"; {n['nranks']} ranks in all" if n["nranks"] else "")
           + (f"; {n['channels']} channels" if n["channels"] else ""),
           f"GPUDirect RDMA: {_yes(n['gdrdma'])} · NVLS: {_yes(n['nvls'])}"
           + (" (available)" if n["nvls_available"] and not n["nvls"] else "") + f" · CollNet: {_yes(n['collnet'])}"]
    details: dict = {}
    for p in n["pairs"]:
        details.setdefault(p["transport"], []).append(p["detail"])
    rows = [[k, c, _short(list(dict.fromkeys(details.get(k, [])))[:4], 3)] for k, c in n["transports"].items()]
    out += ["", "Transports (connection lines seen):", table(rows, ["kind", "lines", "as printed"]) if rows
            else "  none: the log holds no connection lines (NCCL prints them at init, with NCCL_DEBUG=INFO)"]
    if n["settings"]:
        out += ["", "Settings that change NCCL's choice:"]
        out += [f"  {k}={n['env'][k]}: {v}" for k, v in n["settings"].items()]
    others = [f"{k}={v}" for k, v in n["env"].items() if k not in n["settings"]]
    if others:
        out.append("Other NCCL variables: " + _short(others, 8))
    if n["pairs"]:
        rows = [[p["from"], p["to"], p["transport"], p["detail"] + (f" [{p['side']}]" if p["side"] else "")]
                for p in n["pairs"][:most]]
        out += ["", f"Connections ({len(n['pairs'])} distinct"
                + (f", the first {most}" if len(n["pairs"]) > most else "") + "):",
                table(rows, ["from", "to", "transport", "detail"])]
    out += _nccl_check(n.get("cross_check"), most)
    out += ["", "Findings:"] + ([f"- {f}" for f in n["findings"]] or ["  nothing to act on in this log"])
    return "\n".join(out)


def _nccl_check(check: dict | None, most: int) -> list[str]:
    """The pairs of GPUs checked against the topology: their link, the transport used and the one expected."""
    if not check:
        return []
    if not check["pairs"]:
        return ["", "Against the topology: no pair of GPUs of one host could be matched to it"]
    rows = [[r["host"] or "", r["from"], r["to"], r["link"], r["transport"], r["expected"]]
            for r in check["pairs"][:most]]
    return ["", f"Against the topology ({len(check['pairs'])} pairs; GPU numbers: {check['gpu_numbers']}):",
            table(rows, ["host", "from", "to", "link", "used", "expected"])]


FLEET_HEADLINE = ("GPUs", "driver", "cuda", "nccl", "torch", "NICs")   # the columns of the groups' table


def fleet_rows(fleet: dict) -> tuple[list[str], list[list[str]]]:
    """The groups as a table (header, rows): which nodes, their headline facts, and how many facts differ."""
    from .fleet import named
    out = []
    for i, g in enumerate(fleet["groups"]):
        differs = sum(1 for o in fleet["odd"] if o["node"] == g["nodes"][0])   # the facts listed for it
        out.append(["norm" if g["norm"] else str(i + 1), named(g["nodes"]),
                    *[g["facets"].get(k, "-") for k in FLEET_HEADLINE], "-" if g["norm"] else str(differs)])
    return ["group", "nodes", *FLEET_HEADLINE, "differs"], out


def fleet(fleet: dict) -> str:
    """Human text for `gputopo inspect --fleet`."""
    from .fleet import grouped, said
    answered = len(fleet["nodes"]) - len(fleet["unreachable"])
    out = [f"Fleet: {answered} of {len(fleet['nodes'])} node(s) answered"
           + (f"; the norm is the {fleet['norm_by']}" if fleet["norm_by"] != "majority" else "")]
    if fleet["groups"]:
        header, body = fleet_rows(fleet)
        out += ["", table(body, header)]
    if fleet["odd"]:
        out += ["", "What differs from the norm:"] + [f"  {line}" for line in said(fleet)]
    if fleet["health"]:
        out += ["", "Health:"] + [f"  {line}" for line in grouped([(h["node"], f"{h['level']}: {h['message']}")
                                                                     for h in fleet["health"]])]
    if fleet["unreachable"]:
        out += ["", "No report:"] + [f"  {line}" for line in grouped([(u["node"], u["reason"])
                                                                        for u in fleet["unreachable"]])]
    out += ["", "Recommendation:"] + [f"  {line}" for line in fleet["recommendation"]]
    return "\n".join(out)
