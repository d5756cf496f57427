"""The `gputopo` command line: thin click commands that read options, call a function or two, render."""
from __future__ import annotations

import functools
import importlib.util
import json
import sys
from importlib import resources

import click

from . import __version__
from .errors import BadInput, GputopoError
from .units import parse_size

OPTIMIZERS = ("adamw", "adamw-8bit", "adafactor", "sgd")  # plan.OPTIMIZER_BYTES; kept here so --help stays light


def _usage_error(e: click.UsageError) -> click.exceptions.Exit:
    """Click's usage errors as one line, like every other refusal: `Error: --gpu-mem 24: give a unit ...`."""
    if isinstance(e, click.BadParameter) and not isinstance(e, click.MissingParameter) and e.param is not None:
        opts = [o for o in getattr(e.param, "opts", []) if o.startswith("--")] or getattr(e.param, "opts", [])
        name = max(opts, key=len) if opts else e.param.name
        click.echo(f"Error: {name} {e.message}", err=True)
    else:
        click.echo(f"Error: {e.format_message()}", err=True)
    return click.exceptions.Exit(e.exit_code)


class Group(click.Group):
    """Turns every GputopoError and usage error into one `Error: ...` line and its exit code; --debug shows the
    traceback."""

    def make_context(self, *args, **kwargs):
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as e:
            raise _usage_error(e)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            raise _usage_error(e)
        except GputopoError as e:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"Error: {e}", err=True)
            ctx.exit(e.exit_code)


# One vocabulary for every command: each kind of value is checked once, here, and means the same everywhere.
class Size(click.ParamType):
    """Bytes in binary units, as GPUs are sold and nvidia-smi and `free -g` print them: 80GB = 80 GiB."""
    name = "SIZE"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        try:
            return parse_size(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


class SizeList(Size):
    """Comma-separated sizes: 1MB,4MB,64MB."""
    name = "SIZE,.."

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        parts = [p for p in str(value).split(",") if p.strip()]
        if not parts:
            self.fail(f"{value!r}: expected sizes like 1MB,4MB,64MB", param, ctx)
        return [super(SizeList, self).convert(p, param, ctx) for p in parts]


class Count(click.ParamType):
    """A whole number of things, at least `least` (1 unless told)."""
    name = "N"

    def __init__(self, least: int = 1):
        self.least = least

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            n = value
        else:
            try:
                n = int(str(value).strip())
            except ValueError:
                self.fail(f"{value!r}: expected a whole number", param, ctx)
        if n < self.least:
            self.fail(f"must be {self.least} or more, not {n}", param, ctx)
        return n


class Bandwidth(click.ParamType):
    """GB/s per direction, above 0: 12.5, 25GB/s, or 100Gb/s (bits, as networks are sold)."""
    name = "GB/S"

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            n = value
        else:
            import re
            m = re.fullmatch(r"\s*([+-]?[0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*(GB/s|GBps|Gb/s|Gbps|Gbit/s)?\s*", str(value))
            if not m:
                self.fail(f"{value}: expected GB/s per direction, like 12.5, 25GB/s or 100Gb/s", param, ctx)
            n = float(m.group(1)) / (8 if (m.group(2) or "").startswith("Gb") else 1)
        if n <= 0:
            self.fail(f"{value}: a bandwidth must be above 0 GB/s", param, ctx)
        return n


class GpuModelType(click.ParamType):
    """A GPU model gputopo knows (its memory and bf16 support then follow), or a one-line refusal naming them."""
    name = "GPU-MODEL"

    def convert(self, value, param, ctx):
        from . import gpus
        if isinstance(value, gpus.GpuModel):
            return value
        try:
            return gpus.known(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)


class LinkType(click.ParamType):
    """A link type as nvidia-smi topo -m prints it."""
    name = "TYPE"

    def convert(self, value, param, ctx):
        from .topology import rank
        text = str(value).strip().upper()
        if rank(text) == (-1, 0):
            self.fail(f"{value}: not a link type of nvidia-smi (NV#, PIX, PXB, PHB, NODE, SYS)", param, ctx)
        return text


class GpuIds(click.ParamType):
    """Which GPUs, by index as nvidia-smi numbers them: 0,1,3 (accelerate's --gpu_ids). --gpus is a count."""
    name = "0,1,.."

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        parts = [p.strip() for p in str(value).split(",")]
        bad = [p for p in parts if not p.isdigit()]
        if bad:
            self.fail(f"{value}: GPU indices like 0,1,3 (--gpus is a count); not {bad[0]!r}", param, ctx)
        return tuple(dict.fromkeys(int(p) for p in parts))


SIZE, SIZES, COUNT, BANDWIDTH, GPU_MODEL, LINK = Size(), SizeList(), Count(), Bandwidth(), GpuModelType(), LinkType()
GPU_IDS = GpuIds()


def _options(*opts):
    """A decorator adding `opts` in the order given (as sqlite-utils shares output_options)."""
    def deco(fn):
        for opt in reversed(opts):
            fn = opt(fn)
        return fn
    return deco


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


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]},
             epilog="Sizes (--gpu-mem, --cpu-mem, --nvme-free, ...) are binary, as GPUs are sold and nvidia-smi and"
                    " `free -g` print them: 80GB = 80 GiB; a number without a unit is refused."
                    " Refusals are one `Error:` line and exit 2; README.md lists every exit status.")
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
    text = _decode(data)
    if text is None:
        raise BadInput(f"{'stdin' if path == '-' else path}: binary file, not nvidia-smi text")
    if not text.strip():
        raise BadInput(f"{'stdin' if path == '-' else path}: empty; paste the output of `nvidia-smi topo -m`")
    return text


def _decode(data: bytes) -> str | None:
    """Text as saved by a shell: UTF-8 (BOM or not), UTF-16 with a BOM (PowerShell's `>`), or latin-1;
    None for binary data (NUL or control bytes in what should be text)."""
    import codecs
    import re
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            text = data.decode("utf-16")
        except UnicodeDecodeError:
            return None
    else:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            text = data.decode("latin-1")
    # Tabs, line ends and ESC (nvidia-smi's underline escape) are text; other control characters are not.
    return None if re.search(r"[\x00-\x08\x0b\x0e-\x19\x1c-\x1f\x7f-\x9f]", text) else text


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
        pasted = [(f"example:{example}", text)]
        return parse.texts([text], gpu_model or e["gpu_model"]), [f"example:{example}"], None, pasted
    if from_file:
        from .markdown import unwrap  # a saved `inspect --markdown` report or issue: its fenced blocks
        pasted = [(("stdin" if p == "-" else p), t) for p in from_file for t in unwrap(_read(p))]
        return (parse.texts([t for _, t in pasted], gpu_model, names=[n for n, _ in pasted]), list(from_file), None,
                pasted)
    try:
        return probe.topology(), [], None, []
    except NvmlUnavailable as e:
        return None, [], str(e), []


model_options = _options(
    click.option("--model", metavar="NAME|PATH", help="A known model (gpt2, t5-3b, llama-2-7b, ...) or a folder with config.json."),
    click.option("--params", metavar="N", help="Parameter count (7B, 350M) when only the size is known."),
    click.option("--hidden-size", type=COUNT, help="Hidden size, with --params."),
    click.option("--layers", type=COUNT, help="Transformer blocks, with --params."),
    click.option("--vocab-size", type=COUNT, help="Vocabulary size, with --params (optional)."),
)
training_options = _options(
    click.option("--precision", type=click.Choice(["fp32", "fp16", "bf16"]),
                 help="Training precision; bf16 needs Ampere or newer [default: bf16 on Ampere or newer, else fp16]."),
    click.option("--optimizer", type=click.Choice(list(OPTIMIZERS)), default="adamw", show_default=True,
                 help="Optimizer: its states take 8 (AdamW), 2 (8-bit Adam), about 4 (Adafactor) or 4 (SGD with"
                      " momentum) bytes per parameter."),
    click.option("--batch-size", type=COUNT, default=4, show_default=True, help="Micro-batch per GPU."),
    click.option("--seq-len", type=COUNT, help="Tokens per sample [default: the model's context, at most 1024]."),
    click.option("--grad-checkpointing", is_flag=True, help="Recompute activations in backward."),
    click.option("--grad-accum", type=COUNT, help="Gradient accumulation steps [default: 1, or from --global-batch]."),
    click.option("--global-batch", type=COUNT,
                 help="Samples per optimizer step: must equal --batch-size x --grad-accum x GPUs x nodes"
                      " (derives --grad-accum when not given)."),
    click.option("--attention", type=click.Choice(["auto", "eager", "sdpa"]),
                 help="Attention as transformers runs it [default: auto, what transformers picks for the"
                      " architecture: sdpa where supported, else eager]."),
    click.option("--flash-attention", is_flag=True, help="Same as --attention sdpa (fused: no s^2 scores kept)."),
    click.option("--offload-params/--no-offload-params", default=None,
                 help="With ZeRO-3 offload, offload parameters too (default: yes at stage 3)."),
)
host_options = _options(
    click.option("--cpu-mem", type=SIZE, help="CPU RAM per node, e.g. 512GB [default: this machine's]."),
    click.option("--nvme-path", type=click.Path(file_okay=False),
                 help="Folder for NVMe offload [default: the local NVMe mount with the most free space, else the"
                      " roomiest local disk; `gputopo doctor` lists the disks]."),
    click.option("--nvme-free", type=SIZE, help="Free NVMe space per node [default: measured at --nvme-path]."),
    click.option("--nodes", type=COUNT, default=1, show_default=True, help="Nodes (each like this one)."),
    click.option("--inter-node-gbps", type=BANDWIDTH, default=12.5, show_default=True,
                 help="Network bandwidth between nodes, GB/s per direction (100Gb/s = 12.5)."),
)
gpu_options = _options(
    click.option("--gpus", type=COUNT, help="GPUs per node [default: those of this machine]."),
    click.option("--gpu-mem", type=SIZE, help="Memory per GPU: 80GB (= 80 GiB, as the card is sold), 16000MiB"
                                              " [default: --gpu-model's, else this machine's]."),
    click.option("--gpu-model", type=GPU_MODEL, help="GPU model (A100-80GB, H100, RTX 4090...): fills --gpu-mem, bf16"
                                                     " support and NVLink bandwidth; an unknown name is refused."),
    click.option("--link", type=LINK, help="Weakest link between GPUs as nvidia-smi prints it: NV12, PIX, PHB, SYS..."),
)


def _request(kw: dict, **how):
    """Every shared option -> gputopo.request.Request (the one place defaults and cross-option rules live)."""
    from . import request
    kw = dict(kw)
    kw["precision_"] = kw.pop("precision", None)
    return request.resolve(**kw, **how)


def _plan(req) -> dict:
    from . import report
    return report.plan(req.model, req.layout, req.training, req.global_batch, req.notes)


@cli.command()
@model_options
@training_options
@gpu_options
@host_options
@click.option("--measure", is_flag=True, help="Also train the model (random weights) for two steps on this machine"
                                              " and print predicted vs measured memory.")
@json_option
def plan(as_json, measure, **kw):
    """Memory per GPU for each strategy (DDP, ZeRO-1/2/3, offload) and the one to use."""
    from . import render
    data = _plan(_request(kw))
    if measure:
        from . import measure as measuring
        data["measured"] = measuring.check(data)
    emit(data, render.plan, as_json)
    _exit_if_nothing_fits(data)


def _exit_if_nothing_fits(planned: dict | None) -> None:
    """The whole table is shown first (each strategy with how much it is short); then one line and exit 1."""
    from .errors import DoesNotFit
    if planned and planned["recommendation"]["strategy"] is None:
        click.echo(f"Error: {planned['recommendation']['reasons'][0]}", err=True)
        sys.exit(DoesNotFit.exit_code)


@cli.command()
@click.option("--from-file", "-f", multiple=True, metavar="PATH",
              help="Saved `nvidia-smi topo -m`, `topo -p2p`, `nvlink -s` or `-L` text ('-' for stdin); repeatable.")
@click.option("--example", metavar="NAME", help="Show a bundled real machine; `--example list` lists them.")
@click.option("--gpu-ids", type=GPU_IDS, help="Look at these GPUs only (indices as nvidia-smi prints them).")
@click.option("--best", type=COUNT, metavar="K", help="Pick the K GPUs with the best interconnect.")
@click.option("--gpu-model", type=GPU_MODEL, help="GPU model when the paste does not name it (bandwidth, memory, bf16).")
@click.option("--gpu-mem", type=SIZE, help="Memory per GPU when the paste does not say (for --model); 80GB = 80 GiB.")
@model_options
@training_options
@click.option("--markdown", is_flag=True, help="Print a report to paste into a GitHub issue (Mermaid graph, source"
              " text); `inspect -f report.md` reads it back.")
@click.option("--plot", type=click.Path(dir_okay=False), metavar="PATH.png|svg",
              help="Also draw the topology to a PNG or SVG (needs matplotlib).")
@click.option("--force", is_flag=True, help="Overwrite --plot if it exists.")
@host_options
@json_option
@click.pass_context
def inspect(ctx, from_file, example, gpu_ids, best, gpu_model, gpu_mem, markdown, plot, force, as_json, **kw):
    """Show the GPUs, their links explained, health findings and a strategy (memory-based with --model)."""
    from . import files, probe, render, report, request
    request.exclusive(example=example, from_file=from_file)
    if not (kw.get("model") or kw.get("params")):
        given = [p.opts[0] for p in ctx.command.params if p.name in PLAN_INPUTS
                 and ctx.get_parameter_source(p.name) == click.core.ParameterSource.COMMANDLINE]
        if given:
            raise BadInput(f"{', '.join(given)} {'feeds' if len(given) == 1 else 'feed'} the memory plan: add --model"
                           " (or --params)")
    if markdown and as_json:
        raise BadInput("--markdown and --json exclude each other")
    if force and not plot:
        raise BadInput("--force overwrites --plot; give --plot PATH")
    if plot:
        if not plot.lower().endswith((".png", ".svg")):
            raise BadInput(f"--plot {plot}: give a .png or .svg file name")
        files.check_output(plot, force, "--plot")
        if importlib.util.find_spec("matplotlib") is None:
            raise BadInput("--plot needs matplotlib: pip install matplotlib")
    if example == "list" and (markdown or plot):
        raise BadInput("--example list lists the examples; --markdown and --plot need one: --example NAME")
    if example == "list":
        rows = [[k, v["description"]] for k, v in _examples().items() if not k.startswith("_")]
        if as_json:
            click.echo(render.to_json({"schema_version": 1, "examples": {k: v for k, v in _examples().items()
                                                                         if not k.startswith("_")}}))
        else:
            click.echo(render.table(rows, ["example", "machine"]))
        return
    topo, sources, status, pasted = _topology(from_file, example, str(gpu_model) if gpu_model else None)
    if topo is None and (markdown or plot):
        from .errors import NvmlUnavailable
        raise NvmlUnavailable(f"{'--markdown' if markdown else '--plot'} needs a topology and no GPU is visible"
                              f" ({status}); give --from-file or --example")
    planned = None
    if topo is not None and (kw.get("model") or kw.get("params")):
        names = report.select(topo, gpu_ids)
        planned = _plan(_request(kw, gpu_mem=gpu_mem, gpu_model=gpu_model, topology=topo, selected=names))
    data = report.inspect(topo, gpu_ids=gpu_ids, best=best, env=probe.environment(), host=probe.host(),
                          status=status, sources=sources, planned=planned)
    if not sources:  # this machine, not a paste: its blocking host problems, briefly (`gputopo doctor` for all)
        data["host_checks"] = [c for c in _doctor(topo=topo, status=status or "")["checks"] if c["blocking"]]
    if plot:
        from . import plot as drawing
        files.write_atomic(plot, drawing.render(data, plot.rsplit(".", 1)[1].lower()))
        click.echo(f"wrote {plot}", err=True)
    if markdown:
        from . import markdown as md
        click.echo(md.report(data, pasted), nl=False)
        return
    emit(data, render.inspect, as_json)
    _exit_if_nothing_fits(planned)


def _names(decorator) -> tuple[str, ...]:
    return tuple(p.name for p in decorator(lambda: None).__click_params__)


# Options of inspect that only matter with --model (they feed the memory plan): every shared model, training
# and host option, so one added to those decorators is covered too.
PLAN_INPUTS = ("gpu_mem",) + tuple(n for n in _names(model_options) + _names(training_options) + _names(host_options)
                                   if n not in ("model", "params"))


# Options of deepspeed-config that only feed the memory plan: without --auto (or --model and a layout to check
# the chosen stage against) they would change nothing, so they are refused.
PLAN_ONLY = ("gpu_mem", "link", "seq_len", "attention", "flash_attention", "cpu_mem", "inter_node_gbps",
             "grad_checkpointing")


@cli.command("deepspeed-config")
@click.option("--stage", type=int, help="ZeRO stage 0-3 (or --auto).")
@click.option("--offload", type=click.Choice(["none", "cpu", "nvme"]), default="none", show_default=True,
              help="Where ZeRO keeps optimizer states (and at stage 3 parameters) off the GPU.")
@click.option("--auto", "auto_", is_flag=True, help="Take stage and offload from `gputopo plan` for --model.")
@click.option("--hf/--no-hf", default=True, show_default=True,
              help="'auto' where the HF Trainer fills values (--hf), or concrete values for deepspeed.initialize.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the config here (else stdout).")
@click.option("--force", is_flag=True, help="Overwrite --output if it exists.")
@click.option("--launcher", type=click.Choice(["torchrun", "deepspeed", "accelerate", "slurm"]),
              help="Also print the matching launch command and files.")
@click.option("--script", default="train.py", show_default=True, help="Training script for --launcher.")
@click.option("--ds-optimizer", is_flag=True,
              help="With --launcher accelerate: DeepSpeed's AdamW and WarmupDecayLR in the config (the script uses"
                   " accelerate's DummyOptim/DummyScheduler) instead of the script's own.")
@click.option("--master-addr", metavar="HOST", help="Head node's address for --nodes > 1, written into the launch"
              " files [default: the printed commands read $MASTER_ADDR].")
@click.option("--master-port", type=click.IntRange(1, 65535), default=29500, show_default=True,
              help="Rendezvous port on the head node for --launcher.")
@click.option("--check", is_flag=True,
              help="Run `gputopo doctor` on this config before writing it: refuse (exit 1) if its ops cannot build here.")
@click.option("--no-compile-ops", is_flag=True,
              help='Adam/AdamW through torch ("torch_adam": true): no FusedAdam/CPUAdam to compile (slower step).')
@model_options
@training_options
@gpu_options
@host_options
@json_option
@click.pass_context
def deepspeed_config(ctx, stage, offload, auto_, hf, output, force, launcher, script, ds_optimizer, master_addr,
                     master_port, check, no_compile_ops, as_json, **kw):
    """Write a DeepSpeed config that DeepSpeed accepts, sized for the model and layout, and its launch."""
    import os

    from . import dsconfig, files, launch, validate
    files.check_output(output, force)
    _launch_options(launcher, kw.get("nodes") or 1, ds_optimizer, master_addr, master_port)
    folder = os.path.dirname(output) if output else ""
    for name in launch.file_names(launcher, kw.get("nodes") or 1) if output else []:
        files.check_output(os.path.join(folder, name), force, what="launcher file")
    if auto_ and stage is not None:
        raise BadInput("give --stage or --auto, not both")
    if auto_ and not (kw.get("model") or kw.get("params")):
        raise BadInput("--auto needs --model (or --params) to plan for")
    if stage is None and not auto_:
        raise BadInput("give --stage 0|1|2|3, or --auto with --model")
    if not auto_:
        given = [k for k in PLAN_ONLY if ctx.get_parameter_source(k) == click.core.ParameterSource.COMMANDLINE]
        unused = [f"--{k.replace('_', '-')}" for k in given if not (k == "grad_checkpointing" and hf)]
        if kw.get("nvme_free") is not None and offload == "nvme" and not (kw.get("model") or kw.get("params")):
            raise BadInput("--nvme-free is checked against what the offload needs: give --model too")
        if kw.get("nvme_free") is not None and offload != "nvme":
            unused.append("--nvme-free")
        if unused:
            raise BadInput(f"{', '.join(unused)} only {'feeds' if len(unused) == 1 else 'feed'} the memory plan:"
                           " add --auto (with --model), or drop " + ("it" if len(unused) == 1 else "them"))
    req = _request(kw, need_model=auto_, need_layout=auto_)
    # With --hf and no --precision the Trainer's own fp16/bf16 flags decide ("auto"); otherwise it is written out.
    # accelerate takes precision from the DeepSpeed file only (it refuses mixed_precision beside it): written out.
    for_accelerate = launcher == "accelerate"
    precision = req.training.precision if (kw.get("precision") or auto_ or not hf or for_accelerate) else None
    warnings = [n for k, n in req.defaults.items() if k != "precision" or precision] + list(req.notes_)
    planned = None
    if auto_:
        planned = _plan(req)
        if planned["recommendation"]["strategy"] is None:
            from .errors import DoesNotFit
            raise DoesNotFit(planned["recommendation"]["reasons"][0] + " (`gputopo plan` with the same options shows"
                             " every strategy)")
        stage, offload = dsconfig.STRATEGY_TO_CONFIG[planned["recommendation"]["strategy"]]
        warnings.append(f"--auto: gputopo plan recommends {planned['recommendation']['strategy']}")
    model, t = req.model, req.training
    nvme_path = kw.get("nvme_path")
    need = None
    if offload == "nvme":
        if not nvme_path:
            nvme_path, why = _offload_dir()
            warnings.append(why)
            if as_json:  # the text output prints every warning on stderr at the end
                click.echo(f"note: {why}", err=True)
        if not os.path.isdir(nvme_path):
            raise BadInput(f"--nvme-path {nvme_path}: not an existing directory")
        if not os.access(nvme_path, os.W_OK):
            raise BadInput(f"--nvme-path {nvme_path}: not writable")
        if model:
            from .plan import nvme_bytes
            from .units import gib
            need = nvme_bytes(model, t, req.nodes)
            import shutil
            here = shutil.disk_usage(nvme_path).free
            free = kw.get("nvme_free")
            if free is None:
                free = here
            elif need > here:  # --nvme-free wins (as in plan), but this folder could not hold the swap files
                warnings.append(f"{nvme_path} has {gib(here)} free here and offload needs {gib(need)}: fine if"
                                f" --nvme-free {gib(free)} describes the machine you train on, else pass --nvme-path")
            if need > free:
                raise BadInput(f"--nvme-path {nvme_path}: {gib(free)} free, offload needs {gib(need)}"
                               f" ({gib(need - free)} missing)")
        if not check and validate.libaio_ok() is False:
            warnings.append("DeepSpeed's async_io op cannot build here: install libaio-dev (ds_report shows it)")
    cfg = dsconfig.build(stage, offload, hf=hf, offload_params=kw.get("offload_params"),
                         nvme_path=os.path.abspath(nvme_path) if nvme_path else None, precision=precision,
                         hidden_size=model.hidden_size if model else None,
                         largest_layer=model.largest_layer_params if model else None,
                         batch_size=t.batch_size, grad_accum=t.grad_accum,
                         gpus=None if req.gpus_assumed else req.world,  # unknown: DeepSpeed derives it at start
                         optimizer=t.optimizer, torch_adam=no_compile_ops, accelerate=for_accelerate,
                         ds_optimizer=ds_optimizer)
    if for_accelerate:
        warnings += dsconfig.accelerate_notes(cfg, hf=hf, ds_optimizer=ds_optimizer, optimizer=t.optimizer,
                                              torch_adam=no_compile_ops)
    elif t.optimizer != "adamw" and not hf:
        warnings.append(f"--optimizer {t.optimizer}: no optimizer block; pass yours to"
                        " deepspeed.initialize(optimizer=...)")
    version = validate.with_deepspeed(cfg, gpus=req.world, micro=t.batch_size, accum=t.grad_accum,
                                      precision=precision)
    warnings.append(f"validated by DeepSpeed {version}'s own config classes" if version else
                    "deepspeed is not installed: checked by gputopo's rules only")
    if check:  # before anything is written: the ops this config loads, its NVMe folder, locked memory
        report = _preflight("deepspeed-config --check", cfg=cfg, nvme_need=need)
        warnings += [f"doctor: {c['subject']}: {c['found']}" for c in report["checks"]
                     if c["id"].startswith(("ds_op", "nvme_path", "memlock"))]
    text = json.dumps(cfg, indent=2) + "\n"
    if output:
        files.write_atomic(output, text)
    targs = dsconfig.training_arguments(req.training, precision) if hf and not for_accelerate else None
    told = {k for k in ("batch_size", "grad_accum", "global_batch", "optimizer", "grad_checkpointing", "precision")
            if ctx.get_parameter_source(k) == click.core.ParameterSource.COMMANDLINE}
    if targs and (told or auto_):  # say what reaches the "auto" values when the user set any of them
        warnings.append("the HF Trainer fills the \"auto\" values from TrainingArguments("
                        + ", ".join(f"{k}={v!r}" for k, v in targs.items()) + ")"
                        + (f": {t.batch_size} x {t.grad_accum} x {req.world} GPU(s) = {req.global_batch} per step"
                           if req.global_batch else ""))
    launch_info = (launch.command(launcher, output or "ds_config.json", gpus=req.gpus_per_node, nodes=req.nodes,
                                  script=script, master=master_addr, port=master_port, stage=stage, folder=folder,
                                  shape="accelerate" if for_accelerate else "trainer" if hf else "initialize",
                                  ds_optimizer=ds_optimizer, grad_accum=t.grad_accum) if launcher else None)
    if output:
        for path, content in launch_info["files"].items() if launch_info else []:
            files.write_atomic(path, content)
    if as_json:
        from . import render
        click.echo(render.to_json({"schema_version": 1, "config": cfg, "path": os.path.abspath(output) if output else None,
                                   "launch": launch_info, "warnings": warnings, "plan": planned,
                                   "training_arguments": targs}))
        return
    if not output:
        click.echo(text, nl=False)
    else:
        click.echo(f"wrote {', '.join([output] + list(launch_info['files'] if launch_info else []))}", err=True)
    for w in warnings:
        click.echo(f"note: {w}", err=True)
    if launch_info:
        out = sys.stderr if not output else sys.stdout
        if not output:
            for name, content in launch_info["files"].items():
                click.echo(f"--- {name}\n{content}", file=out, nl=not content.endswith("\n"))
        for r in launch_info["run"]:
            click.echo(f"# on {r['where']}:\n{r['command']}", file=out)
        for n in launch_info["notes"]:
            click.echo(f"# {n}", file=out)
        click.echo("# the training script needs:", file=out)
        for line in launch_info["script_needs"]:
            click.echo(f"#   {line}", file=out)


def _launch_options(launcher, nodes, ds_optimizer, master_addr, master_port):
    """Refuse launch options that would change nothing for this launcher and layout."""
    if ds_optimizer and launcher != "accelerate":
        raise BadInput("--ds-optimizer is for --launcher accelerate: the other configs always carry DeepSpeed's optimizer")
    if master_addr is not None:
        if launcher is None or launcher == "slurm" or nodes < 2:
            raise BadInput("--master-addr is for --launcher torchrun|deepspeed|accelerate with --nodes 2 or more"
                           " (Slurm finds its head node itself)")
        if not master_addr.strip() or any(c.isspace() or c in "$`'\"" for c in master_addr):
            raise BadInput(f"--master-addr {master_addr!r}: a host name or IP address")
    if master_port != 29500 and (launcher is None or (launcher == "torchrun" and nodes == 1)):
        raise BadInput("--master-port is for --launcher (one-node torchrun --standalone picks a free port itself)")


def _ds_config(path: str) -> dict:
    """A DeepSpeed config file as a dict; bad files get one line."""
    try:
        cfg = json.loads(_read(path))
    except ValueError as e:
        raise BadInput(f"{path}: not JSON ({e})")
    if not isinstance(cfg, dict):
        raise BadInput(f"{path}: a DeepSpeed config is a JSON object")
    return cfg


def _doctor(cfg=None, config_path=None, topo=None, status=None, nvme_need=None, nvme_path=None) -> dict:
    """Run the doctor; a topology already probed (and why it is missing) is reused instead of probed again."""
    from . import doctor
    from .errors import NvmlUnavailable
    if topo is None and status is None:
        return doctor.run(cfg, config_path=config_path, nvme_need=nvme_need, nvme_path=nvme_path)

    def topo_fn():
        if topo is None:
            raise NvmlUnavailable(status)
        return topo
    return doctor.run(cfg, config_path=config_path, topo_fn=topo_fn, nvme_need=nvme_need, nvme_path=nvme_path)


def _preflight(what: str, cfg=None, topo=None, status=None, nvme_need=None) -> dict:
    """Doctor before launching or writing: each blocking check on one line with its fix, then exit 1."""
    data = _doctor(cfg, topo=topo, status=status, nvme_need=nvme_need)
    stop = [c for c in data["checks"] if c["blocking"]]
    for c in stop:
        click.echo(f"doctor: {c['subject']}: {c['found']}" + (f" - fix: {c['fix']}" if c["fix"] else ""), err=True)
    if stop:
        raise GputopoError(f"{what}: {len(stop)} blocking problem(s) found by `gputopo doctor` (listed above)")
    return data


def _offload_dir() -> tuple[str, str]:
    """--offload nvme without --nvme-path: the NVMe mount with the most free space, else the roomiest local disk."""
    from . import system
    from .units import size
    picked = system.default_offload_dir()
    if picked is None:
        raise BadInput("--offload nvme: no writable local disk here (tmpfs is RAM, not NVMe); give --nvme-path DIR")
    folder, d, why = picked
    where = f"{d.mountpoint}: {d.fstype} on {d.block or d.device}, {size(d.free_bytes)} free"
    warning = "" if d.kind == "nvme" else f"; it is NOT NVMe ({d.kind}): offload will be slower, pass --nvme-path"
    return folder, f"--nvme-path not given: using {folder} ({where}), {why}{warning}"


@cli.command()
@click.option("--config", "config_path", metavar="DS.json",
              help="Also check what this DeepSpeed config needs: its compiled ops, NVMe folder, locked memory.")
@click.option("--nvme-path", type=click.Path(file_okay=False),
              help="Also check this folder for NVMe offload: writable, on NVMe or not, free space.")
@json_option
@click.pass_context
def doctor(ctx, config_path, nvme_path, as_json):
    """Host and install traps that break multi-GPU runs, worst first; exit 1 if one will."""
    from . import render
    cfg = _ds_config(config_path) if config_path else None
    data = _doctor(cfg, config_path=config_path, nvme_path=nvme_path)
    emit(data, render.doctor, as_json)
    ctx.exit(data["exit_code"])


@cli.command("bench-nvlink")
@click.option("--model", default="gpt2", show_default=True, help="Causal LM: catalog name, HF cache name or a folder.")
@click.option("--nproc", type=COUNT, help="Processes per node [default: all visible GPUs; 2 on CPU].")
@click.option("--gpu-ids", type=GPU_IDS, help="Use these GPUs (indices as nvidia-smi prints them).")
@click.option("--steps", type=COUNT, help="Steps per arm [default: 200 on GPU as in the reference; 4 on CPU].")
@click.option("--warmup-steps", type=Count(0), help="Steps left out of the timing [default: 10 on GPU, 1 on CPU].")
@click.option("--batch-size", type=COUNT, help="Per process [default: 4 on GPU as in the reference, 2 on CPU].")
@click.option("--seq-len", type=COUNT, default=128, show_default=True, help="Tokens per sample.")
@click.option("--precision", type=click.Choice(["fp32", "fp16", "bf16"]),
              help="bf16 needs Ampere or newer [default: bf16 on Ampere or newer, fp16 on older GPUs, fp32 on CPU].")
@click.option("--dataset", default="auto", show_default=True,
              help="wikitext-2-raw-v1 (local cache only), a .txt file, synthetic, or auto (wikitext if cached).")
@click.option("--repeat", type=COUNT, default=1, show_default=True, help="Runs per arm, interleaved.")
@click.option("--timeout", type=click.FloatRange(0, min_open=True), default=3600, show_default=True, help="Seconds one torchrun may take.")
@click.option("--train-only", is_flag=True, help="Skip the all-reduce sweep.")
@click.option("--allreduce-only", is_flag=True, help="Skip the training arms.")
@click.option("--allreduce-sizes", type=SIZES, help="Sizes of the sweep, e.g. 1MB,64MB (binary: 1MB = 1 MiB)"
              " [default: 1 MiB to 1 GiB on GPU, 1 MiB to 32 MiB on CPU].")
@click.option("--nnodes", type=COUNT, default=1, show_default=True, help="Nodes taking part (one torchrun each).")
@click.option("--node-rank", type=Count(0), default=0, show_default=True, help="This node's rank, 0 on the first.")
@click.option("--rdzv-endpoint", metavar="HOST:PORT", help="c10d rendezvous for several nodes (node 0's address).")
@click.option("--output", type=click.Path(dir_okay=False), help="Results JSON, written after every finished arm.")
@click.option("--force", is_flag=True, help="Overwrite --output / --plot.")
@click.option("--plot", type=click.Path(dir_okay=False), help="A PNG of step times and the all-reduce sweep (matplotlib).")
@click.option("--verbose", is_flag=True, help="Stream every line of the children.")
@json_option
@click.pass_context
def bench_nvlink(ctx, model, nproc, gpu_ids, steps, warmup_steps, batch_size, seq_len, precision, dataset, repeat, timeout,
                 train_only, allreduce_only, allreduce_sizes, nnodes, node_rank, rdzv_endpoint, output, force, plot,
                 verbose, as_json):
    """Train the same DDP run with and without NCCL_P2P_DISABLE=1 through torchrun, and sweep all-reduce."""
    import os

    from . import bench, files, probe, render, report, request
    from .errors import NvmlUnavailable, TooFewGpus
    for what, path in (("--output", output), ("--plot", plot)):
        files.check_output(path, force, what)
    if output and plot and os.path.abspath(output) == os.path.abspath(plot):
        raise BadInput("--output and --plot name the same file")
    if train_only and allreduce_only:
        raise BadInput("--train-only and --allreduce-only exclude each other")
    # An option the chosen half never reads is refused, not dropped (the sweep is fp32, once per arm).
    ignored = {"--allreduce-only": (allreduce_only, ("model", "steps", "warmup_steps", "batch_size", "seq_len",
                                                     "precision", "dataset", "repeat")),
               "--train-only": (train_only, ("allreduce_sizes",))}
    for flag, (on, names) in ignored.items():
        given = [p.opts[0] for p in ctx.command.params if on and p.name in names
                 and ctx.get_parameter_source(p.name) == click.core.ParameterSource.COMMANDLINE]
        if given:
            raise BadInput(f"{flag} ignores {', '.join(given)}: leave {'it' if len(given) == 1 else 'them'} out")
    if plot and importlib.util.find_spec("matplotlib") is None:
        raise BadInput("--plot needs matplotlib: pip install matplotlib")
    if nnodes > 1 and not rdzv_endpoint:
        raise BadInput("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (node 0's address)")
    if not 0 <= node_rank < nnodes:
        raise BadInput(f"--node-rank {node_rank}: must be between 0 and {nnodes - 1}")
    try:
        topo = probe.topology()
    except NvmlUnavailable:
        topo = None
    link = None
    if topo is not None:
        names = report.select(topo, gpu_ids)
        if nproc and nproc > len(names):
            raise TooFewGpus(f"--nproc {nproc}: only {len(names)} GPU(s) selected")
        bench.need_two_gpus(names, nproc, model)
        names = names[: nproc or None]
        w = topo.weakest(names)
        if w is not None:
            bw, basis = topo.bandwidth_gbps(w)
            link = {"a": w.a, "b": w.b, "type": w.type, "bandwidth_gbps": bw, "bandwidth_basis": basis}
        model_name = next((topo.gpu(n).model for n in names if topo.gpu(n).model), None)
        o = bench.Options(device="cuda", nproc=len(names), steps=steps or 200, warmup_steps=warmup_steps if warmup_steps is not None else 10,
                          batch_size=batch_size or 4,
                          precision=request.precision(precision, model_name)[0],
                          visible_devices=",".join(str(topo.gpu(n).index) for n in names) if gpu_ids else None)
    else:
        if gpu_ids:
            raise BadInput("--gpu-ids: no NVIDIA GPU visible here")
        o = bench.Options(device="cpu", nproc=nproc or 2, steps=steps or 4, warmup_steps=warmup_steps if warmup_steps is not None else 1,
                          batch_size=batch_size or 2, precision=request.precision(precision, None, "cpu")[0])
    if o.warmup_steps >= o.steps:
        raise BadInput(f"--warmup-steps {o.warmup_steps} leaves no timed step of {o.steps}")
    o.model, o.seq_len, o.dataset, o.repeat, o.timeout = model, seq_len, dataset, repeat, timeout
    o.train, o.allreduce = not allreduce_only, not train_only
    o.allreduce_sizes = allreduce_sizes or []
    o.nnodes, o.node_rank, o.rdzv_endpoint = nnodes, node_rank, rdzv_endpoint
    if o.train:
        o.dataset, note = bench.resolve_dataset(dataset)
        o.notes += [note] if note else []
    if o.device == "cpu" and steps is None:
        click.echo(f"CPU: {o.steps} steps per arm, batch {o.batch_size} x {o.seq_len} (about two minutes for gpt2 on"
                   " 2 cores); --steps to change", err=True)

    saved = {"runs": 0, "allreduce": 0}

    def save(results):
        if output:
            files.write_atomic(output, json.dumps(results, indent=2, sort_keys=True) + "\n")
            saved.update(runs=len(results["runs"]), allreduce=len(results["allreduce"]))
    warned = _preflight("bench-nvlink", topo=topo, status=None if topo else "no NVIDIA GPU visible")["counts"]["warn"]
    if warned:
        click.echo(f"note: `gputopo doctor` has {warned} warning(s) about this machine", err=True)
    o.log_dir = bench.new_log_dir()
    click.echo(f"logs of this run: {o.log_dir}", err=True)
    progress = _progress(verbose)
    try:
        results = bench.run(o, link, save, progress)
    except KeyboardInterrupt:
        progress.done()
        raise BadInput("interrupted: the children were stopped" + (f"; finished arms are in {output}" if output else ""))
    except GputopoError as e:
        progress.done()
        if output:
            e.args = (f"{e}\n" + (f"Finished arms are kept in {output}" if any(saved.values()) else
                                  f"No arm finished; {output} records the failure"),)
        raise
    progress.done()
    if plot:
        files.write_atomic(plot, render.bench_plot(results))
    emit(results, render.bench, as_json)


class _progress:
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


def main():
    cli(prog_name="gputopo")
