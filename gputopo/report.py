"""Topology + findings + advice -> the `inspect` report, one dict (its schema is in docs/inspect.md). Pure."""
from __future__ import annotations

from . import advise, health
from .errors import NvmlUnavailable, TooFewGpus
from .topology import Topology, rank, select

SCHEMA_VERSION = 1


def inspect(topo: Topology | None, *, gpu_ids: tuple | None = None, best: int | None = None,
            env: dict | None = None, host: dict | None = None, status: str | None = None,
            sources: list[str] | None = None, planned: dict | None = None) -> dict:
    """The whole inspect report. `topo` is None when no GPU is visible; `status` then says why."""
    out = {"schema_version": SCHEMA_VERSION, "source": topo.source if topo else None, "inputs": sources or [],
           "gpu_status": {"visible": topo is not None, "reason": status}, "host": host, "driver": None,
           "gpus": [], "nics": [], "links": [], "selected": [], "islands": [], "weakest_link": None,
           "best": None, "findings": [], "recommendation": None, "plan": None, "links_note": None, "notes": []}
    if topo is None:
        return out
    names = select(topo, gpu_ids)
    out["driver"] = topo.driver
    out["gpus"] = [g.to_dict() for g in topo.gpus]
    out["nics"] = [n.to_dict() for n in topo.nics]
    links = []
    for l in topo.links:
        d = l.to_dict()
        if l.a.startswith("GPU") and l.b.startswith("GPU"):
            d["bandwidth_gbps"], d["bandwidth_basis"] = topo.bandwidth_gbps(l)
        else:
            d["bandwidth_gbps"], d["bandwidth_basis"] = None, None
        links.append(d)
    out["links"] = links
    out["selected"] = names
    out["islands"] = topo.islands()
    weakest = topo.weakest(names)
    out["weakest_link"] = weakest.to_dict() if weakest else None
    if best is not None:
        if best > len(topo.gpus):
            raise TooFewGpus(f"--best {best}: this topology has {len(topo.gpus)} GPU(s)")
        chosen = topo.best(best)
        w = topo.weakest(chosen)
        out["best"] = {"k": best, "gpus": chosen, "weakest_link": w.to_dict() if w else None,
                       "cuda_visible_devices": ",".join(str(topo.gpu(n).index) for n in chosen),
                       "command": "CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES="
                                  + ",".join(str(topo.gpu(n).index) for n in chosen)}
    out["findings"] = [f.to_dict() for f in health.check(topo, names, env or {})]
    out["recommendation"] = planned["recommendation"] if planned else advise.interconnect(topo, names).to_dict()
    out["plan"] = planned
    if len(names) < 2:
        out["links_note"] = _one_gpu(topo, names[0], out["recommendation"], planned is not None)
    out["notes"] = list(topo.notes)
    return out


def _one_gpu(topo: Topology, name: str, rec: dict, planned: bool) -> str:
    """What inspect says instead of a link table when one GPU is in view."""
    g = topo.gpu(name)
    which = f"{name}, {g.model}" if g.model else name
    if len(topo.gpus) > 1:
        which += f", of this machine's {len(topo.gpus)}"
    strategy = rec.get("strategy")
    plan = (f"the plan for it is {strategy} ({advise.WHAT.get(strategy, strategy)})" if strategy else "no plan yet")
    plan += "" if planned else "; give --model to check that the model fits its memory"
    return (f"One GPU ({which}): no GPU-to-GPU interconnect to judge; {plan}. `--best K` and `gputopo bench-nvlink`"
            " (P2P on vs off) need two or more GPUs on one machine.")


def affinity_columns(gpus: list[dict]) -> list[tuple[str, str]]:
    """The per-GPU columns after a matrix's cells, (title, report key): GPU NUMA ID (nvidia-smi 550+) only where
    some GPU has one of its own (an HBM NUMA node, as on Grace Hopper), as nvidia-smi's N/A and no column read
    alike."""
    cols = [("CPU Affinity", "cpu_affinity"), ("NUMA Affinity", "numa_affinity")]
    return cols + ([("GPU NUMA ID", "gpu_numa_id")] if any(g.get("gpu_numa_id") is not None for g in gpus) else [])


def ranked_types(report: dict) -> list[tuple[str, list[str], dict]]:
    """GPU-GPU link types among the selected GPUs, slowest first: (type, pairs, one link dict)."""
    chosen = set(report["selected"])
    groups: dict[str, tuple[list[str], dict]] = {}
    for l in report["links"]:
        if l["a"] in chosen and l["b"] in chosen:
            groups.setdefault(l["type"] or "?", ([], l))[0].append(f"{l['a']}-{l['b']}")
    return sorted(((t, pairs, l) for t, (pairs, l) in groups.items()), key=lambda x: rank(x[2]["type"]))


def plan_for(req, *, rates=None, steps: int | None = None, device: str = "cuda", found: dict | None = None) -> dict:
    """The `plan` report for a resolved gputopo.request.Request (defaults, bf16, global batch already checked):
    every strategy's memory, traffic and step time, and the recommendation. `rates`: this machine's calibrated
    figures (gputopo.calibrate), else the GPU's datasheet (gputopo.speed.gpu_rates). What the user left open
    (micro-batch, checkpointing, parameter offload) is searched first (gputopo.search); `found`: that search's
    record when the caller ran it (deepspeed-config --auto)."""
    from . import search, speed  # the memory and time arithmetic: only when a plan is asked for
    from .plan import strategies as all_strategies
    steps = steps if steps is not None else getattr(req, "steps", None)   # --steps through the request (inspect)
    asked = req   # before the search: what the user left open stays open for the LoRA alternative
    rates = rates or speed.gpu_rates(req.layout, req.training)
    req, searched = search.best(req, rates, device)   # what the user left open, chosen (a no-op when nothing is)
    found = found or searched
    model, layout, training = req.model, req.layout, req.training
    strategies = all_strategies(model, layout, training)
    times = {s.name: speed.step(s.name, model, layout, training, rates, steps=steps, device=device)
             for s in strategies}
    for s in strategies:
        s.comm_seconds_per_step = times[s.name].comm_s
    pick = found["chosen"]["strategy"] if found and found["chosen"] else None
    advice = advise.from_plan(model, layout, training, strategies, req.global_batch, times,
                              pick=pick, tried=frozenset(found["searched"]) if found else frozenset()).to_dict()
    chosen = advice["strategy"]
    advice.update(micro_batch=training.batch_size, grad_accum=training.grad_accum,
                  grad_checkpointing=training.grad_checkpointing,
                  offload_params=training.offload_params if chosen in search.OFFLOADS else None)
    rows = [{**s.to_dict(), "time": times[s.name].to_dict()} for s in strategies]
    # Full fine-tuning that fits only by offloading, or not at all: what LoRA (then QLoRA) would take instead.
    # gputopo never switches by itself: LoRA changes what is learned.
    lora = (peft_alternative(asked, rates, device, steps) if not training.finetune.peft
            and (chosen is None or "offload" in chosen) else None)
    return {"schema_version": SCHEMA_VERSION, "model": model.to_dict(), "layout": layout.to_dict(),
            "training": training.to_dict(), "strategies": rows, "recommendation": advice, "search": found,
            "interconnect_ab": interconnect_ab(chosen, model, layout, training, rates, times, device),
            "rates": rates.to_dict(), "notes": list(req.notes), "peft_alternative": lora,
            "host_spread": host_spread(chosen, model, layout, training, steps, device)}


def host_spread(name, model, layout, training, steps, device: str = "cuda") -> dict | None:
    """The chosen strategy's step at each end of an assumed core count (Layout.cpu_cores_range), where the host
    takes part in it (offload): what the assumption moves. None where the cores were given or do not matter."""
    from dataclasses import replace

    from . import speed
    if not name or "offload" not in name or not layout.cpu_cores_range:
        return None
    out = {"cores": list(layout.cpu_cores_range), "step_s": []}
    for cores in layout.cpu_cores_range:
        lay = replace(layout, cpu_cores=cores)
        out["step_s"].append(speed.step(name, model, lay, training, speed.gpu_rates(lay, training), steps=steps,
                                        device=device).step_s)
    return out


def peft_alternative(req, rates, device: str, steps: int | None) -> dict | None:
    """The same question with --finetune lora (PEFT's default targets and rank), and with qlora where LoRA too
    fits only by offloading: the first that fits on the GPUs alone, else the last tried; None where PEFT has no
    default for the model (its targets must be named)."""
    from dataclasses import replace

    from . import finetune
    from .errors import BadInput
    out = None
    for mode in ("lora", "qlora"):
        try:
            ft = finetune.resolve(req.model, mode, None, None, None, {})
        except BadInput:
            return None
        planned = plan_for(replace(req, training=replace(req.training, finetune=ft)), rates=rates, steps=steps,
                           device=device)
        r = planned["recommendation"]
        row = next((s for s in planned["strategies"] if s["name"] == r["strategy"]), None)
        out = {"mode": mode, "targets": list(ft.targets), "rank": ft.rank, "strategy": r["strategy"],
               "micro_batch": r["micro_batch"], "grad_accum": r["grad_accum"],
               "grad_checkpointing": r["grad_checkpointing"],
               "per_gpu_bytes": row["per_gpu_bytes"]["total"] if row else None,
               "step_s": row["time"]["step_s"] if row else None}
        if r["strategy"] and "offload" not in r["strategy"]:
            return out
    return out


def interconnect_ab(name, model, layout, training, rates, times, device: str = "cuda") -> dict | None:
    """What the link buys the recommended strategy: its step with P2P and with NCCL_P2P_DISABLE=1 (the two arms
    bench-nvlink measures). None with one GPU or several nodes (the network sets the pace there)."""
    from . import speed
    if name is None or layout.gpus < 2 or layout.nodes > 1:
        return None
    on, off = times[name].step_s, speed.step(name, model, layout, training, rates, p2p=False,
                                                     device=device).step_s
    return {"strategy": name, "link": layout.link_type, "step_s": on, "step_s_without_p2p": off,
            "ratio": off / on if on and off else None, "p2p_used": speed.p2p_used(layout)}


def inspect_report(inputs, *, gpu_ids=None, best=None, options: dict | None = None, gpu_mem=None, gpu_model=None,
                   need_topology: str | None = None) -> dict:
    """inspect's whole answer for gputopo.sources.Inputs: the report, the plan with --model, and on this machine
    (not a paste) its blocking host problems. need_topology names the option that cannot do without one."""
    from . import probe
    topo, options = inputs.topology, options or {}
    if topo is None and need_topology:
        raise NvmlUnavailable(f"{need_topology} needs a topology and no GPU is visible ({inputs.status}); give"
                              " --from-file or --example")
    planned = None
    if topo is not None and (options.get("model") or options.get("params")):
        from . import request  # the plan's inputs: only with --model
        req = request.from_options({**options, "gpu_mem": gpu_mem, "gpu_model": gpu_model}, topology=topo,
                                   selected=select(topo, gpu_ids))
        planned = plan_for(req)
    live = not inputs.sources  # a paste describes another machine: this host's CPUs and RAM are not its
    data = inspect(topo, gpu_ids=gpu_ids, best=best, env=probe.environment(), host=probe.host() if live else None,
                   status=inputs.status, sources=inputs.sources, planned=planned)
    if live:  # this machine: its versions, variables and blocking host problems (`gputopo doctor` for all)
        from . import doctor
        cuda = probe.nvml_facts()["driver"]["cuda"] if topo is not None else None
        data["versions"], data["env"] = {"driver": data["driver"], **probe.versions(cuda)}, probe.variables()
        data["host_checks"] = doctor.blocking(doctor.run(topo_fn=doctor.known_topology(topo, inputs.status or "")))
    return data


def nccl(source, name: str, inputs=None) -> tuple[dict, list[str]]:
    """`inspect --nccl-log`: the log's summary (gputopo.nccllog; `source` its text or a text stream), checked
    against the topology of `inputs` (gputopo.sources.Inputs) when given; and the first log lines it read, for
    --markdown's source block (nccllog.excerpt)."""
    from . import nccllog
    from .errors import BadInput
    try:
        log = nccllog.parse(source)
    except BadInput as e:
        raise BadInput(f"{name}: {e}") from None
    topo = inputs.topology if inputs else None
    data = {"schema_version": SCHEMA_VERSION, "inputs": [name] + (list(inputs.sources) if inputs else []),
            "nccl": nccllog.summary(log, topo)}
    return data, nccllog.excerpt(log)


def nic_cells(pasted) -> dict:
    """The NIC-to-NIC cells of the pasted `nvidia-smi topo -m` texts ((name, text) pairs, gputopo.sources.Inputs),
    {(NIC, NIC): class}: the report's links are those with a GPU, so the text and markdown matrices take these from
    the paste itself to show every cell of it. Empty when nothing pasted (live, NVML) holds them."""
    from . import parse
    from .errors import BadInput
    out = {}
    for _, text in pasted or []:
        try:
            if parse.kind(text) != "topo":
                continue
            m = parse.matrix(text)
        except BadInput:
            continue
        nics = [l for l in m.labels if not l.startswith("GPU")]
        for i, a in enumerate(nics):
            for b in nics[i + 1:]:
                v = m.cells.get((a, b)) or m.cells.get((b, a))
                if v is not None:
                    out[(a, b)] = v
    return out
