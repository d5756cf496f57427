"""The host around the GPUs, read-only: mounts and disks, /dev/shm, memlock, IOMMU, PCIe bridges, kernel
modules, the CUDA toolchain. probe.py's twin for what NVML does not see.

Everything is read through `Host`, rooted at `/` or at a recorded tree (proc/, sys/, and the saved output of
commands under cmd/, e.g. `cmd/lspci -vvv.txt`, `cmd/df -B1.txt`), so tests replay real machines.
No torch import: torch's CUDA version comes from its version.py file.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path("/")  # tests point this at a recorded tree
# File systems that live in RAM, across the network, or are kernel views rather than disks.
RAM_FS = {"tmpfs", "ramfs", "devtmpfs"}
NETWORK_FS = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph", "glusterfs", "9p",
              "fuse.sshfs", "fuse.s3fs", "fuse.gcsfuse", "fuse.juicefs", "wekafs", "virtiofs"}
# Files Docker and Kubernetes bind-mount into a container (they share the host disk's device name).
CONTAINER_FILE_MOUNTS = {"/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/dev/termination-log"}
PSEUDO_FS = {"proc", "sysfs", "cgroup", "cgroup2", "devpts", "mqueue", "debugfs", "tracefs", "securityfs",
             "pstore", "bpf", "configfs", "fusectl", "hugetlbfs", "autofs", "binfmt_misc", "efivarfs", "nsfs",
             "rpc_pipefs", "squashfs", "iso9660", "fuse.lxcfs", "selinuxfs", "overlayfs_meta"}


class Host:
    """Reads the machine, or a recorded copy of it under `root` (then commands come from root/cmd/*.txt)."""

    def __init__(self, root: Path | str | None = None, env: dict | None = None):
        self.root = Path(root) if root is not None else ROOT
        self.live = self.root == Path("/")
        self.env = dict(os.environ if self.live else self._environ()) if env is None else dict(env)

    def path(self, p: str) -> Path:
        return self.root / p.lstrip("/")

    def read(self, p: str) -> str | None:
        try:
            return self.path(p).read_text(errors="replace")
        except OSError:
            return None

    def listdir(self, p: str) -> list[str]:
        try:
            return sorted(os.listdir(self.path(p)))
        except OSError:
            return []

    def command(self, *args: str, timeout: float = 10) -> str | None:
        """Output of a command (None when absent or failing); a recorded tree holds it as cmd/<args>.txt."""
        if not self.live:
            return self.read(f"cmd/{' '.join(args)}.txt")
        exe = shutil.which(args[0])
        if exe is None:
            return None
        try:
            out = subprocess.run([exe, *args[1:]], capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout + out.stderr if out.returncode == 0 else None

    def which(self, name: str) -> str | None:
        if not self.live:
            return (self.read(f"cmd/which {name}.txt") or "").strip() or None
        return shutil.which(name)

    def usage(self, mountpoint: str) -> tuple[int, int] | None:
        """(total, free) bytes of the file system at `mountpoint`; a recorded tree holds `df -B1` output."""
        if self.live:
            try:
                u = shutil.disk_usage(mountpoint)
                return u.total, u.free
            except OSError:
                return None
        for line in (self.read("cmd/df -B1.txt") or "").splitlines()[1:]:
            parts = line.split()
            if len(parts) >= 6 and parts[-1] == mountpoint and parts[1].isdecimal():
                return int(parts[1]), int(parts[3])
        return None

    def is_dir(self, path: str) -> bool:
        """A live path is asked; in a recorded tree a mount point is a folder unless it is a known file mount."""
        if self.live:
            return os.path.isdir(path)
        return path not in CONTAINER_FILE_MOUNTS and not re.search(r"\.[a-z]+$", path)

    def writable(self, path: str) -> bool:
        """Whether files can be created at `path` (or, when it does not exist yet, in its nearest parent)."""
        p = Path(path)
        while not p.exists() and p != p.parent:
            p = p.parent
        return self.live and os.access(p, os.W_OK | os.X_OK)

    def _environ(self) -> dict:
        raw = self.read("proc/self/environ") or ""
        return dict(kv.split("=", 1) for kv in raw.split("\0") if "=" in kv)


# --- disks -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Disk:
    mountpoint: str
    device: str
    fstype: str
    kind: str                  # "nvme", "ssd", "rotational", "ram", "network", "overlay", "unknown"
    block: str | None          # the whole block device under it: nvme0n1, sda, vda
    rotational: bool | None
    read_only: bool
    total_bytes: int | None
    free_bytes: int | None

    @property
    def local(self) -> bool:
        return self.kind in ("nvme", "ssd", "rotational", "overlay", "unknown")

    def to_dict(self) -> dict:
        return {**asdict(self), "local": self.local}


def mounts(host: Host) -> list[tuple[str, str, str, str]]:
    """(device, mountpoint, fstype, options) of every mount; psutil parses the table (octal escapes and all)."""
    import psutil
    saved = psutil.PROCFS_PATH
    psutil.PROCFS_PATH = str(host.path("proc"))
    try:
        parts = psutil.disk_partitions(all=True)
    except OSError:
        return []
    finally:
        psutil.PROCFS_PATH = saved
    return [(p.device, p.mountpoint, p.fstype, p.opts) for p in parts]


def _block(host: Host, device: str) -> str | None:
    """/dev/nvme0n1p2 -> nvme0n1; /dev/mapper/vg-root -> the disk under the device-mapper volume."""
    if not device.startswith("/dev/"):
        return None
    name = os.path.basename(os.path.realpath(device) if host.live else device)
    if host.listdir(f"sys/block/{name}/slaves"):  # dm-N, md0: the first disk underneath decides
        return _block(host, "/dev/" + host.listdir(f"sys/block/{name}/slaves")[0])
    if host.path(f"sys/block/{name}").exists():
        return name
    m = re.fullmatch(r"((?:nvme\d+n\d+|mmcblk\d+|loop\d+))p\d+|([a-z]+)\d+", name)
    return (m.group(1) or m.group(2)) if m else None


def disks(host: Host) -> list[Disk]:
    """Every mounted file system that can hold files (no /proc, /sys, cgroups), most free first."""
    out, seen = [], set()
    for device, mountpoint, fstype, opts in mounts(host):
        if fstype in PSEUDO_FS or mountpoint in seen or fstype == "devtmpfs":
            continue
        seen.add(mountpoint)
        block = _block(host, device)
        rot = host.read(f"sys/block/{block}/queue/rotational") if block else None
        rotational = None if rot is None else rot.strip() == "1"
        if fstype in RAM_FS:
            kind = "ram"
        elif fstype in NETWORK_FS or fstype.startswith("fuse.") and ":" in device:
            kind = "network"
        elif fstype == "overlay":
            kind = "overlay"
        elif block and block.startswith("nvme"):
            kind = "nvme"
        elif rotational is False:
            kind = "ssd"
        elif rotational:
            kind = "rotational"
        else:
            kind = "unknown"
        if not host.is_dir(mountpoint):
            continue  # a bind-mounted file: /etc/hosts, /etc/resolv.conf in containers
        usage = host.usage(mountpoint)
        if usage is None and fstype in RAM_FS:  # a recorded tree: tmpfs says its size in the mount options
            usage = _tmpfs_size(opts, host)
        out.append(Disk(mountpoint=mountpoint, device=device, fstype=fstype, kind=kind, block=block,
                        rotational=rotational, read_only="ro" in opts.split(","),
                        total_bytes=usage[0] if usage else None, free_bytes=usage[1] if usage else None))
    return sorted(out, key=lambda d: -(d.free_bytes or 0))


def _tmpfs_size(opts: str, host: Host) -> tuple[int, None] | None:
    """tmpfs `size=65536k` (k/m/g or % of RAM); none given means the kernel default, half of RAM."""
    m = re.search(r"(?:^|,)size=(\d+)([kmgKMG%]?)", opts)
    ram = meminfo_total(host)
    if not m:
        return (ram // 2, None) if ram else None
    n, unit = int(m.group(1)), m.group(2).lower()
    if unit == "%":
        return (ram * n // 100, None) if ram else None
    return n * {"": 1, "k": 2 ** 10, "m": 2 ** 20, "g": 2 ** 30}[unit], None


def disk_of(path: str, all_disks: list[Disk]) -> Disk | None:
    """The mount holding `path` (longest mount point that is a prefix of it)."""
    p = os.path.abspath(path)
    best = None
    for d in all_disks:
        mp = d.mountpoint.rstrip("/") or "/"
        if (p == mp or p.startswith(mp + "/") or mp == "/") and (best is None or len(mp) > len(best.mountpoint)):
            best = d
    return best


def fstype_of(path: str, host: Host | None = None) -> str | None:
    """The file system type of the mount holding `path`, kernel views (proc, sysfs) included, which disks()
    leaves out; None when the mount table cannot be read."""
    p = os.path.realpath(path)
    best = None
    for _, mountpoint, fstype, _ in mounts(host or Host()):
        mp = mountpoint.rstrip("/") or "/"
        if (p == mp or p.startswith(mp + "/") or mp == "/") and (best is None or len(mp) > len(best[0])):
            best = (mp, fstype)
    return best[1] if best else None


def pick_offload_dir(host: Host, all_disks: list[Disk], tmp: str, home: str | None = None,
                     cwd: str | None = None) -> tuple[str, Disk, str] | None:
    """Where NVMe offload should go without --nvme-path: (folder, its disk, why), or None if nowhere local.

    The NVMe mount with the most free space; else the local disk with the most (not NVMe: slower). On a chosen
    mount the first writable folder that lies on it: the temp dir, the home folder, the working folder, the
    mount point itself (a non-root user can rarely write to a mount point)."""
    candidates = [d for d in all_disks if d.local and not d.read_only and d.free_bytes]
    nvme = [d for d in candidates if d.kind == "nvme"]
    places = [p for p in (tmp, home, cwd) if p]
    for group, why in ((nvme, "the NVMe mount with the most free space"),
                       (candidates, "no writable NVMe mount: the local disk with the most free space")):
        for d in sorted(group, key=lambda d: -(d.free_bytes or 0)):
            on_it = [p for p in places if getattr(disk_of(p, all_disks), "mountpoint", None) == d.mountpoint]
            for folder in on_it + [d.mountpoint]:
                if host.writable(folder):
                    return folder, d, why
    return None


def default_offload_dir() -> tuple[str, Disk, str] | None:
    """pick_offload_dir() on this machine: what --nvme-path means when it is not given."""
    import tempfile
    host = Host()
    return pick_offload_dir(host, disks(host), tempfile.gettempdir(), os.path.expanduser("~"), os.getcwd())


# --- memory, limits, PCIe ---------------------------------------------------------------------------------

def meminfo_total(host: Host) -> int | None:
    m = re.search(r"^MemTotal:\s+(\d+) kB", host.read("proc/meminfo") or "", re.M)
    return int(m.group(1)) * 1024 if m else None


def memlock(host: Host) -> int | None | str:
    """The soft RLIMIT_MEMLOCK in bytes, "unlimited", or None when unreadable (`ulimit -l` shows KiB)."""
    m = re.search(r"^Max locked memory\s+(\S+)\s+(\S+)\s+bytes", host.read("proc/self/limits") or "", re.M)
    if not m:
        return None
    return "unlimited" if m.group(1) == "unlimited" else int(m.group(1))


@dataclass(frozen=True)
class PciDevice:
    bus_id: str                 # 0000:03:02.0
    description: str            # "PCI bridge: Advanced Micro Devices, Inc. [AMD] Matisse PCIe GPP Bridge"
    secondary: tuple[int, int] | None  # buses below a bridge: (secondary, subordinate)
    acs_ctl: dict | None        # {"SrcValid": True, "ReqRedir": True, ...}; None when not shown
    caps_hidden: bool           # lspci printed "Capabilities: <access denied>" (not root)

    @property
    def is_nvidia_gpu(self) -> bool:
        return ("NVIDIA" in self.description
                and re.match(r"(VGA compatible|3D) controller", self.description) is not None)

    @property
    def acs_redirects(self) -> bool:
        """Peer requests/completions forced up to the root complex: what breaks or slows GPU P2P."""
        a = self.acs_ctl or {}
        return bool(a.get("ReqRedir") or a.get("CmpltRedir") or a.get("SrcValid") and a.get("EgressCtrl"))


def lspci(text: str) -> list[PciDevice]:
    """Parse `lspci -vvv` (or `lspci -vvv | grep ACSCtl`, which keeps only the flags)."""
    devices, cur = [], None
    header = re.compile(r"^((?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])\s+(.*)$", re.I)

    def close():
        if cur:
            devices.append(PciDevice(**cur))
    for line in text.splitlines():
        m = header.match(line)
        if m:
            close()
            bus = m.group(1).lower()
            cur = {"bus_id": bus if bus.count(":") == 2 else "0000:" + bus, "description": m.group(2).strip(),
                   "secondary": None, "acs_ctl": None, "caps_hidden": False}
            continue
        s = line.strip()
        if cur is None and s.startswith("ACSCtl:"):  # grep output: one anonymous device per line
            cur = {"bus_id": f"?{len(devices)}", "description": "", "secondary": None, "acs_ctl": None,
                   "caps_hidden": False}
        if cur is None:
            continue
        if s.startswith("Bus: primary="):
            b = dict(kv.split("=") for kv in s[len("Bus: "):].replace(",", " ").split() if "=" in kv)
            if "secondary" in b and "subordinate" in b:
                cur["secondary"] = (int(b["secondary"], 16), int(b["subordinate"], 16))
        elif s.startswith("ACSCtl:"):
            cur["acs_ctl"] = {f[:-1]: f.endswith("+") for f in s[len("ACSCtl:"):].split() if f[-1] in "+-"}
            if not cur["description"]:
                close()
                cur = None
        elif "Capabilities: <access denied>" in s:
            cur["caps_hidden"] = True
    close()
    return devices


ACS_BITS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
PCI_CLASSES = {0x0300: "VGA compatible controller", 0x0302: "3D controller", 0x0604: "PCI bridge"}


def pci_sysfs(host: Host) -> list[PciDevice]:
    """Bridges and GPUs from /sys/bus/pci/devices/*/config, without lspci. Beyond the first 64 bytes config
    space is readable by root only; the ACS control register sits in the extended capabilities (PCIe spec:
    capability ID 0x000D, control word at +6), so without root `caps_hidden` is set."""
    out = []
    for dev in host.listdir("sys/bus/pci/devices"):
        try:
            cfg = host.path(f"sys/bus/pci/devices/{dev}/config").read_bytes()
        except OSError:
            continue
        if len(cfg) < 64:
            continue
        word = lambda off, cfg=cfg: int.from_bytes(cfg[off:off + 2], "little")  # noqa: E731
        vendor, cls = word(0), word(0x0A)
        name = PCI_CLASSES.get(cls, f"class {cls:04x}") + (": NVIDIA Corporation" if vendor == 0x10de else
                                                           f": vendor {vendor:04x}")
        bridge = cfg[0x0E] & 0x7F == 1
        acs, off, seen = None, 0x100, set()
        while len(cfg) >= off + 8 and off and off not in seen:  # the extended capability list
            seen.add(off)
            header = int.from_bytes(cfg[off:off + 4], "little")
            if header & 0xFFFF == 0x000D:
                ctl = word(off + 6)
                acs = {b: bool(ctl >> i & 1) for i, b in enumerate(ACS_BITS)}
                break
            off = header >> 20
        out.append(PciDevice(bus_id=dev.lower(), description=name,
                             secondary=(cfg[0x19], cfg[0x1A]) if bridge else None, acs_ctl=acs,
                             caps_hidden=len(cfg) <= 64 and cls == 0x0604))
    return out


def bridges_above(devices: list[PciDevice], bus_id: str) -> list[PciDevice]:
    """Bridges whose bus range holds the device at `bus_id` (same PCI domain)."""
    dom, bus = bus_id[:4], int(bus_id[5:7], 16)
    return [d for d in devices if d.secondary and d.bus_id[:4] == dom and d.secondary[0] <= bus <= d.secondary[1]]


def nvidia_gpus_sysfs(host: Host) -> list[str]:
    """PCI addresses of NVIDIA display/3D controllers, from sysfs (no driver needed)."""
    out = []
    for dev in host.listdir("sys/bus/pci/devices"):
        vendor = (host.read(f"sys/bus/pci/devices/{dev}/vendor") or "").strip()
        cls = (host.read(f"sys/bus/pci/devices/{dev}/class") or "").strip()
        if vendor == "0x10de" and cls[:4] == "0x03":
            out.append(dev.lower())
    return out


def iommu(host: Host, gpus: list[str]) -> dict:
    """IOMMU state: active units, kernel command line, and the DMA domain type of the GPUs' groups."""
    cmdline = (host.read("proc/cmdline") or "").split()
    flags = [a for a in cmdline if re.match(r"(intel_iommu|amd_iommu|iommu|iommu\.passthrough)=", a)]
    types = {}
    for g in gpus:
        t = host.read(f"sys/bus/pci/devices/{g}/iommu_group/type")
        if t is not None:
            types[g] = t.strip()
    return {"units": host.listdir("sys/class/iommu"), "groups": len(host.listdir("sys/kernel/iommu_groups")),
            "cmdline": flags, "gpu_domain_types": types,
            "hypervisor": re.search(r"^flags\s*:.*\bhypervisor\b", host.read("proc/cpuinfo") or "", re.M) is not None}


def kernel_modules(host: Host) -> set[str]:
    return {line.split()[0] for line in (host.read("proc/modules") or "").splitlines() if line.strip()} | set(
        host.listdir("sys/module"))


def rdma_devices(host: Host) -> list[str]:
    return host.listdir("sys/class/infiniband")


# --- CUDA toolchain, without importing torch -----------------------------------------------------------

def torch_dir() -> str | None:
    """torch's package folder, found without importing it (importing torch costs seconds); None if absent."""
    spec = importlib.util.find_spec("torch")
    return list(spec.submodule_search_locations)[0] if spec and spec.submodule_search_locations else None


def torch_build() -> dict | None:
    """torch's version and CUDA version from its version.py; None if absent."""
    folder = torch_dir()
    if folder is None:
        return None
    out = {"version": None, "cuda": None, "hip": None}
    try:
        tree = ast.parse(Path(folder, "version.py").read_text())
    except (OSError, SyntaxError):
        return out
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            key = {"__version__": "version", "cuda": "cuda", "hip": "hip"}.get(target.id)
            if key:
                out[key] = value.value
    return out


def cuda_home(host: Host) -> tuple[str | None, str]:
    """The CUDA_HOME torch's extension builder will use, and how it was found (torch.utils.cpp_extension's rule)."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if host.env.get(var):
            return host.env[var], f"${var}"
    nvcc = host.which("nvcc")
    if nvcc:
        return os.path.dirname(os.path.dirname(nvcc)), f"from nvcc on PATH at {nvcc}"
    if host.path("usr/local/cuda").exists():
        return "/usr/local/cuda", "/usr/local/cuda exists"
    return None, "no $CUDA_HOME, no nvcc on PATH, no /usr/local/cuda"


def nvcc_version(host: Host, home: str | None) -> str | None:
    """`nvcc --version` release, e.g. "12.4" (nvcc under CUDA_HOME, as DeepSpeed's builder runs it)."""
    if not home:
        return None
    exe = os.path.join(home, "bin", "nvcc")
    text = host.command(exe, "--version") if host.live and os.path.exists(exe) else (
        None if host.live else host.read("cmd/nvcc --version.txt"))
    m = re.search(r"release (\d+\.\d+)", text or "")
    return m.group(1) if m else None


def cuda_toolkits(host: Host) -> list[str]:
    """Installed toolkits that could serve as CUDA_HOME: /usr/local/cuda-*/ with bin/nvcc."""
    return [f"/usr/local/{d}" for d in host.listdir("usr/local") if d.startswith("cuda")
            and host.path(f"usr/local/{d}/bin/nvcc").exists()]


def driver_version(host: Host) -> str | None:
    """The NVIDIA kernel module version from /proc/driver/nvidia/version (readable without NVML)."""
    m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", host.read("proc/driver/nvidia/version") or "")
    return m.group(1) if m else None


def cxx(host: Host) -> str | None:
    return host.env.get("CXX") or host.which("c++") or host.which("g++") or host.which("clang++")


def ninja(host: Host) -> str | None:
    return host.which("ninja") or ("python package ninja" if importlib.util.find_spec("ninja") else None)
