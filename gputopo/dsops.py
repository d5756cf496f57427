"""A DeepSpeed config -> the compiled ops it will load, and whether each is prebuilt, built before, buildable here.

Which op a config needs mirrors DeepSpeed's engine (`_configure_basic_optimizer`, `get_optimizer_configuration`
in deepspeed/runtime/engine.py, 0.19): Adam/AdamW -> FusedAdam, or DeepSpeedCPUAdam when the optimizer is
offloaded, or torch's own AdamW with `"torch_adam": true`; Lamb -> FusedLamb; Lion -> FusedLion/CPULion;
Adagrad offloaded -> CPUAdagrad; any NVMe offload -> async_io (libaio). Whether an op can be built is asked of
DeepSpeed's own op builders (`is_compatible()`), plus what they do not check: ninja, a C++ compiler, and nvcc
matching torch's CUDA for ops with CUDA sources. Imports deepspeed (and torch) only in `status()`.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass

# JIT build time of each op on 2 cores (docs/measurements/cpu-install-2026-11.md, measured): what "first use" costs.
BUILD_SECONDS = {"deepspeed_shm_comm": 26, "fused_adam": 41, "cpu_adam": 41, "async_io": 150}
BUILD_VAR = {"fused_adam": "DS_BUILD_FUSED_ADAM", "cpu_adam": "DS_BUILD_CPU_ADAM", "async_io": "DS_BUILD_AIO",
             "fused_lamb": "DS_BUILD_FUSED_LAMB", "fused_lion": "DS_BUILD_FUSED_LION", "cpu_lion": "DS_BUILD_CPU_LION",
             "cpu_adagrad": "DS_BUILD_CPU_ADAGRAD", "deepspeed_shm_comm": "DS_BUILD_SHM_COMM"}
NO_COMPILE = 'add "torch_adam": true to optimizer.params (gputopo deepspeed-config --no-compile-ops)'


@dataclass(frozen=True)
class Need:
    op: str      # DeepSpeed's op name, as ds_report lists it
    why: str


def block(cfg: dict, key: str) -> dict:
    """cfg[key] when it is a JSON object, else {} (a hand-written config may hold anything)."""
    value = cfg.get(key) if isinstance(cfg, dict) else None
    return value if isinstance(value, dict) else {}


def needed(cfg: dict) -> list[Need]:
    """The ops `deepspeed.initialize` will load for this config (not counting the accelerator's own)."""
    zero = block(cfg, "zero_optimization")
    off_opt = block(zero, "offload_optimizer").get("device", "none")
    off_par = block(zero, "offload_param").get("device", "none")
    cpu_opt = off_opt in ("cpu", "nvme")
    opt = block(cfg, "optimizer")
    name = str(opt.get("type", "")).lower()
    params = block(opt, "params")
    out = []
    if name in ("adam", "adamw"):
        if params.get("torch_adam") is True:
            pass  # torch.optim.Adam(W): nothing to compile
        elif cpu_opt:
            out.append(Need("cpu_adam",
                            f"{opt['type']} with the optimizer offloaded to {off_opt} runs DeepSpeedCPUAdam"))
        else:
            out.append(Need("fused_adam", f"{opt['type']} on the GPU runs DeepSpeed's FusedAdam"))
    elif name == "lamb":
        out.append(Need("fused_lamb", "Lamb runs DeepSpeed's FusedLamb"))
    elif name == "lion":
        out.append(Need("cpu_lion" if cpu_opt else "fused_lion", "Lion runs DeepSpeed's "
                        + ("CPULion (offloaded)" if cpu_opt else "FusedLion")))
    elif name == "adagrad" and cpu_opt:
        out.append(Need("cpu_adagrad", "Adagrad with the optimizer offloaded runs DeepSpeedCPUAdagrad"))
    if "nvme" in (off_opt, off_par):
        what = " and ".join(w for w, d in (("optimizer states", off_opt), ("parameters", off_par)) if d == "nvme")
        out.append(Need("async_io", f"NVMe offload of {what} reads and writes through libaio"))
    return out


@dataclass(frozen=True)
class OpStatus:
    op: str
    why: str
    state: str            # "prebuilt", "cached" (JIT-built before), "buildable", "not_buildable", "unknown"
    detail: str           # what was found, one sentence
    fix: str | None

    def to_dict(self) -> dict:
        return asdict(self)


def _fix(op: str, reason: str) -> str:
    prebuild = (f"or prebuild it: DS_BUILD_OPS=0 {BUILD_VAR[op]}=1 pip install --no-build-isolation deepspeed"
                if op in BUILD_VAR else "")
    if op == "async_io":
        return ("install libaio: apt-get install libaio-dev (dnf install libaio-devel),"
                " or offload to cpu instead of nvme")
    if reason == "nvcc":
        base = "set CUDA_HOME to a CUDA toolkit with torch's CUDA major version"
    elif reason == "cxx":
        base = "install a C++ compiler (apt-get install build-essential)"
    elif reason == "ninja":
        base = "pip install ninja"
    else:
        base = "see `ds_report`"
    alt = f"; or {NO_COMPILE}" if op in ("fused_adam", "cpu_adam") else ""
    return f"{base}, {prebuild}{alt}" if prebuild else base + alt


def status(needs: list[Need], toolchain: dict, ops: dict | None = None, installed: dict | None = None,
           cache_dir: str | None = None) -> list[OpStatus]:
    """Ask DeepSpeed's op builders about each needed op. `ops` (name -> builder), `installed` (name -> bool)
    and `cache_dir` default to the installed DeepSpeed's; tests pass their own.

    toolchain: {"ninja": path|None, "cxx": path|None, "nvcc": "12.4"|None, "torch_cuda": "12.4"|None}."""
    if not needs:
        return []
    if ops is None:
        found = builders()
        if found is None:
            return [OpStatus(n.op, n.why, "unknown", "deepspeed is not installed", "pip install deepspeed")
                    for n in needs]
        ops, installed, accelerator = found
        if accelerator == "cpu":  # the CPU accelerator builds its shared-memory comm op at init
            needs = [Need("deepspeed_shm_comm", "DeepSpeed's CPU accelerator builds it at init_distributed")] + needs
        cache_dir = cache_dir or _jit_dir(toolchain.get("torch_cuda"))
    out = []
    for n in needs:
        b = ops.get(n.op)
        if b is None:
            out.append(OpStatus(n.op, n.why, "not_buildable", "this DeepSpeed has no such op for this accelerator",
                                "use another optimizer, or CPU offload"))
            continue
        if (installed or {}).get(n.op):
            out.append(OpStatus(n.op, n.why, "prebuilt", "compiled into the installed DeepSpeed", None))
            continue
        folder = os.path.join(cache_dir, n.op) if cache_dir else None
        if folder and os.path.exists(os.path.join(folder, f"{n.op}.so")):
            other, here = built_for(folder), this_site()
            if other and here and other != here:   # what doctor's jit_shared says: rebuilt on first use here
                out.append(OpStatus(n.op, n.why, "buildable", f"JIT-built in {folder} for another environment"
                                    f" ({other}): this one rebuilds it on its first use",
                                    "export TORCH_EXTENSIONS_DIR=<this environment>/torch_extensions (see"
                                    " `gputopo doctor`, jit_shared)"))
            else:
                out.append(OpStatus(n.op, n.why, "cached", f"JIT-built before ({folder})", None))
            continue
        import contextlib
        import sys

        from . import validate
        try:  # its compile probe needs real file descriptors: quiet() points 1 and 2 at /dev/null underneath
            with validate.quiet(), contextlib.redirect_stdout(sys.__stdout__), \
                    contextlib.redirect_stderr(sys.__stderr__):
                compatible = bool(b.is_compatible(False))
        except Exception as e:  # DeepSpeed's own ds_report treats a failing probe as "not compatible"
            compatible, error = False, str(e).splitlines()[0] if str(e) else type(e).__name__
        else:
            error = None
        if not compatible:
            reason = "libaio (the shared library and headers) not found" if n.op == "async_io" else (
                error or "DeepSpeed's builder says its requirements are missing")
            out.append(OpStatus(n.op, n.why, "not_buildable", f"cannot build here: {reason}", _fix(n.op, "")))
            continue
        missing = _toolchain_gap(b, toolchain)
        if missing:
            what, reason = missing
            out.append(OpStatus(n.op, n.why, "not_buildable", f"cannot build here: {what}", _fix(n.op, reason)))
            continue
        secs = BUILD_SECONDS.get(n.op)
        out.append(OpStatus(n.op, n.why, "buildable", "builds here at first use (JIT"
                            + (f", about {secs} s on 2 cores" if secs else "") + ")", None))
    return out


def builders() -> tuple[dict, dict, str] | None:
    """The installed DeepSpeed's op builders for this machine's accelerator (ds_report's list), which ops it
    has prebuilt, and the accelerator's name; None without deepspeed. Imports deepspeed and torch (seconds)."""
    from . import validate
    if not validate.available():
        return None
    with validate.quiet():
        from deepspeed.accelerator import get_accelerator
        from deepspeed.git_version_info import accelerator_name, installed_ops
        from deepspeed.ops.op_builder.all_ops import ALL_OPS
    accelerator = get_accelerator()._name
    return ALL_OPS, {k: bool(v) and accelerator_name == accelerator for k, v in installed_ops.items()}, accelerator


def _toolchain_gap(builder, tc: dict) -> tuple[str, str] | None:
    """What torch's JIT needs that DeepSpeed's is_compatible() does not check."""
    if not tc.get("ninja"):
        return "ninja not found (torch builds extensions with it)", "ninja"
    if not tc.get("cxx"):
        return "no C++ compiler (c++, g++)", "cxx"
    try:
        sources = builder.sources()
    except Exception:
        sources = []
    if any(str(s).endswith(".cu") for s in sources):
        torch_cuda, nvcc = tc.get("torch_cuda"), tc.get("nvcc")
        if not torch_cuda:
            return "it has CUDA kernels and torch is a CPU build", "nvcc"
        if not nvcc:
            return f"it has CUDA kernels and no nvcc was found (CUDA_HOME: {tc.get('cuda_home') or 'none'})", "nvcc"
        if nvcc.split(".")[0] != torch_cuda.split(".")[0]:
            return f"nvcc {nvcc} does not match torch's CUDA {torch_cuda} (DeepSpeed refuses a major mismatch)", "nvcc"
    return None


def _jit_dir(torch_cuda: str | None) -> str:
    """torch.utils.cpp_extension's build root (_get_build_directory): $TORCH_EXTENSIONS_DIR itself when set,
    else ~/.cache/torch_extensions/py311_cu124 (one folder per Python and CUDA)."""
    import sys
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        return os.environ["TORCH_EXTENSIONS_DIR"]
    root = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "torch_extensions")
    tag = f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}_" + (
        f"cu{torch_cuda.replace('.', '')}" if torch_cuda else "cpu")
    return os.path.join(root, tag)


@dataclass(frozen=True)
class Build:
    """One op folder of torch's JIT build root, as a later run will find it."""
    path: str
    op: str
    lock_age_s: float | None    # a `lock` file (torch's FileBaton) and how old; None: no lock
    building: bool              # a live process works in the folder (ninja, the compiler)
    built_for: str | None       # the site-packages its build.ninja compiled against


def jit_builds(torch_cuda: str | None, *, root: str | None = None, now: float | None = None,
               busy: set | None = None) -> list[Build]:
    """The op folders under this Python's JIT build root (_jit_dir; `root` instead, for tests), each with its lock,
    whether a process is building there (busy: the folders processes work in; default: /proc/*/cwd), and the
    environment its build.ninja names (torch's and DeepSpeed's include paths)."""
    import time
    root = root or _jit_dir(torch_cuda)
    now = time.time() if now is None else now
    busy = _busy_folders() if busy is None else busy
    out = []
    for op in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        path = os.path.join(root, op)
        if not os.path.isdir(path):
            continue
        lock = os.path.join(path, "lock")
        age = now - os.path.getmtime(lock) if os.path.exists(lock) else None
        out.append(Build(path, op, age, any(b == path or b.startswith(path + os.sep) for b in busy),
                         built_for(path)))
    return out


def built_for(path: str) -> str | None:
    """The site-packages an op folder's build.ninja compiled against (torch's and DeepSpeed's include paths)."""
    import re
    try:
        with open(os.path.join(path, "build.ninja"), errors="replace") as f:
            found = re.search(r"(/\S*?/site-packages)/(?:torch|deepspeed)/", f.read())
    except OSError:
        return None
    return found.group(1) if found else None


def this_site() -> str | None:
    """The site-packages this environment's builds compile against: torch's."""
    from .system import torch_dir
    torch = torch_dir()
    return os.path.dirname(torch) if torch else None


def _busy_folders() -> set:
    """The working folders of this machine's processes (ninja and the compiler run inside an op's folder)."""
    out = set()
    for pid in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if pid.isdigit():
            try:
                out.add(os.readlink(f"/proc/{pid}/cwd"))
            except OSError:
                pass
    return out


# --- TORCH_CUDA_ARCH_LIST as DeepSpeed reads it ------------------------------------------------------------------

ARCH_VAR = "TORCH_CUDA_ARCH_LIST"
# PyTorch's arch-specific targets: 9.0a (Hopper's wgmma), 10.0a, 12.0a; CUDA 12.9's family-specific ones end in f.
ARCH_SPECIFIC = r"(\d+\.\d+)[a-z](\+PTX)?"


def installed_version() -> str | None:
    """The installed DeepSpeed's version from its package metadata (no import); None without deepspeed."""
    import importlib.metadata
    try:
        return importlib.metadata.version("deepspeed")
    except importlib.metadata.PackageNotFoundError:
        return None


def arch_entries(value: str) -> list[str]:
    """TORCH_CUDA_ARCH_LIST's entries split as DeepSpeed and PyTorch split them: on ';' and ' ', blanks dropped."""
    return [cc.strip() for cc in value.strip().replace(" ", ";").split(";") if cc.strip()]


def arch_unparsed(value: str) -> list[str]:
    """The entries DeepSpeed's op builder cannot read: it raises ValueError at every JIT build of a CUDA op.

    Mirrors CUDAOpBuilder.compute_capability_args and filter_ccs (deepspeed/ops/op_builder/builder.py, 0.19.8,
    JIT mode): entries are sorted by int() of each '.'-part cut at '+', then read as int(major), int(minor cut at
    '+'). So '9.0+PTX' passes and '9.0a' (which PyTorch accepts), 'Hopper', 'native' or '8.0,9.0' do not.
    tests/test_doctor.py holds this to the installed DeepSpeed's own function."""
    def reads(cc: str) -> bool:
        parts = cc.split(".")
        try:
            [int(p.split("+")[0]) for p in parts]
        except ValueError:
            return False
        return len(parts) >= 2
    return [cc for cc in arch_entries(value) if not reads(cc)]


def arch_for_deepspeed(value: str) -> str | None:
    """TORCH_CUDA_ARCH_LIST as DeepSpeed can read it: '9.0a' becomes '9.0' and '9.0a+PTX' '9.0+PTX', duplicates
    dropped; None (unset: DeepSpeed then builds for the GPUs it sees) when an entry cannot be mended so."""
    import re
    bad, out = set(arch_unparsed(value)), []
    for cc in arch_entries(value):
        if cc in bad:
            m = re.fullmatch(ARCH_SPECIFIC, cc)
            if not m:
                return None
            cc = m.group(1) + (m.group(2) or "")
        if cc not in out:
            out.append(cc)
    return ";".join(out) or None


def arch_notes(env) -> list[str]:
    """The line saying what deepspeed_env changes in env's TORCH_CUDA_ARCH_LIST; [] when nothing."""
    value = env.get(ARCH_VAR)
    bad = arch_unparsed(value or "")
    version = installed_version() if bad else None
    if version is None:
        return []
    mended = arch_for_deepspeed(value)
    given = f"as {mended}" if mended else "unset (DeepSpeed then builds for the GPUs it sees)"
    return [f"{ARCH_VAR} {value} given to the processes gputopo starts {given}: DeepSpeed {version} cannot parse"
            f" {', '.join(bad)}"]


def deepspeed_env(env, say=None) -> dict:
    """A copy of env whose TORCH_CUDA_ARCH_LIST DeepSpeed can read (arch_for_deepspeed), for the processes gputopo
    starts; `say` gets arch_notes' line when it changed."""
    env, notes = dict(env), arch_notes(env)
    if notes:
        mended = arch_for_deepspeed(env.pop(ARCH_VAR))
        if mended:
            env[ARCH_VAR] = mended
        if say:
            say(notes[0])
    return env
