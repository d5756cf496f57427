"""Host facts + GPU topology + (optionally) a DeepSpeed config -> checks, worst first, each with what was found,
why it matters and the fix. `fail` means a run will break here; the command exits 1 on any.

Thresholds and their sources are next to each check. GPU-side findings (degraded links, throttling, NCCL/CUDA
variables) come from health.py, the same ones `inspect` prints.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time
from dataclasses import asdict, dataclass

from . import dsops, health, nvme, system
from .errors import GputopoError
from .plan import value_bytes
from .topology import Topology
from .units import gib, size
from .worker import DS_SHM_PREFIX

SCHEMA_VERSION = 1
ORDER = {"fail": 0, "warn": 1, "unknown": 2, "info": 3, "ok": 4}
LEVEL = {"error": "fail", "warn": "warn", "info": "info"}  # health.Finding levels -> check status
MIB, GIB = 2 ** 20, 2 ** 30
# deepspeed/env_report.py warns below 512 MiB; NCCL's troubleshooting guide (Docker) asks for --shm-size=1g.
SHM_FAIL, SHM_WARN = 512 * MIB, 1 * GIB
# gputopo's own thresholds for the temp dir: below 512 MiB pip/JIT builds and torch.compile caches hit ENOSPC.
TMP_FAIL, TMP_WARN = 512 * MIB, 5 * GIB
CAP_IPC_LOCK = 14  # linux/capability.h: lets a process mlock() beyond RLIMIT_MEMLOCK


@dataclass(frozen=True)
class Check:
    id: str               # stable: "shm", "memlock", "pcie_acs", "ds_op:async_io", "env:nccl_p2p_disabled", ...
    status: str           # "fail" (breaks a run), "warn", "unknown" (could not be checked), "info", "ok"
    subject: str          # what was looked at: "/dev/shm", "GPU0", "torch", "async_io"
    found: str
    why: str
    fix: str | None = None

    def to_dict(self) -> dict:
        return {**asdict(self), "blocking": self.status == "fail"}


# --- the checks ----------------------------------------------------------------------------------------------

def check_shm(host, disks: list, n_gpus: int | None) -> Check:
    why = ("NCCL keeps shared-memory transport buffers in /dev/shm (\"NCCL WARN Error: failed to extend /dev/shm\")"
           " and DataLoader workers pass batches through it; NCCL's docs ask 1 GiB in containers, DeepSpeed warns"
           " below 512 MiB")
    fix = "docker run --shm-size=1g (or --ipc=host); Kubernetes: an emptyDir with medium: Memory at /dev/shm"
    d = next((d for d in disks if d.mountpoint == "/dev/shm"), None)
    if d is None:
        if host.path("dev/shm").is_dir():
            on = system.disk_of("/dev/shm", disks)
            return Check("shm", "warn", "/dev/shm",
                         f"not a mount of its own: a folder on {on.mountpoint if on else '?'}",
                         why, "mount a tmpfs there (mount -t tmpfs -o size=1g tmpfs /dev/shm)")
        return Check("shm", "fail", "/dev/shm", "missing", why, fix)
    if d.total_bytes is None:
        return Check("shm", "unknown", "/dev/shm", f"{d.fstype}, size unreadable", why)
    gpus = f" for {n_gpus} GPU(s)" if n_gpus else ""
    found = (f"{size(d.total_bytes)} {d.fstype}" + (f" ({size(d.free_bytes)} free)" if d.free_bytes is not None else "")
             + gpus)
    if d.total_bytes < SHM_FAIL:
        # Without a GPU there is no NCCL (gloo talks over TCP): only DataLoader workers and DeepSpeed's CPU comm.
        return Check("shm", "fail" if n_gpus else "warn", "/dev/shm",
                     found + (" - Docker's default" if d.total_bytes == 64 * MIB else "")
                     + ("" if n_gpus else "; no GPU here, so no NCCL"), why, fix)
    if d.total_bytes < SHM_WARN:
        return Check("shm", "warn", "/dev/shm", found + ", under the 1 GiB NCCL's docs ask", why, fix)
    return Check("shm", "ok", "/dev/shm", found, why)


def check_shm_leftovers(host) -> list[Check]:
    """Buffers DeepSpeed's shared-memory comm op (CPU runs) left in /dev/shm: one per rank and run, 66 MB each,
    never unlinked (csrc/cpu/comm/shm.cpp), so RAM that a long-lived machine loses run by run (332 of them held
    22 GB here, until the OOM killer stopped a run). Those no process maps (/proc/*/maps) are safe to remove."""
    names = [n for n in host.listdir("dev/shm") if n.startswith(DS_SHM_PREFIX)]
    if not names:
        return []
    mapped = set()
    for pid in (p for p in host.listdir("proc") if p.isdigit()):
        maps = host.read(f"proc/{pid}/maps") or ""
        mapped.update(n for n in names if n in maps)
    idle = [n for n in names if n not in mapped]
    if not idle:
        return []
    held = sum(p.stat().st_size for p in (host.path(f"dev/shm/{n}") for n in idle) if p.exists())  # a job may end
    return [Check("shm_leftovers", "warn", "/dev/shm",
                  f"{len(idle)} buffer(s) of DeepSpeed's CPU comm op that no process has open, {size(held)} of RAM"
                  + (f" ({len(mapped)} more open by a running job)" if mapped else ""),
                  "DeepSpeed's shared-memory all-reduce on CPUs makes a buffer per rank and never removes it: each"
                  " run leaves 66 MB per process in /dev/shm until a reboot (gputopo's own runs remove theirs)",
                  f"rm /dev/shm/{DS_SHM_PREFIX}*" + (" once no DeepSpeed job runs here" if mapped else ""))]


def check_tmp(disks: list, tmp: str) -> Check:
    why = "pip and JIT builds of DeepSpeed ops, DeepSpeed's compile probes and torch.compile's caches write here"
    d = system.disk_of(tmp, disks)
    if d is None or d.free_bytes is None:
        return Check("tmp_space", "unknown", tmp, "free space unreadable", why)
    found = f"{size(d.free_bytes)} free on {d.mountpoint} ({_kind(d)})"
    fix = "free space, or point TMPDIR at a larger local disk"
    if d.free_bytes < TMP_FAIL:
        return Check("tmp_space", "fail", tmp, found, why, fix)
    if d.free_bytes < TMP_WARN:
        return Check("tmp_space", "warn", tmp, found + " (below 5 GiB)", why, fix)
    return Check("tmp_space", "ok", tmp, found, why)


def check_nvme_path(host, disks: list, path: str, need: int | None = None) -> Check:
    why = "DeepSpeed swaps ZeRO-3 parameters/optimizer states to files here through libaio (O_DIRECT)"
    d = system.disk_of(path, disks)
    unusable = nvme.problem(path) if host.live else None  # the words plan and deepspeed-config refuse it with
    if unusable:
        return Check("nvme_path", "fail", path, unusable, why, "pick a writable folder on a local NVMe disk:"
                                                               " --nvme-path DIR")
    if d is None:
        return Check("nvme_path", "unknown", path, "no mount found for it", why)
    found = f"on {d.mountpoint} ({_kind(d)}), {size(d.free_bytes)} free"
    if need is not None and d.free_bytes is not None and d.free_bytes < need:
        return Check("nvme_path", "fail", path, f"{found}; offload needs {gib(need)}", why,
                     "free space or choose a larger NVMe mount (--nvme-path)")
    if d.kind == "nvme":
        return Check("nvme_path", "ok", path, found, why)
    if d.kind == "ram":
        return Check("nvme_path", "warn", path, found + ": this is RAM, not a disk", why,
                     "offload to cpu instead (--offload cpu), or a folder on an NVMe disk")
    if d.kind == "network":
        return Check("nvme_path", "warn", path, found + ": a network file system", why,
                     "use a local NVMe folder; network storage is far slower and may not support O_DIRECT")
    return Check("nvme_path", "warn", path, found + ": not NVMe, so swapping will be slower", why,
                 "use a folder on an NVMe mount if there is one (gputopo doctor lists the disks)")


def pinned_bytes(cfg: dict | None) -> int | None:
    """Bytes DeepSpeed's NVMe swapper mlock()s for this config (its aio buffers), or None without NVMe offload.
    NotANumber for a size DeepSpeed would refuse.

    Param swapper: buffer_count x buffer_size elements of 2 bytes (16-bit) or 4 (fp32); optimizer swapper:
    buffer_count x sub_group_size fp32 elements (deepspeed/runtime/swap_tensor/*, 0.19)."""
    if not cfg:
        return None
    zero = dsops.block(cfg, "zero_optimization")
    total, any_nvme = 0, False
    half = dsops.block(cfg, "bf16").get("enabled") is True or dsops.block(cfg, "fp16").get("enabled") is True
    param_bytes = value_bytes("bf16" if half else "fp32")
    par, opt = dsops.block(zero, "offload_param"), dsops.block(zero, "offload_optimizer")
    at = "zero_optimization."
    if par.get("device") == "nvme":
        any_nvme = True
        total += (_int(par, "buffer_count", 5, at + "offload_param.")
                  * _int(par, "buffer_size", 100_000_000, at + "offload_param.") * param_bytes)
    if opt.get("device") == "nvme":
        any_nvme = True
        total += (_int(opt, "buffer_count", 4, at + "offload_optimizer.")
                  * _int(zero, "sub_group_size", 1_000_000_000, at) * 4)
    return total if any_nvme else None


class NotANumber(ValueError):
    """A config size DeepSpeed's own config classes refuse (pydantic's int field, ge=0)."""


# DeepSpeed's int fields are 64-bit: pydantic refuses a float past it ("exceeded maximum size"), so 1e308 is no size
MOST_CONFIG_INT = 2 ** 63 - 1


def _int(block: dict, key: str, default: int, at: str) -> int:
    """block[key] as DeepSpeed reads its int fields (a whole number of 0 or more: 5, 5.0, "5"; true is 1), the
    default when it is absent or "auto" (the HF Trainer's); NotANumber naming the key for what DeepSpeed refuses
    ("inf", 2.5, -3, 1e308): a float() of "inf" passed int() an infinity (OverflowError), and 1e308 made a size that
    no float could divide."""
    value = block.get(key)
    if value is None or value == "auto":
        return default
    number = value
    if isinstance(value, str):
        number = int(value) if re.fullmatch(r"\s*[0-9]{1,20}\s*", value) else \
            float(value) if re.fullmatch(r"\s*[0-9]{1,20}\.0*\s*", value) else None
    if isinstance(number, float) and number.is_integer():
        number = int(number)
    if not isinstance(number, int) or not 0 <= number <= MOST_CONFIG_INT:
        shown = json.dumps(value) if len(json.dumps(value)) <= 40 else json.dumps(value)[:37] + "..."
        raise NotANumber(f"{at}{key} is {shown}: DeepSpeed refuses the config (it takes a whole number of 0 or more,"
                         " within 64 bits)")
    return number


def _cap_ipc_lock(host) -> bool | None:
    m = re.search(r"^CapEff:\s*([0-9a-f]+)", host.read("proc/self/status") or "", re.M)
    return None if not m else bool(int(m.group(1), 16) >> CAP_IPC_LOCK & 1)


def check_memlock(host, cfg: dict | None, rdma: list[str]) -> Check:
    limit = system.memlock(host)
    why = ("DeepSpeed's NVMe swap buffers are mlock()ed (ops/csrc/pin_memory/page_alloc.cpp) and RDMA registers"
           " memory (GPUDirect, InfiniBand); both fail beyond `ulimit -l`")
    fix = "docker run --ulimit memlock=-1; on a host: `* - memlock unlimited` in /etc/security/limits.conf"
    try:
        need = pinned_bytes(cfg)
    except NotANumber as e:
        return Check("memlock", "fail", "--config", str(e), why + "; DeepSpeed checks its sizes first",
                     "write the size as a whole number, or leave it out for DeepSpeed's default")
    if limit is None:
        return Check("memlock", "unknown", "ulimit -l", "unreadable (/proc/self/limits)", why)
    shown = "unlimited" if limit == "unlimited" else f"{size(limit)} ({limit // 1024} KiB as `ulimit -l` prints it)"
    if limit == "unlimited":
        return Check("memlock", "ok", "ulimit -l", shown, why)
    cap = _cap_ipc_lock(host)
    if cap:
        return Check("memlock", "ok", "ulimit -l", shown + "; the process has CAP_IPC_LOCK, which lifts the limit", why)
    if need is not None and need > limit:
        return Check("memlock", "fail", "ulimit -l", f"{shown}; this config's NVMe swap buffers lock {gib(need)}",
                     why, fix)
    if rdma:
        return Check("memlock", "warn", "ulimit -l", f"{shown} with RDMA devices ({', '.join(rdma)})", why, fix)
    return Check("memlock", "info", "ulimit -l", shown + "; nothing here needs locked memory"
                 + ("" if cfg else " (checked against a config with --config)"), why)


def check_acs(host, gpu_buses: list[str], n_gpus: int) -> Check:
    why = ("ACS redirect on a PCIe bridge sends GPU peer-to-peer traffic up to the root complex: NCCL P2P hangs or"
           " crawls (NCCL troubleshooting, \"PCI Access Control Services\")")
    text = host.command("lspci", "-vvv")
    devices, source = (system.lspci(text), "lspci -vvv") if text is not None else ([], None)
    if not any(d.acs_ctl is not None for d in devices):  # no lspci, or one without root: sysfs config space
        from_sysfs = system.pci_sysfs(host)
        if from_sysfs and (not devices or not all(d.caps_hidden for d in from_sysfs if d.secondary)):
            devices, source = from_sysfs, "sysfs config space"
    if not devices:
        return Check("pcie_acs", "unknown", "PCIe bridges", "neither lspci nor /sys/bus/pci could be read", why,
                     "install pciutils and run `sudo lspci -vvv | grep ACSCtl`")
    if not any(d.acs_ctl is not None for d in devices) and any(d.caps_hidden for d in devices):
        return Check("pcie_acs", "unknown", "PCIe bridges", "capabilities hidden: reading ACS needs root", why,
                     "run `sudo lspci -vvv | grep ACSCtl`, or `sudo gputopo doctor`")
    gpus = sorted(set(gpu_buses) | {d.bus_id for d in devices if d.is_nvidia_gpu})
    redirecting = [d for d in devices if d.acs_redirects]
    if not redirecting:
        shown = sum(1 for d in devices if d.acs_ctl is not None)
        return Check("pcie_acs", "ok", "PCIe bridges",
                     f"no ACS redirect ({shown} device(s) with ACS of {len(devices)} read from {source})", why)
    above = [b for b in redirecting if any(b in system.bridges_above(devices, g) for g in gpus)]
    fix = ("disable ACS in the BIOS (or per bridge until reboot: sudo setpci -s BUS ECAP_ACS+0x6.w=0000);"
           " stopgap: NCCL_P2P_DISABLE=1")
    names = ", ".join(b.bus_id for b in (above or redirecting)[:6]) + ("..." if len(above or redirecting) > 6 else "")
    if above:
        vm = system.iommu(host, []).get("hypervisor")
        status = "fail" if n_gpus > 1 and not vm else "warn"
        return Check("pcie_acs", status, "PCIe bridges", f"ACS redirect on {names}, above GPU(s) "
                     + ", ".join(gpus) + (" (a VM: passthrough needs ACS; ask the host for P2P)" if vm else ""),
                     why, fix)
    return Check("pcie_acs", "warn" if not gpus else "info", "PCIe bridges",
                 f"ACS redirect on {len(redirecting)} bridge(s) ({names}); "
                 + ("no NVIDIA GPU seen below them" if gpus else "no NVIDIA GPU seen, so none known to sit below"),
                 why, fix if not gpus else None)


def check_iommu(host, gpu_buses: list[str], n_gpus: int) -> Check:
    why = "in translation (DMA) mode the IOMMU remaps peer-to-peer traffic: NCCL's docs warn P2P may hang or be slow"
    io = system.iommu(host, gpu_buses)
    cmd = " ".join(io["cmdline"]) or "no iommu flags"
    if not host.path("sys").exists():
        return Check("iommu", "unknown", "IOMMU", "sysfs not readable", why)
    if not io["units"] and not io["groups"]:
        return Check("iommu", "ok", "IOMMU", f"off (no IOMMU unit, no groups; kernel: {cmd})", why)
    translated = [g for g, t in io["gpu_domain_types"].items() if t.startswith("DMA")]
    if translated:
        status = "warn" if n_gpus > 1 and not io["hypervisor"] else "info"
        return Check("iommu", status, "IOMMU", f"translation mode for GPU(s) {', '.join(translated)} (kernel: {cmd})",
                     why, "boot with iommu=pt (intel_iommu=on iommu=pt / amd_iommu=on iommu=pt) for passthrough")
    if io["gpu_domain_types"]:
        return Check("iommu", "ok", "IOMMU", "passthrough (identity) for the GPUs", why)
    return Check("iommu", "info", "IOMMU", f"{len(io['units'])} unit(s), {io['groups']} group(s); no GPU to judge"
                 f" (kernel: {cmd})", why)


def check_env(env: dict, topo: Topology | None, names: list[str]) -> list[Check]:
    """NCCL_*/CUDA_* variables: health's findings (the ones inspect prints), plus the rest listed."""
    t = topo or Topology(gpus=())
    out = [Check(f"env:{f.code}", LEVEL[f.level], f.subject, f.message,
                 "NCCL/CUDA variables left in a shell change the transport or the GPU numbering",
                 "unset it unless you mean it" if f.level != "info" else None)
           for f in health.check(t, names, env) if f.subject == "env"]
    if (env.get("CUDA_LAUNCH_BLOCKING") or "0") not in ("0", ""):
        out.append(Check("env:cuda_launch_blocking", "warn", "env", "CUDA_LAUNCH_BLOCKING is set",
                         "every kernel launch waits for the previous one: a debugging switch, much slower",
                         "unset CUDA_LAUNCH_BLOCKING"))
    known = {"NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "CUDA_VISIBLE_DEVICES",
             "CUDA_DEVICE_ORDER", "CUDA_LAUNCH_BLOCKING", "CUDA_HOME", "CUDA_PATH"}
    rest = sorted(k for k in env if k.startswith(("NCCL_", "CUDA_")) and k not in known)
    out.append(Check("env:variables", "info", "env", ("set: " + ", ".join(f"{k}={env[k]}" for k in rest)) if rest
                     else "no other NCCL_*/CUDA_* variable set", "what else NCCL and CUDA will read"))
    return out


def cuda_stack(host, topo: Topology | None, driver: dict) -> tuple[list[Check], dict]:
    """torch's CUDA vs the driver, nvcc vs torch, CUDA_HOME, C++ compiler, ninja; and the toolchain facts."""
    tb = system.torch_build()
    home, how = system.cuda_home(host)
    nvcc = system.nvcc_version(host, home)
    tc = {"torch_cuda": tb and tb["cuda"], "nvcc": nvcc, "cuda_home": home, "cxx": system.cxx(host),
          "ninja": system.ninja(host)}
    gpus = topo is not None and len(topo.gpus) > 0
    out = []
    if tb is None:
        out.append(Check("torch", "fail" if gpus else "info", "torch", "not installed",
                         "training, bench-nvlink and DeepSpeed need it", "pip install torch"))
    elif tb["cuda"] is None and tb["hip"] is None:
        out.append(Check("torch", "fail" if gpus else "info", "torch", f"{tb['version']}: a CPU build",
                         "a CPU build of torch cannot use the GPUs" if gpus else "fine here: no GPU to use",
                         "install a CUDA build: pip install torch --index-url https://download.pytorch.org/whl/cu124"
                         if gpus else None))
    else:
        out.append(Check("torch", "ok", "torch", f"{tb['version']} (CUDA {tb['cuda'] or '-'}, HIP {tb['hip'] or '-'})",
                         "the CUDA version torch was built with decides the driver and nvcc it needs"))
    drv, drv_cuda = driver.get("version"), driver.get("cuda")
    if gpus or drv:
        why = "the driver must support torch's CUDA: an older one fails at the first CUDA call"
        if drv_cuda and tb and tb["cuda"]:
            d, t = [tuple(int(x) for x in v.split(".")[:2]) for v in (drv_cuda, tb["cuda"])]
            status = "fail" if d[0] < t[0] else ("warn" if d < t else "ok")
            found = f"driver {drv or '?'} supports CUDA {drv_cuda}; torch needs {tb['cuda']}" + (
                " (same major: minor-version compatibility, PTX JIT unavailable)" if status == "warn" else "")
            out.append(Check("cuda_driver", status, "driver", found, why,
                             "update the NVIDIA driver, or install a torch built for an older CUDA"
                             if status != "ok" else None))
        else:
            out.append(Check("cuda_driver", "info", "driver", f"driver {drv or 'unknown'}"
                             + (f", CUDA {drv_cuda}" if drv_cuda else ""), why))
    why = ("DeepSpeed JIT-compiles CUDA ops (FusedAdam, FusedLamb) with nvcc from CUDA_HOME;"
           " its major must match torch's")
    header = home and (host.path(home.lstrip("/") + "/include/cuda_runtime.h").exists() if not host.live
                       else os.path.exists(os.path.join(home, "include", "cuda_runtime.h")))
    kits = system.cuda_toolkits(host)
    matters = bool(tb and tb["cuda"])
    if not home or not nvcc:
        out.append(Check("nvcc", "warn" if matters else "info", "CUDA toolkit",
                         f"no nvcc ({how})" if not home else f"CUDA_HOME {home} ({how}) has no working bin/nvcc",
                         why, ("install the CUDA toolkit matching torch's CUDA and set CUDA_HOME, or use prebuilt"
                               " ops / " + "\"torch_adam\": true") if matters else None))
    elif not header:
        out.append(Check("nvcc", "warn" if matters else "info", "CUDA toolkit",
                         f"nvcc {nvcc}, but CUDA_HOME resolves to {home} ({how}), which has no include/cuda_runtime.h",
                         why, f"export CUDA_HOME={shlex.quote(kits[0])}" if kits else
                         "set CUDA_HOME to the toolkit's folder"))
    elif matters and nvcc.split(".")[0] != tb["cuda"].split(".")[0]:
        out.append(Check("nvcc", "warn", "CUDA toolkit", f"nvcc {nvcc} at {home}; torch's CUDA is {tb['cuda']}", why,
                         "set CUDA_HOME to a toolkit with torch's CUDA major version"))
    else:
        out.append(Check("nvcc", "ok" if matters else "info", "CUDA toolkit", f"nvcc {nvcc} at {home} ({how})"
                         + ("" if matters else "; unused: torch has no CUDA"), why))
    for key, what, fix in (("cxx", "C++ compiler", "apt-get install build-essential"),
                           ("ninja", "ninja", "pip install ninja")):
        out.append(Check(key, "ok" if tc[key] else "warn", what, tc[key] or "not found",
                         "torch's JIT builds DeepSpeed's C++/CUDA ops with it at first use", None if tc[key] else fix))
    return out, tc


def check_arch_list(env: dict, torch_cuda: str | None, jit: bool | None) -> list[Check]:
    """TORCH_CUDA_ARCH_LIST against the installed DeepSpeed's parser (dsops.arch_unparsed); nothing when unset or
    without DeepSpeed. jit: whether the config loads an op DeepSpeed JIT-builds (None: no config, so assume so)."""
    value = env.get(dsops.ARCH_VAR)
    version = dsops.installed_version() if (value or "").strip() else None  # 50 ms of metadata: only when set
    if version is None:
        return []
    shown, bad = f'{dsops.ARCH_VAR}="{value}"', dsops.arch_unparsed(value)
    why = ("DeepSpeed's op builder int()s each part of every entry (compute_capability_args) before each JIT build"
           " of an op on CUDA (FusedAdam, FusedLamb, async_io...), even one built before, where PyTorch itself"
           " accepts arch-specific targets such as 9.0a: \"ValueError: invalid literal for int()\"")
    if not bad:
        return [Check("ds_arch_list", "ok", "env", f"{shown}: DeepSpeed {version} parses it", why)]
    mended = dsops.arch_for_deepspeed(value)
    fix = (f'set {dsops.ARCH_VAR}="{mended}" (drop the arch-specific suffix) before building ops' if mended else
           f'unset {dsops.ARCH_VAR} (DeepSpeed then builds for the GPUs it sees) or give versions: "8.0;9.0"')
    found = f"{shown}: DeepSpeed {version} cannot parse {', '.join(bad)} (its op builder int()s each part)"
    if not torch_cuda:  # a CPU or ROCm torch: DeepSpeed's builders never read the list
        return [Check("ds_arch_list", "info", "env", found + "; unused here: torch has no CUDA", why, fix)]
    if jit is False:
        return [Check("ds_arch_list", "warn", "env", found + "; this config loads no op DeepSpeed"
                      " JIT-builds, any other would fail", why, fix)]
    return [Check("ds_arch_list", "fail", "env", found, why, fix)]


def check_gpus(topo: Topology | None, reason: str | None, names: list[str], env: dict,
               persistence: dict, rdma: list[str], modules: set[str], sysfs_gpus: list[str]) -> list[Check]:
    """Degraded GPUs (health), persistence mode, GPUDirect RDMA; or why none of it could be checked."""
    if topo is None:
        if sysfs_gpus:
            return [Check("gpus", "fail", "GPUs", f"{len(sysfs_gpus)} NVIDIA GPU(s) on the PCI bus"
                          f" ({', '.join(sysfs_gpus)}) but NVML cannot reach them: {reason}",
                          "without the driver nothing can use them",
                          "load the driver (nvidia-smi, dmesg); in a container run with --gpus all")]
        return [Check("gpus", "unknown", "GPUs", f"no NVIDIA GPU visible ({reason})",
                      "GPU health, persistence mode, driver/CUDA and GPUDirect checks need one: not checked here")]
    out = [Check(f"gpu:{f.code}", LEVEL[f.level], f.subject, f.message, "a degraded GPU or link slows every step",
                 None) for f in health.check(topo, names, env) if f.subject != "env" and f.code != "no_live_health"]
    if not any(c.status in ("fail", "warn") for c in out):
        out.append(Check("gpus", "ok", "GPUs", f"{len(topo.gpus)} GPU(s), no health problem found", "health.py checks"))
    off = [n for n, on in persistence.items() if on is False]
    if off:
        out.append(Check("persistence", "warn", ", ".join(off), "persistence mode off",
                         "the driver tears GPUs down between processes: every launch pays the initialisation again",
                         "sudo nvidia-smi -pm 1 (or run nvidia-persistenced)"))
    elif persistence and all(v is None for v in persistence.values()):
        out.append(Check("persistence", "unknown", "GPUs", "NVML did not report persistence mode", ""))
    elif persistence:
        out.append(Check("persistence", "ok", "GPUs", "persistence mode on", ""))
    why = "across nodes NCCL reads and writes GPU memory straight from the NIC only with GPUDirect RDMA"
    if rdma:
        loaded = {"nvidia_peermem", "nv_peer_mem"} & modules
        out.append(Check("peermem", "ok" if loaded else "warn", "GPUDirect RDMA",
                         f"{', '.join(sorted(loaded))} loaded" if loaded else
                         f"RDMA device(s) {', '.join(rdma)} but nvidia-peermem is not loaded", why,
                         None if loaded else "sudo modprobe nvidia-peermem (multi-node runs only)"))
    else:
        out.append(Check("peermem", "info", "GPUDirect RDMA", "no InfiniBand/RoCE device: several nodes would talk"
                         " over TCP sockets", why))
    return out


def check_disks(disks: list, offload: tuple | None = None) -> Check:
    nvme = [d for d in disks if d.kind == "nvme"]
    local = [d for d in disks if d.local and d.kind != "nvme"]
    parts = []
    if nvme:
        parts.append("NVMe: " + ", ".join(f"{d.mountpoint} {size(d.free_bytes)} free" for d in nvme))
    if local:
        parts.append("other local: " + ", ".join(f"{d.mountpoint} ({_kind(d)}) {size(d.free_bytes)} free"
                                                  for d in local[:4]))
    ram = [d.mountpoint for d in disks if d.kind == "ram"]
    net = [f"{d.mountpoint} ({d.fstype})" for d in disks if d.kind == "network"]
    if net:
        parts.append("network: " + ", ".join(net))
    if ram:
        parts.append(f"tmpfs (RAM): {len(ram)} mount(s)")
    if offload:
        parts.append(f"`deepspeed-config --offload nvme` would use {offload[0]}")
    return Check("disks", "ok" if nvme else "info", "disks", "; ".join(parts) or "no mounts read",
                 "NVMe offload wants a local NVMe folder; tmpfs is RAM and network storage is slow")


def _kind(d) -> str:
    label = {"nvme": "NVMe", "ssd": "SSD", "rotational": "rotational", "ram": "tmpfs, RAM", "network": "network",
             "overlay": "container overlay", "unknown": "unknown disk"}[d.kind]
    return f"{d.fstype}, {label}" + (f" {d.block}" if d.block and d.kind in ("nvme", "ssd", "rotational") else "")


# --- the whole run -------------------------------------------------------------------------------------------

def run(cfg: dict | None = None, *, config_path: str | None = None, host=None, topo_fn=None, nvml_facts=None,
        ops: dict | None = None, installed: dict | None = None, nvme_need: int | None = None,
        nvme_path: str | None = None) -> dict:
    """Every check, worst first, as the documented JSON dict. `cfg` is a DeepSpeed config (dict) to check for.

    host: system.Host (default: this machine); topo_fn: () -> Topology (default probe.topology);
    nvml_facts: () -> {"persistence": {...}, "driver": {...}}; ops/installed: DeepSpeed op builders (tests)."""
    from . import probe
    from .errors import NvmlUnavailable
    t0 = time.perf_counter()
    host = host or system.Host()
    try:
        topo, reason = (topo_fn or probe.topology)(), None
    except NvmlUnavailable as e:
        topo, reason = None, str(e)
    names = [g.name for g in topo.gpus] if topo else []
    facts = (nvml_facts or probe.nvml_facts)() if topo is not None else {"persistence": {}, "driver": {}}
    facts["driver"].setdefault("version", None)
    facts["driver"]["version"] = facts["driver"]["version"] or system.driver_version(host)
    sysfs_gpus = system.nvidia_gpus_sysfs(host)
    gpu_buses = sorted({g.pci_bus_id for g in (topo.gpus if topo else ()) if g.pci_bus_id} | set(sysfs_gpus))
    n_gpus = len(names) if topo else len(sysfs_gpus)
    all_disks = system.disks(host)
    rdma = system.rdma_devices(host)
    tmp = _tmpdir(host)
    checks = [check_shm(host, all_disks, n_gpus or None), check_tmp(all_disks, tmp),
              check_memlock(host, cfg, rdma), check_acs(host, gpu_buses, n_gpus),
              check_iommu(host, gpu_buses, n_gpus)]
    checks += check_shm_leftovers(host) + check_env(host.env, topo, names)
    stack, toolchain = cuda_stack(host, topo, facts["driver"])
    checks += stack
    checks += check_gpus(topo, reason, names, host.env, facts["persistence"], rdma,
                         system.kernel_modules(host), sysfs_gpus)
    checks.append(check_disks(all_disks, system.pick_offload_dir(host, all_disks, tmp)))
    if host.live:   # the JIT build root is this user's, not a recorded machine's
        checks += check_jit_builds(dsops.jit_builds(toolchain.get("torch_cuda")), dsops.this_site(), host.env)
    for path in dict.fromkeys(nvme_paths(cfg) + ([nvme_path] if nvme_path else [])):
        checks.append(check_nvme_path(host, all_disks, path, nvme_need))
    ops_report = []
    if cfg is not None:
        needs = dsops.needed(cfg)
        ops_report = dsops.status(needs, toolchain, ops=ops, installed=installed)
        for s in ops_report:
            status = {"prebuilt": "ok", "cached": "ok", "buildable": "ok",
                      "not_buildable": "fail"}.get(s.state, "unknown")
            checks.append(Check(f"ds_op:{s.op}", status, s.op, s.detail, s.why, s.fix))
        if not needs:
            checks.append(Check("ds_op", "ok", "DeepSpeed ops", "this config needs no compiled optimizer or I/O op",
                                "torch's optimizer, or the training script's own"))
    jit = None if cfg is None else any(s.state != "prebuilt" for s in ops_report)
    checks += check_arch_list(host.env, toolchain.get("torch_cuda"), jit)
    checks.sort(key=lambda c: ORDER[c.status])
    counts = {s: sum(1 for c in checks if c.status == s) for s in ORDER}
    return {"schema_version": SCHEMA_VERSION, "ok": counts["fail"] == 0, "exit_code": 1 if counts["fail"] else 0,
            "counts": counts, "config": config_path, "gpus": n_gpus, "gpu_status": reason,
            "checks": [c.to_dict() for c in checks], "ds_ops": [s.to_dict() for s in ops_report],
            "disks": [d.to_dict() for d in all_disks], "toolchain": toolchain,
            "elapsed_s": round(time.perf_counter() - t0, 3)}


# A lock no process here has built under for 10 minutes (the slowest op, async_io, builds in 2.5 here) was most
# likely left by a killed build; a build on another node sharing the folder (NFS home) would hold it too.
STALE_LOCK_S = 600


def check_jit_builds(builds: list, site: str | None, env: dict) -> list[Check]:
    """DeepSpeed's JIT ops as the next run finds them: a lock likely left by a killed build (every later run
    waits on it for ever, silently), and ops built for another virtualenv (each environment rebuilds them on its first
    use, the other again on its next: a 20 s run took 216 s here)."""
    out = []
    for b in builds:
        if b.lock_age_s is not None and not b.building and b.lock_age_s > STALE_LOCK_S:
            out.append(Check(f"jit_lock:{b.op}", "warn", b.path,
                             f"a lock {b.lock_age_s / 60:.0f} min old and no process here building there",
                             "a killed build leaves it, and every later load of the op waits on it without a word;"
                             " a build on another machine sharing this folder would hold it too",
                             f"rm {os.path.join(b.path, 'lock')} (when no machine sharing the folder is building)"))
    other = sorted({b.built_for for b in builds if b.built_for and site and b.built_for != site})
    if other:
        ops = [b.op for b in builds if b.built_for in other]
        root = os.path.dirname(builds[0].path)
        out.append(Check("jit_shared", "warn", root,
                         f"{', '.join(ops)} built for {', '.join(other)}, not this environment ({site})",
                         "virtual environments sharing one JIT folder rebuild each other's ops on every switch",
                         "export TORCH_EXTENSIONS_DIR=" + os.path.join(env.get("VIRTUAL_ENV") or sys.prefix,
                                                                       "torch_extensions")
                         + " in this environment (its activate script)"))
    return out


def nvme_paths(cfg: dict | None) -> list[str]:
    zero = dsops.block(cfg or {}, "zero_optimization")
    paths = [dsops.block(zero, k).get("nvme_path") for k in ("offload_optimizer", "offload_param")
             if dsops.block(zero, k).get("device") == "nvme"]
    return list(dict.fromkeys(str(p) for p in paths if p))


def _tmpdir(host) -> str:
    if host.live:
        import tempfile
        return tempfile.gettempdir()
    return host.env.get("TMPDIR") or "/tmp"


def read_config(path: str) -> dict:
    """A DeepSpeed config file (or '-', stdin) as a dict; a bad file gets one line naming --config."""
    from . import jsonread
    from .errors import BadInput
    from .sources import read_text
    try:
        text = read_text(path, expect="a DeepSpeed config (JSON)")
    except BadInput as e:
        raise BadInput(f"--config {e}") from None
    # a DeepSpeed config nests 3 deep; its numbers whole within 20 digits and finite (1e400 overflowed int())
    cfg = jsonread.loads(text, f"--config {path}:", 32, what="no DeepSpeed setting holds", bad="not JSON")
    if not isinstance(cfg, dict):
        raise BadInput(f"--config {path}: a DeepSpeed config is a JSON object")
    return cfg


def known_topology(topo, status: str | None):
    """A topo_fn for run() that reuses a topology already probed, or says again why none is visible."""
    from .errors import NvmlUnavailable

    def topo_fn():
        if topo is None:
            raise NvmlUnavailable(status)
        return topo
    return topo_fn


def preflight(what: str, cfg=None, topo=None, status=None, nvme_need=None, own_children=False) -> dict:
    """`gputopo doctor` before launching or writing: its report, or GputopoError naming each blocking check.
    own_children: only gputopo's processes run, and they get TORCH_CUDA_ARCH_LIST mended (dsops.deepspeed_env)."""
    data = run(cfg, topo_fn=known_topology(topo, status) if (topo or status) else None, nvme_need=nvme_need)
    stop = [c for c in blocking(data) if not (own_children and c["id"] == "ds_arch_list")]
    if stop:
        lines = [f"doctor: {c['subject']}: {c['found']}" + (f" - fix: {c['fix']}" if c["fix"] else "") for c in stop]
        raise GputopoError(f"{what}: {len(stop)} blocking problem(s) found by `gputopo doctor` (listed above)", lines)
    return data


def blocking(report: dict) -> list[dict]:
    return [c for c in report["checks"] if c["blocking"]]
