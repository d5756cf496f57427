"""Topology + environment -> findings: thermals, power, PCIe, NVLink, P2P and NCCL/CUDA variables. Pure."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from .gpus import max_nvlinks
from .topology import PCIE_KINDS, Topology, kind_of

# docs/sources.md#temperatures: 70-75 °C is great, below 80 °C fine, performance drops from about 84-90 °C.
TEMP_WARN_C, TEMP_THROTTLE_C = 80, 84
POWER_CAP_FRACTION = 0.97
BENIGN_THROTTLE = {"applications_clocks_setting", "display_clock_setting", "sync_boost"}
# NCCL_P2P_LEVEL: the farthest path over which NCCL still uses P2P (NCCL docs, "NCCL_P2P_LEVEL").
P2P_LEVELS = ["LOC", "NVL", "PIX", "PXB", "PHB", "SYS"]
# Its old numeric values, as NCCL's levelsOldToNew maps them (src/graph/paths.cc): 4 and above are SYS.
OLD_P2P_LEVELS = ["LOC", "PIX", "PXB", "PHB", "SYS"]


def p2p_level(value: str | None) -> int | None:
    """NCCL_P2P_LEVEL's value (a name or an old number) -> its index in P2P_LEVELS; None if NCCL ignores it."""
    v = (value or "").strip().upper()
    if v.isdecimal():   # not isdigit: "¹" is a digit int() refuses; nor int() on 4,301 digits: 4 and up are SYS
        digits = v.lstrip("0")[:3] or "0"
        return P2P_LEVELS.index(OLD_P2P_LEVELS[min(int(digits), len(OLD_P2P_LEVELS) - 1)])
    return P2P_LEVELS.index(v) if v in P2P_LEVELS else None


# ---- NCCL's choice of transport between two GPUs of one host: the one owner (nccllog and speed ask it)

def switch_on(value: str | None) -> bool:
    """An NCCL integer switch that is set (NCCL reads it with strtol: "1", not "true")."""
    text = str(value).strip()
    if text.isdecimal():   # strtol saturates where int() refuses 4,301 digits: any digit but 0 is on
        return text.strip("0") != ""
    try:
        return int(text, 0) != 0
    except ValueError:
        return False


def p2p_limit(env: dict) -> tuple[int | None, str | None]:
    """The farthest path (index in health.P2P_LEVELS) the variables allow P2P over, and which variable said so;
    (None, None) when they leave NCCL's default (NVLink and PCIe switches, PXB)."""
    if (env.get("NCCL_P2P_DISABLE") or "").strip() == "1":
        return 0, "NCCL_P2P_DISABLE=1"
    level = p2p_level(env.get("NCCL_P2P_LEVEL"))
    return (level, f"NCCL_P2P_LEVEL={env['NCCL_P2P_LEVEL']}") if level is not None else (None, None)


def expected_transport(link_type: str | None, env: dict) -> str:
    """What NCCL chooses between two GPUs of one host over `link_type` (as `nvidia-smi topo -m` prints it) under
    `env`: P2P up to the allowed level (PXB by default: NVLink and PCIe switches), else SHM, else the network."""
    level, _ = p2p_limit(env)
    allowed = P2P_LEVELS.index("PXB") if level is None else level
    if link_level(link_type) <= allowed:
        return "P2P"
    return "NET" if switch_on(env.get("NCCL_SHM_DISABLE")) else "SHM"


def link_level(link_type: str | None) -> int:
    """A topo -m link type on NCCL_P2P_LEVEL's scale (NV# is NVL; NODE, within one CPU, is PHB)."""
    k = kind_of(link_type or "SYS")
    k = {"NV": "NVL", "NODE": "PHB"}.get(k, k)
    return P2P_LEVELS.index(k) if k in P2P_LEVELS else len(P2P_LEVELS) - 1


@dataclass(frozen=True)
class Finding:
    """One health finding: its level, a stable code, what it is about and the message."""
    level: str      # "info", "warn" or "error"
    code: str       # stable identifier, e.g. "temperature_high"
    subject: str    # "GPU0", "GPU0-GPU1", "env", "host"
    message: str

    def to_dict(self) -> dict:
        return asdict(self)


def _gpu_findings(topo: Topology, names: list[str]) -> list[Finding]:
    out = []
    for g in (topo.gpu(n) for n in names):
        if g.lost:
            out.append(Finding("error", "gpu_lost", g.name, "NVML cannot reach this GPU (fell off the bus?):"
                                                            " check `dmesg` for Xid 79, reseat or reboot"))
            continue
        t = g.temperature_c
        if t is not None and t >= TEMP_THROTTLE_C:
            out.append(Finding("error", "temperature_throttling", g.name,
                               f"{t:g} °C: in the throttling zone (from about {TEMP_THROTTLE_C}-90 °C);"
                               " improve airflow or lower the power limit"))
        elif t is not None and t >= TEMP_WARN_C:
            out.append(Finding("warn", "temperature_high", g.name,
                               f"{t:g} °C: above {TEMP_WARN_C} °C (70-75 °C is ideal); throttling starts near 84 °C"))
        active = sorted(set(g.throttle_reasons or ()) - BENIGN_THROTTLE)
        if active:
            out.append(Finding("warn", "throttling", g.name, "clocks held down by: " + ", ".join(active)))
        if g.power_draw_w is not None and g.power_limit_w and g.power_draw_w >= POWER_CAP_FRACTION * g.power_limit_w:
            out.append(Finding("warn", "power_cap", g.name,
                               f"drawing {g.power_draw_w:.0f} W of a {g.power_limit_w:.0f} W"
                               " limit: running at its power cap; check the PSU and cables"))
        if g.pcie_width and g.pcie_width_max and g.pcie_width < g.pcie_width_max:
            out.append(Finding("warn", "pcie_width_degraded", g.name,
                               f"PCIe link x{g.pcie_width} of x{g.pcie_width_max}: a degraded link (riser, slot"
                               " or seating); host<->GPU copies and PCIe P2P run slower"))
        if g.pcie_gen and g.pcie_gen_max and g.pcie_gen < g.pcie_gen_max:
            out.append(Finding("info", "pcie_gen_below_max", g.name,
                               f"PCIe gen {g.pcie_gen} of {g.pcie_gen_max}: normal when idle (power saving);"
                               " a problem only if it stays so under load"))
        inactive = [n.link for n in g.nvlinks or () if not n.active]
        active_n = sum(1 for n in g.nvlinks or () if n.active)
        promised = max((l.nvlinks for l in topo.links_of(g.name)), default=0)
        if g.nvlinks is not None and promised > active_n:
            out.append(Finding("warn", "nvlink_inactive", g.name,
                               f"the matrix shows NV{promised} but only {active_n} NVLink(s) are active"
                               f" (inactive: {', '.join(map(str, inactive)) or 'none listed'})"))
        elif inactive and promised:
            out.append(Finding("info", "nvlink_inactive", g.name, "NVLink(s) " + ", ".join(map(str, inactive))
                               + " are inactive; the bonded links in use are up"))
    return out


def _link_findings(topo: Topology, names: list[str]) -> list[Finding]:
    out = []
    beyond = {}  # (model, its NVLinks) -> the pairs whose matrix entry claims more
    caps: dict = {}   # per model, looked up once: a paste of 256 GPUs has 32,640 links
    for l in topo.gpu_links(names):
        model = topo.gpu(l.a).model or topo.gpu(l.b).model
        cap = caps[model] if model in caps else caps.setdefault(model, max_nvlinks(model))
        if l.nvlinks and cap is not None and l.nvlinks > cap:
            beyond.setdefault((model, cap), []).append(f"{l.a}-{l.b} NV{l.nvlinks}")
        bad = {mode: s for mode, s in (l.p2p or {}).items() if s not in ("OK", "X")}
        if bad:
            out.append(Finding("warn", "p2p_unsupported", f"{l.a}-{l.b}",
                               "peer-to-peer not available (" + ", ".join(f"{m}: {s}" for m, s in bad.items())
                               + "): NCCL copies through host memory between these GPUs"))
    for (model, cap), pairs in beyond.items():
        out.append(Finding("warn", "nvlinks_beyond_model", pairs[0].split()[0] if len(pairs) == 1 else "GPUs",
                           f"{', '.join(pairs[:3])}{f' and {len(pairs) - 3} more' if len(pairs) > 3 else ''}:"
                           f" {model} has {cap} NVLink(s); is the paste from another machine, or the GPU model"
                           " (--gpu-model) wrong?"))
    return out


def _env_findings(topo: Topology, names: list[str], env: dict) -> list[Finding]:
    out = []
    links = topo.gpu_links(names)
    has_nv = any(l.nvlinks for l in links)
    if (env.get("NCCL_P2P_DISABLE") or "0") not in ("0", ""):
        out.append(Finding("warn" if has_nv else "info", "nccl_p2p_disabled", "env",
                           "NCCL_P2P_DISABLE is set: NCCL will not use NVLink or PCIe peer-to-peer"
                           + (" although these GPUs have NVLink (HF's DDP benchmark: 23 % slower without it)"
                              if has_nv else "")))
    level = (env.get("NCCL_P2P_LEVEL") or "").upper()
    if level:
        idx = p2p_level(level)
        if idx is None:
            out.append(Finding("warn", "nccl_p2p_level", "env", f"NCCL_P2P_LEVEL={level} is not a level NCCL knows"
                                                                  " (LOC, NVL, PIX, PXB, PHB, SYS)"))
        else:
            def beyond(t):
                k = kind_of(t)
                return k != "NV" and k in PCIE_KINDS and P2P_LEVELS.index(k) > idx
            far = [f"{l.a}-{l.b}" for l in links if l.type and beyond(l.type)]
            out.append(Finding("warn" if far else "info", "nccl_p2p_level", "env",
                               f"NCCL_P2P_LEVEL={level}: P2P only up to {P2P_LEVELS[idx]}"
                               + (f"; no P2P for {', '.join(far)}" if far else "; every pair in use qualifies")))
    for var in ("NCCL_SHM_DISABLE", "NCCL_IB_DISABLE"):
        if (env.get(var) or "0") not in ("0", ""):
            out.append(Finding("info", var.lower(), "env", f"{var} is set: NCCL will not use "
                               + ("shared memory between processes" if "SHM" in var else "InfiniBand/RoCE")))
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        out.append(Finding("info", "cuda_visible_devices", "env",
                           f"CUDA_VISIBLE_DEVICES={cvd}: programs see only these GPUs, renumbered from 0"))
    if len(topo.gpus) > 1 and (env.get("CUDA_DEVICE_ORDER") or "FASTEST_FIRST") != "PCI_BUS_ID":
        models = {g.model for g in topo.gpus}
        level_ = "warn" if cvd is not None and (len(models) > 1 or None in models) else "info"
        out.append(Finding(level_, "cuda_device_order", "env",
                           "CUDA numbers GPUs fastest first, nvidia-smi (and this report) by PCI bus id: set"
                           " CUDA_DEVICE_ORDER=PCI_BUS_ID so GPU indices mean the same GPUs everywhere"))
    return out


def _mig_findings(topo: Topology, names: list[str]) -> list[Finding]:
    """GPUs in MIG mode: "GPU to GPU P2P (both PCIe and NVLink) is not supported" there (NVIDIA's MIG user guide,
    https://docs.nvidia.com/datacenter/tesla/mig-user-guide/), so the links above carry none of their traffic."""
    mig = [g for g in (topo.gpu(n) for n in names) if g.mig is not None]
    if not mig:
        return []
    said = "; ".join(f"{g.name}: {', '.join(g.mig) or 'no instance created'}" for g in mig)
    return [Finding("warn", "mig_mode", mig[0].name if len(mig) == 1 else "GPUs",
                    f"in MIG mode ({said}): MIG has no P2P between GPUs, over PCIe or NVLink, so the links listed"
                    " and the interconnect advice do not hold for training across instances; turn MIG off for"
                    " multi-GPU training (nvidia-smi -i N -mig 0, then reset the GPU)")]


def check(topo: Topology, names: list[str], env: dict) -> list[Finding]:
    """All findings for the GPUs `names` of `topo`, worst first."""
    found = (_gpu_findings(topo, names) + _mig_findings(topo, names) + _link_findings(topo, names)
             + _env_findings(topo, names, env))
    if not any(g.temperature_c is not None or g.power_draw_w is not None for g in topo.gpus):
        found.append(Finding("info", "no_live_health", "host", "temperatures, power and PCIe links come only"
                                                               " from a live GPU (NVML): not in a pasted text"))
    order = {"error": 0, "warn": 1, "info": 2}
    return sorted(found, key=lambda f: order[f.level])
