"""Several nodes' inspect reports -> what they share, the norm, and the odd nodes with what differs. Pure.

A multi-node job runs at the pace of its slowest node, and breaks on one that differs in software: so every
node is reduced to facts ("facets") a job depends on, named so a reader can act on them ("driver",
"GPU3 PCIe", "GPU2-GPU5", "GPU0 nearest NIC", "env NCCL_IB_HCA"), nodes with identical facts form a group, the
largest group is the norm, and every fact where a node outside it differs is reported with the norm's value.
Health findings (heat, power, throttling, ECC) are per node and merged, not grouped: they change by the minute.
"""
from __future__ import annotations

import re
import shlex
from collections import Counter

from .units import escaped as shown  # one line, control characters escaped

SCHEMA_VERSION = 1
# Facets whose difference does not slow or break a job by itself (a GPU's NUMA node: its CPU affinity, a
# few percent on data loading): reported, exit status unchanged; so is a fact one side does not report.
MINOR_SUFFIXES = (" NUMA",)
# Variables that change what is logged, cached or dumped, not the path data takes or the result: shown, not
# judged (NCCL: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html; CUDA's JIT cache:
# https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#env-vars). CUDA_LAUNCH_BLOCKING, the
# NCCL_IB_*, NCCL_SOCKET_* and NCCL_P2P_* ones and every other stay judged.
SAY_ONLY = frozenset({"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_DEBUG_TIMESTAMP_FORMAT",
                      "NCCL_DEBUG_TIMESTAMP_LEVELS", "NCCL_WARN_ENABLE_DEBUG_INFO", "NCCL_TOPO_DUMP_FILE",
                      "NCCL_GRAPH_DUMP_FILE", "NCCL_SET_THREAD_NAME", "CUDA_CACHE_PATH", "CUDA_CACHE_MAXSIZE",
                      "CUDA_CACHE_DISABLE", "CUDA_LOG_FILE"})
UNREPORTED = "model not reported"   # a pasted topo -m without `nvidia-smi -L` lines or --gpu-model


def _shown_all(d: dict) -> dict:
    """A flat dict's keys and text values through shown()."""
    return {shown(k): shown(v) if isinstance(v, str) else v for k, v in d.items()}


def facets(report: dict) -> dict[str, str]:
    """One node's facts a multi-node job depends on, each a short text; what a report does not say is left
    out (a pasted topo -m has no driver), so it is compared only where known."""
    out: dict[str, str] = {}
    gpus = report.get("gpus") or []
    models = Counter(g.get("model") or UNREPORTED for g in gpus)
    reason = (report.get("gpu_status") or {}).get("reason")
    out["GPUs"] = (", ".join(f"{n} x {m}" for m, n in sorted(models.items())) if gpus
                   else "none visible" + (f" ({reason})" if reason else ""))
    versions = dict(report.get("versions") or {})
    versions.setdefault("driver", report.get("driver"))
    for key in ("driver", "cuda", "nccl", "torch"):
        if versions.get(key):
            out[key] = str(versions[key])
    for g in gpus:
        pcie = _pcie(g)
        if pcie:
            out[f"{g['name']} PCIe"] = pcie
        if g.get("numa_affinity") not in (None, "", "N/A"):
            out[f"{g['name']} NUMA"] = str(g["numa_affinity"])
    gpu_links = [l for l in report.get("links") or [] if l["a"].startswith("GPU") and l["b"].startswith("GPU")]
    for l in gpu_links:
        out[f"{l['a']}-{l['b']}"] = l["type"]
    nics = report.get("nics") or []
    if nics or (gpu_links and report.get("source") != "nvml"):   # NVML alone knows no NIC: unknown, not 0
        out["NICs"] = str(len(nics))
    for gpu, nic in _nearest_nics(report).items():
        out[f"{gpu} nearest NIC"] = nic
    env = report.get("env")
    if env is not None:
        for name, value in sorted(env.items()):
            if value is not None:
                out[f"env {name}"] = value
    return out


def _pcie(g: dict) -> str | None:
    """A GPU's PCIe link as it trained and its maximum. The current generation is left out: GPUs drop it when
    idle, so it differs between nodes without meaning anything; a narrower width does not recover."""
    width, wmax, gmax = g.get("pcie_width"), g.get("pcie_width_max"), g.get("pcie_gen_max")
    if not (width or wmax or gmax):
        return None
    text = f"Gen{gmax} " if gmax else ""
    text += f"x{width}" if width else ""
    return (text + (f" (max x{wmax})" if wmax and width and wmax != width else "")).strip()


def _nearest_nics(report: dict) -> dict[str, str]:
    """Each GPU's closest NIC and the link to it ("mlx5_0 PIX"), from the topology's GPU-NIC links."""
    from .topology import rank
    best: dict[str, tuple] = {}
    for l in report.get("links") or []:
        gpu, nic = (l["a"], l["b"]) if l["a"].startswith("GPU") else (l["b"], l["a"])
        if not gpu.startswith("GPU") or nic.startswith("GPU"):
            continue
        key = rank(l["type"])
        if gpu not in best or key > best[gpu][0]:
            best[gpu] = (key, f"{nic} {l['type']}")
    return {gpu: text for gpu, (_, text) in sorted(best.items(), key=lambda kv: _gpu_order(kv[0]))}


def _gpu_order(name: str) -> tuple:
    digits = "".join(c for c in name if c.isdecimal())
    return (int(digits) if digits else -1, name)


def compare(reports: dict[str, dict], unreachable: dict[str, str] | None = None) -> dict:
    """{"nodes", "groups", "norm", "odd", "health", "unreachable", "slows", "recommendation"} for reports keyed by
    node name (in the order given) and the nodes that gave none, with the reason."""
    # what came from files and other machines is shown escaped, in text and JSON alike (shown)
    reports = {shown(node): r for node, r in reports.items()}
    unreachable = {shown(node): shown(str(why)) for node, why in (unreachable or {}).items()}
    facts = {node: _shown_all(facets(r)) for node, r in reports.items()}
    # a variable set on some nodes only is a difference: "unset" on the others that report their variables
    names = {k for f in facts.values() for k in f if k.startswith("env ")}
    for node, r in reports.items():
        if r.get("env") is not None:
            facts[node].update({k: "unset" for k in names if k not in facts[node]})
    groups: list[dict] = []
    for node, f in facts.items():
        for g in groups:
            if g["facets"] == f:
                g["nodes"].append(node)
                break
        else:
            groups.append({"nodes": [node], "facets": f})
    health = [{"node": node, **_shown_all(f)} for node, r in reports.items() for f in health_of(r)]
    sick = {node: sum(1 for h in health if h["node"] == node) for node in reports}
    # the largest group is the norm; among equals the one with fewer health findings, then the first
    if groups:   # the others keep the nodes' order
        groups.insert(0, groups.pop(min(range(len(groups)), key=lambda i: (
            -len(groups[i]["nodes"]), sum(sick[n] for n in groups[i]["nodes"]) / len(groups[i]["nodes"]), i))))
    tie = len(groups) > 1 and len(groups[0]["nodes"]) == max(len(g["nodes"]) for g in groups[1:])
    norm = groups[0]["facets"] if groups else {}
    odd = []
    for g in groups[1:]:
        for node in g["nodes"]:
            odd += _differences(node, g["facets"], norm)
    slows = any(slowing(o) for o in odd) or bool(unreachable) or any(h["level"] == "error" for h in health) or bool(
        reports) and all(not r.get("gpus") for r in reports.values())
    out = {"schema_version": SCHEMA_VERSION, "nodes": list(reports) + list(unreachable),
           "groups": [{"nodes": g["nodes"], "norm": i == 0, "facets": g["facets"]} for i, g in enumerate(groups)],
           "norm_by": _norm_by(groups, tie, sick),
           "odd": odd, "health": health, "unreachable": [{"node": n, "reason": r} for n, r in unreachable.items()],
           "slows": slows}
    out["recommendation"] = recommendation(out)
    return out


def health_of(report: dict) -> list[dict]:
    """A node's health problems (warn, error): its report's own findings, and those its GPUs' values show by the
    rules live inspect applies (gputopo.health: heat, power cap, throttling, a narrowed PCIe link, a lost GPU),
    which a report may not carry (edited, or written by another gputopo)."""
    from .health import check
    from .topology import Gpu, Topology
    own = [f for f in report.get("findings") or [] if f.get("level") in ("warn", "error")]
    gpus = tuple(Gpu(name=g["name"], index=i, temperature_c=g.get("temperature_c"), power_draw_w=g.get("power_draw_w"),
                     power_limit_w=g.get("power_limit_w"), pcie_width=g.get("pcie_width"),
                     pcie_width_max=g.get("pcie_width_max"), lost=bool(g.get("lost")),
                     throttle_reasons=None if g.get("throttle_reasons") is None else tuple(g["throttle_reasons"]))
                 for i, g in enumerate(report.get("gpus") or []))
    said = {(f.get("subject"), f.get("code")) for f in own} | {f["message"] for f in own}
    names = {g.name for g in gpus}
    return own + [f.to_dict() for f in check(Topology(gpus=gpus), sorted(names), {})
                  if f.level in ("warn", "error") and f.subject in names
                  and (f.subject, f.code) not in said and f.message not in said]


def _norm_by(groups: list, tie: bool, sick: dict) -> str:
    """How the norm was chosen: by a majority, by health among equals, or for want of anything better."""
    if not tie:
        return "majority"
    rate = [sum(sick[n] for n in g["nodes"]) / len(g["nodes"]) for g in groups]
    rivals = [r for g, r in zip(groups[1:], rate[1:]) if len(g["nodes"]) == len(groups[0]["nodes"])]
    return "fewer health findings (no majority)" if rate[0] < min(rivals) else "first node (no majority)"


def slowing(o: dict) -> bool:
    """A difference that slows or breaks a multi-node job: both sides known, not a NUMA placement, not a variable
    that only logs or caches (SAY_ONLY)."""
    return (not o["what"].endswith(MINOR_SUFFIXES) and o["what"].removeprefix("env ") not in SAY_ONLY
            and None not in (o["norm"], o["value"]))


def _differences(node: str, mine: dict, norm: dict) -> list[dict]:
    """Each fact where `node` differs from the norm (None where one side does not have it). Where the GPUs
    themselves differ (another count, another model or mix of models, none visible), their per-GPU facts would
    only repeat that; where only one side names the model (a paste), the count is compared and the model is
    "not reported"."""
    out = []
    (n_norm, m_norm), (n_mine, m_mine) = _gpus(norm.get("GPUs")), _gpus(mine.get("GPUs"))
    gpus_differ = n_norm != n_mine or None not in (m_norm, m_mine) and not _same_mix(m_norm, m_mine)
    for what in list(norm) + [k for k in mine if k not in norm]:
        a, b = norm.get(what), mine.get(what)
        if what == "GPUs" and not gpus_differ:
            if None in (m_norm, m_mine) and m_norm != m_mine:
                out.append({"node": node, "what": "GPU model", "norm": _models(m_norm), "value": _models(m_mine)})
        elif a != b and not (gpus_differ and re.match(r"GPU\d", what)):
            out.append({"node": node, "what": what, "norm": a, "value": b})
    return out


def _gpus(text: str | None) -> tuple:
    """(count, ((n, model), ...)) of a "GPUs" facet ("4 x NVIDIA H100 80GB HBM3", "3 x A, 1 x B"); the models None
    where a paste did not name them; (None, text) for "none visible"."""
    parts = [p.split(" x ", 1) for p in (text or "").split(", ")]
    if not text or not all(len(p) == 2 and p[0].isdecimal() for p in parts):
        return None, text
    models = tuple((int(n), m) for n, m in parts)
    return sum(n for n, _ in models), None if any(m == UNREPORTED for _, m in models) else models


def _models(models) -> str | None:
    """The models of a _gpus answer as the facet names them."""
    return models if models is None or isinstance(models, str) else ", ".join(m for _, m in models)


# Distinct models of one node compared one against another by the catalog (gpus.lookup); past it, by name: no
# machine holds that many, and a report that says so is not worth a quadratic search.
MOST_MODELS = 64


def _same_mix(a: tuple, b: tuple) -> bool:
    """Two nodes' GPUs are the same models in the same numbers, each model however spelt (_same_model): "4 x H100"
    is not "3 x H100, 1 x L40S", whichever name sorts first."""
    a, b = [p for p in a if p not in b], [p for p in b if p not in a]   # the same spelling and count: alike
    if len(a) != len(b):
        return False
    if len(a) > MOST_MODELS:
        return not a
    left = list(b)
    for n, model in a:
        match = next((i for i, (k, other) in enumerate(left) if k == n and _same_model(model, other)), None)
        if match is None:
            return False
        left.pop(match)
    return True


def _same_model(a: str, b: str) -> bool:
    """One GPU model however spelt: NVML's "NVIDIA H100 80GB HBM3" and a paste's --gpu-model "H100" (the catalog's
    entry; a size only one of them gives is no difference), or the same name but for "NVIDIA" and spacing (an
    older driver's "A100-SXM4-80GB"). Two full names that differ in more are two products ("H100 PCIe" is not
    "H100 80GB HBM3"), and so are names the catalog does not know."""
    if a == b or _plain(a) == _plain(b):
        return True
    from .gpus import lookup
    x, y = lookup(a), lookup(b)
    if x is None or y is None or x.key != y.key or not (_says_only_key(a, x.key) or _says_only_key(b, y.key)):
        return False
    return None in (x.memory_bytes, y.memory_bytes) or x.memory_bytes == y.memory_bytes


def _plain(name: str) -> str:
    """A GPU name without the brand words nvidia-smi has added or dropped over the years, case and punctuation."""
    return re.sub(r"[^A-Z0-9]", "", re.sub(r"\b(NVIDIA|GEFORCE|TESLA)\b", "", name.upper()))


def _says_only_key(name: str, key: str) -> bool:
    """A name that says no more than the catalog's model and a size ("H100", "A100-80GB": --gpu-model as typed)."""
    from .gpus import SIZE_IN_NAME
    return _plain(SIZE_IN_NAME.sub("", name)) == _plain(key)


def sentence(o: dict) -> str:
    """One difference as a person reads it: "node17: GPU3 PCIe Gen4 x8, the others Gen4 x16"."""
    if o["norm"] is None:   # a paste has no driver: unknown, not different
        return f"{o['node']}: {o['what']} {o['value']} (the others' reports do not say)"
    if o["value"] is None:
        return f"{o['node']}: {o['what']} not in its report (the others: {o['norm']})"
    if "-GPU" in o["what"]:   # a GPU pair's link
        return f"{o['node']}: {o['what']} {o['value']} where the others have {o['norm']}"
    only = " (logging or caching only: shown, not judged)" if o["what"].removeprefix("env ") in SAY_ONLY else ""
    return f"{o['node']}: {o['what']} {o['value']}, the others {o['norm']}{only}"


def said(fleet: dict) -> list[str]:
    """The differences as a person reads them at any size: nodes that differ in the same facts share one line per
    fact (`node[101-150]: driver 535.129.03, the others 550.54.15`), and the facts a node's report does not carry
    share one line."""
    by_node: dict = {}
    for o in fleet["odd"]:
        by_node.setdefault(o["node"], []).append(o)
    alike: dict = {}
    for node, found in by_node.items():
        alike.setdefault(tuple((o["what"], o["norm"], o["value"]) for o in found), []).append(node)
    out = []
    for found, nodes in alike.items():
        label = named(nodes)
        facts = [dict(zip(("what", "norm", "value"), f), node=label) for f in found]
        out += [sentence(o) for o in facts if o["value"] is not None]
        missing = [o["what"] for o in facts if o["value"] is None]
        if missing:
            out.append(f"{label}: not in {'its report' if len(nodes) == 1 else 'their reports'}: "
                       f"{', '.join(missing)} (the others report them)")
    return out


def grouped(items: list[tuple[str, str]]) -> list[str]:
    """(node, text) pairs as lines, the nodes that say the same text on one: `node[03-40]: warn: ...`."""
    by_text: dict = {}
    for node, text in items:
        by_text.setdefault(text, []).append(node)
    return [f"{named(nodes)}: {text}" for text, nodes in by_text.items()]


def named(nodes: list[str]) -> str:
    """Nodes for a reader: a few by name in their order, more as a host list."""
    return ", ".join(nodes) if len(nodes) <= 4 else hostlist(nodes)


def hostlist(names: list[str]) -> str:
    """Names as Slurm writes a host list (node[001-004,007],gpu7), each run of numbers under its prefix (numbers
    written with leading zeros keep their width); scontrol takes it as it is."""
    groups: dict = {}
    for name in names:
        m = re.fullmatch(r"(.*?)(\d+)(\D*)", name)
        groups.setdefault((m.group(1), m.group(3)) if m else (name,), []).append(m.group(2) if m else None)
    out = []
    for key, digits in groups.items():
        if len(key) == 1:
            out.append(key[0])
            continue
        padded = any(d.startswith("0") and len(d) > 1 for d in digits)
        by_width: dict = {}
        for d in digits:
            by_width.setdefault(len(d) if padded else 0, set()).add(int(d))
        for width, numbers in by_width.items():
            runs: list = []
            for n in sorted(numbers):
                if runs and n == runs[-1][1] + 1:
                    runs[-1][1] = n
                else:
                    runs.append([n, n])
            spans = [f"{a:0{width}d}" + (f"-{b:0{width}d}" if b > a else "") for a, b in runs]
            out.append(f"{key[0]}{spans[0]}{key[1]}" if len(numbers) == 1 else f"{key[0]}[{','.join(spans)}]{key[1]}")
    return ",".join(out)


def slurm_node(name: str) -> bool:
    """Whether scontrol reads `name` as that one node: a host name by --hosts' rule (launch.host_problem: no ',',
    '[' or space a Slurm host list expands), and not ALL, which names every node. Names come from file names."""
    from .launch import host_problem
    return host_problem(name) is None and name.upper() != "ALL"


def drain_command(nodes: list[str], why: str) -> str:
    """The scontrol line that drains `nodes`; the names come from reports and file names, so every part is quoted
    (a Slurm host list's brackets too: a shell would glob them)."""
    return (f"scontrol update nodename={shlex.quote(hostlist(nodes))} state=drain"
            f" reason={shlex.quote('gputopo: ' + why)}")


def recommendation(fleet: dict) -> list[str]:
    """What the differences cost and what to do about them: a drain line per odd node, unless no majority and
    no health finding says which side is odd."""
    odd_nodes = list(dict.fromkeys(o["node"] for o in fleet["odd"] if slowing(o)))
    lines = []
    if fleet["groups"] and all(g["facets"].get("GPUs", "").startswith("none visible") for g in fleet["groups"]):
        lines.append("no node sees a GPU: a Slurm step sees only the GPUs its job asked for (--gpus-per-node,"
                     " --gres), and a node without its driver sees none")
    elif not fleet["odd"] and not fleet["unreachable"]:
        n = len(fleet["nodes"])
        sick = list(dict.fromkeys(h["node"] for h in fleet["health"]))
        return [f"all {n} node(s) alike in everything compared" + ("" if n > 1 else " (one node: nothing to compare)")
                + (f", but {named(sick)} {'has' if len(sick) == 1 else 'have'} health problems (under Health): a"
                   " multi-node job runs at its slowest node's pace" if sick else "")]
    if odd_nodes and fleet["norm_by"] == "first node (no majority)":
        lines.append(f"the nodes differ ({named(fleet['nodes'])}) and none is the majority: compare them by hand"
                     " before a multi-node job (it runs at its slowest node's pace)")
    elif odd_nodes:
        lines.append("a multi-node job runs at its slowest node's pace, and breaks where software differs: fix or"
                     f" leave out {named(odd_nodes)}")
        reasons: dict = {}   # nodes that are odd in the same way drain in one line
        for node in odd_nodes:
            mine = [f"{o['what']} {o['value']}" for o in fleet["odd"] if o["node"] == node and slowing(o)]
            reasons.setdefault("; ".join(mine[:2]) + (f" and {len(mine) - 2} more" if len(mine) > 2 else ""),
                               []).append(node)
        for what, nodes in reasons.items():
            named_one = [n for n in nodes if slurm_node(n)]
            if named_one:
                lines.append(drain_command(named_one, what))
            if len(named_one) < len(nodes):
                lines.append(f"no drain line for {named([n for n in nodes if not slurm_node(n)])}: not a name Slurm"
                             " reads as one node (ALL, or a ',' or '[' it would expand): drain it by its own name")
    if fleet["unreachable"]:
        lines.append("no report from " + named([u["node"] for u in fleet["unreachable"]])
                     + ": a job that includes them cannot start (or hangs at the rendezvous)")
    if not lines:
        lines.append("the differences are in what some reports do not say, or in NUMA placement: nothing that"
                     " slows a job by itself")
    return lines
