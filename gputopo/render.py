"""Report dicts -> readable text tables, or JSON. Text is drawn from the same dict as JSON."""
from __future__ import annotations

from .report import ranked_types
from .topology import rank
from .units import size

MARK = {"error": "!!", "warn": "! ", "info": "- "}


def to_json(data: dict) -> str:
    """The report dict as indented JSON, keys sorted (stable for diffs)."""
    import json  # only for --json: the text output never needs it
    return json.dumps(data, indent=2, sort_keys=True)


def table(rows: list[list[str]], header: list[str] | None = None) -> str:
    """Left-aligned columns separated by two spaces."""
    allrows = ([header] if header else []) + [[("N/A" if c is None else str(c)) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in allrows if i < len(r)) for i in range(max(map(len, allrows)))]
    return "\n".join("  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in allrows)


def matrix(report: dict) -> str:
    """The link matrix laid out as `nvidia-smi topo -m` prints it."""
    labels = [g["name"] for g in report["gpus"]] + [n["name"] for n in report["nics"]]
    cell = {}
    for l in report["links"]:
        cell[(l["a"], l["b"])] = cell[(l["b"], l["a"])] = l["type"] or "?"
    rows = []
    for g in report["gpus"]:
        rows.append([g["name"]] + [("X" if g["name"] == c else cell.get((g["name"], c), "")) for c in labels]
                    + [g["cpu_affinity"], g["numa_affinity"]])
    for n in report["nics"]:
        rows.append([n["name"]] + [("X" if n["name"] == c else cell.get((n["name"], c), "")) for c in labels])
    return table(rows, [""] + labels + ["CPU Affinity", "NUMA Affinity"])


def inspect(report: dict) -> str:
    """Human text for `gputopo inspect`."""
    out = _host(report)
    if not report["gpu_status"]["visible"]:
        out.append(f"No NVIDIA GPU visible: {report['gpu_status']['reason']}")
        out.append("Try `gputopo inspect --from-file topo.txt` with a saved `nvidia-smi topo -m`,"
                   " or `gputopo inspect --example list` to see bundled real machines.")
        return "\n".join(out)
    out.append(f"Source: {report['source']}" + (f" ({', '.join(report['inputs'])})" if report["inputs"] else ""))
    rows = [[g["name"], g["model"], size(g["memory_total_bytes"]) if g["memory_total_bytes"] else None,
             g["pci_bus_id"], _pcie(g), None if g["temperature_c"] is None else f"{g['temperature_c']:g} C",
             _power(g)] for g in report["gpus"]]
    header = ["GPU", "model", "memory", "bus id", "PCIe", "temp", "power"]
    keep = [i for i in range(len(header)) if i == 0 or any(r[i] is not None for r in rows)]
    if len(keep) > 1:  # a paste without `nvlink -s`/`-L` says nothing per GPU beyond the matrix
        out += ["", table([[r[i] for i in keep] for r in rows], [header[i] for i in keep])]
    out += ["", matrix(report)] + _links(report)
    out += ["", "Findings:"] + [f"{MARK[f['level']]}{f['subject']}: {f['message']}" for f in report["findings"]]
    if not any(f["level"] != "info" for f in report["findings"]):
        out.append("  no health problems found")
    out += [f"Note: {n}" for n in report["notes"]]
    if report.get("plan"):
        return "\n".join(out + ["", plan(report["plan"])])
    r = report["recommendation"]
    if r:
        out += ["", f"Recommendation ({r['basis']}): {r['strategy'] or 'none yet'}"] + [f"  {x}" for x in r["reasons"]]
    return "\n".join(out)


def _host(report: dict) -> list[str]:
    """The host line, and blocking host problems from `gputopo doctor`, briefly."""
    out = []
    h = report["host"]
    if h:
        out.append(f"Host: {h['cpus_logical']} CPUs ({h['cpus_physical']} cores), {h['numa_nodes'] or 'N/A'} NUMA"
                   f" node(s), RAM {size(h['ram_total_bytes'])} ({size(h['ram_available_bytes'])} free),"
                   f" {h['tmp_dir']} {size(h['tmp_free_bytes'])} free")
    for c in report.get("host_checks") or []:
        out.append(f"!! {c['subject']}: {c['found']}" + (f" (fix: {c['fix']})" if c["fix"] else ""))
    if report.get("host_checks"):
        out.append("   `gputopo doctor` explains these and checks the rest")
    return out


def _links(report: dict) -> list[str]:
    """The selected GPUs' link classes slowest first, islands, weakest link, nearest NICs, --best."""
    if report.get("links_note"):
        out = ["", report["links_note"]]
    else:
        out = ["", f"Links among {', '.join(report['selected'])}, slowest first:"]
        rows = []
        for t, pairs, l in ranked_types(report):
            bw = f"{l['bandwidth_gbps']:g} GB/s" if l.get("bandwidth_gbps") else "N/A"
            total = len(report["selected"]) * (len(report["selected"]) - 1) // 2
            rows.append([t, f"all {total} pairs" if len(pairs) == total > 1 else _short(pairs), bw, l["explanation"]])
        out.append(table(rows, ["link", "pairs", "theoretical/dir", "meaning"]))
        nv_basis = {l["bandwidth_basis"] for l in report["links"] if l.get("bandwidth_basis")}
        out += [f"  bandwidth: {b}" for b in sorted(nv_basis)]
    if report["islands"]:
        out.append("NVLink islands: " + "  ".join("{" + ", ".join(i) + "}" for i in report["islands"]))
    w = report["weakest_link"]
    if w:
        out.append(f"Weakest link in use: {w['a']}-{w['b']} {w['type'] or 'unknown'}")
    nic = _nearest_nics(report)
    if nic:
        out.append("Nearest NIC per GPU: " + "  ".join(nic))
    if report["best"]:
        b = report["best"]
        out.append(f"Best {b['k']} GPU(s): {', '.join(b['gpus'])} (weakest link"
                   f" {b['weakest_link']['type'] if b['weakest_link'] else 'none'})")
        out.append(f"  {b['command']}")
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


def plan(data: dict) -> str:
    """Human text for `gputopo plan`."""
    m, lay, t = data["model"], data["layout"], data["training"]
    out = [f"Model: {m['name']} ({m['params'] / 1e6:,.0f}M params, hidden {m['hidden_size']}, {m['layers']} layers;"
           f" {m['source']})",
           f"Layout: {lay['nodes']} node(s) x {lay['gpus_per_node']} GPU(s) of {size(lay['gpu_mem_bytes'])}"
           + (f" ({lay['gpu_model']})" if lay["gpu_model"] else "")
           + (f", weakest link {lay['link_type']}" if lay["link_type"] else "")
           + f"; CPU RAM {size(lay['cpu_mem_bytes'])}/node, NVMe free "
           + (size(lay["nvme_free_bytes"]) if lay["nvme_free_bytes"] is not None else "not given (another machine)"),
           f"Training: {t['precision']}, {t['optimizer']}, micro-batch {t['batch_size']} x {t['seq_len']} tokens,"
           f" accumulation {t['grad_accum']}" + (", gradient checkpointing" if t["grad_checkpointing"] else "")
           + (", selective checkpointing" if t.get("selective") else "") + f", {t['attention']} attention"
           + (f" ({', '.join(k.replace('_', '-') for k in data['search']['searched'])} searched: below)"
              if data.get("search") else ""), ""]
    rows = []
    where = {"gpu": "GPU", "cpu": "CPU", "nvme": "NVMe"}
    for s in data["strategies"]:
        b = s["per_gpu_bytes"]
        comm = "-" if not s["comm_bytes_per_step"] else size(s["comm_bytes_per_step"]) + (
            f" {s['comm_seconds_per_step']:.3f}s" if s["comm_seconds_per_step"] is not None else " (link unknown)")
        fits = ("tight" if s.get("tight") else "yes") + (", if NVMe free" if s.get("condition") else "") \
            if s["fits"] else "no: " + ", ".join(
            f"{where[k]} {size(v)} short" for k, v in s.get("short_bytes", {}).items()) if s.get("short_bytes") else (
            "yes" if s["fits"] else "no")
        rows.append([s["name"], fits, size(b["weights"]), size(b["gradients"]),
                     size(b["optimizer"]), size(b["activations"]), size(b["temporaries"]), size(b["overhead"]),
                     size(b["total"]), size(s["nvidia_smi_bytes"]), s["peak"]["phase"],
                     size(s["cpu_bytes"]), size(s["nvme_bytes"]) if s["nvme_bytes"] else "-", comm])
    out.append(table(rows, ["strategy", "fits", "weights", "grads", "optim", "activ", "temps", "overhead", "total/GPU",
                            "nvidia-smi", "peak falls", "CPU/node", "NVMe/node", "comm/step"]))
    first = data["strategies"][0]
    out.append("  total/GPU = weights + optimizer + overhead + the step's peak (the gradients alive then, activations"
               " kept for backward, temporaries); nvidia-smi adds the allocator's reserve (about"
               f" {size(first['nvidia_smi_bytes'] - first['per_gpu_bytes']['total'])}).")
    out.append("  CPU/node = DeepSpeed's own estimate (estimate_zero2/3_model_states_mem_needs) with its 1.5x margin"
               " (additional_buffer_factor), for CPU offload and for loading fp32 weights on every rank (NVMe: its"
               " pinned swap buffers): what DeepSpeed allocates has not been measured, so the margin stays.")
    out += ["", step_times(data)]
    if data.get("measured"):
        out += ["", measured(data["measured"])]
    if data.get("search"):
        out += ["", searched(data["search"])]
    r = data["recommendation"]
    out += ["", f"Recommendation: {r['strategy'] or 'none fits'}" + (
        f", micro-batch {r['micro_batch']} x {r['grad_accum']} accumulation"
        + (", gradient checkpointing" if r["grad_checkpointing"] else ", selective checkpointing"
           if data["training"].get("selective") else "")
        + ("" if r.get("offload_params") is None else ", parameters offloaded" if r["offload_params"] else
           ", parameters on the GPU") if r["strategy"] else "")] + [f"  {x}" for x in r["reasons"]]
    if data["layout"].get("link_basis", "").startswith("assumed"):
        out.append(f"  (link bandwidth {data['layout']['link_basis']})")
    ds = data.get("deepspeed_config")
    if ds:
        out.append(f"DeepSpeed: {ds['why']}" if not ds["config"] else
                   f"DeepSpeed: `gputopo deepspeed-config --auto` with these options writes {ds['strategy']}'s config"
                   + ("" if ds["strategy"] == r["strategy"] else
                      f" at micro-batch {ds['micro_batch']} x {ds['grad_accum']} ({r['strategy']} is not DeepSpeed)")
                   + f" (ZeRO stage {ds['config']['zero_optimization']['stage']}"
                   + "".join(f", {what} offloaded to {v['device']}"
                             for k, what in (("offload_optimizer", "optimizer"), ("offload_param", "parameters"))
                             for v in [ds["config"]["zero_optimization"].get(k)] if v)
                   + "; --json: deepspeed_config) and the launch line with --launcher.")
    out += [f"Note: {n}" for n in data.get("notes", [])]
    return "\n".join(out)


def _configuration(c: dict, why: str) -> list[str]:
    """One row of the search's table."""
    ckpt = "yes" if c["grad_checkpointing"] else "selective" if c.get("selective") else "no"
    return [c["strategy"], str(c["micro_batch"]), str(c["grad_accum"]), ckpt,
            {True: "yes", False: "no", None: "-"}[c["offload_params"]], size(c["per_gpu_bytes"]), _s(c["step_s"]),
            f"{c['tokens_per_s']:,.0f}" if c["tokens_per_s"] else "?", why]


def searched(found: dict) -> str:
    """plan's search: what was open, how many configurations fit, the winner and the best of the rest."""
    open_ = ", ".join(k.replace("_", "-") for k in found["searched"])
    head = (f"Search ({open_} open; {found['priced']} configurations fit and were priced"
            + (f", at global batch {found['global_batch']}" if found["global_batch"] else
               "; the samples per step follow the micro-batch: --global-batch N holds them"
               if "batch_size" in found["searched"] else "") + "):")
    if not found["chosen"]:
        return head + "\n  none fits: the tables above are the leanest of what was open (the least micro-batch," \
                      " checkpointing where open)"
    rows = [_configuration(found["chosen"], "chosen")] + [_configuration(c, c["why"]) for c in found["next"]]
    text = table(rows, ["strategy", "micro", "accum", "ckpt", "offload params", "total/GPU", "step", "tokens/s",
                        "why not"])
    if not found["timed"]:
        text += "\n  no step time (the link is unknown): ranked by HF's decision tree, then no recomputation, then" \
                " the largest micro-batch"
    return head + "\n" + text


def _s(v) -> str:
    """Seconds as the step table prints them."""
    if v is None:
        return "?"
    return (f"{v:.3f}s" if v < 100 else f"{v / 60:.1f}min" if v < 6000 else f"{v / 3600:.1f}h" if v < 172800
            else f"{v / 86400:.1f}d")


def step_times(data: dict) -> str:
    """The predicted step of each strategy, its parts, and what the figures assume."""
    runs = any("run_s" in s["time"] for s in data["strategies"])
    extra = any(s["time"].get("sampled_extra_s") for s in data["strategies"])
    rows = [[s["name"], _s(t["step_s"]), _s(t["compute_s"]),
             f"{_s(t['comm_s'])} ({_s(t['exposed_comm_s'])})" if t["comm_s"] else "-", _s(t["offload_s"]) if
             t["offload_s"] != 0 else "-", _s(t["optimizer_s"])]
            + ([f"{t['sampled_extra_s']:+.3f}s" if t.get("sampled_extra_s") else "-"] if extra else [])
            + [f"{t['tokens_per_s']:,.0f}" if t["tokens_per_s"] else "?"] + ([_s(t.get("run_s"))] if runs else [])
            for s in data["strategies"] for t in [s["time"]]]
    out = ["Predicted step time (per optimizer step):",
           table(rows, ["strategy", "step", "compute", "comm (exposed)", "offload", "optimizer"]
                 + (["DeepSpeed beyond (sampled)"] if extra else []) + ["tokens/s"] + (["run"] if runs else []))]
    ab = data.get("interconnect_ab")
    if ab and ab["ratio"] and ab.get("p2p_used") is False:
        out.append(f"  NCCL does not use P2P over {ab['link']} by default (it goes through host memory, SHM, as"
                   " `inspect --nccl-log` expects): NCCL_P2P_DISABLE=1 changes nothing here.")
    elif ab and ab["ratio"]:
        out.append(f"  The link buys {ab['strategy']}: {ab['step_s']:.3f} s/step over {ab['link'] or 'the link'} vs"
                   f" {ab['step_s_without_p2p']:.3f} s with NCCL_P2P_DISABLE=1 ({ab['ratio']:.2f}x);"
                   " `gputopo bench-nvlink` measures both.")
    basis = data.get("rates", {}).get("basis", {})
    out += [f"  assumes {k}: {v}" for k, v in basis.items() if k != "summary"]
    return "\n".join(out)


def measured(m: dict) -> str:
    """plan --measure: predicted vs measured, per component."""
    rows = [[r["component"], size(r["predicted"]), size(r["measured"]) if r["measured"] is not None else "N/A",
             f"{r['error']:+.1%}" if r["error"] is not None else "N/A"] for r in m["rows"]]
    out = [f"Measured on this machine ({m['device']}, {m['attention']} attention, torch {m['torch']}, transformers"
           f" {m['transformers']}): {m['method']}",
           table(rows, ["component", "predicted", "measured", "error"]),
           f"  predicted peak phase: {m['predicted_phase']}"]
    t = m.get("time")
    if t:
        steps = ", ".join(f"{x:.3f}" for x in t["step_times_s"])
        out += ["", "Step time of this one process (predicted from this machine's calibration; measured: median of"
                f" {len(t['step_times_s'])} steps after 2 warm-up, {steps} s)",
                table([["step", f"{t['predicted_s']:.3f} s", f"{t['measured_s']:.3f} s", f"{t['error']:+.1%}"]],
                      ["", "predicted", "measured", "error"])]
        out += [f"  assumes {k}: {v}" for k, v in t["basis"].items() if k != "summary"]
    return "\n".join(out + [f"  note: {n}" for n in m["notes"]])


def bench(data: dict) -> str:
    """Human text for `gputopo bench-nvlink`, laid out like the reference table."""
    st = data["settings"]
    where = f"{data['nnodes']} node(s) x {data['nproc']} process(es) on {data['device']} ({data['backend']})"
    out = [f"{where}; all-reduce sweep only (--allreduce-only: no training)"] if st is None else [
        f"{where}; model {data['model']['name'] if data['model'] else 'N/A'}; data {data['dataset'] or 'N/A'}",
        f"{st['steps']} steps per arm ({st['warmup_steps']} warm-up not timed), batch {st['batch_size']} x"
        f" {st['seq_len']} per process, {st['precision']}, {st['repeat']} run(s) per arm"]
    link = data.get("link")
    out.append(f"GPUs share: {link['type']} ({link['a']}-{link['b']}, the weakest link)" if link else
               "GPUs share: no GPU link here")
    if data["runs"]:
        rows = [["Y" if r["env"]["NCCL_P2P_DISABLE"] is None else "N", f"{r['timed_runtime_s']:.2f} s",
                 f"{r['samples_per_second']:.2f}", f"{r['step_time_s']['median']:.4f} s",
                 f"{r['step_time_s']['p10']:.4f}-{r['step_time_s']['p90']:.4f} s", _predicted(r)]
                for r in data["runs"]]
        out += ["", table(rows, ["P2P/NVLink", "time (timed steps)", "samples/s", "median step", "p10-p90",
                                 "predicted step (error)"])]
    cmp_ = data.get("comparison")
    if cmp_:
        ref = data["reference"]
        out.append(f"no-P2P / P2P median step: {cmp_['ratio']:.3f}x. Verdict: {cmp_['message']}")
        if data.get("predicted_ratio"):
            out.append(f"predicted no-P2P / P2P: {data['predicted_ratio']:.3f}x"
                       f" ({data['predicted_ratio'] / cmp_['ratio'] - 1:+.1%} from measured)")
            out += [f"  assumes {k}: {v}" for k, v in data.get("prediction_basis", {}).items()]
        out.append(f"(reference {ref['hardware']}, {ref['model']} on {ref['dataset']}, {ref['steps']} steps:"
                   f" {ref['p2p_s']:.1f} s with P2P vs {ref['no_p2p_s']:.1f} s without,"
                   f" {ref['no_p2p_s'] / ref['p2p_s']:.2f}x)")
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
                table(rows, ["size", "P2P algbw", "P2P busbw", "no-P2P algbw", "no-P2P busbw", "busbw/theoretical"])]
    out += _nccl_paths(data)
    out += [f"Note: {n}" for n in data["notes"]]
    if data.get("log_dir"):
        out.append(f"Logs (every rank's stdout/stderr): {data['log_dir']}")
    return "\n".join(out)


def _nccl_paths(data: dict) -> list[str]:
    """Per arm, the path NCCL said it took (its NCCL_DEBUG=INFO log), and whether the A/B tested its claim."""
    arms = [(r["label"], r.get("nccl")) for r in data["runs"]]
    arms += [(f"all-reduce {k}", v) for k, v in (data.get("allreduce_nccl") or {}).items()]
    rows = [[label, n["version"] or "?", ", ".join(f"{k} {v}" for k, v in n["transports"].items()) or "none printed",
             ", ".join(sorted({p["detail"] for p in n["pairs"]}))[:60], str(n["channels"] or "?"),
             ", ".join(f"{k}={v}" for k, v in n["env"].items()) or "-"] for label, n in arms if n]
    if not rows:
        return []
    out = ["", "Paths NCCL took (its NCCL_DEBUG=INFO log, connection lines per transport):",
           table(rows, ["arm", "NCCL", "transports", "as printed", "channels", "NCCL_* seen"])]
    check = data.get("nccl_check")
    out.append(f"Paths: {check}" if check else "Paths: each arm took the path it claims (P2P on, then off).")
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


DOCTOR_MARK = {"fail": "FAIL", "warn": "WARN", "unknown": "????", "info": "info", "ok": "ok"}


def doctor(data: dict) -> str:
    """Human text for `gputopo doctor`: the checks worst first, why and fix under the ones that need action."""
    c = data["counts"]
    out = [f"gputopo doctor: {c['fail']} blocking, {c['warn']} warning(s), {c['unknown']} not checkable"
           + (f"; DeepSpeed config {data['config']}" if data.get("config") else "")
           + f" ({data['elapsed_s']:.2f} s)", ""]
    rows = []
    for ch in data["checks"]:
        rows.append([DOCTOR_MARK[ch["status"]], ch["id"], ch["found"]])
        if ch["status"] in ("fail", "warn", "unknown"):
            if ch["why"]:
                rows.append(["", "", f"  why: {ch['why']}"])
            if ch["fix"]:
                rows.append(["", "", f"  fix: {ch['fix']}"])
    out.append(table(rows, ["status", "check", "found"]))
    if data["disks"]:
        rows = [[d["mountpoint"], d["fstype"], d["kind"], d["block"], size(d["free_bytes"]), size(d["total_bytes"])]
                for d in data["disks"] if d["kind"] != "ram" or d["mountpoint"] == "/dev/shm"]
        out += ["", table(rows, ["mount", "fs", "kind", "disk", "free", "size"])]
    out.append("")
    out.append("Exit 1: something above will break a run." if c["fail"] else "Nothing blocks a run here.")
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
