"""The NVLink A/B: the same torchrun DDP run with P2P allowed and with NCCL_P2P_DISABLE=1, plus an all-reduce
sweep; children in their own process group, streamed, timed out, and never left behind."""
from __future__ import annotations

import collections
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
from dataclasses import dataclass, field

from .errors import BenchmarkFailed

SCHEMA_VERSION = 1
RESULT = "GPUTOPO_RESULT "
ARMS = (("p2p", None), ("no_p2p", "1"))
# The reference experiment (seed 003): 2x TITAN RTX with NV2, gpt2 on wikitext-2, 200 steps, batch 4 per GPU.
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
    timeout: float = 1800.0
    train: bool = True
    allreduce: bool = True
    allreduce_sizes: list[int] = field(default_factory=list)
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    visible_devices: str | None = None      # --gpus 0,1 -> CUDA_VISIBLE_DEVICES
    python: str = sys.executable


def torchrun_command(o: Options, rdzv_id: str) -> list[str]:
    """torchrun: standalone on one node, c10d rendezvous across several."""
    cmd = [o.python, "-m", "torch.distributed.run", "--nproc_per_node", str(o.nproc)]
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


def child_env(o: Options, p2p_disable: str | None) -> dict:
    env = dict(os.environ)
    env.pop("NCCL_P2P_DISABLE", None)
    if p2p_disable:
        env["NCCL_P2P_DISABLE"] = p2p_disable
    if o.visible_devices is not None:
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # so --gpus means nvidia-smi's numbering
        env["CUDA_VISIBLE_DEVICES"] = o.visible_devices
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 2) // max(1, o.nproc))))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def kill_group(proc: subprocess.Popen) -> None:
    """End a child and everything it started (torchrun and its workers share the child's session)."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_child(label: str, cmd: list[str], env: dict, timeout: float, progress) -> dict:
    """Run one torchrun, stream its output behind a progress line, return the worker's result dict."""
    tail: collections.deque[str] = collections.deque(maxlen=12)
    causes: list[str] = []  # the worker's own error line, or the exception that ended it
    found: list[dict] = []
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, bufsize=1)

    def read():
        for line in proc.stdout:
            line = line.rstrip("\n")
            if line.startswith(RESULT):
                found.append(json.loads(line[len(RESULT):]))
                continue
            if re.match(r"^(error: |[\w.]*(Error|Exception): )", line) and "ChildFailedError" not in line \
                    and line not in causes:
                causes.append(line)
            if not line.startswith(("W1", "E1", "I1")) or "elastic" not in line:  # torchrun's own log noise
                tail.append(line)
            progress(label, line)
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        reader.join(5)
        raise BenchmarkFailed(f"{label}: no result after {timeout:g} s (--timeout); stopped it and its workers."
                              "\nLast lines of the child:\n  " + "\n  ".join(tail))
    except BaseException:  # Ctrl-C included: leave nothing behind
        kill_group(proc)
        raise
    finally:
        if proc.poll() is None:
            kill_group(proc)
    reader.join(10)
    if proc.returncode != 0 or not found:
        if found and proc.returncode < 0:
            return found[0]  # a worker killed at exit after reporting (the DeepSpeed/HF exit flake)
        cause = f": {causes[0]}" if causes else ""
        raise BenchmarkFailed(f"{label}: torchrun exited with {proc.returncode}"
                              + ("" if found else " before reporting a result") + cause
                              + "\nLast lines of the child:\n  " + "\n  ".join(tail))
    return found[0]


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
    """One arm from its repeats: step times pooled, runtimes averaged."""
    times = [t for r in results for t in r["step_times_s"]]
    qs = statistics.quantiles(times, n=10) if len(times) >= 2 else [times[0]] * 9
    first = results[0]
    return {"label": label, "env": {"NCCL_P2P_DISABLE": env_value}, "world_size": first["world_size"], "steps": first["steps"],
            "warmup_steps": first["warmup_steps"], "repeats": len(results),
            "train_runtime_s": statistics.mean(r["train_runtime_s"] for r in results),
            "timed_runtime_s": statistics.mean(r["timed_runtime_s"] for r in results),
            "samples_per_second": statistics.mean(r["samples_per_second"] for r in results),
            "step_time_s": {"median": statistics.median(times), "p10": qs[0], "p90": qs[-1]},
            "step_times_s": times, "losses_finite": all(r["loss_finite"] for r in results)}


def run(o: Options, link: dict | None, save, progress) -> dict:
    """The whole bench. `save(results)` is called after every finished arm, so Ctrl-C keeps what finished."""
    out = {"schema_version": SCHEMA_VERSION, "device": o.device, "backend": "nccl" if o.device == "cuda" else "gloo",
           "nproc": o.nproc, "nnodes": o.nnodes, "model": None, "dataset": None, "link": link,
           "settings": {"steps": o.steps, "warmup_steps": o.warmup_steps, "batch_size": o.batch_size,
                        "seq_len": o.seq_len, "precision": o.precision, "repeat": o.repeat},
           "runs": [], "speedup": None, "allreduce": [], "reference": REFERENCE, "notes": [], "complete": False}
    if o.device == "cpu":
        out["notes"].append("no GPU: CPU processes with gloo; NCCL_P2P_DISABLE changes nothing there, both arms"
                            " still run so the whole path is exercised")
    stamp = "gputopo"  # rendezvous ids must be the same on every node
    if o.train:
        per_arm: dict[str, list[dict]] = {label: [] for label, _ in ARMS}
        for rep in range(o.repeat):  # interleaved, so drift hits both arms alike
            for label, value in ARMS:
                res = run_child(f"{label} {rep + 1}/{o.repeat}" if o.repeat > 1 else label,
                                torchrun_command(o, f"gputopo-{stamp}-{label}-{rep}") + worker_args(o, True, []),
                                child_env(o, value), o.timeout, progress)
                per_arm[label].append(res)
                out["model"], out["dataset"] = res["model"], res["dataset"]
                out["runs"] = [merge_runs(lbl, v, per_arm[lbl]) for lbl, v in ARMS if per_arm[lbl]]
                save(out)
        if all(per_arm.values()):
            a, b = (out["runs"][0]["step_time_s"]["median"], out["runs"][1]["step_time_s"]["median"])
            lo, hi = bootstrap_ratio(out["runs"][0]["step_times_s"], out["runs"][1]["step_times_s"])
            out["speedup"] = {"value": b / a, "ci95": [lo, hi],
                              "definition": "median step time without P2P / with P2P (>1: P2P is faster)"}
    if o.allreduce:
        sizes = o.allreduce_sizes or (GPU_SIZES if o.device == "cuda" else CPU_SIZES)
        for label, value in ARMS:
            res = run_child(f"all-reduce {label}", torchrun_command(o, f"gputopo-{stamp}-ar-{label}")
                            + worker_args(o, False, sizes), child_env(o, value), o.timeout, progress)
            theo = (link or {}).get("bandwidth_gbps")
            for r in res.get("allreduce", []):
                out["allreduce"].append({**r, "p2p": value is None,
                                         "busbw_fraction_of_theoretical": r["busbw_gbps"] / theo if theo else None})
            save(out)
    out["complete"] = True
    save(out)
    return out
