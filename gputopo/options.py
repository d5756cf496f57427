"""One vocabulary for every command: each kind of value is a click ParamType checked once, by the owner of its
rule (units for sizes, topology for links, gpus for GPU models), and options are shared as groups."""
from __future__ import annotations

import re

import click

from .units import MOST_BYTES, MOST_CHARS, MOST_COUNT, NUMBER, shown, whole

OPTIMIZERS = ("adamw", "adamw-8bit", "adafactor", "sgd")  # plan.OPTIMIZER_BYTES; named here so --help stays light

# What no machine has, named in each refusal and in docs/options.md: a value beyond is a typo or a unit slip.
GPU_MEM = (2 ** 30, 2 ** 41)   # 1 GiB (the smallest MIG slice has 5 GB) to 2 TiB (the largest GPUs have 288 GB)
CPU_MEM = (2 ** 30, 2 ** 46)   # 1 GiB to 64 TiB per node (HPE's Superdome Flex holds 48 TB)
NVME_FREE = (2 ** 30, 2 ** 54)   # 1 GiB to 16 PiB per node (24 drives of 122 TB are 2.9 PB)
MOST_NODES = 100_000           # 800,000 GPUs at 8 a node: more than any cluster
MOST_CORES = 8192              # Linux's most CPUs (NR_CPUS with MAXSMP)
MOST_SECONDS = 7 * 24 * 3600   # a week: no run is waited on longer
GBPS = (0.01, 1e6)             # GB/s: 100 Mb/s Ethernet is 0.0125; 1 PB/s is beyond any link
MOST_PATH = 4096               # characters: Linux's PATH_MAX


class _Owned(click.ParamType):
    """A value converted by its rule's owner; the owner's ValueError becomes click's one-line usage error. A text
    longer than any value of its kind is refused before it is read (int() refuses 4301 digits with a traceback)."""
    most_chars, kind = MOST_CHARS, "number"

    def convert(self, value, param, ctx):
        if not isinstance(value, str):
            return value
        if len(value) > self.most_chars:
            self.fail(f"{shown(value)}: longer than any {self.kind} (at most {self.most_chars} characters)", param, ctx)
        try:
            return self.parse(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)

    def parse(self, text: str):
        raise NotImplementedError


class Size(_Owned):
    """Bytes in binary units, as GPUs are sold and nvidia-smi and `free -g` print them: 80GB = 80 GiB; from
    `least` to `most` (what `has` names)."""
    name = "SIZE"

    def __init__(self, least: int = 1, most: int = MOST_BYTES, has: str = "any machine has"):
        self.least, self.most, self.has = least, most, has

    def parse(self, text):
        from .units import parse_size
        return parse_size(text, self.least, self.most, self.has)


class SizeList(Size):
    """Comma-separated sizes: 1MB,4MB,64MB."""
    name = "SIZE,.."
    most_chars, kind = 1024, "list of sizes"

    def parse(self, text):
        return [super(SizeList, self).parse(p) for p in entries(text, "sizes like 1MB,4MB,64MB")]


class Count(_Owned):
    """A whole number of things, at least `least` (1 unless told) and at most `most` (what a run can have: a
    count beyond it is a typo, and planning with it would print sizes no machine has)."""
    name = "N"

    def __init__(self, least: int = 1, most: int = MOST_COUNT, what: str = "a run has", why: str = ""):
        self.least, self.most, self.what, self.why = least, most, what, why

    def convert(self, value, param, ctx):
        n = super().convert(str(value) if isinstance(value, int) and not isinstance(value, bool) else value,
                            param, ctx)
        if n < self.least:
            self.fail(f"must be {self.least} or more, not {n}", param, ctx)
        if n > self.most:
            self.fail(f"{n} is more than {self.what} (at most {self.most}{'; ' + self.why if self.why else ''})",
                      param, ctx)
        return n

    def parse(self, text):
        return whole(text)


class ModelCount(Count):
    """A count in a model's shape (--layers; --hidden-size and --vocab-size, "widths"), bounded as config.json's
    are: gputopo.models owns the bounds, imported here only when a value is read (inspect of a paste stays light)."""

    def __init__(self, shape: str):
        super().__init__(what="any model has")
        self.shape = shape

    def convert(self, value, param, ctx):
        from .models import BOUNDS
        self.most, self.why = BOUNDS[self.shape]
        return super().convert(value, param, ctx)


class Seconds(_Owned):
    """Seconds, 0 or more (above 0 when `positive`) and at most a week (nan and inf are not durations; 1e30 s
    overflows every clock a timeout is set on)."""
    name = "SECONDS"

    def __init__(self, positive: bool = False):
        self.positive = positive

    def parse(self, text):
        if not re.fullmatch(rf"\s*{NUMBER}\s*", text):
            raise ValueError(f"{text!r}: expected seconds, like 30 or 1.5")
        s = float(text)
        if s < 0 or (self.positive and s == 0):
            raise ValueError(f"{text!r}: expected a number of seconds {'above' if self.positive else 'from'} 0")
        if s > MOST_SECONDS:
            raise ValueError(f"{text}: longer than any run is waited on (at most {MOST_SECONDS} s, a week)")
        return s


class Bandwidth(_Owned):
    """GB/s per direction, above 0: 12.5, 25GB/s, or 100Gb/s (a lowercase b is bits, as networks are sold)."""
    name = "GB/S"

    def parse(self, text):
        m = re.fullmatch(rf"\s*({NUMBER})\s*(?:([GT])(B/s|Bps|b/s|bps|bit/s))?\s*", text)
        if not m:
            raise ValueError(f"{text}: expected GB/s per direction, like 12.5, 25GB/s, 100Gb/s or 3.2Tb/s")
        # a lowercase b is bits (networks are sold so: 8 x 400Gb/s = 3.2Tb/s); T is a thousand G
        n = float(m.group(1)) * (1000 if m.group(2) == "T" else 1) / (8 if (m.group(3) or "").startswith("b") else 1)
        if n <= 0:
            raise ValueError(f"{text}: a bandwidth must be above 0 GB/s")
        if n < GBPS[0]:
            raise ValueError(f"{text}: slower than any network (at least {GBPS[0]:g} GB/s; 100 Mb/s Ethernet is"
                             " 0.0125 GB/s)")
        if n > GBPS[1]:   # inf included
            raise ValueError(f"{text}: more than any link carries (at most {GBPS[1]:.0f} GB/s)")
        return n


class GpuModelType(_Owned):
    """A GPU model gputopo knows (its memory and bf16 support then follow), or a one-line refusal naming them."""
    name = "GPU-MODEL"
    most_chars, kind = 96, "GPU model"   # NVML_DEVICE_NAME_V2_BUFFER_SIZE

    def parse(self, text):
        from . import gpus
        return gpus.known(text)


class LinkType(_Owned):
    """A link type as nvidia-smi topo -m prints it."""
    name = "TYPE"
    kind = "link type"

    def parse(self, text):
        from .topology import link_type
        return link_type(text)


class GpuIds(_Owned):
    """Which GPUs, by index as nvidia-smi numbers them: 0,1,3 (accelerate's --gpu_ids). --gpus is a count."""
    name = "0,1,.."
    most_chars, kind = MOST_PATH, "list of GPUs"

    def parse(self, text):
        rule = f"GPU indices like 0,1,3, below {GPU_COUNT.most} (--gpus is a count)"
        ids = []
        for p in entries(text, rule):
            try:
                n = whole(p) if len(p) <= 8 and p.strip()[:1] not in "+-" else -1
            except ValueError:
                n = -1
            if not 0 <= n < GPU_COUNT.most:
                raise ValueError(f"{shown(text)}: {rule}; not {shown(p.strip())!r}")
            if n in ids:
                raise ValueError(f"{shown(text)}: GPU {n} is named twice; name each GPU once")
            ids.append(n)
        return tuple(ids)


def entries(text: str, rule: str) -> list[str]:
    """The entries of a comma-separated list (--gpu-ids, --allreduce-sizes): an empty one ('0,,1', '1MB,') is
    refused, not skipped, by every list alike. `rule` says what the list holds."""
    parts = text.split(",")
    if any(not p.strip() for p in parts):
        where = "is empty" if not text.strip() else "has an empty entry"
        raise ValueError(f"{shown(text)!r} {where}: expected {rule}")
    return parts


class Fraction(_Owned):
    """A probability: 0 or more and below 1 (a dropout of 1 drops everything)."""
    name = "P"

    def parse(self, text):
        if not re.fullmatch(rf"\s*{NUMBER}\s*", text):
            raise ValueError(f"{shown(text)!r}: expected a probability like 0.05")
        p = float(text)
        if not 0 <= p < 1:
            raise ValueError(f"{text}: a probability from 0 up to (not including) 1")
        return p


class Names(_Owned):
    """Comma-separated module names (q_proj,v_proj), each a dotted Python name: PEFT's target_modules."""
    name = "NAMES"
    most_chars, kind = MOST_PATH, "list of module names"

    def parse(self, text):
        rule = "module names like q_proj,v_proj (or all-linear)"
        out = []
        for p in entries(text, rule):
            p = p.strip()
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*|all-linear", p, re.ASCII):
                raise ValueError(f"{shown(p)!r}: not a module name; expected {rule}")
            if p in out:
                raise ValueError(f"{shown(text)}: {p} is named twice")
            out.append(p)
        return tuple(out)


class Text(_Owned):
    """A name, path or address: an empty value is refused rather than read as "not given"."""
    name = "TEXT"
    most_chars, kind = MOST_PATH, "name, path or address"

    def __init__(self, metavar: str = "TEXT"):
        self.name = metavar

    def parse(self, text):
        if not text.strip():
            raise ValueError("is empty: give a value, or leave the option out")
        return text


SIZE, COUNT, BANDWIDTH, GPU_MODEL, LINK = Size(), Count(), Bandwidth(), GpuModelType(), LinkType()
SIZES = SizeList(most=GPU_MEM[1], has="a GPU holds")   # an all-reduce buffer lives in one GPU's memory
GPU_SIZE, CPU_SIZE = Size(*GPU_MEM, has="any GPU has"), Size(*CPU_MEM, has="any node has")
NVME_SIZE = Size(*NVME_FREE, has="any node's disks hold")
GPU_COUNT = Count(most=1024, what="a node holds")
NODES = Count(most=MOST_NODES, what="any cluster has", why="800,000 GPUs at 8 a node")
CORES = Count(most=MOST_CORES, what="a node has", why="Linux's NR_CPUS with MAXSMP")
LAYERS, WIDTH = ModelCount("layers"), ModelCount("widths")
TIMEOUT = Seconds(positive=True)
PORT = Count(most=65535, what="a TCP port number")
GPU_IDS, PATH, DIR, TEXT = GpuIds(), Text("PATH"), Text("DIR"), Text()
RANK = Count(what="a LoRA adapter has", most=2 ** 16, why="a rank is at most the smaller side of the module it adapts")
FRACTION, NAMES = Fraction(), Names()


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


def one_value(param: click.Parameter, texts: list[str], ctx: click.Context | None = None) -> bool:
    """Whether the texts typed for one option are one value as its type reads it: 80GB and 80GiB, 4 and 04,
    25 and 25GB/s are each one value (docs/options.md), so an option given twice with them is given once. A flag's
    texts are its spellings (--hf, --no-hf); a text its type refuses is compared as typed (its refusal follows)."""
    def read(text):
        try:
            return text if getattr(param, "is_flag", False) else param.type.convert(text, param, ctx)
        except click.BadParameter:
            return text
    first = read(texts[0])
    return all(read(text) == first for text in texts[1:])


def names(decorator) -> tuple[str, ...]:
    """The click names of the options a shared group adds."""
    return tuple(p.name for p in decorator(lambda: None).__click_params__)


model_options = group(
    click.option("--model", type=TEXT, metavar="NAME|PATH",
                 help="A known model (gpt2, t5-3b, llama-2-7b, ...) or a folder with config.json."),
    click.option("--params", type=TEXT, metavar="N", help="Parameter count (7B, 350M) when only the size is known."),
    click.option("--hidden-size", type=WIDTH, help="Hidden size, with --params."),
    click.option("--layers", type=LAYERS, help="Transformer blocks, with --params."),
    click.option("--vocab-size", type=WIDTH, help="Vocabulary size, with --params (optional)."),
)
training_options = group(
    click.option("--precision", type=click.Choice(["fp32", "tf32", "fp16", "bf16"]),
                 help="Training precision; bf16 needs Ampere or newer, and so does tf32 (fp32 weights, gradients and"
                      " states, the matmuls in TF32 on tensor cores) [default: bf16 on Ampere or newer, else fp16]."),
    click.option("--optimizer", type=click.Choice(list(OPTIMIZERS)), default="adamw", show_default=True,
                 help="Optimizer: its states take 8 (AdamW), 2 (8-bit Adam) or 4 (SGD with momentum) bytes per"
                      " parameter; Adafactor as the HF Trainer runs it keeps a row and a column per weight matrix"
                      " (4 per parameter where DeepSpeed or FSDP flattens the tensors)."),
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
    click.option("--variable-length", is_flag=True,
                 help="Micro-batches padded to their longest sample, so lengths vary from step to step (no"
                      " packing): the reserved figure adds the caching allocator's segments of an earlier, shorter"
                      " step, which the longest step's tensors do not fit."),
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
    click.option("--optimizer-impl", type=click.Choice(["foreach", "for-loop", "fused"]),
                 help="How torch's AdamW or SGD steps, as their foreach= and fused= arguments say: foreach (CUDA's"
                      " default: a few kernels for all tensors, and a temporary as large as the model), for-loop"
                      " (the CPU's default, and transformers' own AdamW: about 8 kernels per tensor, each dispatched"
                      " by the host), fused (one kernel, no temporary) [default: foreach on GPUs, for-loop on CPU]."),
    click.option("--zero-grad", type=click.Choice(["none", "zeros"]),
                 help="What optimizer.zero_grad() leaves between steps: none (set_to_none=True, torch 2.0's default:"
                      " the gradients are freed until backward writes them), zeros (set_to_none=False, torch 1.x's"
                      " default: they stay allocated through the next forward) [default: none]."),
    click.option("--sync-each-batch", is_flag=True, default=None,
                 help="Reduce the gradients on every micro-batch of an accumulation, as accelerate's sync_each_batch"
                      " does (torchtune's recipes too): DDP all-reduces each one, FSDP keeps only its shards. Without"
                      " it DDP and FSDP accumulate under no_sync, as the HF Trainer, accelerate and Lightning do: FSDP"
                      " then keeps every unit's whole gradient until the last micro-batch."),
    click.option("--fsdp-use-orig-params", is_flag=True, default=None,
                 help="FSDP's use_orig_params=True (accelerate's fsdp_use_orig_params, Lightning's default) with"
                      " --finetune lora|qlora: each block's unit holds the frozen base and its adapters in one flat"
                      " parameter, whose gradient covers the whole unit, as if nothing were frozen [default: false,"
                      " the adapters wrapped apart, as gputopo's accelerate config and PEFT's FSDP guide do]."),
    click.option("--bnb-keeps-input", is_flag=True, default=None,
                 help="bitsandbytes before 0.43.2, with --finetune qlora: each 4-bit matmul keeps its input for"
                      " backward (MatMul4Bit's ctx.tensors = (A, B), dropped by bitsandbytes#1270): the quantized"
                      " projections' inputs of every block, of one block under (reentrant) checkpointing"
                      " [default: false, bitsandbytes 0.43.2 and later keep none]."),
    click.option("--non-reentrant-checkpointing", is_flag=True, default=None,
                 help="Checkpointing runs torch.utils.checkpoint with use_reentrant=False (ms-swift 1.x patches it"
                      " so), with --bnb-keeps-input: its saved-tensor hooks never see what bitsandbytes stores on"
                      " ctx, so every block keeps its 4-bit matmuls' inputs until the backward ends [default: false,"
                      " reentrant, the HF Trainer's and torch's default]."),
    click.option("--loop-keeps-graph", is_flag=True, default=None,
                 help="The training loop keeps naming the last micro-batch's output and loss until the next"
                      " forward replaces them (litgpt's finetune scripts), with --finetune lora|qlora: its logits,"
                      " and with --bnb-keeps-input its 4-bit matmuls' inputs, live beside the new forward"
                      " [default: false, dropped after the backward, as the HF Trainer does]."),
    click.option("--activation-offload", is_flag=True, default=None,
                 help="torchtune's enable_activation_offloading (OffloadActivations), with --grad-checkpointing:"
                      " each checkpointed block's input goes to pinned host RAM in the forward (the last 3 stay on"
                      " the GPU) and comes back, the compute stream waiting, when its backward needs it; priced for"
                      " the torch strategies (single, DDP, FSDP) [default: false, kept on the GPU]."),
    click.option("--quantizer", type=click.Choice(["transformers", "lightning"]),
                 help="What quantized QLoRA's base: transformers (BitsAndBytesConfig: every Linear but the output"
                      " head, from the compute dtype), lightning (Lightning Fabric's BitsandbytesPrecision, litgpt's"
                      " --quantize bnb.*: every Linear, the head too, from fp16; each of the head's matmuls"
                      " dequantizes it to fp16, then casts it) [default: transformers]."),
    click.option("--finetune", type=click.Choice(["full", "lora", "qlora"]),
                 help="What is trained: full (every weight), lora (PEFT LoRA adapters beside the frozen base, loaded in"
                      " 16 bits), qlora (the same with the base in 4-bit NF4, bitsandbytes with double quantization)"
                      " [default: full]."),
    click.option("--lora-rank", type=RANK, help="LoRA's rank r, with --finetune lora|qlora [default: 8, PEFT's]."),
    click.option("--lora-targets", type=NAMES, metavar="NAMES|all-linear",
                 help="The modules LoRA adapts, as PEFT's target_modules names them (q_proj,v_proj), or all-linear"
                      " (every Linear but the output head) [default: PEFT's default for the architecture]."),
    click.option("--lora-dropout", type=FRACTION,
                 help="LoRA's dropout on the adapters' input: each target then keeps a mask and its own copy"
                      " [default: 0, PEFT's]."),
    click.option("--cuda-module-loading", type=click.Choice(["lazy", "eager"]),
                 help="How CUDA loads its kernels, as CUDA_MODULE_LOADING says: lazy (CUDA 11.7 and later, the"
                      " default: a context of about 520 MiB), eager (older stacks load every module at start: 1343 MB"
                      " on the single-GPU guide's V100 with CUDA 11.2) [default: lazy]."),
)
host_options = group(
    click.option("--cpu-mem", type=CPU_SIZE, help="CPU RAM per node, e.g. 512GB [default: this machine's]."),
    click.option("--cpu-cores", type=CORES, help="CPU cores per node: DeepSpeed's CPU Adam steps an offloaded"
                                                 " optimizer on them [default: this machine's physical cores]."),
    click.option("--nvme-path", type=DIR, metavar="DIR",
                 help="Folder for NVMe offload [default: the local NVMe mount with the most free space, else the"
                      " roomiest local disk; `gputopo doctor` lists the disks]."),
    click.option("--nvme-free", type=NVME_SIZE, help="Free NVMe space per node [default: measured at --nvme-path]."),
    click.option("--nodes", type=NODES, default=1, show_default=True, help="Nodes (each like this one)."),
    click.option("--inter-node-gbps", type=BANDWIDTH,
                 help="Network bandwidth between nodes, GB/s per direction, with --nodes 2 or more (or bits:"
                      " 400Gb/s, 3.2Tb/s) [default: 12.5, i.e. 100Gb/s]."),
)
gpu_options = group(
    click.option("--gpus", type=GPU_COUNT, help="GPUs per node [default: those of this machine]."),
    click.option("--gpu-mem", type=GPU_SIZE, help="Memory per GPU: 80GB (= 80 GiB, as the card is sold), 16000MiB"
                                              " [default: --gpu-model's, else this machine's]."),
    click.option("--gpu-model", type=GPU_MODEL, help="GPU model (A100-80GB, H100, RTX 4090...): fills --gpu-mem, bf16"
                                                     " support and NVLink bandwidth; an unknown name is refused."),
    click.option("--link", type=LINK, help="Weakest link between GPUs as nvidia-smi prints it: NV12, PIX, PHB, SYS..."),
)

# --steps: the whole run, for plan, inspect --model and deepspeed-config --auto alike (its time, --max_steps).
steps_option = click.option("--steps", type=COUNT, help="Optimizer steps of the whole run: also print its predicted"
                                                        " time (and --max_steps on an --auto launch line).")

# inspect's options that feed only the memory plan: refused without --model (each shared option is covered).
PLAN_INPUTS = ("gpu_mem", "steps") + tuple(n for n in names(model_options) + names(training_options)
                                            + names(host_options) if n not in ("model", "params"))
