"""The `gputopo` command line: thin click commands that read options, call a function or two, render."""
from __future__ import annotations

import functools
import json
import sys
from importlib import resources

import click

from . import __version__
from .errors import BadInput, GputopoError


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


@cli.command()
@click.option("--from-file", "-f", multiple=True, metavar="PATH",
              help="Saved `nvidia-smi topo -m`, `topo -p2p`, `nvlink -s` or `-L` text ('-' for stdin); repeatable.")
@click.option("--example", metavar="NAME", help="Show a bundled real machine; `--example list` lists them.")
@click.option("--gpus", metavar="0,1,..", help="Look at these GPUs only (indices as nvidia-smi prints them).")
@click.option("--best", type=int, metavar="K", help="Pick the K GPUs with the best interconnect.")
@click.option("--gpu-model", metavar="NAME", help="GPU model when the paste does not name it (for bandwidth).")
@json_option
def inspect(from_file, example, gpus, best, gpu_model, as_json):
    """Show the GPUs, their links explained, health findings and a first strategy."""
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
    data = report.inspect(topo, gpus=gpus, best=best, env=probe.environment(), host=probe.host(),
                          status=status, sources=sources)
    emit(data, render.inspect, as_json)


def main():
    cli(prog_name="gputopo")
