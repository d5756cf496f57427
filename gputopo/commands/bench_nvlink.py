"""`gputopo bench-nvlink`: the same DDP training with and without NCCL_P2P_DISABLE=1, and an all-reduce sweep."""
from __future__ import annotations

import os
import re
import shutil
import sys
import time

import click

from .. import launch
from ..errors import BadInput, GputopoError, Interrupted
from ..options import COUNT, GPU_IDS, PATH, PORT, SIZES, TEXT, TIMEOUT, Count, json_option, typed
from .common import Command, emit, explain_option, notes, text_only, wide_option

SO_FAR = re.compile(r" \(\d+ s so far\)$")


class Progress:
    """Each arm's progress on stderr, fed by rank 0 as it trains (step k/N, its seconds, ETA). On a terminal one
    live line per arm; elsewhere (a log, a pipe) a line every 10 s, each step of 1 s or more, and each arm's last
    state; --verbose adds every line of the children, --quiet shows nothing. An arm silent for 12 s (torchrun
    starting, the model building, a slow step) gets its last line again with its seconds so far
    (children.Heartbeat)."""
    EVERY = 10.0

    def __init__(self, verbose: bool, quiet: bool = False):
        import threading
        self.verbose, self.quiet, self.tty = verbose, quiet, sys.stderr.isatty()
        self.label, self.last, self.pending, self.shown_at, self.live = None, "", None, 0.0, False
        self.beat, self.lock = None, threading.Lock()   # the heartbeat's thread writes too

    def __call__(self, label, line, is_progress: bool = False, keep: bool = False):
        """`keep`: in a log, this line is written even within 10 s of the last (a slow step's)."""
        if self.quiet or not (is_progress or self.verbose):
            return
        with self.lock:
            if label != self.label:
                self._end_arm()
                self.label, self.shown_at = label, float("-inf")   # an arm's first line is always shown
                self._start_beat()
            if is_progress:
                self.last = line
            if self.verbose or not is_progress:
                self._show(f"[{label}] {line}")
                return
            now = time.monotonic()
            if self.tty:
                self._show(f"\r[{label}] {line[:100]:<100}", nl=False)
                self.live = True
            elif keep or now - self.shown_at >= self.EVERY:
                self._show(f"[{label}] {line}")
                self.shown_at, self.pending = now, None
            else:
                self.pending = line

    def _show(self, text: str, nl: bool = True) -> None:
        click.echo(text, err=True, nl=nl)
        if self.beat:
            self.beat.said()

    def _start_beat(self) -> None:
        from .. import children
        label = self.label

        def line(seconds: float) -> str:   # on a terminal cut to the live line's 100 characters, seconds kept
            said, so_far = self.pending or self.last or "running", f" ({seconds:.0f} s so far)"
            said = SO_FAR.sub("", said)   # a calibration's own heartbeat: its seconds replaced, not repeated
            return (said[:100 - len(so_far)] if self.tty and not self.verbose else said) + so_far

        def say(text: str) -> None:
            if not self.lock.acquire(blocking=False):   # a line is being written (or the arm ending) just now
                return
            try:
                if self.label != label:
                    return
                if self.tty and not self.verbose:
                    click.echo(f"\r[{label}] {text[:100]:<100}", err=True, nl=False)
                    self.live = True
                else:
                    click.echo(f"[{label}] {text}", err=True)
                    self.shown_at, self.pending = time.monotonic(), None
            finally:
                self.lock.release()
        self.beat = children.Heartbeat(line, say).start()

    def _end_arm(self):
        """Close the previous arm's line: a newline on a terminal, its last state in a log."""
        if self.beat:
            self.beat.stop()
            self.beat = None
        if self.live:
            click.echo("", err=True)
        elif self.label and self.pending:
            click.echo(f"[{self.label}] {self.pending}", err=True)
        self.pending, self.last, self.live = None, "", False

    def done(self):
        with self.lock:
            self._end_arm()
            self.label = None


def _check_outputs(output, plot, force) -> None:
    from .. import files
    if force and not (output or plot):
        raise BadInput("--force overwrites --output or --plot; give one")
    files.check_output(output, force)
    files.check_picture(plot, force, suffixes=(".png",))
    if output and plot and os.path.abspath(output) == os.path.abspath(plot):
        raise BadInput("--output and --plot name the same file")


def _old_spellings(o: dict) -> tuple[dict, list[str]]:
    """bench-nvlink's options in plan's and deepspeed-config's words; the old spellings still work, with a note.
    Returns bench.Ask's keywords and the notes."""
    said = []
    for old, new in (("nproc", "gpus"), ("nnodes", "nodes")):
        if o[old] is not None:
            if o[new] is not None:
                raise BadInput(f"--{old} is the old spelling of --{new}: give one")
            o[new] = o[old]
            said.append(f"--{old} is spelled --{new} now, as in plan and deepspeed-config")
    endpoint = o.pop("rdzv_endpoint")
    addr, port = o.pop("master_addr"), o.pop("master_port")
    if endpoint:
        if addr or port:
            raise BadInput("--rdzv-endpoint is the old spelling of --master-addr/--master-port: give one")
        host, sep, number = endpoint.rpartition(":")
        try:
            port = PORT.convert(number, None, None) if sep and host else None
        except click.BadParameter:
            port = None
        if port is None:
            raise BadInput(f"--rdzv-endpoint {endpoint}: HOST:PORT, e.g. 10.0.0.1:29500")
        addr = host
        said.append("--rdzv-endpoint HOST:PORT is spelled --master-addr HOST --master-port PORT now")
    if port and not addr:
        raise BadInput("--master-port needs --master-addr (node 0's address)")
    found = addr and launch.master_problem(addr)   # deepspeed-config's rule: the address reaches torchrun's argv
    if found:
        raise BadInput(f"--master-addr {found}")
    ask = {k: v for k, v in o.items() if k not in ("nproc", "nnodes", "gpus", "nodes")}
    ask.update(nproc=o["gpus"], nnodes=o["nodes"] or 1, rdzv_endpoint=f"{addr}:{port or 29500}" if addr else None)
    return ask, said


def _run(prepared, output: str | None, verbose: bool, quiet: bool) -> dict:
    """Pre-flight, then both arms; results saved to --output after every finished arm."""
    from .. import bench, doctor, files, render
    finished: list[str] = []

    def save(results):
        finished[:] = finished_arms(results)
        if output:
            files.write_atomic(output, render.to_json(results) + "\n")
    topo = prepared.topology
    report = doctor.preflight("bench-nvlink", topo=topo, status=None if topo else "no NVIDIA GPU visible",
                              own_children=True)
    if report["counts"]["warn"]:
        notes([f"`gputopo doctor` has {report['counts']['warn']} warning(s) about this machine"])
    log_dir = prepared.options.log_dir = bench.new_log_dir()
    click.echo(f"logs of this run: {log_dir}", err=True)
    progress = Progress(verbose, quiet)
    try:
        return bench.run(prepared.options, prepared.link, save, progress)
    except KeyboardInterrupt as e:   # Ctrl-C, SIGTERM, SIGHUP (gputopo.children)
        from .. import children
        signum = children.signal_of(e)
        during = (f" during {progress.label}" if progress.label else "") + f" ({children.NAMES[signum]})"
        if not finished:
            logs = f" (logs so far: {log_dir})" if _holds(log_dir) else ""
            raise Interrupted(f"interrupted{during}: the children were stopped; no arm had finished, so nothing was"
                              f" written{f' to {output}' if output else ''}{logs}", signum=signum) from None
        where = f"in {output}, and " if output else ""
        raise Interrupted(f"interrupted{during}: the children were stopped; finished: {', '.join(finished)}"
                          f" ({where}each arm's output.log under {log_dir})", signum=signum) from None
    except GputopoError as e:
        if output:
            e.details += (f"Finished arms are kept in {output}: {', '.join(finished)}" if finished else
                          f"No arm finished; {output} records the failure",)
        raise
    finally:
        progress.done()
        if not _holds(log_dir):   # stopped before any arm logged: no empty folder is left behind
            shutil.rmtree(log_dir, ignore_errors=True)


def _holds(folder: str) -> bool:
    """Whether a run's log folder holds a file at any depth (it is made before the first arm, each arm's folder
    when the arm starts, and they stay empty when nothing was logged)."""
    try:
        return any(files for _, _, files in os.walk(folder))
    except OSError:
        return True


def finished_arms(results: dict) -> list[str]:
    """The arms a results dict holds: training runs by label, then the all-reduce sweeps."""
    sweeps = sorted({"all-reduce " + ("p2p" if r["p2p"] else "no_p2p") for r in results["allreduce"]},
                    reverse=True)
    return [r["label"] for r in results["runs"]] + sweeps


@click.command("bench-nvlink", cls=Command, short_help="DDP trained with and without P2P, and an all-reduce sweep.")
@click.option("--model", type=TEXT, metavar="NAME|PATH", default="gpt2", show_default=True,
              help="Causal LM: catalog name, HF cache name or a folder.")
@click.option("--gpus", type=COUNT, help="Processes per node, one per GPU [default: all visible GPUs; 2 on CPU].")
@click.option("--nproc", type=COUNT, hidden=True, help="The old spelling of --gpus.")
@click.option("--gpu-ids", type=GPU_IDS, help="Use these GPUs (indices as nvidia-smi prints them); --gpus counts.")
@click.option("--steps", type=COUNT, help="Steps per arm [default: 200 on GPU as in the reference; 4 on CPU].")
@click.option("--warmup-steps", type=Count(0), help="Steps left out of the timing [default: 10 on GPU, 1 on CPU].")
@click.option("--batch-size", type=COUNT, help="Per process [default: 4 on GPU as in the reference, 2 on CPU].")
@click.option("--seq-len", type=COUNT, default=128, show_default=True, help="Tokens per sample.")
@click.option("--precision", type=click.Choice(["fp32", "fp16", "bf16"]),
              help="bf16 needs Ampere or newer [default: bf16 on Ampere or newer, fp16 on older GPUs, fp32 on CPU].")
@click.option("--dataset", type=TEXT, metavar="NAME|PATH", default="auto", show_default=True,
              help="wikitext-2-raw-v1 (local cache only), a .txt file, synthetic, or auto (wikitext if cached).")
@click.option("--repeat", type=COUNT, default=1, show_default=True, help="Runs per arm, interleaved.")
@click.option("--timeout", type=TIMEOUT,
              help="Seconds one torchrun may take [default: 3600].")
@click.option("--train-only", is_flag=True, help="Skip the all-reduce sweep.")
@click.option("--allreduce-only", is_flag=True, help="Skip the training arms.")
@click.option("--allreduce-sizes", type=SIZES, help="Sizes of the sweep, e.g. 1MB,64MB (binary: 1MB = 1 MiB)"
              " [default: 1 MiB to 1 GiB on GPU, 1 MiB to 32 MiB on CPU].")
@click.option("--nodes", type=COUNT, help="Nodes taking part, one torchrun each [default: 1].")
@click.option("--nnodes", type=COUNT, hidden=True, help="The old spelling of --nodes.")
@click.option("--node-rank", type=Count(0), default=0, show_default=True, help="This node's rank, 0 on the first.")
@click.option("--master-addr", type=TEXT, metavar="HOST", help="Node 0's address, with --nodes 2 or more.")
@click.option("--master-port", type=PORT, metavar="PORT",
              help="Node 0's rendezvous port [default: 29500].")
@click.option("--rdzv-endpoint", type=TEXT, hidden=True, metavar="HOST:PORT",
              help="The old spelling of --master-addr HOST --master-port PORT.")
@click.option("--output", "-o", type=PATH, metavar="PATH",
              help="Results JSON, written after every finished arm ('-': on stdout at the end, as --json).")
@click.option("--force", is_flag=True, help="Overwrite --output / --plot.")
@click.option("--plot", type=PATH, metavar="PATH.png",
              help="A PNG of step times and the all-reduce sweep (matplotlib).")
@click.option("--verbose", is_flag=True, help="Stream every line of the children.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines on stderr.")
@explain_option
@wide_option
@json_option
@click.pass_context
def bench_nvlink(ctx, output, force, plot, verbose, quiet, explain, wide, as_json, **options):
    """Train the same DDP run with and without NCCL_P2P_DISABLE=1 through torchrun, and sweep all-reduce."""
    from .. import bench, files, render
    from .. import plot as drawing
    if output == "-":  # results on stdout
        output, as_json = None, True
    if verbose and quiet:
        raise BadInput("--verbose and --quiet exclude each other")
    text_only(as_json, explain=explain, wide=wide)
    _check_outputs(output, plot, force)
    options, renamed = _old_spellings(options)
    prepared = bench.prepare(bench.Ask(**options, given=typed(ctx)))
    notes(renamed + prepared.notes)   # after every check: a refusal stays one line
    results = _run(prepared, output, verbose, quiet)
    if plot:
        files.write_atomic(plot, drawing.bench(results))
    emit(results, lambda d: render.bench(d, wide=wide, explain=explain), as_json)
