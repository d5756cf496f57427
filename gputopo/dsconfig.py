"""Stage, offload, model and layout -> a DeepSpeed config dict. Plain dicts: no deepspeed import (stays fast).

What it gets right that hand-written configs often do not (issues users hit):
- `aio` is a top-level block, never inside `zero_optimization` (DeepSpeed#2721: the HF NVMe example);
- `stage3_prefetch_bucket_size` and every size are ints (a float breaks DeepSpeed >= 0.15's pydantic model);
- the aio key is `intra_op_parallelism` (`thread_count` was renamed and is silently ignored);
- "auto" only where the Hugging Face Trainer fills the value, so nothing disagrees at start-up;
- for accelerate (`accelerate=True`) the training script owns optimizer and scheduler (accelerate refuses a
  config optimizer beside a script's one), and "auto" is left only where `accelerator.prepare` fills it.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import BadInput
from .plan import DS_SUB_GROUP, NVME_SUB_GROUP, OFFLOAD_OPTIMIZERS, PARAM_BUFFER, zero3_buckets

OFFLOADS = ("none", "cpu", "nvme")
# HF TrainingArguments defaults, used for --no-hf configs (plain deepspeed.initialize).
HF_DEFAULTS = {"lr": 5e-5, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0, "gradient_clipping": 1.0}
AIO = {"block_size": 1048576, "queue_depth": 8, "intra_op_parallelism": 1, "single_submit": False,
       "overlap_events": True}
# DeepSpeed's own defaults, written when neither the model nor the Trainer can size them.
DS_DEFAULT_BUCKET = 500_000_000
DS_DEFAULT_PREFETCH = 50_000_000
DS_DEFAULT_PERSISTENCE = 100_000
# --optimizer -> the HF Trainer's `optim` for optimizers DeepSpeed does not build from its config.
HF_OPTIM = {"adamw-8bit": "adamw_bnb_8bit", "adafactor": "adafactor", "sgd": "sgd"}
STRATEGY_TO_CONFIG = {  # gputopo plan strategy -> (stage, offload)
    "single": (0, "none"), "ddp": (0, "none"), "zero1": (1, "none"), "zero2": (2, "none"),
    "zero2_offload_cpu": (2, "cpu"), "zero3": (3, "none"), "zero3_offload_cpu": (3, "cpu"),
    "zero3_offload_nvme": (3, "nvme"),
}


def check(stage: int, offload: str, offload_params: bool | None, nvme_path: str | None, precision: str | None) -> None:
    """Refuse combinations DeepSpeed rejects late, or silently runs as something else."""
    if stage not in (0, 1, 2, 3):
        raise BadInput(f"--stage {stage}: ZeRO has stages 0, 1, 2 and 3")
    if offload not in OFFLOADS:
        raise BadInput(f"--offload {offload}: one of none, cpu, nvme")
    if offload != "none" and stage == 0:
        raise BadInput("offload needs ZeRO stage 1, 2 or 3 (stage 0 keeps everything on the GPU)")
    if offload_params and offload == "none":
        raise BadInput("--offload-params needs --offload cpu or nvme (where should the parameters go?)")
    if offload_params and stage != 3:
        raise BadInput("--offload-params needs stage 3: parameters are partitioned only at stage 3"
                       f" (got stage {stage})")
    if offload == "nvme" and stage != 3:
        raise BadInput(f"NVMe offload needs stage 3 (at stage {stage} DeepSpeed treats an NVMe optimizer offload"
                       " as CPU)")
    if offload == "nvme" and not nvme_path:
        raise BadInput("--offload nvme needs --nvme-path DIR (a local NVMe folder)")
    if precision not in (None, "fp32", "fp16", "bf16"):
        raise BadInput(f"--precision {precision}: one of fp32, fp16, bf16")


@dataclass(frozen=True)
class Shape:
    """What sizes and shapes a config besides its stage and offload.

    hf: "auto" where the HF Trainer fills it, else concrete values (plain deepspeed.initialize).
    optimizer: "adamw" is DeepSpeed's own (its fused or CPU Adam); any other is the client's (the Trainer's
    `optim`, or what the script passes to deepspeed.initialize), so the config has no optimizer block.
    torch_adam: AdamW through torch.optim (DeepSpeed's `torch_adam` param) instead of FusedAdam/DeepSpeedCPUAdam,
    so nothing has to be compiled (where nvcc, CUDA_HOME or a compiler is missing), at the cost of a slower step.
    accelerate: the shape `accelerator.prepare` accepts (see accelerate_shape): the script's own optimizer unless
    ds_optimizer (DummyOptim); with offload, zero_force_ds_cpu_optimizer says who steps it on the host."""
    hf: bool = True
    offload_params: bool | None = None   # None: yes at stage 3 with offload
    nvme_path: str | None = None
    precision: str | None = None
    hidden_size: int | None = None
    largest_layer: int | None = None
    batch_size: int | None = None
    grad_accum: int = 1
    gpus: int | None = None
    optimizer: str = "adamw"
    torch_adam: bool = False
    accelerate: bool = False
    ds_optimizer: bool = False


def _check_optimizer(offload: str, s: Shape) -> None:
    """Refuse optimizer options that contradict each other or the offload."""
    if s.ds_optimizer and not s.accelerate:
        raise BadInput("--ds-optimizer is for --launcher accelerate:"
                       " the other configs always carry DeepSpeed's optimizer")
    if s.ds_optimizer and s.optimizer != "adamw":
        raise BadInput(f"--ds-optimizer writes DeepSpeed's AdamW: it cannot be --optimizer {s.optimizer}")
    if s.torch_adam and s.optimizer != "adamw":
        raise BadInput(f"--no-compile-ops switches DeepSpeed's own Adam to torch's; with --optimizer {s.optimizer}"
                       " the optimizer is yours and compiles nothing of DeepSpeed's")
    if s.accelerate and s.torch_adam and offload == "none" and not s.ds_optimizer:
        raise BadInput("--no-compile-ops: with --launcher accelerate and no offload the script's own optimizer runs;"
                       " nothing of DeepSpeed's Adam is compiled")
    # accelerate can keep a client optimizer on the host (zero_force_ds_cpu_optimizer false, in build).
    if s.optimizer not in OFFLOAD_OPTIMIZERS and offload != "none" and not s.accelerate:
        raise BadInput(f"--optimizer {s.optimizer} with --offload {offload}: ZeRO-Offload steps the optimizer on the"
                       " host with DeepSpeed's CPU Adam; use --optimizer adamw, or no offload")


def _hf_top() -> dict:
    """Batch, clipping, optimizer, scheduler and precision as "auto": the HF Trainer fills each."""
    auto = "auto"
    return {"train_batch_size": auto, "train_micro_batch_size_per_gpu": auto, "gradient_accumulation_steps": auto,
            "gradient_clipping": auto,
            "optimizer": {"type": "AdamW", "params": {"lr": auto, "betas": auto, "eps": auto, "weight_decay": auto}},
            "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": auto, "warmup_max_lr": auto,
                                                              "warmup_num_steps": auto, "total_num_steps": auto}},
            "fp16": {"enabled": auto, "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
                     "hysteresis": 2, "min_loss_scale": 1},
            "bf16": {"enabled": auto}}


def _plain_top(s: Shape) -> dict:
    """Concrete values for deepspeed.initialize: HF TrainingArguments' defaults where nothing else decides."""
    micro = s.batch_size or 1
    cfg = {"train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": s.grad_accum}
    if s.gpus:
        cfg["train_batch_size"] = micro * s.grad_accum * s.gpus
    cfg["gradient_clipping"] = HF_DEFAULTS["gradient_clipping"]
    cfg["optimizer"] = {"type": "AdamW", "params": {k: HF_DEFAULTS[k] for k in ("lr", "betas", "eps", "weight_decay")}}
    cfg["fp16"] = {"enabled": s.precision == "fp16", "loss_scale": 0, "initial_scale_power": 16}
    cfg["bf16"] = {"enabled": s.precision == "bf16"}
    return cfg


def _top(s: Shape) -> dict:
    """Everything above zero_optimization."""
    if s.accelerate:
        cfg = accelerate_shape(hf=s.hf, precision=s.precision, batch_size=s.batch_size, grad_accum=s.grad_accum,
                               gpus=s.gpus, ds_optimizer=s.ds_optimizer)
    else:
        cfg = _hf_top() if s.hf else _plain_top(s)
    if s.torch_adam and "optimizer" in cfg:
        cfg["optimizer"]["params"]["torch_adam"] = True
    if s.hf and s.precision and not s.accelerate:  # chosen: written out; "auto" would follow the Trainer's flags
        cfg["fp16"]["enabled"] = s.precision == "fp16"
        cfg["bf16"]["enabled"] = s.precision == "bf16"
    if s.optimizer != "adamw" and not s.accelerate:  # accelerate marks a client optimizer itself
        del cfg["optimizer"]
        cfg["zero_allow_untested_optimizer"] = True  # a client optimizer DeepSpeed has not tested with ZeRO
    return cfg


def _zero(stage: int, offload: str, s: Shape) -> dict:
    """zero_optimization without its offload blocks; buckets sized from the hidden size when it is known."""
    hf = s.hf and not s.accelerate  # accelerate fills only what it knows: no "auto" in the ZeRO block
    auto, h = "auto", s.hidden_size
    h2 = h * h if h else None
    zero: dict = {"stage": stage}
    if stage >= 1:
        zero.update({"overlap_comm": True, "contiguous_gradients": True,
                     "reduce_bucket_size": h2 if h2 else (auto if hf else DS_DEFAULT_BUCKET)})
    if stage in (1, 2):
        zero.update({"allgather_partitions": True, "allgather_bucket_size": h2 or DS_DEFAULT_BUCKET,
                     "reduce_scatter": True})
    if stage == 3:
        zero.update({
            "stage3_prefetch_bucket_size": zero3_buckets(h)[0] if h else (auto if hf else DS_DEFAULT_PREFETCH),
            "stage3_param_persistence_threshold": 10 * h if h else (auto if hf else DS_DEFAULT_PERSISTENCE),
            "sub_group_size": NVME_SUB_GROUP if offload == "nvme" else DS_SUB_GROUP,
            "stage3_max_live_parameters": 1_000_000_000, "stage3_max_reuse_distance": 1_000_000_000,
            "stage3_gather_16bit_weights_on_model_save": True})
    return zero


def _offload(zero: dict, offload: str, params: bool, s: Shape) -> dict:
    """The offload blocks (and the top-level aio block for NVMe) to add to the config."""
    if offload == "cpu":
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        if params:
            zero["offload_param"] = {"device": "cpu", "pin_memory": True}
        return {}
    if offload != "nvme":
        return {}
    # Buffers must hold the largest parameter: at least DeepSpeed's 1e8 elements.
    buffer = max(PARAM_BUFFER, s.largest_layer or 0)
    zero["offload_optimizer"] = {"device": "nvme", "nvme_path": s.nvme_path, "pin_memory": True, "buffer_count": 4,
                                 "fast_init": False}
    if params:
        zero["offload_param"] = {"device": "nvme", "nvme_path": s.nvme_path, "pin_memory": True, "buffer_count": 5,
                                 "buffer_size": buffer, "max_in_cpu": 1_000_000_000}
    return {"aio": dict(AIO)}


def build(stage: int, offload: str = "none", shape: Shape | None = None, **kw) -> dict:
    """A DeepSpeed config for this stage, offload and Shape (given, or as keywords: build(3, "cpu", hidden_size=64))."""
    s = shape or Shape(**kw)
    params = s.offload_params if s.offload_params is not None else (stage == 3 and offload != "none")
    check(stage, offload, params, s.nvme_path, s.precision)
    _check_optimizer(offload, s)
    cfg = _top(s)
    zero = _zero(stage, offload, s)
    if s.accelerate and offload != "none":
        # True: accelerate swaps the script's torch Adam/AdamW/Adagrad for DeepSpeed's vectorised CPU version
        # (same update, "5X-7X faster than the standard PyTorch implementation": deepspeed.ai/tutorials/zero-offload).
        # False: the script's own optimizer runs on the CPU as written (needed for SGD, Adafactor, 8-bit:
        # accelerate would silently turn those into Adam). --no-compile-ops keeps torch's AdamW too.
        cfg["zero_force_ds_cpu_optimizer"] = s.ds_optimizer or (s.optimizer == "adamw" and not s.torch_adam)
    cfg.update(_offload(zero, offload, params, s))
    cfg["zero_optimization"] = zero
    cfg["steps_per_print"] = 2000
    cfg["wall_clock_breakdown"] = False
    return cfg


def training_arguments(training, precision: str | None) -> dict:
    """The transformers.TrainingArguments that fill an --hf config's "auto" values for this setup."""
    out = {"per_device_train_batch_size": training.batch_size, "gradient_accumulation_steps": training.grad_accum}
    if training.optimizer in HF_OPTIM:
        out["optim"] = HF_OPTIM[training.optimizer]
    if precision in ("fp16", "bf16"):
        out[precision] = True
    if getattr(training, "tf32", False):   # TrainingArguments(tf32=True) sets torch's allow_tf32 flags
        out["tf32"] = True
    if training.grad_checkpointing:
        out["gradient_checkpointing"] = True
    return out


def accelerate_shape(*, hf: bool, precision: str | None, batch_size: int | None, grad_accum: int,
                     gpus: int | None, ds_optimizer: bool) -> dict:
    """The top of a config for `accelerate launch` (accelerate/accelerator.py, _prepare_deepspeed).

    accelerate fills "auto" only for: the micro-batch (the prepared DataLoader's batch_size), the accumulation
    (Accelerator(gradient_accumulation_steps=...)), train_batch_size (their product x processes), and with
    DummyOptim/DummyScheduler the optimizer's lr and weight_decay and the scheduler's warmup and total steps.
    Anything else left "auto" (betas, eps, fp16/bf16 "enabled" without --mixed_precision) fails or is guessed."""
    auto = "auto"
    cfg: dict = {}
    if hf:
        cfg.update({"train_batch_size": auto, "train_micro_batch_size_per_gpu": auto,
                    "gradient_accumulation_steps": auto})
    else:
        micro = batch_size or 1
        cfg.update({"train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": grad_accum})
        if gpus:
            cfg["train_batch_size"] = micro * grad_accum * gpus
    cfg["gradient_clipping"] = HF_DEFAULTS["gradient_clipping"]  # accelerate would write 1.0 for "auto" anyway
    # DummyOptim(lr=, weight_decay=) and DummyScheduler(total_num_steps=, warmup_num_steps=) fill these
    if ds_optimizer:
        cfg["optimizer"] = {"type": "AdamW", "params": {"lr": auto, "weight_decay": auto,
                                                        "betas": HF_DEFAULTS["betas"], "eps": HF_DEFAULTS["eps"]}}
        cfg["scheduler"] = {"type": "WarmupDecayLR", "params": {"warmup_min_lr": auto, "warmup_max_lr": auto,
                                                                "warmup_num_steps": auto, "total_num_steps": auto}}
    # Precision lives here, not in the accelerate YAML: accelerate refuses `mixed_precision` in a YAML that
    # names a deepspeed_config_file.
    cfg["fp16"] = {"enabled": precision == "fp16", "loss_scale": 0, "initial_scale_power": 16}
    cfg["bf16"] = {"enabled": precision == "bf16"}
    return cfg


def accelerate_notes(cfg: dict, *, hf: bool, ds_optimizer: bool, optimizer: str, torch_adam: bool = False) -> list[str]:
    """What an accelerate-shaped config expects from the script, and the offload optimizer choice, in words."""
    notes = []
    if hf:
        notes.append('"auto" batch sizes: accelerator.prepare() fills train_micro_batch_size_per_gpu from the'
                     " DataLoader's batch_size, gradient_accumulation_steps from"
                     " Accelerator(gradient_accumulation_steps=...), train_batch_size from both")
    else:
        notes.append(f"--no-hf: micro-batch {cfg['train_micro_batch_size_per_gpu']} and accumulation"
                     f" {cfg['gradient_accumulation_steps']} are fixed here; accelerate uses them over the DataLoader's"
                     " batch_size and Accelerator(gradient_accumulation_steps=...)")
    if ds_optimizer:
        notes.append("DeepSpeed's AdamW and WarmupDecayLR: the script passes DummyOptim(params, lr=, weight_decay=)"
                     ' and DummyScheduler(optimizer, total_num_steps=, warmup_num_steps=), which fill their "auto"')
    else:
        notes.append("no optimizer or scheduler block: the script's own are used (accelerate refuses both at once)")
    zero = cfg["zero_optimization"]
    if zero.get("offload_optimizer") and not ds_optimizer:
        if cfg.get("zero_force_ds_cpu_optimizer"):
            notes.append("optimizer offload: accelerate swaps the script's torch Adam/AdamW for DeepSpeedCPUAdam (same"
                         " update, 5-7x faster on the CPU per DeepSpeed's ZeRO-Offload tutorial, no code change);"
                         " any other optimizer class would silently become Adam: say --optimizer sgd|adafactor to keep"
                         " yours")
        else:
            why = "--no-compile-ops" if torch_adam else f"--optimizer {optimizer}"
            notes.append(f"optimizer offload with {why}: zero_force_ds_cpu_optimizer is false, so your optimizer runs"
                         " on the CPU as written, nothing compiled (accelerate would otherwise swap it for"
                         " DeepSpeedCPUAdam: 5-7x faster, but Adam/AdamW only)")
    return notes
