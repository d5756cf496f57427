"""deepspeed-config's work: a resolved request and the config options -> the config, its notes and its launch.

Everything `gputopo deepspeed-config` decides lives here (the command only reads options, calls `generate` and
prints): which stage and offload (--stage, or the plan's choice with --auto), the NVMe folder and its room
(asked of gputopo.nvme, as plan and doctor do), the precision written, DeepSpeed's own validation, the
pre-flight doctor and the launcher files."""
from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import dataclass, field, replace

from . import dsconfig, launch, nvme, validate
from .errors import BadInput, DoesNotFit
from .units import gib

# Options that only feed the memory plan: without --auto they would change nothing, so they are refused.
PLAN_ONLY = ("gpu_mem", "link", "seq_len", "attention", "flash_attention", "cpu_mem", "inter_node_gbps",
             "grad_checkpointing", "cpu_cores", "kernels", "loss", "selective_checkpointing", "pure_16bit", "steps",
             "cuda_module_loading", "variable_length", "bnb_keeps_input", "quantizer",
             "non_reentrant_checkpointing", "loop_keeps_graph")
# Options that describe torch's own optimizer loop, which a DeepSpeed config replaces (its fused optimizer steps,
# and its engine frees the gradients): refused, with or without --auto; plan prices them.
TORCH_LOOP = ("optimizer_impl", "zero_grad", "sync_each_batch", "fsdp_use_orig_params", "activation_offload")
ELSEWHERE = "/local_nvme"   # nvme_path in a config for another machine: the folder DeepSpeed's docs use
TOLD = ("batch_size", "grad_accum", "global_batch", "optimizer", "grad_checkpointing", "precision")
# transformers model types Liger Kernel patches with its fused linear cross-entropy (liger_kernel/transformers/
# monkey_patch.py, MODEL_TYPE_TO_APPLY_LIGER_FN; Granite's has none): the HF Trainer's --use_liger_kernel applies
# Liger's RMSNorm, SwiGLU/GeGLU and RoPE kernels and that loss to them, which is --kernels fused --loss chunked.
LIGER = ("llama", "mistral", "mixtral", "ministral", "qwen2", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3",
         "gemma3_text", "phi3", "olmo2", "olmo3", "glm4", "smollm3", "nemotron", "falcon_h1", "gpt_oss")


@dataclass
class Ask:
    """The options of deepspeed-config beyond the shared request."""
    stage: int | None = None
    offload: str = "none"
    auto: bool = False
    hf: bool = True
    output: str | None = None      # None: the config goes to stdout
    launcher: str | None = None
    script: str = "train.py"
    ds_optimizer: bool = False
    master_addr: str | None = None
    master_port: int = launch.PORT
    cpus_per_task: int | None = None
    check: bool = False
    torch_adam: bool = False        # --no-compile-ops
    nvme_path: str | None = None
    nvme_free: int | None = None
    offload_params: bool | None = None
    given: frozenset = frozenset()  # the click names typed on the command line


@dataclass
class Result:
    config: dict
    path: str | None
    launch: dict | None
    warnings: list = field(default_factory=list)
    plan: dict | None = None
    training_arguments: dict | None = None

    @property
    def text(self) -> str:
        return json.dumps(self.config, indent=2) + "\n"

    @property
    def files(self) -> dict:
        """Every file to write: the config (unless printed) and the launcher's files beside it."""
        out = {self.path: self.text} if self.path else {}
        return {**out, **(self.launch["files"] if self.launch and self.path else {})}

    def to_dict(self) -> dict:
        return {"schema_version": 1, "config": self.config, "path": os.path.abspath(self.path) if self.path else None,
                "launch": self.launch, "warnings": self.warnings, "plan": self.plan,
                "training_arguments": self.training_arguments}


def check_options(a: Ask, nodes: int, has_model: bool) -> None:
    """Refuse, before any work, options that contradict each other or would change nothing."""
    if a.auto and a.stage is not None:
        raise BadInput("give --stage or --auto, not both")
    if a.auto and not has_model:
        raise BadInput("--auto needs --model (or --params) to plan for")
    if a.stage is None and not a.auto:
        raise BadInput("give --stage 0|1|2|3, or --auto with --model")
    if a.auto and "offload" in a.given:
        raise BadInput("--auto takes the offload from the plan: give --stage and --offload, or --auto")
    if "force" in a.given and not a.output:
        raise BadInput("--force overwrites --output; give -o PATH")
    if a.offload_params is False and a.offload == "none" and not a.auto:  # --offload-params: dsconfig.check
        raise BadInput("--no-offload-params needs --offload cpu or nvme (with nothing offloaded it changes nothing)")
    if a.stage == 0 and has_model and not a.auto and a.offload == "none":
        raise BadInput("--model sizes ZeRO's buckets and offload; stage 0 has neither: drop it, or give --stage 1-3"
                       " or --auto")
    torch_loop = [f"--{k.replace('_', '-')}" for k in TORCH_LOOP if k in a.given]
    if torch_loop:
        raise BadInput(f"{' and '.join(torch_loop)} describe{'s' if len(torch_loop) == 1 else ''} torch's own"
                       " optimizer loop (DDP's and FSDP's gradients, torch's optimizer); a DeepSpeed config runs"
                       " DeepSpeed's (its fused optimizer steps, its engine reduces and frees the gradients): drop it"
                       " (gputopo plan prices a torch loop)")
    if not a.auto:
        unused = [f"--{k.replace('_', '-')}" for k in PLAN_ONLY if k in a.given
                  and not (k == "grad_checkpointing" and a.hf)]
        if a.nvme_free is not None and a.offload == "nvme" and not has_model:
            raise BadInput("--nvme-free is checked against what the offload needs: give --model too")
        unused += [f"--{k.replace('_', '-')}" for k in ("nvme_free", "nvme_path") if k in a.given
                   and a.offload != "nvme"]
        if unused:
            raise BadInput(f"{', '.join(unused)} only {'feeds' if len(unused) == 1 else 'feed'} the memory plan:"
                           " add --auto (with --model), or drop " + ("it" if len(unused) == 1 else "them"))
    launch.check_options(a.launcher, nodes, a.master_addr, a.master_port if "master_port" in a.given else None,
                         script_given="script" in a.given, cpus_given="cpus_per_task" in a.given,
                         script=a.script)
    if a.launcher and a.output and a.output.startswith("-"):   # the launch line names it: read as an option there
        raise BadInput(f"--output {a.output}: the launch line would pass it as an option; write ./{a.output}")
    fsdp = [launch.FSDP_YAML] if a.launcher == "accelerate" and a.auto else []   # written where the plan picks FSDP
    written = launch.file_names(a.launcher, nodes) + fsdp
    if a.launcher and a.output and os.path.basename(a.output) in written:
        raise BadInput(f"--output {a.output}: --launcher {a.launcher} writes a file of that name beside the config;"
                       " name the config otherwise (ds_config.json)")


def _strategy(a: Ask, req, rates=None, device: str = "cuda") -> tuple[int, str, dict | None, list, object, str]:
    """(stage, offload, plan, notes, request, strategy): as given, or what `gputopo plan` recommends with --auto,
    with the request's training as its search chose it (micro-batch, accumulation, checkpointing, parameter
    offload).
    rates, device: the plan's own (plan --calibrate's), else the GPU's datasheet."""
    if not a.auto:
        return a.stage, a.offload, None, [], req, None
    from . import advise, report, search, speed
    original, rates = req, rates or speed.gpu_rates(req.layout, req.training)
    req, found = search.best(req, rates, device)
    planned = report.plan_for(req, found=found, rates=rates, device=device, steps=req.steps)
    chosen = planned["recommendation"]["strategy"]
    if chosen is None:
        raise DoesNotFit(planned["recommendation"]["reasons"][0] + " (`gputopo plan` with the same options shows"
                                                                    " every strategy)")
    head = f"--auto: gputopo plan recommends {chosen}"
    if chosen not in dsconfig.STRATEGY_TO_CONFIG:   # PyTorch FSDP: the best DeepSpeed configuration instead
        pick = planned["recommendation"]
        head += (f", micro-batch {pick['micro_batch']} x {pick['grad_accum']} accumulation"
                 + (", gradient checkpointing" if pick["grad_checkpointing"] else "")
                 + f" ({_step(planned, chosen)}): PyTorch FSDP, which no DeepSpeed config expresses (the HF Trainer"
                 " runs it with --fsdp 'full_shard auto_wrap' instead of --deepspeed), so this config holds another:"
                 " the fastest DeepSpeed one that fits")
        ds, ds_found = search.best(original, rates, device, allowed=tuple(dsconfig.STRATEGY_TO_CONFIG))
        rows = {s["name"]: s for s in report.plan_for(ds, found=ds_found, rates=rates, device=device,
                                                      steps=req.steps)["strategies"]}
        fit = [n for n in rows if n in dsconfig.STRATEGY_TO_CONFIG and rows[n]["fits"]]
        if not fit:
            raise DoesNotFit(f"gputopo plan recommends {chosen} (PyTorch FSDP) and no DeepSpeed strategy fits")
        chosen = ((ds_found or {}).get("chosen") or {}).get("strategy") or min(
            fit, key=lambda n: (rows[n]["tight"], rows[n]["time"]["step_s"] or float("inf")))
        head += f" is {chosen}"
        req, row = ds, rows[chosen]
    else:
        row = next(r for r in planned["strategies"] if r["name"] == chosen)
    t, time = req.training, row["time"]
    room = f"{gib(row['per_gpu_bytes']['total'])} per GPU of {gib(req.layout.gpu_mem_bytes)}" \
        + (" (tight: into the 10 % kept for fragmentation)" if row["tight"] else "")
    run = f", {advise.run_words(time['run_s'])} for {req.steps:,} steps" if time.get("run_s") else ""
    said = [head + f", micro-batch {t.batch_size} x {t.grad_accum} accumulation"
            + (", gradient checkpointing" if t.grad_checkpointing else ", selective checkpointing" if t.selective
               else "") + ": "
            + (f"predicted {time['step_s']:.3f} s/step ({time['tokens_per_s']:,.0f} tokens/s{run}), {room}; `gputopo"
               " plan` with the same options shows what it assumes" if time["step_s"] else
               f"{room}; no step time ({time['basis']})")]
    if t.selective:
        said.append("the plan assumed selective checkpointing (torchtitan's per-op policy, every other matmul's"
                    " output kept): neither the HF Trainer nor DeepSpeed has a flag for it, so your script applies it"
                    " (torch.utils.checkpoint with a selective policy); without it this micro-batch may not fit")
    stage, offload = dsconfig.STRATEGY_TO_CONFIG[chosen]
    return stage, offload, planned, said, req, chosen


def _step(planned: dict, name: str) -> str:
    """A strategy's predicted step in the plan, in words."""
    time = next(r["time"] for r in planned["strategies"] if r["name"] == name)
    return f"{time['step_s']:.3f} s/step, {time['tokens_per_s']:,.0f} tokens/s" if time["step_s"] else "no step time"


def _nvme(a: Ask, req, offload: str) -> tuple[str | None, int | None, list]:
    """The NVMe folder (gputopo.nvme's rule), the bytes offload needs there, and what to say about it."""
    if offload != "nvme":
        return None, None, []
    if req.elsewhere and a.nvme_path is None:   # GPUs described, not this machine's: nothing of its disks
        need = _nvme_need(req)
        room = f" with {gib(need)} free per node" if need else ""
        return ELSEWHERE, need, [f"nvme_path {ELSEWHERE} (DeepSpeed's documented example): the machine planned for"
                                 f" is not this one, so edit it to a folder on that machine's NVMe{room}"
                                 " (--nvme-path names a folder here, and is checked here)"]
    chosen = nvme.folder(a.nvme_path)
    notes = [chosen.picked] if chosen.picked else []
    need = _nvme_need(req)
    if need is not None:
        notes += [n for n in [nvme.room(chosen, need, a.nvme_free)] if n]
    if not a.check and validate.libaio_ok() is False:
        notes.append("DeepSpeed's async_io op cannot build here: install libaio-dev (ds_report shows it)")
    return os.path.abspath(chosen.path), need, notes


def _nvme_need(req) -> int | None:
    """NVMe bytes per node of the config written: the plan's own figure for ZeRO-3 with NVMe offload (the optimizer
    alone where the parameters stay on the GPUs), so the note and plan's NVMe/node column say one number."""
    if req.model is None:
        return None
    from .plan import model_states, nvme_bytes
    if req.layout is None:   # no layout asked (a config without --auto): the whole model's states
        return nvme_bytes(req.model, req.training, req.nodes)
    return model_states("zero3_offload_nvme", req.model, req.layout, req.training)[2]


def _precision(a: Ask, req) -> str | None:
    """The precision written into the config. With --hf and no --precision the Trainer's own fp16/bf16 flags
    decide ("auto"); accelerate reads precision from the DeepSpeed file only (it refuses mixed_precision
    beside it), so it is written out there."""
    if "precision" in a.given or a.auto or not a.hf or a.launcher == "accelerate":
        return req.training.precision
    return None


def _build(a: Ask, req, stage: int, offload: str, nvme_path: str | None, precision: str | None) -> tuple[dict, list]:
    """The config dict and the notes on what the script must supply."""
    model, t = req.model, req.training
    accelerate = a.launcher == "accelerate"
    cfg = dsconfig.build(stage, offload, dsconfig.Shape(
        hf=a.hf, nvme_path=nvme_path,
        offload_params=t.offload_params if "offload_params" in a.given or a.auto and stage == 3 and offload != "none"
        else None,
        precision=precision, hidden_size=model.hidden_size if model else None,
        largest_layer=model.largest_layer_params if model else None, batch_size=t.batch_size,
        grad_accum=t.grad_accum, gpus=None if req.gpus_assumed else req.world,  # unknown: DeepSpeed derives it
        optimizer=t.optimizer, torch_adam=a.torch_adam, accelerate=accelerate, ds_optimizer=a.ds_optimizer))
    if accelerate:
        return cfg, dsconfig.accelerate_notes(cfg, hf=a.hf, ds_optimizer=a.ds_optimizer, optimizer=t.optimizer,
                                              torch_adam=a.torch_adam)
    if t.optimizer != "adamw" and not a.hf:
        return cfg, [f"--optimizer {t.optimizer}: no optimizer block;"
                     " pass yours to deepspeed.initialize(optimizer=...)"]
    return cfg, []


def _trainer_note(a: Ask, req, targs: dict | None) -> list:
    """What reaches the "auto" values, said when the user set any of them; without the Trainer, the batch the
    config holds when --global-batch chose its micro-batch."""
    t = req.training
    if not a.hf:   # concrete values in the config (an HF form, accelerate's too, holds "auto")
        return ([f"the config holds micro-batch {t.batch_size} x {t.grad_accum} accumulation x {req.world} GPU(s) ="
                 f" {req.global_batch} per step (--batch-size to choose the micro-batch)"]
                if "global_batch" in a.given and "batch_size" not in a.given and req.global_batch else [])
    if not targs or not (set(TOLD) & a.given or a.auto):
        return []
    return ["the HF Trainer fills the \"auto\" values from TrainingArguments("
            + ", ".join(f"{k}={v!r}" for k, v in targs.items()) + ")"
            + (f": {t.batch_size} x {t.grad_accum} x {req.world} GPU(s) = {req.global_batch} per step"
               if req.global_batch else "")]


def _assumed(a: Ask, req, stack: dict | None = None) -> dict:
    """What the plan assumed that the training script itself must do (launch.script_needs names it): the
    micro-batch, gradient checkpointing, the run's steps, the stack (`stack`: what no flag of the script's runs), and
    for accelerate whether the GPUs are this machine's and none is here (else gloo must be asked)."""
    out = {"micro_batch": req.training.batch_size, "grad_checkpointing": req.training.grad_checkpointing,
           "steps": req.steps if a.auto else None, "stack": list((stack or {}).get("script", []))}
    if a.launcher == "accelerate" and not req.elsewhere:   # GPUs described: the machine planned has them
        from . import probe
        from .errors import NvmlUnavailable
        try:
            out["no_gpu"] = not probe.topology().gpus
        except NvmlUnavailable:
            out["no_gpu"] = True
    return out


def peft_lines(t, strategy: str | None) -> list[str]:
    """What a training script does for the plan's LoRA or QLoRA: no Trainer flag wraps a model in PEFT (TRL's SFT
    script has them: said beside), and a 4-bit base that ZeRO-3 or FSDP shard must be stored in the 16-bit dtype
    they flatten (bnb_4bit_quant_storage: accelerate's FSDP/DeepSpeed QLoRA guides)."""
    ft = t.finetune
    if not ft.peft:
        return []
    targets = "all-linear" if "all-linear" in ft.targets else list(ft.targets)
    compute = {"bf16": "torch.bfloat16", "fp16": "torch.float16"}.get(t.precision, "torch.float32")
    lines = [f"LoRA: model = peft.get_peft_model(model, LoraConfig(r={ft.rank}, target_modules={targets!r},"
             f" lora_dropout={ft.dropout:g})) before training, the base frozen (TRL's SFT script: --use_peft"
             f" --lora_r {ft.rank} --lora_target_modules {' '.join(ft.targets)} --lora_dropout {ft.dropout:g})"]
    if ft.quantized:
        sharded = (strategy or "").startswith(("zero3", "fsdp"))
        storage = f", bnb_4bit_quant_storage={compute}" if sharded else ""
        lines.insert(0, "QLoRA: load the base with from_pretrained(..., quantization_config=BitsAndBytesConfig("
                     "load_in_4bit=True, bnb_4bit_quant_type=\"nf4\", bnb_4bit_use_double_quant=True,"
                     f" bnb_4bit_compute_dtype={compute}{storage}))"
                     + (f" ({strategy} shards the 4-bit weights only when they are stored in {compute})"
                        if sharded else " and peft.prepare_model_for_kbit_training(model)")
                     + " (TRL's SFT script: --load_in_4bit --bnb_4bit_quant_type nf4 --use_bnb_nested_quant)")
    return lines


def stack(req, trainer: bool, strategy: str | None = None) -> dict:
    """What the plan assumed of the training stack beyond transformers' own code as the HF Trainer runs it, as the
    Trainer's flags ("flags": TrainingArguments, only for the Trainer) and, where no flag runs it, what the script
    must do ("script": lines): fused kernels and the loss (--use_liger_kernel where Liger has the model's kernels
    and its fused linear cross-entropy, --torch_compile else). "unplanned": what `strategy` (the plan's pick) needs
    per GPU with transformers' own kernels and loss, when that does not fit. (--pure-16bit plans single, ddp and
    fsdp only: a DeepSpeed config keeps DeepSpeed's fp32 master; --selective-checkpointing has its own note.)"""
    t, m = req.training, req.model
    # TF32: the Trainer's --tf32 (training_arguments); any other script sets torch's flags itself
    tf32 = ["torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True  # the plan priced the"
            " fp32 matmuls in TF32 (--precision tf32)"] if t.tf32 and not trainer else []
    if (t.kernels, t.loss) == ("hf", "hf") or m is None:
        return {"flags": {}, "script": tf32 + peft_lines(t, strategy), "unplanned": None}
    flags, script = {}, tf32 + peft_lines(t, strategy)
    liger = m.model_type in LIGER
    if t.loss == "chunked" and liger:
        flags["use_liger_kernel"] = True
        if trainer:
            script.append("--use_liger_kernel needs the liger-kernel package where it trains (pip install"
                          " liger-kernel)")
        if t.kernels != "fused":
            script.append("--use_liger_kernel also fuses the norms, the MLP's activation and RoPE, beyond the"
                          " chunked loss planned: less memory than planned, not more")
    elif t.kernels == "fused" or t.loss == "fused":
        flags["torch_compile"] = True   # Inductor fuses the elementwise ops and the loss with them
        if t.kernels != "fused":
            script.append("--torch_compile also fuses the elementwise ops, beyond the fused loss planned: less"
                          " memory than planned, not more")
    if t.loss == "chunked" and not liger:
        script.append(f"the plan assumed a chunked loss (no logits whole), which no Trainer flag gives for"
                      f" {m.model_type or m.family} (Liger has no kernels for it): compute the loss in chunks from"
                      " the last hidden state (liger_kernel.transformers.LigerFusedLinearCrossEntropyLoss with the LM"
                      " head's weight, in the Trainer's compute_loss_func)")
    if not trainer:   # deepspeed.initialize or accelerate: the script applies each itself
        own = {"use_liger_kernel": f"liger_kernel.transformers.apply_liger_kernel_to_{m.model_type}(model=model)"
                                   " before it is wrapped: the plan assumed Liger's fused kernels and chunked loss",
               "torch_compile": "model = torch.compile(model) before it is wrapped: the plan assumed fused kernels"
                                " (one per norm, activation and loss)"}
        script = [own[k] for k in flags] + script
        flags = {}
    return {"flags": flags, "script": script, "unplanned": _unplanned(req, strategy)}


def _unplanned(req, strategy: str | None) -> str | None:
    """The strategy's memory per GPU with transformers' own kernels and loss, when it does not fit so."""
    from .plan import strategies
    if strategy is None or req.layout is None:
        return None
    t = req.training
    rows = {s.name: s for s in strategies(req.model, req.layout, replace(t, kernels="hf", loss="hf", pure16=False))}
    chosen = rows.get(strategy)
    return None if chosen is None or chosen.fits else (
        f"with transformers' own kernels and loss, {strategy} at micro-batch {t.batch_size} needs"
        f" {gib(chosen.per_gpu_bytes['total'])} per GPU of {gib(req.layout.gpu_mem_bytes)}: it does not fit")


def _script_args(a: Ask, req, targs: dict | None) -> list[str]:
    """With --auto, what the plan chose as arguments on the launch line: the HF Trainer's own flags
    (TrainingArguments parsed by HfArgumentParser), or --gradient_checkpointing for a script of one's own
    (the config itself holds its micro-batch and accumulation). accelerate's script reads none."""
    if not a.auto or a.launcher == "accelerate":
        return []
    if targs is None:
        return ["--gradient_checkpointing"] if req.training.grad_checkpointing else []
    return [f"--{k}" if v is True else f"--{k} {v}" for k, v in targs.items()]


def launching_env() -> dict:
    """This shell's variables that launch.ENV_CARRIED names, PATH with this Python's folder first: the printed
    launch runs from this virtualenv, whether or not its folder is on PATH here."""
    env = {name: os.environ[name] for name in launch.ENV_CARRIED if os.environ.get(name)}
    here = os.path.dirname(sys.executable)
    env["PATH"] = os.pathsep.join(dict.fromkeys(p for p in [here, *env.get("PATH", "").split(os.pathsep)] if p))
    return env


@dataclass
class Composed:
    """The config before DeepSpeed sees it: what `plan` shows of it and `generate` validates and launches."""
    config: dict
    notes: list
    planned: dict | None
    request: object      # with the training the plan's search chose (--auto)
    stage: int
    precision: str | None
    nvme_need: int | None
    strategy: str | None   # with --auto: the plan's strategy the config expresses


def compose(a: Ask, req, rates=None, device: str = "cuda") -> Composed:
    """The config and its notes, from the options (and with --auto the plan, searched with `rates`): pure, no
    DeepSpeed import, so `plan` shows the very config deepspeed-config --auto writes."""
    stage, offload, planned, notes, req, name = _strategy(a, req, rates, device)
    precision = _precision(a, req)
    notes = [n for k, n in req.defaults.items() if k != "precision" or precision] + list(req.notes_) + notes
    nvme_path, need, nvme_notes = _nvme(a, req, offload)
    cfg, build_notes = _build(a, req, stage, offload, nvme_path, precision)
    if req.model is None and "offload_param" in cfg.get("zero_optimization", {}) and offload == "nvme":
        build_notes.append(f"offload_param.buffer_size is DeepSpeed's default, {dsconfig.PARAM_BUFFER:,} elements:"
                           " --model sizes it to the model's largest parameter. DeepSpeed stops at the first"
                           " parameter larger than a buffer (\"More elements N than buffer size\": a 128256 x 4096"
                           " embedding is 525M)")
    return Composed(cfg, notes + nvme_notes + build_notes, planned, req, stage, precision, need, name)


def for_plan(req, options: dict, given: frozenset, rates=None, device: str = "cuda") -> dict:
    """What `deepspeed-config --auto` with the same options writes for this plan (its --hf config), for `plan`
    to show: {"strategy", "config", "why", and the micro-batch, accumulation and checkpointing it holds}; config
    null with why when there is none. options, given: plan's options by click name, and those typed."""
    from .errors import GputopoError
    # DeepSpeed runs its own optimizer loop: plan's torch-loop options (TORCH_LOOP) are not its
    req = replace(req, training=replace(req.training, optimizer_impl=None, zero_grad="none", sync_each_batch=False,
                                        fsdp_orig_params=False))
    ask = Ask(auto=True, nvme_path=options.get("nvme_path"), nvme_free=options.get("nvme_free"),
              offload_params=options.get("offload_params"), given=given)
    try:
        c = compose(ask, req, rates, device)
    except GputopoError as e:
        return {"strategy": None, "config": None, "why": str(e)}
    t = c.request.training
    return {"strategy": c.strategy, "config": c.config, "why": None, "micro_batch": t.batch_size,
            "grad_accum": t.grad_accum, "grad_checkpointing": t.grad_checkpointing}


SETUP = ("strategy", "micro_batch", "grad_accum", "grad_checkpointing")   # what a config's pick is


def next_step(req, options: dict, given: frozenset, shown: dict, command: str, calibrated: bool = False) -> dict | None:
    """The command `plan` names next (`command`: deepspeed-config --auto with plan's options as typed) and the setup
    it writes: {"command", "writes", "same"}. `shown` is plan's deepspeed_config (for_plan with plan's rates); with
    `calibrated` (plan --calibrate, which deepspeed-config cannot repeat) the command plans from the GPU's
    datasheet instead, so what it writes is planned here the same way, and "same" says whether it is `shown`."""
    if not shown["config"]:
        return None
    writes = for_plan(req, options, given) if calibrated else shown
    same = writes["config"] == shown["config"] and all(writes.get(k) == shown.get(k) for k in SETUP)
    return {"command": command, "same": same,
            "writes": {k: writes.get(k) for k in SETUP} if writes["config"] else {"strategy": None,
                                                                                 "why": writes["why"]}}


def generate(a: Ask, req) -> Result:
    """The config, validated by DeepSpeed where it is installed, with every note and the launch."""
    c = compose(a, req)
    cfg, notes, planned, req, stage, precision, need = (c.config, c.notes, c.planned, c.request, c.stage,
                                                        c.precision, c.nvme_need)
    if a.launcher and req.gpus_assumed:   # a launch starts one process per GPU: a guessed 1 would be silently wrong
        raise BadInput(f"--launcher {a.launcher} starts one process per GPU and no GPU is visible here to count:"
                       " give --gpus N, the GPUs per node where it runs")
    version = validate.with_deepspeed(cfg, gpus=req.world, micro=req.training.batch_size,
                                      accum=req.training.grad_accum, precision=precision)
    notes.append(f"validated by DeepSpeed {version}'s own config classes" if version else
                 "deepspeed is not installed: checked by gputopo's rules only")
    if a.check:  # before anything is written: the ops this config loads, its NVMe folder, locked memory
        from . import doctor  # its host probes: only for --check (plan shows this config too, in 0.1 s)
        report = doctor.preflight("deepspeed-config --check", cfg=cfg, nvme_need=need)
        notes += [f"doctor: {c['subject']}: {c['found']}" for c in report["checks"]
                  if c["id"].startswith(("ds_op", "nvme_path", "memlock"))]
    hf_trainer = a.hf and a.launcher != "accelerate"
    targs = dsconfig.training_arguments(req.training, precision) if hf_trainer else None
    # without --auto, what the options still ask of the script: LoRA/QLoRA's lines, TF32's flags
    ran = stack(req, hf_trainer, c.strategy) if a.auto else {
        "flags": {}, "unplanned": None,
        "script": peft_lines(req.training, "zero3" if stage == 3 else None) + (
            ["torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True  # --precision tf32"]
            if req.training.tf32 and not hf_trainer else [])}
    if targs is not None and a.auto:   # what else the plan assumed, as the Trainer's own flags
        targs.update(ran["flags"], **({"max_steps": req.steps} if req.steps else {}))
    notes += _trainer_note(a, req, targs)
    stack_ = [x for x in req.training.stack() if x.startswith(("--kernels", "--loss"))]
    if stack_ and (ran["flags"] or ran["script"]):   # LoRA's and TF32's own lines say what they are
        what = ", ".join(f"--{k}" for k in ran["flags"]) or "what the script lines say"
        notes.append(f"the plan assumed {', '.join(stack_)}: the launch needs {what}"
                     + (f" ({ran['unplanned']})" if ran["unplanned"] else ""))
    if hf_trainer and precision in ("fp16", "bf16"):
        notes.append(f'the config pins "{precision}": {{"enabled": true}} (--precision {precision}): the HF Trainer'
                     f" refuses it unless TrainingArguments({precision}=True) (--{precision} on its command line)")
    shape = "accelerate" if a.launcher == "accelerate" else "trainer" if a.hf else "initialize"
    launch_info = launch.command(a.launcher, a.output or "ds_config.json", gpus=req.gpus_per_node, nodes=req.nodes,
                                 script=a.script, master=a.master_addr, port=a.master_port, stage=stage,
                                 folder=os.path.dirname(a.output) if a.output else "", shape=shape,
                                 ds_optimizer=a.ds_optimizer, grad_accum=req.training.grad_accum,
                                 env=None if req.elsewhere else launching_env(), cpus=a.cpus_per_task,
                                 assumed=_assumed(a, req, ran), script_args=_script_args(a, req, targs),
                                 here=not req.elsewhere, saved=bool(a.output), threads=_threads(a, req, c.strategy)) \
        if a.launcher else None
    if launch_info and a.launcher == "accelerate" and planned and (planned["recommendation"]["strategy"] or
                                                                    "").startswith("fsdp"):
        _fsdp_launch(a, req, planned, launch_info)
    return Result(cfg, a.output, launch_info, notes, planned, targs)


def _threads(a: Ask, req, strategy: str | None) -> int | None:
    """Each rank's OMP_NUM_THREADS where the plan priced DeepSpeed's CPU Adam on the node's cores (--auto with
    offload): the threads its step time was priced on (speed.threads_per_rank, the plan's time.threads_per_rank),
    within the --cpus-per-task the job asks."""
    if not a.auto or not strategy or req.layout is None:
        return None
    from . import speed
    priced = speed.threads_per_rank(strategy, req.layout)
    if priced and a.cpus_per_task:   # Slurm gives what the job asks
        return max(1, min(priced, a.cpus_per_task // req.gpus_per_node))
    return priced


def _fsdp_launch(a: Ask, req, planned: dict, launch_info: dict) -> None:
    """The plan's own pick, PyTorch FSDP, as accelerate runs it: its config beside the DeepSpeed one's, and its
    command first (checked like every output before anything is written)."""
    from . import files
    r = planned["recommendation"]
    path = os.path.join(os.path.dirname(a.output) if a.output else "", launch.FSDP_YAML)
    if a.output:
        files.check_output(path, "force" in a.given, what="launcher file")
    launch_info["files"][path] = launch.accelerate_fsdp_yaml(
        gpus=req.gpus_per_node, nodes=req.nodes, master=a.master_addr, port=a.master_port,
        offload=r["strategy"] == "fsdp_offload_cpu",
        # --pure-16bit: the model is 16-bit itself; accelerate's mixed precision would upcast its flat parameters
        precision="fp32" if planned["training"]["pure16"] else planned["training"]["precision"],
        checkpointing=r["grad_checkpointing"])
    cmd = f"accelerate launch --config_file {shlex.quote(path)} {shlex.quote(a.script)}"
    machine = "the training machine" if req.elsewhere else "this machine"
    launch_info["run"].insert(0, {"where": f"{machine}, the plan's pick: {r['strategy']} (PyTorch FSDP, no DeepSpeed)"
                                           f" at micro-batch {r['micro_batch']} x {r['grad_accum']}", "command": cmd})
    launch_info["notes"].append(f"{path}: PyTorch FSDP as the plan priced {r['strategy']}; the DeepSpeed config and"
                                " its accelerate file are the fastest DeepSpeed setup instead")
    if planned["training"]["finetune"]["mode"] != "full":
        launch_info["script_needs"].append(
            "FSDP with use_orig_params false and PEFT: wrap the adapters apart, after the Trainer is built:"
            " from peft.utils.other import fsdp_auto_wrap_policy; trainer.accelerator.state.fsdp_plugin"
            ".auto_wrap_policy = fsdp_auto_wrap_policy(trainer.model)")
