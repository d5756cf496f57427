"""How fast `gputopo inspect --nccl-log` reads a long log, and in how much memory (issue 33: a 200 MB log took 89 s
and 863 MB; the target is at least 20 MB/s in memory that does not grow with the log).

    .venv/bin/python benchmarks/nccllog_speed.py [--mb 200] [--kind fixtures cluster job] [--keep DIR]

Three logs of --mb megabytes each, written to a temporary folder and read by the command as a user runs it
(`gputopo inspect --nccl-log FILE --json`, a process of its own, so its peak memory is its own):
- fixtures: the 97 real pastes of tests/fixtures/nccl/ one after another, over and over: every kind of line
  NCCL prints, the hardest mix (each line goes to a different handler);
- cluster: a 64-node, 512-GPU job whose communicators are set up again and again (init, ring lists, trees and
  32 channels of P2P inside each node and NET/IB/GDRDMA between them): connection lines, what a big cluster's
  log is made of;
- job: one 16-GPU init, then a long training run's output: the program's own lines and NCCL_DEBUG_SUBSYS=COLL's
  one line per collective.
Printed per log: seconds, MB/s, peak resident memory (ru_maxrss of the command's process), and what the summary
counted (lines read, connection lines), so a fast figure that read nothing shows as such.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPUTOPO = [sys.executable, "-m", "gputopo"]


def fixtures():
    """The real pastes, as one text."""
    parts = [Path(p).read_text(encoding="utf-8", errors="replace")
             for p in sorted(glob.glob(str(ROOT / "tests/fixtures/nccl/*.log")))]
    return "".join(p if p.endswith("\n") else p + "\n" for p in parts)


def cluster(run: int):
    """One communicator set-up of a 64 x 8 GPU job (its pids and comm id differ run to run)."""
    nodes, gpus, channels = 64, 8, 32
    out = []
    for n in range(nodes):
        host = f"gpu-node-{n:03d}"
        for g in range(gpus):
            r = n * gpus + g
            pre = f"{host}:{100000 + run * 1000 + r}:{200000 + run * 1000 + r} [{g}] NCCL INFO "
            out.append(f"{pre}comm 0x55d{run:05x}{r:04x} rank {r} nranks {nodes * gpus} cudaDev {g} nvmlDev {g}"
                       f" busId {0x18 + g * 0x10:x}000 commId 0x{run:x}c0ffee - Init START")
            out += [f"{pre}Channel {c:02d}/{channels:02d} :    " + " ".join(str(x) for x in range(16)) for c in (0, 1)]
            out.append(f"{pre}Trees [0] {r + 1 if g < 7 else -1}/-1/-1->{r}->{r - 1 if g else -1}")
            for c in range(channels):
                nxt = n * gpus + (g + 1) % gpus
                out.append(f"{pre}Channel {c:02d}/0 : {r}[{g}] -> {nxt}[{(g + 1) % gpus}] via P2P/CUMEM/read")
                if g == gpus - 1:
                    peer = ((n + 1) % nodes) * gpus
                    out.append(f"{pre}Channel {c:02d}/0 : {r}[{g}] -> {peer}[0] [send] via NET/IB/{g % 4}/GDRDMA")
                if g == 0:
                    peer = ((n - 1) % nodes) * gpus + gpus - 1
                    out.append(f"{pre}Channel {c:02d}/0 : {peer}[7] -> {r}[{g}] [receive] via NET/IB/{g % 4}/GDRDMA")
            out.append(f"{pre}Connected all rings")
            out.append(f"{pre}comm 0x55d{run:05x}{r:04x} rank {r} nranks {nodes * gpus} cudaDev {g} nvmlDev {g}"
                       " - Init COMPLETE")
    return "\n".join(out) + "\n"


def job(run: int):
    """A thousand steps of a 16-GPU training run: the program's lines and one COLL line per all-reduce."""
    out = []
    for step in range(run * 1000, run * 1000 + 1000):
        out.append(f"[rank0]: step {step} loss {2.0 + (step % 97) / 100:.4f} lr 3.0e-04 grad_norm 1.02 tokens/s 51234")
        for r in range(16):
            out.append(f"node{r // 8}:{4000 + r}:{4100 + r} [{r % 8}] NCCL INFO AllReduce: opCount {step:x} sendbuff"
                       f" 0x7f3a{r:02x}000000 recvbuff 0x7f3a{r:02x}000000 count 124439808 datatype 7 op 0 root 0"
                       f" comm 0x55d0c0ffee{r:02x} [nranks=16] stream 0x55d0beef{r:02x}")
    return "\n".join(out) + "\n"


def write(path: Path, kind: str, mb: int) -> int:
    """A log of about `mb` MB of that kind; its size in bytes."""
    size, run = 0, 0
    head = [f"node{n}:{4000 + n * 8 + g}:{4100 + n * 8 + g} [{g}] NCCL INFO Channel 00/0 : {n * 8 + g}[{g}] ->"
            f" {n * 8 + (g + 1) % 8}[{(g + 1) % 8}] via P2P/IPC/read" for n in (0, 1) for g in range(8)]
    with open(path, "w") as f:
        if kind == "job":
            f.write("\n".join(head) + "\n")
        text = fixtures() if kind == "fixtures" else None
        while size < mb * 1_000_000:
            chunk = text if text is not None else (cluster(run) if kind == "cluster" else job(run))
            f.write(chunk)
            size += len(chunk.encode())
            run += 1
    return path.stat().st_size


def measure(path: Path) -> dict:
    """The command on `path`: wall seconds, peak RSS (MiB, its own: reaped here with wait4), the summary's counts."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(GPUTOPO + ["inspect", "--nccl-log", str(path), "--json"], stdout=out, stderr=err,
                                cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode:
            sys.exit(f"{path.name}: exit {proc.returncode}: {err.read().decode()[-300:]}")
        return {"seconds": seconds, "rss": usage.ru_maxrss / 1024, "lines": json.loads(out.read())["nccl"]["lines"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=200, help="size of each log (MB)")
    ap.add_argument("--kind", nargs="+", default=["fixtures", "cluster", "job"], choices=["fixtures", "cluster", "job"])
    ap.add_argument("--keep", help="write the logs here and keep them (default: a temporary folder)")
    args = ap.parse_args()
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="nccllog-speed-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"{'log':<10}{'MB':>8}{'s':>8}{'MB/s':>8}{'peak MiB':>10}  lines read (nccl / connection)")
    try:
        for kind in args.kind:
            path = folder / f"{kind}.log"
            size = path.stat().st_size if path.exists() else write(path, kind, args.mb)
            m = measure(path)
            mb = size / 1e6
            print(f"{kind:<10}{mb:>8.0f}{m['seconds']:>8.1f}{mb / m['seconds']:>8.1f}{m['rss']:>10.0f}"
                  f"  {m['lines']['nccl']} / {m['lines']['connections']}")
    finally:
        if not args.keep:
            for p in folder.glob("*.log"):
                p.unlink()
            folder.rmdir()


if __name__ == "__main__":
    main()
