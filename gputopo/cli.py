"""The `gputopo` command line: thin click commands that read options, call a function or two, render."""
from __future__ import annotations

import functools
import json
import sys
from importlib import resources

import click

from . import __version__
from .errors import BadInput, GputopoError

OPTIMIZERS = ("adamw", "adamw-8bit", "adafactor", "sgd")  # plan.OPTIMIZER_BYTES; kept here so --help stays light


class Group(click.Group):
    """Turns every GputopoError into one `Error: ...` line and its exit code; --debug shows the traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except GputopoError as e:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"Error: {e}", err=True)
            ctx.exit(e.exit_code)


def json_option(fn):
    """--json: print the documented JSON object on stdout instead of the table."""
    @click.option("--json", "as_json", is_flag=True, help="Print JSON (schema in README.md) instead of text.")
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper


def emit(data: dict, text_fn, as_json: bool) -> None:
    from . import render
    click.echo(render.to_json(data) if as_json else text_fn(data))


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gputopo")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def cli(ctx, debug):
    """Multi-GPU topology, strategy and launch advice: inspect, plan, deepspeed-config, bench-nvlink."""
    ctx.obj = {"debug": debug}


def _examples() -> dict:
    return json.loads(resources.files("gputopo.examples").joinpath("index.json").read_text())


def _read(path: str) -> str:
    """A pasted text from a file or '-' (stdin); bad files get one clear line."""
    if path == "-":
        data = sys.stdin.buffer.read()
    else:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise BadInput(f"{path}: no such file")
        except IsADirectoryError:
            raise BadInput(f"{path}: is a directory, not a text file")
        except OSError as e:
            raise BadInput(f"{path}: cannot read ({e.strerror})")
    if b"\x00" in data:
        raise BadInput(f"{path}: binary file, not nvidia-smi text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    if not text.strip():
        raise BadInput(f"{'stdin' if path == '-' else path}: empty; paste the output of `nvidia-smi topo -m`")
    return text


def _topology(from_file, example, gpu_model):
    """Where the topology comes from: pasted files, a bundled example, or the live machine."""
    from . import parse, probe
    from .errors import NvmlUnavailable
    if example:
        index = _examples()
        if example not in index or example.startswith("_"):
            raise BadInput(f"--example {example}: unknown; `gputopo inspect --example list` lists them")
        e = index[example]
        text = resources.files("gputopo.examples").joinpath(e["file"]).read_text()
        return parse.texts([text], gpu_model or e["gpu_model"]), [f"example:{example}"], None
    if from_file:
        texts = [_read(path) for path in from_file]
        return parse.texts(texts, gpu_model, names=[("stdin" if p == "-" else p) for p in from_file]), list(from_file), None
    try:
        return probe.topology(), [], None
    except NvmlUnavailable as e:
        return None, [], str(e)


def model_options(fn):
    """Options shared by plan, inspect and deepspeed-config: the model and the training setup."""
    opts = [
        click.option("--model", metavar="NAME|PATH", help="A known model (gpt2, t5-3b, llama-2-7b, ...) or a folder with config.json."),
        click.option("--params", metavar="N", help="Parameter count (7B, 350M) when only the size is known."),
        click.option("--hidden-size", type=int, help="Hidden size, with --params."),
        click.option("--layers", type=int, help="Transformer blocks, with --params."),
        click.option("--vocab-size", type=int, help="Vocabulary size, with --params (optional)."),
        click.option("--precision", type=click.Choice(["fp32", "fp16", "bf16"]),
                     help="Training precision [default: bf16 on Ampere or newer, else fp16]."),
        click.option("--optimizer", type=click.Choice(list(OPTIMIZERS)), default="adamw", show_default=True),
        click.option("--batch-size", type=int, default=4, show_default=True, help="Micro-batch per GPU."),
        click.option("--seq-len", type=int, help="Tokens per sample [default: the model's context, at most 1024]."),
        click.option("--grad-checkpointing", is_flag=True, help="Recompute activations in backward."),
        click.option("--grad-accum", type=int, default=1, show_default=True, help="Gradient accumulation steps."),
        click.option("--global-batch", type=int, help="Target global batch: derives --grad-accum."),
        click.option("--flash-attention", is_flag=True, help="Fused attention (no s^2 scores kept)."),
        click.option("--offload-params/--no-offload-params", default=True, show_default=True,
                     help="With ZeRO-3 offload, offload parameters too (not only optimizer states)."),
        click.option("--cpu-mem", metavar="SIZE", help="CPU RAM per node [default: this machine's]."),
        click.option("--nvme-path", type=click.Path(), help="Folder for NVMe offload [default: the temp dir]."),
        click.option("--nvme-free", metavar="SIZE", help="Free NVMe space per node [default: measured at --nvme-path]."),
        click.option("--nodes", type=int, default=1, show_default=True, help="Nodes (each like this one)."),
        click.option("--inter-node-gbps", type=float, default=12.5, show_default=True,
                     help="Network bandwidth between nodes, GB/s per direction."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def _wants_plan(kw) -> bool:
    return bool(kw.get("model") or kw.get("params"))


def _plan(kw, layout_fn):
    """Build model, layout and training from the options and run the plan; layout_fn(**host_facts) -> Layout."""
    import os
    import shutil
    import tempfile

    from . import models, probe, report
    from .plan import Training, parse_bytes
    model = models.resolve(kw.get("model"), kw.get("params"), kw.get("hidden_size"), kw.get("layers"), kw.get("vocab_size"))
    if kw["nodes"] < 1:
        raise BadInput("--nodes must be 1 or more")
    cpu = parse_bytes(kw["cpu_mem"], "--cpu-mem") if kw.get("cpu_mem") else probe.host()["ram_total_bytes"]
    nvme_path = kw.get("nvme_path") or tempfile.gettempdir()
    if kw.get("nvme_free"):
        nvme = parse_bytes(kw["nvme_free"], "--nvme-free")
    elif os.path.isdir(nvme_path):
        nvme = shutil.disk_usage(nvme_path).free
    else:
        raise BadInput(f"--nvme-path {nvme_path}: not a directory")
    layout = layout_fn(cpu_mem_bytes=cpu, nvme_free_bytes=nvme, nodes=kw["nodes"], inter_node_gbps=kw["inter_node_gbps"])
    from .advise import is_ampere_or_newer
    precision = kw.get("precision") or ("fp16" if is_ampere_or_newer(layout.gpu_model) is False else "bf16")
    seq = kw.get("seq_len") or min(model.max_positions or 512, 1024)
    training = Training(precision=precision, optimizer=kw["optimizer"], batch_size=kw["batch_size"], seq_len=seq,
                        grad_checkpointing=kw["grad_checkpointing"], grad_accum=kw["grad_accum"],
                        flash_attention=kw["flash_attention"], offload_params=kw["offload_params"])
    return report.plan(model, layout, training, kw.get("global_batch"))


@cli.command()
@model_options
@click.option("--gpus", type=int, help="GPUs per node [default: those of this machine].")
@click.option("--gpu-mem", metavar="SIZE", help="Memory per GPU: 24GiB, 80GB, 16000MiB [default: this machine's].")
@click.option("--gpu-model", metavar="NAME", help="GPU model (bf16 support, NVLink bandwidth).")
@click.option("--link", metavar="TYPE", help="Weakest link between GPUs as nvidia-smi prints it: NV12, PIX, PHB, SYS...")
@json_option
def plan(gpus, gpu_mem, gpu_model, link, as_json, **kw):
    """Memory per GPU for each strategy (DDP, ZeRO-1/2/3, offload) and the one to use."""
    from . import plan as planning, probe, render, report
    from .errors import NvmlUnavailable
    from .plan import parse_bytes
    if gpus is None or gpu_mem is None:
        try:
            topo = probe.topology()
        except NvmlUnavailable as e:
            raise BadInput(f"no GPU visible here ({e}): give --gpus N and --gpu-mem SIZE")
        names = [g.name for g in topo.gpus][: gpus or None]

        def layout_fn(**host):
            return report.layout_from_topology(topo, names, parse_bytes(gpu_mem, "--gpu-mem") if gpu_mem else None, **host)
    else:
        if gpus < 1:
            raise BadInput("--gpus must be 1 or more")
        from .topology import rank
        if link and rank(link) == (-1, 0):
            raise BadInput(f"--link {link}: not a link type of nvidia-smi (NV#, PIX, PXB, PHB, NODE, SYS)")

        def layout_fn(**host):
            gbps, basis = planning.link_bandwidth(link, gpu_model) if link else (None, "unknown")
            return planning.Layout(gpus_per_node=gpus, gpu_mem_bytes=parse_bytes(gpu_mem, "--gpu-mem"), gpu_model=gpu_model,
                                   link_type=link, link_gbps=gbps, link_basis=basis, **host)
    emit(_plan(kw, layout_fn), render.plan, as_json)


@cli.command()
@click.option("--from-file", "-f", multiple=True, metavar="PATH",
              help="Saved `nvidia-smi topo -m`, `topo -p2p`, `nvlink -s` or `-L` text ('-' for stdin); repeatable.")
@click.option("--example", metavar="NAME", help="Show a bundled real machine; `--example list` lists them.")
@click.option("--gpus", metavar="0,1,..", help="Look at these GPUs only (indices as nvidia-smi prints them).")
@click.option("--best", type=int, metavar="K", help="Pick the K GPUs with the best interconnect.")
@click.option("--gpu-model", metavar="NAME", help="GPU model when the paste does not name it (for bandwidth).")
@click.option("--gpu-mem", metavar="SIZE", help="Memory per GPU when the paste does not say (for --model).")
@model_options
@json_option
def inspect(from_file, example, gpus, best, gpu_model, gpu_mem, as_json, **kw):
    """Show the GPUs, their links explained, health findings and a strategy (memory-based with --model)."""
    from . import probe, render, report
    if example == "list":
        rows = [[k, v["description"]] for k, v in _examples().items() if not k.startswith("_")]
        if as_json:
            click.echo(render.to_json({"schema_version": 1, "examples": {k: v for k, v in _examples().items()
                                                                         if not k.startswith("_")}}))
        else:
            click.echo(render.table(rows, ["example", "machine"]))
        return
    topo, sources, status = _topology(from_file, example, gpu_model)
    planned = None
    if topo is not None and _wants_plan(kw):
        from .plan import parse_bytes
        names = report.select(topo, gpus)
        planned = _plan(kw, lambda **host: report.layout_from_topology(
            topo, names, parse_bytes(gpu_mem, "--gpu-mem") if gpu_mem else None, **host))
    data = report.inspect(topo, gpus=gpus, best=best, env=probe.environment(), host=probe.host(),
                          status=status, sources=sources, planned=planned)
    emit(data, render.inspect, as_json)


def main():
    cli(prog_name="gputopo")
