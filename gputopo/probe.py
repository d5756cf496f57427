"""NVML / nvidia-smi / the host -> Topology and host facts. The only module that touches the machine."""
from __future__ import annotations

import os
from dataclasses import replace

from . import parse
from .errors import NvmlUnavailable
from .topology import Gpu, Link, NvLink, Topology

# NVML topology levels -> nvidia-smi topo -m vocabulary (nvml.h: nvmlGpuTopologyLevel_t).
NVML_LEVEL = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
# nvml.h: nvmlClocksEventReasons; GpuIdle is not a problem and is left out.
THROTTLE_BITS = {
    0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
    0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
P2P_STATUS = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "NS", 5: "NS", 6: "U"}
SYSFS_PCI = "/sys/bus/pci/devices"   # a path string: pathlib is imported by the live probe alone (fast start)


def _nvml():
    """Import and initialise NVML; NvmlUnavailable says why not, in words a user can act on."""
    try:
        import pynvml
    except ImportError:
        raise NvmlUnavailable("the nvidia-ml-py package (module pynvml) is not installed") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        reasons = {
            "NVMLError_LibraryNotFound": "no NVML library (libnvidia-ml.so.1 not found):"
                                         " is the NVIDIA driver installed?",
            "NVMLError_DriverNotLoaded": "the NVIDIA driver is installed but not loaded (try `nvidia-smi`, `dmesg`)",
            "NVMLError_NoPermission": "no permission to open the NVIDIA devices",
        }
        raise NvmlUnavailable(reasons.get(type(e).__name__, f"NVML failed to start: {e}")) from None
    return pynvml


def _safe(nvml, fn, *args, default=None):
    """One NVML field; a field the GPU cannot report becomes unknown instead of failing the command."""
    try:
        return getattr(nvml, fn)(*args)
    except (nvml.NVMLError, AttributeError):
        return default


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def _bus(bus_id) -> str:
    """Normalise a PCI bus id: NVML says 00000000:07:00.0, sysfs 0000:07:00.0."""
    return _text(bus_id).lower()[-12:]


def _sysfs(bus: str, name: str) -> str | None:
    try:
        with open(os.path.join(SYSFS_PCI, bus, name)) as f:
            return f.read().strip()
    except OSError:
        return None


def _cpulist(mask_words) -> str:
    """NVML's CPU affinity bitmask (64-bit words) -> '0-23,48-71' as nvidia-smi prints it."""
    cpus = [w * 64 + b for w, word in enumerate(mask_words) for b in range(64) if int(word) >> b & 1]
    ranges, start = [], None
    for i, c in enumerate(cpus):
        start = c if start is None else start
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            ranges.append(f"{start}-{c}" if c != start else str(c))
            start = None
    return ",".join(ranges)


def _gpu(nvml, i: int, handle) -> Gpu:
    q = lambda fn, *a: _safe(nvml, fn, handle, *a)  # noqa: E731
    pci = q("nvmlDeviceGetPciInfo")
    bus = _bus(pci.busId) if pci is not None else None
    mem = q("nvmlDeviceGetMemoryInfo")
    reasons = q("nvmlDeviceGetCurrentClocksEventReasons")
    if reasons is None:
        reasons = q("nvmlDeviceGetCurrentClocksThrottleReasons")
    cpu = _sysfs(bus, "local_cpulist") if bus else None
    if cpu is None:
        mask = q("nvmlDeviceGetCpuAffinity", max(1, ((os.cpu_count() or 64) + 63) // 64))
        cpu = _cpulist(mask) if mask is not None else None
    # NUMA affinity is the node nearest the GPU (what `nvidia-smi topo -m` prints): sysfs, where the firmware
    # says (-1: it does not), else NVML's memory affinity. nvmlDeviceGetNumaNodeId is the GPU's *own* node
    # (Grace Hopper), nvidia-smi's "GPU NUMA ID".
    numa = _sysfs(bus, "numa_node") if bus else None
    if numa in (None, "-1"):
        nodes = q("nvmlDeviceGetMemoryAffinity", 1, getattr(nvml, "NVML_AFFINITY_SCOPE_NODE", 0))
        numa = (_cpulist(nodes) or None) if nodes is not None else None
    own = q("nvmlDeviceGetNumaNodeId")
    power, limit = q("nvmlDeviceGetPowerUsage"), q("nvmlDeviceGetEnforcedPowerLimit")
    links = []
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        state = _safe(nvml, "nvmlDeviceGetNvLinkState", handle, link)
        if state is None:
            continue  # the GPU has no such link
        remote = _safe(nvml, "nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
        rtype = _safe(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
        links.append(NvLink(link=link, active=state == getattr(nvml, "NVML_FEATURE_ENABLED", 1),
                            version=_safe(nvml, "nvmlDeviceGetNvLinkVersion", handle, link),
                            remote=_bus(remote.busId) if remote is not None else None,
                            remote_is_switch=None if rtype is None else rtype == 2))
    return Gpu(
        name=f"GPU{i}", index=i, model=_text(q("nvmlDeviceGetName")), uuid=_text(q("nvmlDeviceGetUUID")),
        pci_bus_id=bus, memory_total_bytes=getattr(mem, "total", None), memory_used_bytes=getattr(mem, "used", None),
        cpu_affinity=cpu, numa_affinity=None if numa in (None, "-1") else str(numa),
        gpu_numa_id=None if own is None or own < 0 else str(own),
        pcie_gen=q("nvmlDeviceGetCurrPcieLinkGeneration"), pcie_gen_max=q("nvmlDeviceGetMaxPcieLinkGeneration"),
        pcie_width=q("nvmlDeviceGetCurrPcieLinkWidth"), pcie_width_max=q("nvmlDeviceGetMaxPcieLinkWidth"),
        temperature_c=q("nvmlDeviceGetTemperature", getattr(nvml, "NVML_TEMPERATURE_GPU", 0)),
        power_draw_w=power / 1000 if power is not None else None,
        power_limit_w=limit / 1000 if limit is not None else None,
        throttle_reasons=None if reasons is None else tuple(n for b, n in THROTTLE_BITS.items() if reasons & b),
        nvlinks=tuple(links) if links else None, mig=_mig(nvml, handle))


def _mig(nvml, handle) -> tuple[str, ...] | None:
    """The profiles of a GPU's MIG instances ("3g.40gb", from each instance's name), None when MIG is off."""
    mode = _safe(nvml, "nvmlDeviceGetMigMode", handle)
    if not mode or mode[0] != getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1):
        return None
    names = []
    for i in range(_safe(nvml, "nvmlDeviceGetMaxMigDeviceCount", handle, default=0)):
        h = _safe(nvml, "nvmlDeviceGetMigDeviceHandleByIndex", handle, i)   # NVMLError_NotFound: a free slot
        name = _text(_safe(nvml, "nvmlDeviceGetName", h)) if h is not None else None
        if name:
            names.append(name.rsplit("MIG ", 1)[-1])   # "NVIDIA A100-SXM4-40GB MIG 1g.5gb" -> "1g.5gb"
    return tuple(names)


def _nv_count(a: Gpu, b: Gpu, gpu_buses: set[str]) -> int:
    """Active NVLinks between two GPUs: direct links, or through NVSwitches (then the smaller fan-out)."""
    direct = sum(1 for n in a.nvlinks or () if n.active and n.remote == b.pci_bus_id)
    if direct:
        return direct

    def to_switch(g: Gpu) -> int:
        return sum(1 for n in g.nvlinks or () if n.active and n.remote and
                   (n.remote_is_switch or (n.remote_is_switch is None and n.remote not in gpu_buses)))
    return min(to_switch(a), to_switch(b))


def nvml_topology() -> Topology:
    """Read GPUs, links, P2P and health through NVML. Command line equivalent: `nvidia-smi topo -m` + `-q`."""
    nvml = _nvml()
    try:
        count = nvml.nvmlDeviceGetCount()
        if count == 0:
            raise NvmlUnavailable("the NVIDIA driver is loaded but reports no GPUs")
        gpus, handles, notes = [], [], []
        for i in range(count):
            try:
                h = nvml.nvmlDeviceGetHandleByIndex(i)
                gpus.append(_gpu(nvml, i, h))
                handles.append(h)
            except nvml.NVMLError as e:
                # A GPU that fell off the bus (Xid 79) still belongs in the report, as lost.
                gpus.append(Gpu(name=f"GPU{i}", index=i, lost=True))
                handles.append(None)
                notes.append(f"GPU{i} did not answer NVML ({type(e).__name__}): check `dmesg` for Xid errors")
        buses = {g.pci_bus_id for g in gpus if g.pci_bus_id}
        links = []
        for i, a in enumerate(gpus):
            for j in range(i + 1, len(gpus)):
                b = gpus[j]
                if handles[i] is None or handles[j] is None:
                    links.append(Link(a.name, b.name, None))
                    continue
                nv = _nv_count(a, b, buses)
                level = _safe(nvml, "nvmlDeviceGetTopologyCommonAncestor", handles[i], handles[j])
                kind = f"NV{nv}" if nv else NVML_LEVEL.get(level)
                status = _safe(nvml, "nvmlDeviceGetP2PStatus", handles[i], handles[j], 0)
                links.append(Link(a.name, b.name, kind,
                                  p2p=None if status is None else {"r": P2P_STATUS.get(status, "U")}))
        return Topology(gpus=tuple(gpus), links=tuple(links), source="nvml", notes=tuple(notes),
                        driver=_text(_safe(nvml, "nvmlSystemGetDriverVersion")))
    finally:
        _safe(nvml, "nvmlShutdown")


def cuda_device() -> dict | None:
    """The GPU a CUDA process started here computes on (device LOCAL_RANK of those CUDA_VISIBLE_DEVICES leaves),
    as NVML sees it: {"name", "model", "memory_free_bytes"}, unknown fields None; None when CUDA would see none."""
    nvml = _nvml()
    try:
        handles = [_safe(nvml, "nvmlDeviceGetHandleByIndex", i) for i in range(_safe(nvml, "nvmlDeviceGetCount",
                                                                                     default=0))]
        uuids = [_text(_safe(nvml, "nvmlDeviceGetUUID", h)) if h is not None else None for h in handles]
        visible = cuda_visible(os.environ.get("CUDA_VISIBLE_DEVICES"), uuids)
        rank = int(os.environ.get("LOCAL_RANK") or 0)
        if rank >= len(visible):
            return None
        i = visible[rank]
        if isinstance(i, str):   # a MIG instance: NVML's figures for its GPU are not the instance's
            return {"name": i, "model": None, "memory_free_bytes": None}
        h = handles[i]
        mem = _safe(nvml, "nvmlDeviceGetMemoryInfo", h) if h is not None else None
        return {"name": f"GPU{i}", "model": _text(_safe(nvml, "nvmlDeviceGetName", h)) if h is not None else None,
                "memory_free_bytes": getattr(mem, "free", None)}
    finally:
        _safe(nvml, "nvmlShutdown")


def cuda_visible(value: str | None, uuids: list[str | None]) -> list[int | str]:
    """CUDA_VISIBLE_DEVICES as CUDA reads it: the NVML indices (a MIG instance: its id) in CUDA's order, every GPU
    when unset. An entry naming no GPU ends the list ("" and "-1" hide them all), as CUDA's own parsing does.
    Indices are NVML's PCI order, which CUDA's default FASTEST_FIRST order keeps among GPUs of one model."""
    if value is None:
        return list(range(len(uuids)))
    out = []
    for entry in (e.strip() for e in value.split(",")):
        if entry.isdigit() and int(entry) < len(uuids):
            out.append(int(entry))
        elif entry.startswith("MIG-"):
            out.append(entry)
        else:   # a GPU's UUID, or a prefix of it naming one GPU only
            match = [i for i, u in enumerate(uuids) if entry and u and u.startswith(entry)]
            if len(match) != 1:
                break
            out.append(match[0])
    return out


def smi_text(*args: str) -> str | None:
    """Output of `nvidia-smi ARGS`, or None when the binary is absent or fails."""
    import shutil  # shutil and subprocess here, not at the top: inspect of a paste never runs nvidia-smi (fast start)
    import subprocess
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def topology() -> Topology:
    """The live topology: NVML first; NIC rows from `nvidia-smi topo -m`; the binary alone if NVML fails."""
    matrix_text = smi_text("topo", "-m")
    try:
        topo = nvml_topology()
    except NvmlUnavailable as e:
        if not matrix_text:
            raise
        topo = parse.texts([matrix_text] + [t for t in [smi_text("-L")] if t])
        return replace(topo, source="nvidia-smi", notes=topo.notes + (f"NVML unavailable: {e}",))
    if matrix_text:
        try:
            smi = parse.topo_matrix(matrix_text)
        except Exception as e:  # the live view still stands without the NIC rows
            return replace(topo, notes=topo.notes + (f"`nvidia-smi topo -m` unreadable: {e}",))
        nic_links = tuple(l for l in smi.links if not (l.a.startswith("GPU") and l.b.startswith("GPU")))
        return replace(topo, gpus=tuple(_fill_affinity(g, smi) for g in topo.gpus), nics=smi.nics,
                       links=topo.links + nic_links)
    return topo


def _fill_affinity(g: Gpu, smi: Topology) -> Gpu:
    """Affinities NVML and sysfs could not tell, from `nvidia-smi topo -m` (same GPU index, same machine)."""
    other = next((s for s in smi.gpus if s.name == g.name), None)
    if other is None:
        return g
    return replace(g, cpu_affinity=g.cpu_affinity or other.cpu_affinity,
                   numa_affinity=g.numa_affinity or other.numa_affinity, gpu_numa_id=g.gpu_numa_id or other.gpu_numa_id)


def host() -> dict:
    """CPUs, NUMA nodes, RAM and temp-dir free space of this machine."""
    import shutil
    import tempfile
    from pathlib import Path

    import psutil
    numa = sorted(Path("/sys/devices/system/node").glob("node[0-9]*"))
    tmp = tempfile.gettempdir()
    vm, disk = psutil.virtual_memory(), shutil.disk_usage(tmp)
    return {"cpus_logical": psutil.cpu_count(logical=True), "cpus_physical": psutil.cpu_count(logical=False),
            "numa_nodes": len(numa) or None, "ram_total_bytes": vm.total, "ram_available_bytes": vm.available,
            "tmp_dir": tmp, "tmp_free_bytes": disk.free}


def environment() -> dict[str, str | None]:
    """The environment variables that change how NCCL and CUDA see the GPUs."""
    names = ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE",
             "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")
    return {n: os.environ.get(n) for n in names}


def variables() -> dict[str, str]:
    """Every NCCL_* and CUDA_* variable set here: what a node's jobs inherit (a fleet compares them)."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(("NCCL_", "CUDA_"))}


# pip wheels that carry NCCL, newest CUDA first: torch loads the one installed beside it
NCCL_WHEELS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11")


def versions(cuda: str | None) -> dict:
    """torch's and NCCL's versions as installed here, read from the packages' metadata (no import: inspect stays
    fast); NCCL from its pip wheel (None for a torch built against a system NCCL)."""
    from importlib.metadata import PackageNotFoundError, version

    def of(name):
        try:
            return version(name)
        except PackageNotFoundError:
            return None
    return {"cuda": cuda, "torch": of("torch"), "nccl": next((v for v in map(of, NCCL_WHEELS) if v), None)}


def nvml_facts() -> dict:
    """Persistence mode per GPU and the driver's version and CUDA version, through NVML (unknown -> None)."""
    nvml = _nvml()
    try:
        persistence = {}
        for i in range(_safe(nvml, "nvmlDeviceGetCount", default=0)):
            h = _safe(nvml, "nvmlDeviceGetHandleByIndex", i)
            mode = _safe(nvml, "nvmlDeviceGetPersistenceMode", h) if h is not None else None
            persistence[f"GPU{i}"] = None if mode is None else mode == getattr(nvml, "NVML_FEATURE_ENABLED", 1)
        cuda = _safe(nvml, "nvmlSystemGetCudaDriverVersion_v2") or _safe(nvml, "nvmlSystemGetCudaDriverVersion")
        return {"persistence": persistence,
                "driver": {"version": _text(_safe(nvml, "nvmlSystemGetDriverVersion")),
                           "cuda": f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None}}
    finally:
        _safe(nvml, "nvmlShutdown")
