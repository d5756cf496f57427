"""One vocabulary for every command: each kind of value is a click ParamType checked once, by the owner of its
rule (units for sizes, topology for links, gpus for GPU models), and options are shared as groups."""
from __future__ import annotations

import re

import click

OPTIMIZERS = ("adamw", "adamw-8bit", "adafactor", "sgd")  # plan.OPTIMIZER_BYTES; named here so --help stays light


class _Owned(click.ParamType):
    """A value converted by its rule's owner; the owner's ValueError becomes click's one-line usage error."""

    def convert(self, value, param, ctx):
        if not isinstance(value, str):
            return value
        try:
            return self.parse(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)

    def parse(self, text: str):
        raise NotImplementedError


class Size(_Owned):
    """Bytes in binary units, as GPUs are sold and nvidia-smi and `free -g` print them: 80GB = 80 GiB."""
    name = "SIZE"

    def parse(self, text):
        from .units import parse_size
        return parse_size(text)


class SizeList(Size):
    """Comma-separated sizes: 1MB,4MB,64MB."""
    name = "SIZE,.."

    def parse(self, text):
        parts = [p for p in text.split(",") if p.strip()]
        if not parts:
            raise ValueError(f"{text!r}: expected sizes like 1MB,4MB,64MB")
        return [super(SizeList, self).parse(p) for p in parts]


class Count(_Owned):
    """A whole number of things, at least `least` (1 unless told) and at most `most` (what a run can have: a
    count beyond it is a typo, and planning with it would print sizes no machine has)."""
    name = "N"

    def __init__(self, least: int = 1, most: int = 2 ** 31 - 1, what: str = "a run has"):
        self.least, self.most, self.what = least, most, what

    def convert(self, value, param, ctx):
        n = super().convert(str(value) if isinstance(value, int) and not isinstance(value, bool) else value,
                            param, ctx)
        if n < self.least:
            self.fail(f"must be {self.least} or more, not {n}", param, ctx)
        if n > self.most:
            self.fail(f"{n} is more than {self.what} (at most {self.most})", param, ctx)
        return n

    def parse(self, text):
        try:
            return int(text.strip())
        except ValueError:
            raise ValueError(f"{text!r}: expected a whole number") from None


class Seconds(_Owned):
    """A finite number of seconds, 0 or more (nan and inf are not durations)."""
    name = "SECONDS"

    def __init__(self, positive: bool = False):
        self.positive = positive

    def parse(self, text):
        import math
        try:
            s = float(text)
        except ValueError:
            raise ValueError(f"{text!r}: expected seconds, like 30 or 1.5") from None
        if not math.isfinite(s) or s < 0 or (self.positive and s == 0):
            raise ValueError(f"{text!r}: expected a finite number of seconds, {'above' if self.positive else 'from'} 0")
        return s


class Bandwidth(_Owned):
    """GB/s per direction, above 0: 12.5, 25GB/s, or 100Gb/s (a lowercase b is bits, as networks are sold)."""
    name = "GB/S"

    def parse(self, text):
        m = re.fullmatch(r"\s*([+-]?[0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*(?:([GT])(B/s|Bps|b/s|bps|bit/s))?\s*", text)
        if not m:
            raise ValueError(f"{text}: expected GB/s per direction, like 12.5, 25GB/s, 100Gb/s or 3.2Tb/s")
        # a lowercase b is bits (networks are sold so: 8 x 400Gb/s = 3.2Tb/s); T is a thousand G
        n = float(m.group(1)) * (1000 if m.group(2) == "T" else 1) / (8 if (m.group(3) or "").startswith("b") else 1)
        if n <= 0:
            raise ValueError(f"{text}: a bandwidth must be above 0 GB/s")
        if n > 1e6:   # 1 PB/s: beyond any link (inf included)
            raise ValueError(f"{text}: more than any link carries (at most 1000000 GB/s)")
        return n


class GpuModelType(_Owned):
    """A GPU model gputopo knows (its memory and bf16 support then follow), or a one-line refusal naming them."""
    name = "GPU-MODEL"

    def parse(self, text):
        from . import gpus
        return gpus.known(text)


class LinkType(_Owned):
    """A link type as nvidia-smi topo -m prints it."""
    name = "TYPE"

    def parse(self, text):
        from .topology import link_type
        return link_type(text)


class GpuIds(_Owned):
    """Which GPUs, by index as nvidia-smi numbers them: 0,1,3 (accelerate's --gpu_ids). --gpus is a count."""
    name = "0,1,.."

    def parse(self, text):
        parts = [p.strip() for p in text.split(",")]
        bad = [p for p in parts if not p.isdecimal()]
        if bad:
            raise ValueError(f"{text}: GPU indices like 0,1,3 (--gpus is a count); not {bad[0]!r}")
        return tuple(dict.fromkeys(int(p) for p in parts))


class Text(_Owned):
    """A name, path or address: an empty value is refused rather than read as "not given"."""
    name = "TEXT"

    def __init__(self, metavar: str = "TEXT"):
        self.name = metavar

    def parse(self, text):
        if not text.strip():
            raise ValueError("is empty: give a value, or leave the option out")
        return text


SIZE, SIZES, COUNT, BANDWIDTH, GPU_MODEL, LINK = Size(), SizeList(), Count(), Bandwidth(), GpuModelType(), LinkType()
GPU_COUNT = Count(most=1024, what="a node holds")
TIMEOUT = Seconds(positive=True)
GPU_IDS, PATH, DIR, TEXT = GpuIds(), Text("PATH"), Text("DIR"), Text()


def group(*opts):
    """A decorator adding `opts` in the order given (as sqlite-utils shares output_options)."""
    def deco(fn):
        for opt in reversed(opts):
            fn = opt(fn)
        return fn
    return deco


# --json: the documented JSON object on stdout instead of the table, in every command.
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON (schema in docs/) instead of text.")


def given(ctx: click.Context, names) -> list[str]:
    """The options among `names` (click names) typed on the command line, as their --flags (both spellings of
    an on/off flag: --offload-params/--no-offload-params)."""
    on_line = typed(ctx)
    return ["/".join(p.opts[:1] + p.secondary_opts[:1]) for p in ctx.command.params
            if p.name in names and p.name in on_line]


def typed(ctx: click.Context) -> frozenset:
    """The click names of every option typed on the command line (a default is not typed)."""
    return frozenset(p.name for p in ctx.command.params
                     if ctx.get_parameter_source(p.name) == click.core.ParameterSource.COMMANDLINE)


def names(decorator) -> tuple[str, ...]:
    """The click names of the options a shared group adds."""
    return tuple(p.name for p in decorator(lambda: None).__click_params__)


model_options = group(
    click.option("--model", type=TEXT, metavar="NAME|PATH",
                 help="A known model (gpt2, t5-3b, llama-2-7b, ...) or a folder with config.json."),
    click.option("--params", type=TEXT, metavar="N", help="Parameter count (7B, 350M) when only the size is known."),
    click.option("--hidden-size", type=COUNT, help="Hidden size, with --params."),
    click.option("--layers", type=COUNT, help="Transformer blocks, with --params."),
    click.option("--vocab-size", type=COUNT, help="Vocabulary size, with --params (optional)."),
)
training_options = group(
    click.option("--precision", type=click.Choice(["fp32", "fp16", "bf16"]),
                 help="Training precision; bf16 needs Ampere or newer [default: bf16 on Ampere or newer, else fp16]."),
    click.option("--optimizer", type=click.Choice(list(OPTIMIZERS)), default="adamw", show_default=True,
                 help="Optimizer: its states take 8 (AdamW), 2 (8-bit Adam), about 4 (Adafactor) or 4 (SGD with"
                      " momentum) bytes per parameter."),
    click.option("--batch-size", type=COUNT,
                 help="Micro-batch per GPU [default: a plan searches powers of two up to what fits; 4 in a config"
                      " without --auto]."),
    click.option("--seq-len", type=COUNT, help="Tokens per sample [default: the model's context, at most 1024]."),
    click.option("--grad-checkpointing/--no-grad-checkpointing", default=None,
                 help="Recompute activations in backward, or not [default: a plan tries both; off in a config"
                      " without --auto]."),
    click.option("--selective-checkpointing", is_flag=True,
                 help="Recompute part of them: torchtitan's per-op policy (every other matmul's output and"
                      " attention's kept, the rest recomputed)."),
    click.option("--pure-16bit", is_flag=True,
                 help="The weights themselves in 16 bits (loaded with torch_dtype=torch.bfloat16): gradients and"
                      " optimizer states too, no fp32 master copy; plain PyTorch and FSDP (DeepSpeed keeps its own"
                      " fp32 master)."),
    click.option("--grad-accum", type=COUNT, help="Gradient accumulation steps [default: 1, or from --global-batch]."),
    click.option("--global-batch", type=COUNT,
                 help="Samples per optimizer step: must equal --batch-size x --grad-accum x GPUs x nodes"
                      " (derives --grad-accum when not given)."),
    click.option("--attention", type=click.Choice(["auto", "eager", "sdpa"]),
                 help="Attention as transformers runs it [default: auto, what transformers picks for the"
                      " architecture: sdpa where supported, else eager]."),
    click.option("--flash-attention", is_flag=True, help="Same as --attention sdpa (fused: no s^2 scores kept)."),
    click.option("--kernels", type=click.Choice(["hf", "fused"]),
                 help="What runs the elementwise work: hf, transformers' modeling code as the Trainer runs it (norms,"
                      " activations and rotary op by op, fp32 upcasts); fused, one kernel each in 16 bits"
                      " (torch.compile, Liger Kernel, Megatron, llm.c, MosaicML) [default: hf]."),
    click.option("--loss", type=click.Choice(["hf", "fused", "chunked"]),
                 help="How the loss meets the logits: hf, transformers' fp32 copy of them; fused, one 16-bit"
                      " cross-entropy kernel (flash-attn's, torch.compile); chunked, never all at once (Liger's fused"
                      " linear cross-entropy) [default: fused with --kernels fused, else hf]."),
    click.option("--offload-params/--no-offload-params", default=None,
                 help="With ZeRO-3 offload, offload parameters too [default: a plan tries both; yes at stage 3"
                      " in a config without --auto]."),
)
host_options = group(
    click.option("--cpu-mem", type=SIZE, help="CPU RAM per node, e.g. 512GB [default: this machine's]."),
    click.option("--cpu-cores", type=COUNT, help="CPU cores per node: DeepSpeed's CPU Adam steps an offloaded"
                                                 " optimizer on them [default: this machine's physical cores]."),
    click.option("--nvme-path", type=DIR, metavar="DIR",
                 help="Folder for NVMe offload [default: the local NVMe mount with the most free space, else the"
                      " roomiest local disk; `gputopo doctor` lists the disks]."),
    click.option("--nvme-free", type=SIZE, help="Free NVMe space per node [default: measured at --nvme-path]."),
    click.option("--nodes", type=COUNT, default=1, show_default=True, help="Nodes (each like this one)."),
    click.option("--inter-node-gbps", type=BANDWIDTH,
                 help="Network bandwidth between nodes, GB/s per direction, with --nodes 2 or more (or bits:"
                      " 400Gb/s, 3.2Tb/s) [default: 12.5, i.e. 100Gb/s]."),
)
gpu_options = group(
    click.option("--gpus", type=GPU_COUNT, help="GPUs per node [default: those of this machine]."),
    click.option("--gpu-mem", type=SIZE, help="Memory per GPU: 80GB (= 80 GiB, as the card is sold), 16000MiB"
                                              " [default: --gpu-model's, else this machine's]."),
    click.option("--gpu-model", type=GPU_MODEL, help="GPU model (A100-80GB, H100, RTX 4090...): fills --gpu-mem, bf16"
                                                     " support and NVLink bandwidth; an unknown name is refused."),
    click.option("--link", type=LINK, help="Weakest link between GPUs as nvidia-smi prints it: NV12, PIX, PHB, SYS..."),
)

# inspect's options that feed only the memory plan: refused without --model (each shared option is covered).
PLAN_INPUTS = ("gpu_mem",) + tuple(n for n in names(model_options) + names(training_options) + names(host_options)
                                   if n not in ("model", "params"))
