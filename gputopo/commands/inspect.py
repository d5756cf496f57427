"""`gputopo inspect`: the GPUs, their links explained, health findings and a strategy."""
from __future__ import annotations

import click

from ..errors import BadInput
from ..options import (
    COUNT,
    GPU_COUNT,
    GPU_IDS,
    GPU_MODEL,
    GPU_SIZE,
    LINK,
    PATH,
    PLAN_INPUTS,
    TEXT,
    TIMEOUT,
    given,
    host_options,
    json_option,
    model_options,
    steps_option,
    training_options,
)
from .common import Command, emit, exit_if_nothing_fits, explain_option, same_options, text_only, wide_option

# inspect's options that `plan` has not: left out of the plan command --gpus and --link are pointed to
NOT_PLANS = ("from_file", "example", "gpu_ids", "best", "nccl_log", "fleet", "hosts", "slurm_nodes", "partition",
             "timeout", "remote_command", "markdown", "plot", "force", "as_json", "explain", "wide")


def _described(ctx, gpus: int | None, link: str | None, topology: bool) -> BadInput:
    """--gpus N or --link: GPUs described by count and link are `plan`'s (inspect reads a machine: this one, a paste,
    an example); the refusal names what asks it: --gpu-ids/--best among a topology's GPUs, else plan with the options
    as typed."""
    flag = f"--gpus {gpus}" if gpus is not None else f"--link {link}"
    if topology and gpus is not None:
        ids = ",".join(map(str, range(min(gpus, 4)))) + (f",...,{gpus - 1}" if gpus > 4 else "")
        return BadInput(f"{flag}: inspect reads the GPUs of its topology; --gpu-ids {ids} (or --best {gpus}) picks"
                        " among them")
    if topology:
        return BadInput(f"{flag}: inspect reads the links of its topology (--gpu-ids picks GPUs among them)")
    words = same_options(ctx, ["plan"], NOT_PLANS)
    words += ([] if ctx.params.get("model") or ctx.params.get("params") else ["--model", "NAME"]) + (
        [] if gpus is not None else ["--gpus", "N"])
    return BadInput(f"{flag}: inspect reads a machine (this one, -f PASTE, --example NAME); GPUs described by"
                    f" count are plan's: {' '.join(words)}")


def _needs_a_topology(ctx) -> str | None:
    """The first option given that cannot work without a topology (none visible: refused, not dropped)."""
    found = given(ctx, ("markdown", "plot", "model", "params", "gpu_ids", "best"))
    return found[0] if found else None


def _check(ctx, options: dict, markdown: bool, plot: str | None, force: bool, as_json: bool, example) -> None:
    """Refuse, before any work, flags that exclude each other or would change nothing."""
    if not (options.get("model") or options.get("params")):
        plan_only = given(ctx, PLAN_INPUTS)
        if plan_only:
            raise BadInput(f"{', '.join(plan_only)} {'feeds' if len(plan_only) == 1 else 'feed'} the memory plan: add"
                           " --model (or --params)")
    if markdown and as_json:
        raise BadInput("--markdown and --json exclude each other")
    if force and not plot:
        raise BadInput("--force overwrites --plot; give --plot PATH")
    if plot:
        from .. import files
        files.check_picture(plot, force)
    if example == "list":
        others = [o for o in given(ctx, [p.name for p in ctx.command.params]) if o not in ("--example", "--json")]
        if others:
            raise BadInput(f"--example list lists the examples; {', '.join(others)} need(s) one: --example NAME")
    if options.get("best") and options.get("gpu_ids"):
        raise BadInput("--best picks K GPUs among all; --gpu-ids names them: give one")


NCCL_WITH = ("nccl_log", "from_file", "example", "markdown", "as_json")
FLEET_ONLY = ["hosts", "slurm_nodes", "partition", "timeout", "remote_command"]
FLEET_WITH = ("fleet", "from_file", "gpu_model", "markdown", "as_json", *FLEET_ONLY)


def _fleet(ctx, from_file, hosts, slurm_nodes, partition, timeout, remote, gpu_model, markdown: bool,
           as_json: bool) -> None:
    """inspect --fleet: every node's report, gathered or read, compared; exit 1 when a node slows or breaks a
    multi-node job (gputopo.fleet says which)."""
    import os

    from .. import fleet, gather, render
    from .. import markdown as md
    if not ctx.params["fleet"]:
        raise BadInput(f"{given(ctx, FLEET_ONLY)[0]} is for --fleet")
    others = [o for o in given(ctx, [p.name for p in ctx.command.params if p.name not in FLEET_WITH])]
    if others:
        raise BadInput(f"--fleet compares whole nodes: {', '.join(others)} do(es) not apply")
    if markdown and as_json:
        raise BadInput("--markdown and --json exclude each other")
    sources_given = [o for o, v in (("--from-file", from_file), ("--hosts", hosts), ("--slurm-nodes", slurm_nodes))
                     if v]
    if len(sources_given) > 1:
        raise BadInput(f"--fleet takes its nodes from one place: {' or '.join(sources_given)}")
    if partition and not slurm_nodes:
        raise BadInput("--partition is for --slurm-nodes (inside an allocation srun runs in its partition)")
    live = not from_file
    if gpu_model and live:
        raise BadInput("--gpu-model names the GPUs of a pasted node (--from-file with `nvidia-smi topo -m`); nodes"
                       " asked live report their own")
    if not live and given(ctx, ["timeout", "remote_command"]):
        raise BadInput(f"{given(ctx, ['timeout', 'remote_command'])[0]} is for nodes asked live, not --from-file")
    inside = bool(os.environ.get("SLURM_JOB_ID") and os.environ.get("SLURM_JOB_NODELIST"))
    cmd = gather.remote_command(remote, timeout)
    reports, unreachable = _gather(from_file, hosts, slurm_nodes, partition, timeout, cmd, inside,
                                   str(gpu_model) if gpu_model else None)
    data = {"schema_version": 1, "fleet": fleet.compare(reports, unreachable)}
    if markdown:
        click.echo(md.fleet(data["fleet"]), nl=False)
    else:
        emit(data, lambda d: render.fleet(d["fleet"]), as_json)
    if data["fleet"]["slows"]:
        ctx.exit(1)


def _nccl(ctx, path: str, from_file, example, markdown: bool, as_json: bool) -> None:
    """--nccl-log: the log explained, and checked against the topology of --from-file or --example when given."""
    from .. import render, report, sources
    others = given(ctx, [p.name for p in ctx.command.params if p.name not in NCCL_WITH])
    if others:
        raise BadInput(f"{', '.join(others)}: nothing to do with --nccl-log, which reads the log (--from-file or"
                       " --example gives the topology to check it against)")
    if markdown and as_json:
        raise BadInput("--markdown and --json exclude each other")
    if example == "list":
        raise BadInput("--example list lists the examples; with --nccl-log give one: --example NAME")
    if path == "-" and "-" in from_file:
        raise BadInput("--nccl-log - and --from-file - both read stdin: give one of them a file")
    inputs = sources.topology(from_file, example) if from_file or example else None
    with sources.streamed_text(path, expect="an NCCL_DEBUG=INFO log") as (name, stream):
        data, lines = report.nccl(stream, name, inputs)
    if markdown:
        from .. import markdown as md
        click.echo(md.nccl_report(data, lines, inputs.pasted if inputs else []), nl=False)
    else:
        emit(data, render.nccl, as_json)


def _list_examples(as_json: bool) -> None:
    from .. import render, sources
    data = {"schema_version": 1, "examples": sources.examples()}
    emit(data, lambda d: render.table([[k, v["description"]] for k, v in d["examples"].items()],
                                      ["example", "machine"], render.WIDTH, wrap_last=True), as_json)


@click.command(cls=Command, short_help="The GPUs, their links explained, health; a plan with --model.")
@click.option("--from-file", "-f", multiple=True, type=PATH, metavar="PATH",
              help="Saved `nvidia-smi topo -m`, `topo -p2p`, `nvlink -s` or `-L` text ('-' for stdin); repeatable.")
@click.option("--example", type=TEXT, metavar="NAME", help="Show a bundled real machine; `--example list` lists them.")
@click.option("--gpu-ids", type=GPU_IDS, help="Look at these GPUs only (indices as nvidia-smi prints them).")
@click.option("--best", type=COUNT, metavar="K", help="Pick the K GPUs with the best interconnect.")
@click.option("--gpus", type=GPU_COUNT, hidden=True,
              help="Not inspect's: GPUs described by count are `gputopo plan`'s (refused, naming that command).")
@click.option("--link", type=LINK, hidden=True,
              help="Not inspect's: GPUs described by their link are `gputopo plan`'s (refused, naming that command).")
@click.option("--gpu-model", type=GPU_MODEL,
              help="GPU model when the paste does not name it (bandwidth, memory, bf16).")
@click.option("--gpu-mem", type=GPU_SIZE,
              help="Memory per GPU when the paste does not say (for --model); 80GB = 80 GiB.")
@model_options
@training_options
@steps_option
@click.option("--nccl-log", type=PATH, metavar="PATH",
              help="Explain an NCCL_DEBUG=INFO log ('-' for stdin): hosts, ranks, the transport between each pair of"
                   " GPUs, GPUDirect RDMA, the NCCL_* settings behind them; checked against --from-file/--example.")
@click.option("--fleet", is_flag=True,
              help="Inspect every node and name the odd ones: inside a Slurm allocation its nodes (srun), or"
                   " --hosts, --slurm-nodes, or --from-file reports (one node per file).")
@click.option("--hosts", type=PATH, metavar="FILE",
              help="With --fleet: the nodes, one per line or DeepSpeed's hostfile (`name slots=N`); pdsh, else ssh.")
@click.option("--slurm-nodes", type=TEXT, metavar="LIST",
              help="With --fleet from a login node: these Slurm nodes (node[01-04]), one srun task each.")
@click.option("--partition", type=TEXT, metavar="NAME", help="With --slurm-nodes: the partition to run in.")
@click.option("--timeout", type=TIMEOUT, default=30, show_default=True,
              help="With --fleet: seconds each node may take to answer.")
@click.option("--remote-command", type=TEXT, metavar="CMD",
              help="With --fleet: what each node runs [default: this Python's `-m gputopo inspect --json`];"
                   " it sees GPUTOPO_NODE, the node's name.")
@click.option("--markdown", is_flag=True, help="Print a report to paste into a GitHub issue (Mermaid graph, source"
              " text); `inspect -f report.md` reads it back.")
@click.option("--plot", type=PATH, metavar="PATH.png|svg",
              help="Also draw the topology to a PNG or SVG (needs matplotlib).")
@click.option("--force", is_flag=True, help="Overwrite --plot if it exists.")
@host_options
@explain_option
@wide_option
@json_option
@click.pass_context
def inspect(ctx, from_file, example, gpus, link, gpu_ids, best, gpu_model, gpu_mem, nccl_log, fleet, hosts, slurm_nodes,
            partition, timeout, remote_command, markdown, plot, force, explain, wide, as_json, **options):
    """Show the GPUs, their links explained, health findings and a strategy (memory-based with --model); with
    --nccl-log, what NCCL chose between them."""
    from .. import render, report, sources
    if gpus is not None or link is not None:
        raise _described(ctx, gpus, link, bool(from_file or example))
    if nccl_log:
        return _nccl(ctx, nccl_log, from_file, example, markdown, as_json)
    if fleet or given(ctx, FLEET_ONLY):
        return _fleet(ctx, from_file, hosts, slurm_nodes, partition, timeout, remote_command, gpu_model, markdown,
                      as_json)
    _check(ctx, {**options, "best": best, "gpu_ids": gpu_ids}, markdown, plot, force, as_json, example)
    text_only(as_json, markdown, explain=explain, wide=wide)
    if example == "list":
        return _list_examples(as_json)
    inputs = sources.topology(from_file, example, str(gpu_model) if gpu_model else None)
    data = report.inspect_report(inputs, gpu_ids=gpu_ids, best=best, options=options, gpu_mem=gpu_mem,
                                 gpu_model=gpu_model, need_topology=_needs_a_topology(ctx))
    if plot:
        from .. import files
        from .. import plot as drawing
        files.write_atomic(plot, drawing.render(data, plot.rsplit(".", 1)[1].lower()))
        click.echo(f"wrote {plot}", err=True)
    if markdown:
        from .. import markdown as md
        click.echo(md.report(data, inputs.pasted), nl=False)
    else:
        cells = report.nic_cells(inputs.pasted)   # the paste's NIC-to-NIC cells: the report's links all have a GPU
        emit(data, lambda d: render.inspect(d, wide=wide, explain=explain, nic_cells=cells), as_json)
    exit_if_nothing_fits(data["plan"])


def _gather(from_file, hosts, slurm_nodes, partition, timeout, cmd, inside, gpu_model) -> tuple[dict, dict]:
    """(reports, unreachable) from the one place --fleet was given (or the Slurm allocation it runs in)."""
    import os
    import shutil

    from .. import gather
    if from_file:
        reports, unreachable = gather.from_files(list(from_file), gpu_model), {}
    elif hosts:
        reports, unreachable = gather.over_hosts(gather.hostfile(hosts), cmd, timeout, pdsh=bool(shutil.which("pdsh")))
    elif slurm_nodes or inside:
        nodes = (gather.slurm_nodes(slurm_nodes) if slurm_nodes
                 else gather.slurm_nodes(os.environ["SLURM_JOB_NODELIST"], "SLURM_JOB_NODELIST"))
        reports, unreachable = gather.over_slurm(nodes, cmd, timeout, inside=not slurm_nodes, partition=partition)
    else:
        raise BadInput("--fleet needs nodes: run it inside a Slurm allocation (salloc/sbatch), or give --hosts FILE,"
                       " --slurm-nodes LIST, or --from-file REPORT... (one node per file)")
    return reports, unreachable
