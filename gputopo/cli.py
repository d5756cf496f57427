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
from .units import parse_bytes

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
        click.option("--offload-params/--no-offload-params", default=None,
                     help="With ZeRO-3 offload, offload parameters too (default: yes at stage 3)."),
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
    from .plan import Training
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
                        flash_attention=kw["flash_attention"], offload_params=kw["offload_params"] is not False)
    return report.plan(model, layout, training, kw.get("global_batch"))


def _layout_fn(gpus, gpu_mem, gpu_model, link):
    """How to build the layout: from --gpus/--gpu-mem, else from this machine's GPUs."""
    from . import plan as planning, probe, report
    from .errors import NvmlUnavailable
    if gpus is None or gpu_mem is None:
        try:
            topo = probe.topology()
        except NvmlUnavailable as e:
            raise BadInput(f"no GPU visible here ({e}): give --gpus N and --gpu-mem SIZE")
        names = [g.name for g in topo.gpus][: gpus or None]
        return lambda **host: report.layout_from_topology(
            topo, names, parse_bytes(gpu_mem, "--gpu-mem") if gpu_mem else None, **host)
    if gpus < 1:
        raise BadInput("--gpus must be 1 or more")
    from .topology import rank
    if link and rank(link) == (-1, 0):
        raise BadInput(f"--link {link}: not a link type of nvidia-smi (NV#, PIX, PXB, PHB, NODE, SYS)")

    def layout_fn(**host):
        gbps, basis = planning.link_bandwidth(link, gpu_model) if link else (None, "unknown")
        return planning.Layout(gpus_per_node=gpus, gpu_mem_bytes=parse_bytes(gpu_mem, "--gpu-mem"), gpu_model=gpu_model,
                               link_type=link, link_gbps=gbps, link_basis=basis, **host)
    return layout_fn


@cli.command()
@model_options
@click.option("--gpus", type=int, help="GPUs per node [default: those of this machine].")
@click.option("--gpu-mem", metavar="SIZE", help="Memory per GPU: 24GiB, 80GB, 16000MiB [default: this machine's].")
@click.option("--gpu-model", metavar="NAME", help="GPU model (bf16 support, NVLink bandwidth).")
@click.option("--link", metavar="TYPE", help="Weakest link between GPUs as nvidia-smi prints it: NV12, PIX, PHB, SYS...")
@json_option
def plan(gpus, gpu_mem, gpu_model, link, as_json, **kw):
    """Memory per GPU for each strategy (DDP, ZeRO-1/2/3, offload) and the one to use."""
    from . import render
    emit(_plan(kw, _layout_fn(gpus, gpu_mem, gpu_model, link)), render.plan, as_json)



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
        names = report.select(topo, gpus)
        planned = _plan(kw, lambda **host: report.layout_from_topology(
            topo, names, parse_bytes(gpu_mem, "--gpu-mem") if gpu_mem else None, **host))
    data = report.inspect(topo, gpus=gpus, best=best, env=probe.environment(), host=probe.host(),
                          status=status, sources=sources, planned=planned)
    emit(data, render.inspect, as_json)


@cli.command("deepspeed-config")
@click.option("--stage", type=int, help="ZeRO stage 0-3 (or --auto).")
@click.option("--offload", type=click.Choice(["none", "cpu", "nvme"]), default="none", show_default=True)
@click.option("--auto", "auto_", is_flag=True, help="Take stage and offload from `gputopo plan` for --model.")
@click.option("--hf/--no-hf", default=True, show_default=True,
              help="'auto' where the HF Trainer fills values (--hf), or concrete values for deepspeed.initialize.")
@click.option("--gpus", type=int, help="GPUs per node [default: this machine's, else 1].")
@click.option("--gpu-mem", metavar="SIZE", help="Memory per GPU (for --auto).")
@click.option("--gpu-model", metavar="NAME", help="GPU model (bf16 support).")
@click.option("--link", metavar="TYPE", help="Weakest link between GPUs (for --auto).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the config here (else stdout).")
@click.option("--force", is_flag=True, help="Overwrite --output if it exists.")
@click.option("--launcher", type=click.Choice(["torchrun", "deepspeed", "accelerate", "slurm"]),
              help="Also print the matching launch command and files.")
@click.option("--script", default="train.py", show_default=True, help="Training script for --launcher.")
@model_options
@json_option
def deepspeed_config(stage, offload, auto_, hf, gpus, gpu_mem, gpu_model, link, output, force, launcher, script,
                     as_json, **kw):
    """Write a DeepSpeed config that DeepSpeed accepts, sized for the model and layout, and its launch."""
    import os

    from . import dsconfig, launch, validate
    warnings = []
    planned = None
    if output and os.path.exists(output) and not force:
        raise BadInput(f"{output} exists; pass --force to overwrite it")
    if auto_:
        if not _wants_plan(kw):
            raise BadInput("--auto needs --model (or --params) to plan for")
        planned = _plan(kw, _layout_fn(gpus, gpu_mem, gpu_model, link))
    if auto_:
        if stage is not None:
            raise BadInput("give --stage or --auto, not both")
        stage, offload = dsconfig.STRATEGY_TO_CONFIG[planned["recommendation"]["strategy"]]
        warnings.append(f"--auto: gputopo plan recommends {planned['recommendation']['strategy']}")
    if stage is None:
        raise BadInput("give --stage 0|1|2|3, or --auto with --model")
    model = None
    if _wants_plan(kw):
        from . import models
        model = models.resolve(kw.get("model"), kw.get("params"), kw.get("hidden_size"), kw.get("layers"), kw.get("vocab_size"))
    nvme_path = kw.get("nvme_path")
    if offload == "nvme":
        if not nvme_path:
            raise BadInput("--offload nvme needs --nvme-path DIR (a local NVMe folder)")
        if not os.path.isdir(nvme_path):
            raise BadInput(f"--nvme-path {nvme_path}: not an existing directory")
        if not os.access(nvme_path, os.W_OK):
            raise BadInput(f"--nvme-path {nvme_path}: not writable")
        if model:
            from .plan import Training, nvme_bytes
            from .units import gib
            need = nvme_bytes(model, Training(precision=kw.get("precision") or "bf16", optimizer=kw["optimizer"]),
                              kw["nodes"])
            import shutil
            free = shutil.disk_usage(nvme_path).free
            if need > free:
                raise BadInput(f"--nvme-path {nvme_path}: {gib(free)} free, offload needs {gib(need)}"
                               f" ({gib(need - free)} missing)")
        if validate.libaio_ok() is False:
            warnings.append("DeepSpeed's async_io op cannot build here: install libaio-dev (ds_report shows it)")
    n_gpus = gpus or (planned["layout"]["gpus_per_node"] if planned else 1)
    precision = kw.get("precision") or (planned["training"]["precision"] if planned else None)
    if not hf and precision is None:
        precision = "bf16"
        warnings.append("--no-hf without --precision: bf16 (use --precision fp16 on GPUs older than Ampere)")
    cfg = dsconfig.build(stage, offload, hf=hf, offload_params=kw.get("offload_params"),
                         nvme_path=os.path.abspath(nvme_path) if nvme_path else None, precision=precision,
                         hidden_size=model.hidden_size if model else None,
                         largest_layer=model.largest_layer_params if model else None,
                         batch_size=kw["batch_size"], grad_accum=kw["grad_accum"],
                         gpus=gpus * kw["nodes"] if gpus else None)
    version = validate.with_deepspeed(cfg, gpus=n_gpus * kw["nodes"], micro=kw["batch_size"], accum=kw["grad_accum"],
                                      precision=precision)
    warnings.append(f"validated by DeepSpeed {version}'s own config classes" if version else
                    "deepspeed is not installed: checked by gputopo's rules only")
    text = json.dumps(cfg, indent=2) + "\n"
    if output:
        with open(output, "w") as f:
            f.write(text)
    launch_info = (launch.command(launcher, output or "ds_config.json", gpus=n_gpus, nodes=kw["nodes"], script=script,
                                  stage=stage) if launcher else None)
    if as_json:
        from . import render
        click.echo(render.to_json({"schema_version": 1, "config": cfg, "path": os.path.abspath(output) if output else None,
                                   "launch": launch_info, "warnings": warnings}))
        return
    if not output:
        click.echo(text, nl=False)
    else:
        click.echo(f"wrote {output}", err=True)
    for w in warnings:
        click.echo(f"note: {w}", err=True)
    if launch_info:
        out = sys.stderr if not output else sys.stdout
        for name, content in launch_info["files"].items():
            click.echo(f"--- {name}\n{content}", file=out, nl=not content.endswith("\n"))
        click.echo(launch_info["command"], file=out)
        for n in launch_info["notes"]:
            click.echo(f"# {n}", file=out)


def _check_output_path(opt: str, path: str | None, force: bool) -> None:
    """Before any work: the folder exists and is writable, and an existing file needs --force."""
    import os
    if not path:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise BadInput(f"{opt} {path}: is a directory; give a file name")
    if not os.path.isdir(folder):
        raise BadInput(f"{opt} {path}: folder {os.path.dirname(path) or folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise BadInput(f"{opt} {path}: folder {os.path.dirname(path) or folder} is not writable")
    if os.path.exists(path) and not force:
        raise BadInput(f"{path} exists; pass --force to overwrite it")


def _write_atomic(path: str, content: str | bytes) -> None:
    """A temporary file in the same folder, then os.replace: a crash never leaves half a file."""
    import os
    import tempfile
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".gputopo-", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; a plain open() would honour the umask
        with os.fdopen(fd, "wb" if isinstance(content, bytes) else "w") as f:
            f.write(content)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _sizes(text: str) -> list[int]:
    return [parse_bytes(part, "--allreduce-sizes") for part in text.split(",") if part.strip()]


@cli.command("bench-nvlink")
@click.option("--model", default="gpt2", show_default=True, help="Causal LM: catalog name, HF cache name or a folder.")
@click.option("--nproc", type=int, help="Processes per node [default: all visible GPUs; 2 on CPU].")
@click.option("--gpus", metavar="0,1", help="Use these GPUs (nvidia-smi numbering).")
@click.option("--steps", type=int, help="Steps per arm [default: 200 on GPU as in the reference; 4 on CPU].")
@click.option("--warmup-steps", type=int, help="Steps left out of the timing [default: 10 on GPU, 1 on CPU].")
@click.option("--batch-size", type=int, help="Per process [default: 4 on GPU as in the reference, 2 on CPU].")
@click.option("--seq-len", type=int, default=128, show_default=True)
@click.option("--precision", type=click.Choice(["fp32", "fp16", "bf16"]),
              help="[default: bf16 on Ampere or newer, fp16 on older GPUs, fp32 on CPU]")
@click.option("--dataset", default="auto", show_default=True,
              help="wikitext-2-raw-v1 (local cache only), a .txt file, synthetic, or auto (wikitext if cached).")
@click.option("--repeat", type=int, default=1, show_default=True, help="Runs per arm, interleaved.")
@click.option("--timeout", type=float, default=3600, show_default=True, help="Seconds one torchrun may take.")
@click.option("--train-only", is_flag=True, help="Skip the all-reduce sweep.")
@click.option("--allreduce-only", is_flag=True, help="Skip the training arms.")
@click.option("--allreduce-sizes", metavar="1MiB,4MiB,..", help="Sizes of the sweep [default: 1 MiB-1 GiB on GPU, -32 MiB on CPU].")
@click.option("--nnodes", type=int, default=1, show_default=True)
@click.option("--node-rank", type=int, default=0, show_default=True)
@click.option("--rdzv-endpoint", metavar="HOST:PORT", help="c10d rendezvous for several nodes (node 0's address).")
@click.option("--output", type=click.Path(dir_okay=False), help="Results JSON, written after every finished arm.")
@click.option("--force", is_flag=True, help="Overwrite --output / --plot.")
@click.option("--plot", type=click.Path(dir_okay=False), help="A PNG of step times and the all-reduce sweep (matplotlib).")
@click.option("--verbose", is_flag=True, help="Stream every line of the children.")
@json_option
def bench_nvlink(model, nproc, gpus, steps, warmup_steps, batch_size, seq_len, precision, dataset, repeat, timeout,
                 train_only, allreduce_only, allreduce_sizes, nnodes, node_rank, rdzv_endpoint, output, force, plot,
                 verbose, as_json):
    """Train the same DDP run with and without NCCL_P2P_DISABLE=1 through torchrun, and sweep all-reduce."""
    import os

    from . import bench, probe, render, report
    from .advise import is_ampere_or_newer
    from .errors import NvmlUnavailable, TooFewGpus
    for opt, path in (("--output", output), ("--plot", plot)):
        _check_output_path(opt, path, force)
    if output and plot and os.path.abspath(output) == os.path.abspath(plot):
        raise BadInput("--output and --plot name the same file")
    if train_only and allreduce_only:
        raise BadInput("--train-only and --allreduce-only exclude each other")
    if plot and importlib.util.find_spec("matplotlib") is None:
        raise BadInput("--plot needs matplotlib: pip install matplotlib")
    for name, value in (("--steps", steps), ("--repeat", repeat), ("--nnodes", nnodes), ("--nproc", nproc),
                        ("--batch-size", batch_size), ("--seq-len", seq_len)):
        if value is not None and value < 1:
            raise BadInput(f"{name} must be 1 or more")
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
        names = report.select(topo, gpus)
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
                          precision=precision or ("bf16" if is_ampere_or_newer(model_name) else "fp16"),
                          visible_devices=",".join(str(topo.gpu(n).index) for n in names) if gpus else None)
    else:
        if gpus:
            raise BadInput("--gpus: no NVIDIA GPU visible here")
        o = bench.Options(device="cpu", nproc=nproc or 2, steps=steps or 4, warmup_steps=warmup_steps if warmup_steps is not None else 1,
                          batch_size=batch_size or 2, precision=precision or "fp32")
    if o.warmup_steps >= o.steps:
        raise BadInput(f"--warmup-steps {o.warmup_steps} leaves no timed step of {o.steps}")
    o.model, o.seq_len, o.dataset, o.repeat, o.timeout = model, seq_len, dataset, repeat, timeout
    o.train, o.allreduce = not allreduce_only, not train_only
    o.allreduce_sizes = _sizes(allreduce_sizes) if allreduce_sizes else []
    o.nnodes, o.node_rank, o.rdzv_endpoint = nnodes, node_rank, rdzv_endpoint
    if o.train:
        o.dataset, note = bench.resolve_dataset(dataset)
        o.notes += [note] if note else []
    if o.device == "cpu" and steps is None:
        click.echo(f"CPU: {o.steps} steps per arm, batch {o.batch_size} x {o.seq_len} (about two minutes for gpt2 on"
                   " 2 cores); --steps to change", err=True)
    o.log_dir = bench.new_log_dir()
    click.echo(f"logs of this run: {o.log_dir}", err=True)

    saved = {"runs": 0, "allreduce": 0}

    def save(results):
        if output:
            _write_atomic(output, json.dumps(results, indent=2, sort_keys=True) + "\n")
            saved.update(runs=len(results["runs"]), allreduce=len(results["allreduce"]))
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
        _write_atomic(plot, render.bench_plot(results))
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
