"""A stand-in for `pynvml` (nvidia-ml-py) with the same function names and NVMLError_* classes.

Values are those of real hardware (2x RTX 3090 with an NVLink bridge; HGX H100 through NVSwitch):
names, bus ids, memory, PCIe, power in milliwatts, NVLink 3/4. Only the calls probe.py makes exist.
"""
from __future__ import annotations

import types


class NVMLError(Exception):
    value = 999


def _err(name, value):
    return type(f"NVMLError_{name}", (NVMLError,), {"value": value})


NVMLError_NotSupported = _err("NotSupported", 3)
NVMLError_InvalidArgument = _err("InvalidArgument", 2)
NVMLError_DriverNotLoaded = _err("DriverNotLoaded", 9)
NVMLError_LibraryNotFound = _err("LibraryNotFound", 12)
NVMLError_GpuIsLost = _err("GpuIsLost", 15)
NVMLError_NoPermission = _err("NoPermission", 4)
NVMLError_NotFound = _err("NotFound", 6)

GIB = 1024 ** 3


def rtx3090_pair():
    """2x RTX 3090 on a desktop board joined by a 4-link NVLink bridge (nvidia-smi: NV4)."""
    buses = ["00000000:01:00.0", "00000000:21:00.0"]
    gpus = []
    for i, bus in enumerate(buses):
        gpus.append({
            "name": "NVIDIA GeForce RTX 3090", "uuid": f"GPU-6e5b9f3c-1d2a-4c8e-9f0a-7b3c2d1e4f5{i}",
            "bus": bus, "mem_total": 24 * GIB, "mem_used": 512 * 1024 ** 2,
            "pcie": (4, 4, 16, 16), "temp": 45, "power": 118_000, "limit": 350_000, "reasons": 0x1,
            "nvlinks": [(1, 3, buses[1 - i], 0)] * 4, "numa": 0,
        })
    return {"gpus": gpus, "ancestor": {(0, 1): 30}, "p2p": {(0, 1): 0}}


def h100_nvswitch(n=4):
    """HGX H100: every GPU has 18 NVLink 4 links, all to NVSwitches (nvidia-smi: NV18)."""
    gpus = []
    for i in range(n):
        gpus.append({
            "name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f{i}",
            "bus": f"00000000:{0x18 + 0x20 * i:02X}:00.0", "mem_total": 80 * GIB, "mem_used": 600 * 1024 ** 2,
            "pcie": (5, 5, 16, 16), "temp": 34, "power": 72_000, "limit": 700_000, "reasons": 0x1,
            "nvlinks": [(1, 4, f"00000000:{0xA0 + k % 4:02X}:00.0", 2) for k in range(18)],
            "numa": 0 if i < n // 2 else 1,
        })
    anc = {(i, j): (40 if (i < n // 2) == (j < n // 2) else 50) for i in range(n) for j in range(i + 1, n)}
    return {"gpus": gpus, "ancestor": anc, "p2p": {k: 0 for k in anc}}


def h100_single():
    """One H100 SXM of an HGX board as a cloud pod sees it: its 18 NVLinks go to NVSwitches, no peer GPU."""
    s = h100_nvswitch(1)
    s["gpus"][0].update(bus="00000000:19:00.0", numa=0)
    return s


class FakeNvml(types.ModuleType):
    """Module-like object installed as sys.modules['pynvml'] by the `fake_nvml` fixture."""
    NVML_FEATURE_ENABLED = 1
    NVML_TEMPERATURE_GPU = 0
    NVML_NVLINK_MAX_LINKS = 18
    NVML_AFFINITY_SCOPE_NODE = 0

    def __init__(self, scenario=None, *, init_error=None, lost=(), unsupported=(), hot=None):
        super().__init__("pynvml")
        for name, value in globals().items():
            if name.startswith("NVMLError"):
                setattr(self, name, value)
        self.s = scenario or {"gpus": [], "ancestor": {}, "p2p": {}}
        self.init_error, self.lost, self.unsupported, self.hot = init_error, set(lost), set(unsupported), hot or {}
        self.calls = []

    def _check(self, fn, handle=None):
        self.calls.append(fn)
        if fn in self.unsupported:
            raise NVMLError_NotSupported()
        if handle is not None and handle in self.lost:
            raise NVMLError_GpuIsLost()

    def nvmlInit(self):
        if self.init_error:
            raise self.init_error()

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return len(self.s["gpus"])

    def nvmlDeviceGetPersistenceMode(self, h):
        self._check("nvmlDeviceGetPersistenceMode", h)
        return self.s["gpus"][h].get("persistence", 1)

    def nvmlSystemGetDriverVersion(self):
        self._check("nvmlSystemGetDriverVersion")
        return self.s.get("driver", ("550.54.15", 12040))[0]

    def nvmlSystemGetCudaDriverVersion_v2(self):
        self._check("nvmlSystemGetCudaDriverVersion_v2")
        return self.s.get("driver", ("550.54.15", 12040))[1]

    def nvmlDeviceGetHandleByIndex(self, i):
        self._check("nvmlDeviceGetHandleByIndex", i)
        return i

    def _g(self, h, fn):
        self._check(fn, h)
        return {**self.s["gpus"][h], **self.hot.get(h, {})}

    def nvmlDeviceGetName(self, h):
        if isinstance(h, tuple):   # a MIG instance's handle: its parent's name and its profile, as NVML names it
            return f"{self._g(h[0], 'nvmlDeviceGetName')['name']} MIG {self.s['gpus'][h[0]]['mig'][h[1]]}"
        return self._g(h, "nvmlDeviceGetName")["name"]

    def nvmlDeviceGetMigMode(self, h):
        g = self._g(h, "nvmlDeviceGetMigMode")
        if "mig" not in g:   # a GPU without MIG (a GeForce): NVML says not supported
            raise NVMLError_NotSupported()
        return [0, 0] if g["mig"] is None else [1, 1]   # [current, pending]; None: MIG-capable, off

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        return 0 if self._g(h, "nvmlDeviceGetMaxMigDeviceCount").get("mig") is None else 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, i):
        if i >= len(self._g(h, "nvmlDeviceGetMigDeviceHandleByIndex").get("mig") or ()):
            raise NVMLError_NotFound()
        return (h, i)

    def nvmlDeviceGetUUID(self, h):
        return self._g(h, "nvmlDeviceGetUUID")["uuid"]

    def nvmlDeviceGetPciInfo(self, h):
        return types.SimpleNamespace(busId=self._g(h, "nvmlDeviceGetPciInfo")["bus"].encode())

    def nvmlDeviceGetMemoryInfo(self, h):
        g = self._g(h, "nvmlDeviceGetMemoryInfo")
        return types.SimpleNamespace(total=g["mem_total"], used=g["mem_used"], free=g["mem_total"] - g["mem_used"])

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self._g(h, "nvmlDeviceGetCurrPcieLinkGeneration")["pcie"][0]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self._g(h, "nvmlDeviceGetMaxPcieLinkGeneration")["pcie"][1]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._g(h, "nvmlDeviceGetCurrPcieLinkWidth")["pcie"][2]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self._g(h, "nvmlDeviceGetMaxPcieLinkWidth")["pcie"][3]

    def nvmlDeviceGetTemperature(self, h, sensor):
        return self._g(h, "nvmlDeviceGetTemperature")["temp"]

    def nvmlDeviceGetPowerUsage(self, h):
        return self._g(h, "nvmlDeviceGetPowerUsage")["power"]

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return self._g(h, "nvmlDeviceGetEnforcedPowerLimit")["limit"]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._g(h, "nvmlDeviceGetCurrentClocksEventReasons")["reasons"]

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        return self._g(h, "nvmlDeviceGetCurrentClocksThrottleReasons")["reasons"]

    def nvmlDeviceGetCpuAffinity(self, h, size):
        self._g(h, "nvmlDeviceGetCpuAffinity")
        return [0xFFFFFF] + [0] * (size - 1)

    def nvmlDeviceGetMemoryAffinity(self, h, size, scope):
        """NUMA nodes nearest the GPU as a bitmask (what nvidia-smi prints as NUMA Affinity)."""
        numa = self._g(h, "nvmlDeviceGetMemoryAffinity")["numa"]
        return [1 << numa] + [0] * (size - 1)

    def nvmlDeviceGetNumaNodeId(self, h):
        """The GPU's own NUMA node: only coherent parts (Grace Hopper) have one; others answer NotSupported."""
        g = self._g(h, "nvmlDeviceGetNumaNodeId")
        if "gpu_numa" not in g:
            raise NVMLError_NotSupported()
        return g["gpu_numa"]

    def _link(self, h, link, fn):
        links = self._g(h, fn)["nvlinks"]
        if link >= len(links):
            raise NVMLError_InvalidArgument()
        return links[link]

    def nvmlDeviceGetNvLinkState(self, h, link):
        return self._link(h, link, "nvmlDeviceGetNvLinkState")[0]

    def nvmlDeviceGetNvLinkVersion(self, h, link):
        return self._link(h, link, "nvmlDeviceGetNvLinkVersion")[1]

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        return types.SimpleNamespace(busId=self._link(h, link, "nvmlDeviceGetNvLinkRemotePciInfo")[2])

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h, link):
        return self._link(h, link, "nvmlDeviceGetNvLinkRemoteDeviceType")[3]

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        self._check("nvmlDeviceGetTopologyCommonAncestor")
        return self.s["ancestor"][tuple(sorted((a, b)))]

    def nvmlDeviceGetP2PStatus(self, a, b, index):
        self._check("nvmlDeviceGetP2PStatus")
        return self.s["p2p"][tuple(sorted((a, b)))]
