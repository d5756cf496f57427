"""The NVLink A/B: the same torchrun DDP run with P2P allowed and with NCCL_P2P_DISABLE=1, plus an all-reduce
sweep; children in their own process group, streamed, timed out, and never left behind."""
from __future__ import annotations

import collections
import importlib.util
import json
import os
import random
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import children, dsops
from .errors import BadInput, BenchmarkFailed, TooFewGpus
from .worker import OFFLINE, PROGRESS, RESULT, WIKITEXT

SCHEMA_VERSION = 1
ARMS = (("p2p", None), ("no_p2p", "1"))
# The reference experiment (docs/sources.md#benchmark): 2x TITAN RTX with NV2, gpt2 on wikitext-2, 200 steps,
# batch 4 per GPU.
REFERENCE = {"hardware": "2x TITAN RTX, NV2", "model": "gpt2", "dataset": "wikitext-2", "steps": 200,
             "p2p_s": 101.9003, "no_p2p_s": 131.4367}
GPU_SIZES = [2 ** 20 * 2 ** k for k in range(11)]   # 1 MiB .. 1 GiB
CPU_SIZES = [2 ** 20 * 2 ** k for k in range(6)]    # 1 MiB .. 32 MiB: gloo on two cores is slow


@dataclass
class Options:
    model: str = "gpt2"
    nproc: int = 2
    device: str = "cpu"                     # what the children will use: "cuda" or "cpu"
    steps: int = 4
    warmup_steps: int = 1
    batch_size: int = 2
    seq_len: int = 128
    precision: str = "fp32"
    dataset: str = "auto"
    repeat: int = 1
    timeout: float = 3600.0                 # seconds one torchrun may take (200 gpt2 steps on a slow GPU fit)
    train: bool = True
    allreduce: bool = True
    allreduce_sizes: list[int] = field(default_factory=list)
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    visible_devices: str | None = None      # --gpu-ids 0,1 -> CUDA_VISIBLE_DEVICES
    python: str = sys.executable
    log_dir: str | None = None              # this run's logs; a new folder in the temp dir when None
    notes: list[str] = field(default_factory=list)


# Defaults per device: on GPU the reference experiment's; on CPU the twin that shows the path in minutes.
DEFAULTS = {"cuda": {"steps": 200, "warmup_steps": 10, "batch_size": 4},
            "cpu": {"steps": 4, "warmup_steps": 1, "batch_size": 2}}
TRAIN_ONLY_OPTIONS = ("model", "steps", "warmup_steps", "batch_size", "seq_len", "precision", "dataset", "repeat")


@dataclass
class Ask:
    """bench-nvlink's options as given (None: the default for the device found)."""
    model: str = "gpt2"
    nproc: int | None = None
    gpu_ids: tuple | None = None
    steps: int | None = None
    warmup_steps: int | None = None
    batch_size: int | None = None
    seq_len: int = 128
    precision: str | None = None
    dataset: str = "auto"
    repeat: int = 1
    timeout: float | None = None
    train_only: bool = False
    allreduce_only: bool = False
    allreduce_sizes: list = field(default_factory=list)
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    given: frozenset = frozenset()   # the click names typed on the command line


@dataclass
class Prepared:
    """What bench-nvlink will run: the options, the weakest link tested, the topology (None on CPU), notes."""
    options: Options
    link: dict | None
    topology: object
    notes: list = field(default_factory=list)


def check_ask(a: Ask) -> None:
    """Refuse options that exclude each other or that the chosen half never reads."""
    if a.train_only and a.allreduce_only:
        raise BadInput("--train-only and --allreduce-only exclude each other")
    ignored = {"--allreduce-only": (a.allreduce_only, TRAIN_ONLY_OPTIONS),  # the sweep is fp32, once per arm
               "--train-only": (a.train_only, ("allreduce_sizes",))}
    for flag, (on, names) in ignored.items():
        given = [f"--{n.replace('_', '-')}" for n in names if on and n in a.given]
        if given:
            raise BadInput(f"{flag} ignores {', '.join(given)}: leave {'it' if len(given) == 1 else 'them'} out")
    if a.nnodes > 1 and not a.rdzv_endpoint:
        raise BadInput("--nodes > 1 needs --master-addr HOST (node 0's address)")
    if not 0 <= a.node_rank < a.nnodes:
        raise BadInput(f"--node-rank {a.node_rank}: must be between 0 and {a.nnodes - 1}")
    if not a.allreduce_only:
        check_model(a.model)
    if a.node_rank > 0:
        check_endpoint(a.rdzv_endpoint)
    elif a.rdzv_endpoint:
        check_own_endpoint(a.rdzv_endpoint)


def check_model(name: str) -> None:
    """Refuse, before any process starts, a --model the workers could not build: not a folder with
    config.json, not in the local HF cache, not a causal LM of gputopo's catalog (gputopo.worker.build_model)."""
    from .models import CATALOG, CAUSAL_FAMILIES, catalog_key, check_counts, read_config
    path = Path(name)
    if path.is_dir():   # read as plan reads it: a regular, bounded file naming no code, counts a machine can hold
        check_counts(read_config(path), path)
        return
    c = CATALOG.get(catalog_key(name))
    if c is not None and c["family"] in CAUSAL_FAMILIES:
        return
    hub = Path(os.environ.get("HF_HUB_CACHE", Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
                              / "hub"))
    if (hub / ("models--" + name.replace("/", "--")) / "snapshots").is_dir():
        return
    why = "not a causal LM of gputopo's catalog (gpt2*, llama*, mistral*, qwen*, gemma-2*, phi*)" if c is None else \
        f"a {c['family']} model, not a causal LM the benchmark trains"
    raise BadInput(f"--model {name}: {why}, not a folder with config.json, and not in the local HF cache"
                   " (nothing is downloaded)")


def _resolved(endpoint: str):
    """HOST:PORT -> (host, port, family, socket address), or a refusal naming the host; an IPv6 host in its brackets
    ([fe80::1]:29500, as torchrun takes it) is looked up without them."""
    import socket
    host, _, port = endpoint.rpartition(":")
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        family, _, _, _, addr = socket.getaddrinfo(bare, int(port), type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as e:
        raise BadInput(f"--master-addr {host}: does not resolve here ({e.strerror or e})") from None
    return host, port, family, addr


def check_own_endpoint(endpoint: str) -> None:
    """On node 0, which opens the rendezvous: refuse in a second an address that does not resolve or is not this
    machine's, and a port another process listens on (a second bench on the same --master-port ran 200 s before
    "connection to the C10d store has failed"). The probe binds as the store will; SO_REUSEADDR lets a port a
    finished run left in TIME_WAIT pass."""
    import errno
    import socket
    host, port, family, addr = _resolved(endpoint)
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(addr)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise BadInput(f"--master-port {port}: already in use on {host} (another run's rendezvous?): give"
                               " another --master-port") from None
            if e.errno == errno.EADDRNOTAVAIL:
                raise BadInput(f"--master-addr {host}: not an address of this machine; node 0 (--node-rank 0) opens"
                               " the rendezvous on it") from None
            raise BadInput(f"--master-addr {host}:{port}: {e.strerror or e}") from None


def check_endpoint(endpoint: str, wait: float = 3.0) -> None:
    """On a node other than 0, refuse in seconds an endpoint that does not resolve or does not answer (torchrun
    would retry for minutes). Nothing listening yet is fine: node 0 opens the rendezvous when its first arm
    starts, and this node's torchrun waits for it."""
    import errno
    import socket
    host, port, _, addr = _resolved(endpoint)
    try:
        with socket.create_connection(addr[:2], timeout=wait):
            return
    except ConnectionRefusedError:
        return
    except TimeoutError:
        raise BadInput(f"--master-addr {host}: no answer within {wait:g} s at port {port} (host down, or a firewall"
                       " drops the port); node 0 must be reachable from here") from None
    except OSError as e:
        if e.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            raise BadInput(f"--master-addr {host}: unreachable from here ({e.strerror})") from None
        raise BadInput(f"--master-addr {host}:{port}: {e.strerror or e}") from None


def _gpus(a: Ask, topo) -> tuple[Options, dict | None]:
    """Options for the GPUs selected on this machine, and the weakest link among them."""
    from .request import precision
    from .topology import select
    names = select(topo, a.gpu_ids)
    if a.nproc and a.nproc > len(names):
        raise TooFewGpus(f"--gpus {a.nproc}: only {len(names)} GPU(s) selected")
    need_two_gpus(names, a.nproc, a.model)
    names = names[: a.nproc or None]
    link = None
    w = topo.weakest(names)
    if w is not None:
        bw, basis = topo.bandwidth_gbps(w)
        link = {"a": w.a, "b": w.b, "type": w.type, "bandwidth_gbps": bw, "bandwidth_basis": basis}
    model_name = topo.model_of(names)
    o = Options(device="cuda", nproc=len(names), precision=precision(a.precision, model_name)[0],
                visible_devices=",".join(str(topo.gpu(n).index) for n in names) if a.gpu_ids else None)
    if not a.train_only:
        check_sizes(a.allreduce_sizes, o, [topo.gpu(n) for n in names])
    return o, link


# What a sweep's process holds besides its buffer: the interpreter, torch and gloo (232 MB measured, torch 2.13).
WORKER_BYTES = 256 * 2 ** 20


def check_sizes(sizes: list[int], o: Options, gpus=()) -> None:
    """--allreduce-sizes against the memory that holds them, before any process starts (2 TiB on CPU ran both
    training arms, then failed in the sweep's child): each process fills one buffer of each size in turn
    (gputopo.worker.allreduce_sweep), on a GPU in that GPU's free memory, on CPU all of this node's processes in the
    host's available memory (MemAvailable)."""
    from .units import size
    if not sizes:
        return
    most = max(sizes)
    if o.device == "cuda":
        for g in gpus:
            if g.memory_total_bytes and most > g.memory_total_bytes - (g.memory_used_bytes or 0):
                free = g.memory_total_bytes - (g.memory_used_bytes or 0)
                raise BadInput(f"--allreduce-sizes {size(most)}: more than {g.name}'s {size(free)} free (of"
                               f" {size(g.memory_total_bytes)}), and the buffer lives in one GPU's memory")
        return
    avail = available_memory()
    if avail is not None and o.nproc * (most + WORKER_BYTES) > avail:
        each = max(0, avail // o.nproc - WORKER_BYTES)
        raise BadInput(f"--allreduce-sizes {size(most)}: {o.nproc} processes holding it each (and about"
                       f" {size(WORKER_BYTES)} of torch each) need more than this machine's {size(avail)} of available"
                       f" memory (MemAvailable); at most {size(each)} a buffer here")


def available_memory() -> int | None:
    """The host's available memory in bytes (/proc/meminfo MemAvailable), None when unreadable."""
    try:
        with open("/proc/meminfo") as f:
            m = re.search(r"^MemAvailable:\s+(\d+) kB", f.read(), re.M)
    except OSError:
        return None
    return int(m.group(1)) * 1024 if m else None


def prepare(a: Ask) -> Prepared:
    """Probe, pick the device, fill every default and check the dataset: all before any process starts."""
    from . import probe
    from .errors import NvmlUnavailable
    from .request import precision
    check_ask(a)
    try:
        topo, why = probe.topology(), None
    except NvmlUnavailable as e:
        topo, why = None, str(e)
    if topo is not None:
        o, link = _gpus(a, topo)
    elif a.gpu_ids:  # as inspect says it (report.inspect_report): the same option, the same answer
        raise NvmlUnavailable(f"--gpu-ids needs a topology and no GPU is visible ({why})")
    elif a.nproc == 1 and a.nnodes == 1:  # as on CUDA: an A/B of peer-to-peer needs a peer
        raise TooFewGpus("bench-nvlink compares P2P on and off between 2 or more processes; --gpus 1 on one node"
                         " has no peer (on CPU the twin runs 2 processes)")
    else:
        o, link = Options(device="cpu", nproc=a.nproc or 2, precision=precision(a.precision, None, "cpu")[0]), None
        if not a.train_only:
            check_sizes(a.allreduce_sizes, o)
    for k, v in DEFAULTS[o.device].items():
        setattr(o, k, v if getattr(a, k) is None else getattr(a, k))
    if o.warmup_steps >= o.steps:
        raise BadInput(f"--warmup-steps {o.warmup_steps} leaves no timed step of {o.steps}")
    o.model, o.seq_len, o.repeat = a.model, a.seq_len, a.repeat
    o.timeout = a.timeout or o.timeout
    o.train, o.allreduce, o.allreduce_sizes = not a.allreduce_only, not a.train_only, a.allreduce_sizes or []
    o.nnodes, o.node_rank, o.rdzv_endpoint = a.nnodes, a.node_rank, a.rdzv_endpoint
    notes = []
    if o.train:
        o.dataset, note = resolve_dataset(a.dataset)
        o.notes += [note] if note else []
    o.notes += dsops.arch_notes(os.environ)   # said once: child_env mends it for every child
    if o.train and o.device == "cpu" and a.steps is None:
        notes.append(f"CPU: {o.steps} steps per arm, batch {o.batch_size} x {o.seq_len} (about two minutes for gpt2"
                     " on 2 cores); --steps to change")
    return Prepared(o, link, topo, notes)


def new_log_dir() -> str:
    """A folder for this run's logs: torchrun's per-rank stdout/stderr and each child's whole output."""
    return tempfile.mkdtemp(prefix=time.strftime("gputopo-bench-%Y%m%d-%H%M%S-"))


def resolve_dataset(name: str, python: str = sys.executable) -> tuple[str, str | None]:
    """What the workers will read, decided once for every arm, and a note when `auto` fell back.
    Refuses (BadInput) a dataset that cannot be read here, before any run."""
    if name == "synthetic":
        return name, None
    if name == "auto" or name.startswith("wikitext"):
        wanted = WIKITEXT if name == "auto" else name
        reason = wikitext_problem(wanted, python)
        if reason is None:
            return wanted, None
        if name != "auto":
            raise BadInput(f"--dataset {name}: {reason}; use --dataset synthetic or a local .txt file")
        return "synthetic", (f"--dataset auto: {wanted} unavailable here ({reason}), so synthetic data (random"
                             " token ids) instead; step times do not depend on the token values")
    if not Path(name).is_file():
        raise BadInput(f"--dataset {name}: no such file (or synthetic, auto, {WIKITEXT})")
    return name, None


def wikitext_problem(name: str, python: str) -> str | None:
    """Why the workers could not read this wikitext config offline, or None. The cheap answers first (no
    `datasets` package; nothing named wikitext in the HF caches); else the worker's own loader tries, in a
    child with the hub offline (an in-process import could already be online, and would retry the network)."""
    try:
        installed = importlib.util.find_spec("datasets") is not None
    except (ImportError, ValueError):  # ValueError: sys.modules["datasets"] is None, i.e. import blocked
        installed = False
    if not installed:
        return "the `datasets` package is not installed (pip install datasets)"
    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    caches = [Path(os.environ.get("HF_DATASETS_CACHE", home / "datasets")),
              Path(os.environ.get("HF_HUB_CACHE", home / "hub"))]
    if not any(next(c.glob("*wikitext*"), None) for c in caches if c.is_dir()):
        return "not in the local datasets cache, and nothing is downloaded"
    code = "import sys; from gputopo.worker import wikitext_lines; wikitext_lines(sys.argv[1])"
    try:
        proc = subprocess.run([python, "-c", code, name], capture_output=True, text=True, timeout=300,
                              env={**os.environ, **OFFLINE})
    except subprocess.TimeoutExpired:
        return "reading it from the local datasets cache took more than 300 s"
    if proc.returncode == 0:
        return None
    last = (proc.stderr.strip().splitlines() or ["failed"])[-1]
    return last.split(": ", 2)[-1] if last.startswith("error: ") else last


def torchrun_command(o: Options, rdzv_id: str, log_dir: str | None = None) -> list[str]:
    """torchrun: standalone on one node, c10d rendezvous across several. With log_dir, every rank's stdout and
    stderr are also kept in files there (--tee 3), and a failing rank's error in its error.json."""
    cmd = [o.python, "-m", "torch.distributed.run", "--nproc_per_node", str(o.nproc)]
    if log_dir:
        cmd += ["--log-dir", log_dir, "--tee", "3"]
    if o.nnodes == 1 and not o.rdzv_endpoint:
        cmd += ["--standalone"]
    else:
        cmd += ["--nnodes", str(o.nnodes), "--node_rank", str(o.node_rank), "--rdzv_backend", "c10d",
                "--rdzv_endpoint", o.rdzv_endpoint or "127.0.0.1:29500", "--rdzv_id", rdzv_id]
    return cmd + ["-m", "gputopo.worker"]


def worker_args(o: Options, train: bool, sizes: list[int]) -> list[str]:
    args = ["--model", o.model, "--steps", str(o.steps), "--warmup-steps", str(o.warmup_steps),
            "--batch-size", str(o.batch_size), "--seq-len", str(o.seq_len), "--precision", o.precision,
            "--dataset", o.dataset]
    if not train:
        args.append("--no-train")
    if sizes:
        args += ["--allreduce-sizes", ",".join(map(str, sizes))]
    return args


def child_env(o: Options, p2p_disable: str | None, log_dir: Path | None = None) -> dict:
    """The arm's environment: NCCL_P2P_DISABLE only where the arm sets it, the GPUs selected, one thread per
    process's share of the cores; with log_dir, NCCL's INFO lines of init, graph and environment go to one file
    per process there (read back by nccl_report)."""
    env = dsops.deepspeed_env(os.environ)
    if log_dir is not None:
        env.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,GRAPH,ENV",
                   NCCL_DEBUG_FILE=str(log_dir / "nccl.%h.%p.log"))
    env.pop("NCCL_P2P_DISABLE", None)
    if p2p_disable:
        env["NCCL_P2P_DISABLE"] = p2p_disable
    if o.visible_devices is not None:
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # so --gpu-ids means nvidia-smi's numbering
        env["CUDA_VISIBLE_DEVICES"] = o.visible_devices
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 2) // max(1, o.nproc))))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(OFFLINE)
    env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] = "[rank${rank}]:"  # how --tee labels each rank's lines
    return env


RANK_PREFIX = re.compile(r"^\[rank\d+\]:")  # TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE in child_env
ERROR_LINE = re.compile(r"^(error: |Fatal Python error|[\w.]*(Error|Exception)(: |$))")


def duration(seconds: float) -> str:
    """12s, 3m05s, 1h02m: an ETA a person reads at a glance."""
    s = int(round(seconds))
    return f"{s}s" if s < 60 else f"{s // 60}m{s % 60:02d}s" if s < 3600 else f"{s // 3600}h{s % 3600 // 60:02d}m"


class Tracker:
    """Rank 0's progress lines (gputopo.worker.progress) as one line of text: the step, its own seconds, and the
    time left at the median pace of the last few steps (a median shown as the step's time repeated a step's)."""

    def __init__(self):
        self.seconds: list[float] = []

    def text(self, f: dict) -> str | None:
        if f.get("phase") == "build":
            return f"building {f['model']} in {f['world']} process(es)"
        if f.get("phase") == "tokenizer":   # a model without its own tokenizer: a BPE on the dataset's first MiB
            return (f"training a byte-level BPE tokenizer on {f['chars'] / 2 ** 20:.1f} MiB of the dataset's"
                    f" {f['of'] / 2 ** 20:.1f} MiB read")
        if f.get("phase") == "allreduce":
            return f"all-reduce {f['size'] / 2 ** 20:g} MiB ({f['index']}/{f['of']})"
        if f.get("phase") != "train":
            return None
        self.seconds.append(f["seconds"])
        pace = statistics.median(self.seconds[-5:])
        left = f["steps"] - f["step"]
        eta = f", ETA {duration(left * pace)}" if left else ""
        return f"step {f['step']}/{f['steps']}: {f['seconds']:.3f} s{eta}"


def run_child(label: str, cmd: list[str], env: dict, timeout: float, progress, log_dir: Path | None = None) -> dict:
    """Run one torchrun, stream its output behind a progress line, return the worker's result dict. With
    log_dir, the child's whole output goes to log_dir/output.log beside torchrun's per-rank logs."""
    tail: collections.deque[str] = collections.deque(maxlen=200)
    found: list[dict] = []
    log = open(log_dir / "output.log", "w") if log_dir else None
    progress(label, "starting torchrun", True)
    proc = children.spawn(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    tracker = Tracker()

    def read():
        for line in proc.stdout:
            if log:
                log.write(line)
            line = line.rstrip("\n")
            text = RANK_PREFIX.sub("", line)
            if text.startswith(RESULT):
                found.append(json.loads(text[len(RESULT):]))
            elif text.startswith(PROGRESS):
                fields = json.loads(text[len(PROGRESS):])
                shown = tracker.text(fields)
                if shown:   # a step of a second or more keeps its line in a log: few such lines, each one read
                    progress(label, shown, True, keep=fields.get("phase") == "train" and fields["seconds"] >= 1)
            else:
                tail.append(line)
                progress(label, line)
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        children.end(proc)
        reader.join(5)
        raise BenchmarkFailed(f"{label}: no result after {timeout:g} s (--timeout); stopped it and its workers."
                              + _where(log_dir) + "\nLast lines of the child:\n  "
                              + "\n  ".join(list(tail)[-12:])) from None
    except BaseException:  # Ctrl-C included: leave nothing behind
        children.end(proc)
        raise
    finally:
        if proc.poll() is None:
            children.end(proc)
        reader.join(10)
        if log:
            log.close()
    if proc.returncode != 0 or not found:
        if found and proc.returncode < 0:
            return found[0]  # a worker killed at exit after reporting (the DeepSpeed/HF exit flake)
        raise BenchmarkFailed(failure_report(label, proc.returncode, bool(found), list(tail), log_dir))
    return found[0]


def _where(log_dir: Path | None) -> str:
    return f" Logs: {log_dir}" if log_dir else ""


def first_failed_rank(log_dir: Path | None, lines: list[str]) -> Path | None:
    """The folder of the local rank that failed first: the oldest error.json a worker wrote (worker.record_error),
    else the rank torchrun names as the root cause (a rank killed by a signal writes nothing)."""
    if log_dir is None:
        return None
    errors = sorted(log_dir.glob("*/attempt_*/*/error.json"), key=lambda f: f.stat().st_mtime_ns)
    if errors:
        return errors[0].parent
    text = "\n".join(lines)
    m = re.search(r"Root Cause.*?local_rank: (\d+)\)", text, re.S)
    dirs = sorted(log_dir.glob(f"*/attempt_*/{m.group(1)}")) if m else []
    return dirs[-1] if dirs else None


def failure_report(label: str, returncode: int, reported: bool, lines: list[str], log_dir: Path | None) -> str:
    """What the user needs from a failed child: the failing rank's own error and last stderr lines (not only
    torchrun's ChildFailedError), and where the whole logs are."""
    head = f"{label}: torchrun exited with {returncode}" + ("" if reported else " before reporting a result")
    rank_dir = first_failed_rank(log_dir, lines)
    stderr = rank_dir / "stderr.log" if rank_dir else None
    if stderr and stderr.exists():
        last = [l.rstrip() for l in stderr.read_text(errors="replace").splitlines() if l.strip()][-15:]
        cause = next((l for l in reversed(last) if ERROR_LINE.match(l)), last[-1] if last else "no output")
        return (f"{head}; local rank {rank_dir.name} failed first: {cause}\n"
                f"Last lines of its stderr ({stderr}):\n  " + "\n  ".join(last) + "\n" + _where(log_dir).strip())
    # torchrun itself failed (arguments, rendezvous) or no rank log exists: the child's own last lines
    own = [l for l in lines if not (l.startswith(("W1", "E1", "I1")) and "elastic" in l)]
    cause = next((l for l in reversed(own) if ERROR_LINE.match(RANK_PREFIX.sub("", l))
                  and "ChildFailedError" not in l), None)
    return (head + (f": {RANK_PREFIX.sub('', cause)}" if cause else "") + _where(log_dir)
            + "\nLast lines of the child:\n  " + "\n  ".join(own[-12:]))


def bootstrap_ratio(a: list[float], b: list[float], n: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95 % interval of median(b)/median(a) by resampling the step times."""
    if len(a) < 2 or len(b) < 2:
        r = statistics.median(b) / statistics.median(a)
        return r, r
    rng = random.Random(seed)
    ratios = sorted(statistics.median(rng.choices(b, k=len(b))) / statistics.median(rng.choices(a, k=len(a)))
                    for _ in range(n))
    return ratios[int(0.025 * n)], ratios[int(0.975 * n) - 1]


def merge_runs(label: str, env_value: str | None, results: list[dict]) -> dict:
    """One arm from its repeats: step times pooled, runtimes averaged, each run's median kept for the verdict."""
    times = [t for r in results for t in r["step_times_s"]]
    qs = statistics.quantiles(times, n=10) if len(times) >= 2 else [times[0]] * 9
    first = results[0]
    return {"label": label, "env": {"NCCL_P2P_DISABLE": env_value}, "world_size": first["world_size"],
            "steps": first["steps"],
            "warmup_steps": first["warmup_steps"], "repeats": len(results),
            "train_runtime_s": statistics.mean(r["train_runtime_s"] for r in results),
            "timed_runtime_s": statistics.mean(r["timed_runtime_s"] for r in results),
            "samples_per_second": statistics.mean(r["samples_per_second"] for r in results),
            "step_time_s": {"median": statistics.median(times), "p10": qs[0], "p90": qs[-1]},
            "run_medians_s": [r["step_time_s"]["median"] for r in results],
            "step_times_s": times, "losses_finite": all(r["loss_finite"] for r in results),
            "nccl": next((r["nccl"] for r in results if r.get("nccl")), None)}


def compare(device: str, p2p: dict, no_p2p: dict) -> dict:
    """The A/B and what it can mean. On CPU the arms are one program (gloo never reads NCCL_P2P_DISABLE);
    on GPUs a difference counts only when every run of one arm beats every run of the other (--repeat)."""
    ratio = no_p2p["step_time_s"]["median"] / p2p["step_time_s"]["median"]
    lo, hi = bootstrap_ratio(p2p["step_times_s"], no_p2p["step_times_s"])
    a, b = p2p["run_medians_s"], no_p2p["run_medians_s"]
    pct = f"{abs(ratio - 1):.1%}"
    spread = (f"median step P2P {a[0]:.4f} s, no P2P {b[0]:.4f} s, one run per arm" if len(a) < 2 or len(b) < 2 else
              f"run medians: P2P {min(a):.4f}-{max(a):.4f} s, no P2P {min(b):.4f}-{max(b):.4f} s,"
              f" {len(a)} runs per arm")
    if device != "cuda":
        verdict, message = "identical_arms", (
            f"no claim: on CPU both arms are the same program (gloo ignores NCCL_P2P_DISABLE), so the {pct}"
            f" difference is run-to-run noise ({spread})")
    elif min(len(a), len(b)) < 2:
        verdict, message = "cannot_tell", (
            f"cannot tell: one run per arm cannot separate a {pct} difference from run-to-run noise;"
            " use --repeat 3 or more")
    elif min(b) > max(a):
        verdict, message = "p2p_faster", f"P2P speed-up {ratio:.3f}x, beyond the spread of the runs ({spread})"
    elif max(b) < min(a):
        verdict, message = "p2p_slower", f"P2P is slower by {pct}, beyond the spread of the runs ({spread})"
    else:
        verdict, message = "within_noise", f"no claim: the {pct} difference is within the spread of the runs ({spread})"
    return {"ratio": ratio, "ci95_steps": [lo, hi], "run_medians_s": {"p2p": a, "no_p2p": b},
            "definition": "median step time without P2P / with P2P (>1: P2P is faster)",
            "verdict": verdict, "message": message}


def need_two_gpus(selected: list[str], nproc: int | None, model: str) -> None:
    """An A/B of NCCL peer-to-peer needs two GPUs in one node: refuse (exit 4) and say what works instead."""
    if len(selected) >= 2 and (nproc is None or nproc >= 2):
        return
    why = (f"--gpus {nproc} uses one GPU" if len(selected) >= 2 else
           f"only one GPU ({', '.join(selected)}) is available to it")
    raise TooFewGpus(f"bench-nvlink compares P2P on and off between 2 or more GPUs of a node, and {why}; for one"
                     " GPU's step time run `torchrun --nproc_per_node 1 -m gputopo.worker --model"
                     f" {shlex.quote(model)}`,"
                     " for what fits on it `gputopo plan --gpus 1`")


def slug(label: str) -> str:
    return re.sub(r"[^\w.-]+", "-", label).strip("-")


def run(o: Options, link: dict | None, save, progress) -> dict:
    """The whole bench. `save(results)` is called after every finished arm, so a late failure or Ctrl-C keeps
    what finished."""
    log_root = Path(o.log_dir or new_log_dir())
    out = {"schema_version": SCHEMA_VERSION, "device": o.device, "backend": "nccl" if o.device == "cuda" else "gloo",
           "nproc": o.nproc, "nnodes": o.nnodes, "model": None, "dataset": None, "link": link,
           "settings": {"steps": o.steps, "warmup_steps": o.warmup_steps, "batch_size": o.batch_size,
                        "seq_len": o.seq_len, "precision": o.precision, "repeat": o.repeat, "dataset": o.dataset}
           if o.train else None,
           "runs": [], "comparison": None, "speedup": None, "allreduce": [], "allreduce_nccl": {},
           "nccl_check": None, "predicted_ratio": None,
           "reference": REFERENCE,
           "log_dir": str(log_root), "notes": list(o.notes), "complete": False, "error": None}
    if o.device == "cpu":
        out["notes"].append("no GPU: CPU processes with gloo, which ignores NCCL_P2P_DISABLE; both arms still run"
                            " so the whole path is exercised, and their difference is noise")
        out["notes"].append("gloo writes no NCCL log: no transport to report (runs[].nccl is null)")
    stamp = "gputopo"  # rendezvous ids must be the same on every node

    def child(label: str, rdzv: str, train: bool, sizes: list[int], value: str | None) -> dict:
        arm_dir = log_root / slug(label)
        arm_dir.mkdir(parents=True, exist_ok=True)
        res = run_child(label, torchrun_command(o, f"gputopo-{stamp}-{rdzv}", str(arm_dir))
                        + worker_args(o, train, sizes), child_env(o, value, arm_dir), o.timeout, progress, arm_dir)
        return {**res, "nccl": nccl_report(arm_dir) if o.device == "cuda" else None}
    try:
        _arms(o, out, child, link, save, progress)
    except BenchmarkFailed as e:
        out["error"] = str(e).splitlines()[0]
        save(out)
        raise
    except KeyboardInterrupt:   # Ctrl-C, or SIGTERM/SIGHUP (gputopo.children): the finished arms, marked unfinished
        if out["runs"] or out["allreduce"]:   # nothing finished: nothing is written
            out["error"] = "interrupted: the run was stopped before it finished"
            save(out)
        raise
    out["complete"] = True
    save(out)
    return out


def nccl_report(arm_dir: Path) -> dict | None:
    """What NCCL said it did in one arm, from every process's NCCL_DEBUG_FILE (gputopo.nccllog); None when NCCL
    wrote nothing there (a rank that never initialised NCCL)."""
    from . import nccllog
    from .errors import BadInput as NoLines
    text = "".join(f.read_text(errors="replace") for f in sorted(arm_dir.glob("nccl.*.log")))
    try:
        s = nccllog.summary(nccllog.parse(text))
    except NoLines:
        return None
    return {k: s[k] for k in ("version", "hosts", "transports", "gdrdma", "channels", "nvls", "env", "pairs",
                              "findings", "lines")}   # lines: NCCL lines read, connections, ring and tree lines


def nccl_check(link: dict | None, arms: dict[str, tuple[bool, dict | None]]) -> str | None:
    """Whether the arms ({label: (P2P allowed, NCCL report)}) took the paths the A/B claims: P2P where it is
    allowed and the GPUs share NVLink or a PCIe switch (NCCL's default P2P reach), none under
    NCCL_P2P_DISABLE=1. None when every arm did, or no arm has an NCCL log."""
    from .topology import kind_of
    said = []
    near = link is not None and kind_of(link["type"]) in ("NV", "PIX", "PXB")
    for label, (allowed, nccl) in arms.items():
        if not nccl:
            continue
        p2p = nccl["transports"].get("P2P", 0)
        if allowed and not p2p and near:
            said.append(f"{label} used no P2P although {link['a']}-{link['b']} share {link['type']} (NCCL chose"
                        f" {', '.join(nccl['transports']) or 'nothing it printed'}; NCCL_* it saw:"
                        f" {', '.join(f'{k}={v}' for k, v in nccl['env'].items()) or 'none'})")
        if not allowed and p2p:
            said.append(f"{label} still used P2P on {p2p} connection(s) with NCCL_P2P_DISABLE=1")
    return ("the A/B did not test what it claims: " + "; ".join(said)) if said else None


def calibration(o: Options, progress) -> tuple[object, object, dict | None, str | None]:
    """(model, training, this machine's calibration, why there is none) for the step-time prediction, timed
    before the arms in as many processes as each arm runs (gputopo.calibrate)."""
    from . import calibrate, models
    from .errors import GputopoError
    from .plan import Training
    try:
        spec = models.resolve(o.model, None, None, None)
    except GputopoError as e:
        return None, None, None, f"no prediction: {e}"
    seq = min(o.seq_len, spec.max_positions or o.seq_len)   # as gputopo.worker clips it
    t = Training(precision=o.precision, batch_size=o.batch_size, seq_len=seq)
    threads = int(child_env(o, None)["OMP_NUM_THREADS"])
    progress("calibrating", f"timing {spec.name}'s step parts in {o.nproc} process(es) for the prediction", True)
    try:
        cal = calibrate.run(calibrate.request(spec, t, threads, device=o.device), copies=o.nproc,
                            env=child_env(o, None),
                            say=lambda line: progress("calibrating", line.removeprefix("calibrating: "), True))
    except GputopoError as e:
        return spec, t, None, f"no prediction: {e}"
    return spec, t, cal, None


def predict(o: Options, out: dict, spec, t, cal: dict) -> None:
    """Each arm's predicted step (DDP, as the worker trains) from the calibration and that arm's all-reduce
    sweep; their ratio. Without a sweep (--train-only) the link's rate is unknown: no prediction."""
    from . import calibrate, speed
    from .plan import Layout
    lay = Layout(gpus_per_node=o.nproc, gpu_mem_bytes=0, nodes=o.nnodes)
    preds, basis = {}, {}
    for run in out["runs"]:
        p2p = run["env"]["NCCL_P2P_DISABLE"] is None
        sweep = [r for r in out["allreduce"] if r["p2p"] == p2p]
        if not sweep:
            out["notes"].append("no prediction: --train-only skips the all-reduce sweep the link's rate comes from")
            return
        rates = calibrate.rates(cal, sweep=sweep)
        time = speed.step("ddp", spec, lay, t, rates, device=o.device)
        run["predicted_step_s"] = time.step_s
        run["prediction"] = time.to_dict()
        preds[p2p], basis[p2p] = time.step_s, rates.basis
    if preds.get(True) and preds.get(False):
        out["predicted_ratio"] = preds[False] / preds[True]
        out["prediction_basis"] = basis[True]


def judge_paths(out: dict, link: dict | None) -> None:
    """The NCCL logs against the A/B's claim: when an arm took the wrong path, the verdict says so and no
    speed-up is claimed."""
    arms = {r["label"]: (r["env"]["NCCL_P2P_DISABLE"] is None, r.get("nccl")) for r in out["runs"]}
    arms.update({f"all-reduce {k}": (k == "p2p", v) for k, v in out["allreduce_nccl"].items()})
    out["nccl_check"] = nccl_check(link, arms)
    if out["nccl_check"] and out["comparison"]:
        out["comparison"].update(verdict="not_what_it_claims", message=out["nccl_check"])
        out["speedup"] = None


def _arms(o: Options, out: dict, child, link: dict | None, save, progress=None) -> None:
    if o.train:
        spec, t, cal, why = calibration(o, progress or (lambda *a: None))
        if why:
            out["notes"].append(why)
        per_arm: dict[str, list[dict]] = {label: [] for label, _ in ARMS}
        for rep in range(o.repeat):  # interleaved, so drift hits both arms alike
            for label, value in ARMS:
                res = child(f"{label} {rep + 1}/{o.repeat}" if o.repeat > 1 else label, f"{label}-{rep}", True, [],
                            value)
                per_arm[label].append(res)
                out["model"], out["dataset"] = res["model"], res["dataset"]
                out["runs"] = [merge_runs(lbl, v, per_arm[lbl]) for lbl, v in ARMS if per_arm[lbl]]
                save(out)
        out["comparison"] = compare(o.device, *out["runs"])
        if out["comparison"]["verdict"] in ("p2p_faster", "p2p_slower"):
            out["speedup"] = {"value": out["comparison"]["ratio"], "ci95": out["comparison"]["ci95_steps"],
                              "definition": out["comparison"]["definition"]}
    if o.allreduce:
        sizes = o.allreduce_sizes or (GPU_SIZES if o.device == "cuda" else CPU_SIZES)
        for label, value in ARMS:
            res = child(f"all-reduce {label}", f"ar-{label}", False, sizes, value)
            theo = (link or {}).get("bandwidth_gbps")
            for r in res.get("allreduce", []):
                out["allreduce"].append({**r, "p2p": value is None,
                                         "busbw_fraction_of_theoretical": r["busbw_gbps"] / theo if theo else None})
            out["allreduce_nccl"][label] = res.get("nccl")
            save(out)
    judge_paths(out, link)
    if o.train and cal:
        predict(o, out, spec, t, cal)
        save(out)
