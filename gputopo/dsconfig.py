"""Stage, offload, model and layout -> a DeepSpeed config dict. Plain dicts: no deepspeed import (stays fast).

What it gets right that hand-written configs often do not (issues users hit):
- `aio` is a top-level block, never inside `zero_optimization` (DeepSpeed#2721: the HF NVMe example);
- `stage3_prefetch_bucket_size` and every size are ints (a float breaks DeepSpeed >= 0.15's pydantic model);
- the aio key is `intra_op_parallelism` (`thread_count` was renamed and is silently ignored);
- "auto" only where the Hugging Face Trainer fills the value, so nothing disagrees at start-up.
"""
from __future__ import annotations

from .errors import BadInput

OFFLOADS = ("none", "cpu", "nvme")
# HF TrainingArguments defaults, used for --no-hf configs (plain deepspeed.initialize).
HF_DEFAULTS = {"lr": 5e-5, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0, "gradient_clipping": 1.0}
AIO = {"block_size": 1048576, "queue_depth": 8, "intra_op_parallelism": 1, "single_submit": False,
       "overlap_events": True}
# DeepSpeed's own defaults, written when neither the model nor the Trainer can size them.
DS_DEFAULT_BUCKET = 500_000_000
DS_DEFAULT_PREFETCH = 50_000_000
DS_DEFAULT_PERSISTENCE = 100_000
NVME_SUB_GROUP = 100_000_000  # as gputopo.plan assumes: DeepSpeed's 1e9 needs 16 GB of pinned host memory per rank
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
        raise BadInput(f"--offload-params needs stage 3: parameters are partitioned only at stage 3 (got stage {stage})")
    if offload == "nvme" and stage != 3:
        raise BadInput(f"NVMe offload needs stage 3 (at stage {stage} DeepSpeed treats an NVMe optimizer offload as CPU)")
    if offload == "nvme" and not nvme_path:
        raise BadInput("--offload nvme needs --nvme-path DIR (a local NVMe folder)")
    if precision not in (None, "fp32", "fp16", "bf16"):
        raise BadInput(f"--precision {precision}: one of fp32, fp16, bf16")


def build(stage: int, offload: str = "none", *, hf: bool = True, offload_params: bool | None = None,
          nvme_path: str | None = None, precision: str | None = None, hidden_size: int | None = None,
          largest_layer: int | None = None, batch_size: int | None = None, grad_accum: int = 1,
          gpus: int | None = None, optimizer: str = "adamw", torch_adam: bool = False) -> dict:
    """A DeepSpeed config. hf=True: "auto" where the HF Trainer fills it; hf=False: concrete values.

    optimizer: "adamw" is DeepSpeed's own (its fused or CPU Adam); any other is the client's (the Trainer's
    `optim`, or what the script passes to deepspeed.initialize), so the config has no optimizer block.
    torch_adam: AdamW through torch.optim (DeepSpeed's `torch_adam` param) instead of FusedAdam/DeepSpeedCPUAdam,
    so nothing has to be compiled (where nvcc, CUDA_HOME or a compiler is missing), at the cost of a slower step."""
    if offload_params is None:
        offload_params = stage == 3 and offload != "none"
    check(stage, offload, offload_params, nvme_path, precision)
    from .plan import OFFLOAD_OPTIMIZERS
    if torch_adam and optimizer != "adamw":
        raise BadInput(f"--no-compile-ops switches DeepSpeed's own Adam to torch's; with --optimizer {optimizer}"
                       " the optimizer is yours and compiles nothing of DeepSpeed's")
    if optimizer not in OFFLOAD_OPTIMIZERS and offload != "none":
        raise BadInput(f"--optimizer {optimizer} with --offload {offload}: ZeRO-Offload steps the optimizer on the"
                       " host with DeepSpeed's CPU Adam; use --optimizer adamw, or no offload")
    auto = "auto"
    h2 = hidden_size * hidden_size if hidden_size else None
    cfg: dict = {}
    if hf:
        cfg.update({"train_batch_size": auto, "train_micro_batch_size_per_gpu": auto,
                    "gradient_accumulation_steps": auto, "gradient_clipping": auto})
        cfg["optimizer"] = {"type": "AdamW", "params": {"lr": auto, "betas": auto, "eps": auto, "weight_decay": auto}}
        cfg["scheduler"] = {"type": "WarmupDecayLR", "params": {"warmup_min_lr": auto, "warmup_max_lr": auto,
                                                                "warmup_num_steps": auto, "total_num_steps": auto}}
        cfg["fp16"] = {"enabled": auto, "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
                       "hysteresis": 2, "min_loss_scale": 1}
        cfg["bf16"] = {"enabled": auto}
    else:
        micro = batch_size or 1
        cfg["train_micro_batch_size_per_gpu"] = micro
        cfg["gradient_accumulation_steps"] = grad_accum
        if gpus:
            cfg["train_batch_size"] = micro * grad_accum * gpus
        cfg["gradient_clipping"] = HF_DEFAULTS["gradient_clipping"]
        cfg["optimizer"] = {"type": "AdamW", "params": {k: HF_DEFAULTS[k] for k in ("lr", "betas", "eps", "weight_decay")}}
        cfg["fp16"] = {"enabled": precision == "fp16", "loss_scale": 0, "initial_scale_power": 16}
        cfg["bf16"] = {"enabled": precision == "bf16"}
    if torch_adam:
        cfg["optimizer"]["params"]["torch_adam"] = True
    if hf and precision:  # a precision the user chose is written out; "auto" would follow the Trainer's flags
        cfg["fp16"]["enabled"] = precision == "fp16"
        cfg["bf16"]["enabled"] = precision == "bf16"
    if optimizer != "adamw":
        del cfg["optimizer"]
        cfg["zero_allow_untested_optimizer"] = True  # a client optimizer DeepSpeed has not tested with ZeRO
    zero: dict = {"stage": stage}
    if stage >= 1:
        bucket = h2 if h2 else (auto if hf else DS_DEFAULT_BUCKET)
        zero.update({"overlap_comm": True, "contiguous_gradients": True, "reduce_bucket_size": bucket})
    if stage in (1, 2):
        zero.update({"allgather_partitions": True, "allgather_bucket_size": h2 or DS_DEFAULT_BUCKET,
                     "reduce_scatter": True})
    if stage == 3:
        zero.update({
            "stage3_prefetch_bucket_size": int(0.9 * h2) if h2 else (auto if hf else DS_DEFAULT_PREFETCH),
            "stage3_param_persistence_threshold": 10 * hidden_size if hidden_size else (auto if hf else DS_DEFAULT_PERSISTENCE),
            "sub_group_size": NVME_SUB_GROUP if offload == "nvme" else 1_000_000_000,
            "stage3_max_live_parameters": 1_000_000_000, "stage3_max_reuse_distance": 1_000_000_000,
            "stage3_gather_16bit_weights_on_model_save": True})
    if offload == "cpu":
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        if offload_params:
            zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    elif offload == "nvme":
        # Buffers must hold the largest parameter: at least DeepSpeed's 1e8 elements.
        buffer = max(100_000_000, largest_layer or 0)
        zero["offload_optimizer"] = {"device": "nvme", "nvme_path": nvme_path, "pin_memory": True, "buffer_count": 4,
                                     "fast_init": False}
        if offload_params:
            zero["offload_param"] = {"device": "nvme", "nvme_path": nvme_path, "pin_memory": True, "buffer_count": 5,
                                     "buffer_size": buffer, "max_in_cpu": 1_000_000_000}
        cfg["aio"] = dict(AIO)
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
    if training.grad_checkpointing:
        out["gradient_checkpointing"] = True
    return out
