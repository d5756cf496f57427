"""`gputopo bench-nvlink`: the same DDP training with and without NCCL_P2P_DISABLE=1, and an all-reduce sweep."""
from __future__ import annotations

import os
import sys

import click

from ..errors import BadInput, GputopoError, Interrupted
from ..options import COUNT, GPU_IDS, PATH, SIZES, TEXT, Count, json_option, typed
from .common import emit, notes


class Progress:
    """One progress line per arm on a terminal (the child's latest line); every line with --verbose."""

    def __init__(self, verbose: bool):
        self.verbose, self.tty, self.label = verbose, sys.stderr.isatty(), None

    def __call__(self, label, line):
        if self.verbose:
            click.echo(f"[{label}] {line}", err=True)
            return
        if label != self.label:
            if self.label and self.tty:
                click.echo("", err=True)
            self.label = label
            if not self.tty:
                click.echo(f"[{label}] running", err=True)
        if self.tty:
            width = 100
            click.echo(f"\r[{label}] {line[:width]:<{width}}", err=True, nl=False)

    def done(self):
        if self.tty and self.label:
            click.echo("", err=True)


def _check_outputs(output, plot, force) -> None:
    from .. import files
    if force and not (output or plot):
        raise BadInput("--force overwrites --output or --plot; give one")
    files.check_output(output, force)
    files.check_picture(plot, force, suffixes=(".png",))
    if output and plot and os.path.abspath(output) == os.path.abspath(plot):
        raise BadInput("--output and --plot name the same file")


def _run(prepared, output: str | None, verbose: bool) -> dict:
    """Pre-flight, then both arms; results saved to --output after every finished arm."""
    from .. import bench, doctor, files, render
    saved = {"runs": 0, "allreduce": 0}

    def save(results):
        if output:
            files.write_atomic(output, render.to_json(results) + "\n")
            saved.update(runs=len(results["runs"]), allreduce=len(results["allreduce"]))
    topo = prepared.topology
    report = doctor.preflight("bench-nvlink", topo=topo, status=None if topo else "no NVIDIA GPU visible")
    if report["counts"]["warn"]:
        notes([f"`gputopo doctor` has {report['counts']['warn']} warning(s) about this machine"])
    prepared.options.log_dir = bench.new_log_dir()
    click.echo(f"logs of this run: {prepared.options.log_dir}", err=True)
    progress = Progress(verbose)
    try:
        return bench.run(prepared.options, prepared.link, save, progress)
    except KeyboardInterrupt:
        raise Interrupted("interrupted: the children were stopped" + (
            f"; finished arms are in {output}" if output and any(saved.values())
            else "; nothing was written")) from None
    except GputopoError as e:
        if output:
            e.details += (f"Finished arms are kept in {output}" if any(saved.values()) else
                          f"No arm finished; {output} records the failure",)
        raise
    finally:
        progress.done()


@click.command("bench-nvlink")
@click.option("--model", type=TEXT, default="gpt2", show_default=True,
              help="Causal LM: catalog name, HF cache name or a folder.")
@click.option("--nproc", type=COUNT, help="Processes per node [default: all visible GPUs; 2 on CPU].")
@click.option("--gpu-ids", type=GPU_IDS, help="Use these GPUs (indices as nvidia-smi prints them).")
@click.option("--steps", type=COUNT, help="Steps per arm [default: 200 on GPU as in the reference; 4 on CPU].")
@click.option("--warmup-steps", type=Count(0), help="Steps left out of the timing [default: 10 on GPU, 1 on CPU].")
@click.option("--batch-size", type=COUNT, help="Per process [default: 4 on GPU as in the reference, 2 on CPU].")
@click.option("--seq-len", type=COUNT, default=128, show_default=True, help="Tokens per sample.")
@click.option("--precision", type=click.Choice(["fp32", "fp16", "bf16"]),
              help="bf16 needs Ampere or newer [default: bf16 on Ampere or newer, fp16 on older GPUs, fp32 on CPU].")
@click.option("--dataset", type=TEXT, default="auto", show_default=True,
              help="wikitext-2-raw-v1 (local cache only), a .txt file, synthetic, or auto (wikitext if cached).")
@click.option("--repeat", type=COUNT, default=1, show_default=True, help="Runs per arm, interleaved.")
@click.option("--timeout", type=click.FloatRange(0, min_open=True),
              help="Seconds one torchrun may take [default: 3600].")
@click.option("--train-only", is_flag=True, help="Skip the all-reduce sweep.")
@click.option("--allreduce-only", is_flag=True, help="Skip the training arms.")
@click.option("--allreduce-sizes", type=SIZES, help="Sizes of the sweep, e.g. 1MB,64MB (binary: 1MB = 1 MiB)"
              " [default: 1 MiB to 1 GiB on GPU, 1 MiB to 32 MiB on CPU].")
@click.option("--nnodes", type=COUNT, default=1, show_default=True, help="Nodes taking part (one torchrun each).")
@click.option("--node-rank", type=Count(0), default=0, show_default=True, help="This node's rank, 0 on the first.")
@click.option("--rdzv-endpoint", type=TEXT, metavar="HOST:PORT",
              help="c10d rendezvous for several nodes (node 0's address).")
@click.option("--output", type=PATH, metavar="PATH",
              help="Results JSON, written after every finished arm ('-': on stdout at the end, as --json).")
@click.option("--force", is_flag=True, help="Overwrite --output / --plot.")
@click.option("--plot", type=PATH, metavar="PATH.png",
              help="A PNG of step times and the all-reduce sweep (matplotlib).")
@click.option("--verbose", is_flag=True, help="Stream every line of the children.")
@json_option
@click.pass_context
def bench_nvlink(ctx, output, force, plot, verbose, as_json, **options):
    """Train the same DDP run with and without NCCL_P2P_DISABLE=1 through torchrun, and sweep all-reduce."""
    from .. import bench, files, render
    from .. import plot as drawing
    if output == "-":  # results on stdout
        output, as_json = None, True
    _check_outputs(output, plot, force)
    prepared = bench.prepare(bench.Ask(**options, given=typed(ctx)))
    notes(prepared.notes)
    results = _run(prepared, output, verbose)
    if plot:
        files.write_atomic(plot, drawing.bench(results))
    emit(results, render.bench, as_json)
