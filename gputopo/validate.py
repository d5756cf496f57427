"""Check a DeepSpeed config with DeepSpeed's own config classes, where DeepSpeed is installed.

DeepSpeed's pydantic models reject unknown keys and bad values inside `zero_optimization`; its full parse
(DeepSpeedConfig) checks batch arithmetic. Both miss a few things (unknown top-level keys, "auto" left
unfilled, a string stage), so those are checked here too. Imports deepspeed only when called.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io

from .errors import BadInput

# Top-level keys DeepSpeedConfig reads (deepspeed/runtime/constants.py and the config classes).
KNOWN_TOP = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping",
             "optimizer", "scheduler", "fp16", "bf16", "zero_optimization", "aio", "steps_per_print",
             "wall_clock_breakdown", "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer",
             "communication_data_type",
             "prescale_gradients", "gradient_predivide_factor", "sparse_gradients", "activation_checkpointing",
             "flops_profiler", "tensorboard", "wandb", "csv_monitor", "comms_logger", "dump_state", "memory_breakdown",
             "checkpoint", "data_types", "amp", "torch_autocast", "compile", "seq_parallel_communication_data_type"}
OPTIMIZERS = {"adam", "adamw", "lamb", "onebitadam", "onebitlamb", "zerooneadam", "adagrad", "sgd", "lion",
              "muadam", "muadamw", "musgd", "muon"}


@contextlib.contextmanager
def quiet():
    """Silence DeepSpeed's import banners at the file-descriptor level (stdout must stay clean for --json).

    contextlib.redirect_stdout is not enough: DeepSpeed's op builders need a real stdout file descriptor."""
    import os
    import sys
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
        os.dup2(null.fileno(), 2)
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def available() -> bool:
    return importlib.util.find_spec("deepspeed") is not None


def fill_auto(cfg: dict, micro: int = 1, accum: int = 1, gpus: int = 1, precision: str | None = None) -> dict:
    """Replace "auto" as the HF Trainer would, so DeepSpeed's own parser can judge the rest."""
    import copy
    out = copy.deepcopy(cfg)
    values = {"train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": accum,
              "train_batch_size": micro * accum * gpus, "gradient_clipping": 1.0, "lr": 5e-5, "betas": [0.9, 0.999],
              "eps": 1e-8, "weight_decay": 0.0, "warmup_min_lr": 0, "warmup_max_lr": 5e-5, "warmup_num_steps": 0,
              "total_num_steps": 1000, "reduce_bucket_size": 589824, "stage3_prefetch_bucket_size": 530841,
              "stage3_param_persistence_threshold": 7680}

    def walk(d):
        for k, v in d.items():
            if isinstance(v, dict):
                if k in ("fp16", "bf16") and v.get("enabled") == "auto":
                    v["enabled"] = precision == k
                walk(v)
            elif v == "auto":
                d[k] = values[k]
    walk(out)
    return out


def own_checks(cfg: dict) -> None:
    """What DeepSpeed's parser lets through but fails on (or silently ignores) later."""
    unknown = sorted(set(cfg) - KNOWN_TOP)
    if unknown:
        raise BadInput(f"unknown top-level DeepSpeed key(s): {', '.join(unknown)}")
    zero = cfg.get("zero_optimization", {})
    if "aio" in zero:
        raise BadInput("`aio` belongs at the top level, not inside zero_optimization (DeepSpeed ignores it there)")
    for name, value in list(zero.items()) + [(f"{k}.{kk}", vv) for k, v in zero.items() if isinstance(v, dict)
                                             for kk, vv in v.items()]:
        # Sizes are pydantic ints since DeepSpeed 0.15; 4.5e7 slips through, 530841.6 does not.
        if isinstance(value, float):
            raise BadInput(f"zero_optimization.{name} = {value!r}: must be an integer")
    stage = zero.get("stage", 0)
    if not isinstance(stage, int) or isinstance(stage, bool):
        raise BadInput(f"zero_optimization.stage must be an integer, not {stage!r}")
    if "offload_param" in zero and zero["offload_param"].get("device", "none") != "none" and stage != 3:
        raise BadInput(f"offload_param needs stage 3 (got {stage})")
    for key in ("offload_param", "offload_optimizer"):
        if zero.get(key, {}).get("device") == "nvme" and not zero[key].get("nvme_path"):
            raise BadInput(f"{key}: device nvme without nvme_path")
    opt = cfg.get("optimizer", {}).get("type")
    if opt is not None and opt.lower() not in OPTIMIZERS:
        raise BadInput(f"optimizer type {opt!r} is not one DeepSpeed knows ({', '.join(sorted(OPTIMIZERS))})")
    if cfg.get("fp16", {}).get("enabled") is True and cfg.get("bf16", {}).get("enabled") is True:
        raise BadInput("fp16 and bf16 are both enabled: choose one")


def aio_keys() -> set[str] | None:
    """The aio keys the installed DeepSpeed reads (they changed: thread_count -> intra_op_parallelism)."""
    if not available():
        return None
    from deepspeed.runtime.swap_tensor import constants as c
    return {getattr(c, n) for n in dir(c) if n.startswith("AIO_") and not n.endswith(("_DEFAULT", "FORMAT"))
            and isinstance(getattr(c, n), str)} - {"aio"}


def with_deepspeed(cfg: dict, gpus: int = 1, micro: int = 1, accum: int = 1,
                   precision: str | None = None) -> str | None:
    """Parse with DeepSpeed's own classes; returns the DeepSpeed version, or None when it is not installed."""
    own_checks(cfg)
    if not available():
        return None
    key, cache = _cache_key(cfg, gpus, micro, accum, precision)
    if key in cache:  # importing deepspeed costs seconds; a config it accepted once it accepts again
        return cache[key]
    from unittest import mock  # imports asyncio: ~40 ms a cached answer does not need
    with quiet():
        import deepspeed
        from deepspeed.runtime.config import DeepSpeedConfig
        from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    keys = aio_keys()
    unknown_aio = sorted(set(cfg.get("aio", {})) - keys) if keys is not None else []
    if unknown_aio:
        raise BadInput(f"aio key(s) {', '.join(unknown_aio)} unknown to DeepSpeed {deepspeed.__version__}"
                       " (it would silently use defaults)")
    filled = fill_auto(cfg, micro, accum, gpus, precision)

    class Mpu:  # tells DeepSpeedConfig the data-parallel world size without a process group
        def get_data_parallel_world_size(self):
            return gpus
    try:
        DeepSpeedZeroConfig(**filled.get("zero_optimization", {}))
        with mock.patch.object(deepspeed.comm, "get_rank", return_value=0), quiet():
            DeepSpeedConfig(filled, mpu=Mpu())
    except Exception as e:  # pydantic ValidationError, AssertionError, ValueError: one line for the user
        first = " ".join(str(e).split("\n")[:3])
        raise BadInput(f"DeepSpeed {deepspeed.__version__} rejects the config: {first}") from None
    _remember(key, cache, deepspeed.__version__)
    return deepspeed.__version__


# The cache holds at most 500 answers of about 90 bytes; a file larger than this is not one gputopo wrote.
CACHE_MOST = 1 << 20


def _cache_path():
    import os
    from pathlib import Path
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    # the XDG spec: a relative value is ignored (one wrote ./relcache/gputopo/validated.json in the working folder)
    return Path(xdg if os.path.isabs(xdg) else Path.home() / ".cache") / "gputopo" / "validated.json"


def _cache_key(cfg: dict, *args) -> tuple[str, dict]:
    """Accepted configs, keyed by DeepSpeed's version, the config and the batch arithmetic. A cache that is not a
    regular file of at most CACHE_MOST bytes (a link, a FIFO, /dev/zero) is not read: an empty one instead."""
    import hashlib
    import importlib.metadata
    import json

    from .files import read_own
    version = importlib.metadata.version("deepspeed")
    key = hashlib.sha256(json.dumps([version, cfg, *args], sort_keys=True).encode()).hexdigest()
    try:
        cache = json.loads(read_own(_cache_path(), CACHE_MOST) or b"{}")
    except (ValueError, RecursionError):
        cache = {}
    return key, cache if isinstance(cache, dict) else {}


def _remember(key: str, cache: dict, version) -> None:
    """Keep an answer: a temporary file of gputopo's own, renamed over the cache (gputopo.files.write_atomic), so
    nothing is written through a link, and an entry that is not a regular file is left as it is."""
    import json

    from .errors import WriteFailed
    from .files import write_atomic
    path = _cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        cache[key] = version
        write_atomic(str(path), json.dumps(dict(list(cache.items())[-500:])))
    except (OSError, WriteFailed):
        pass  # a read-only home, or a cache that is not a file: only the next run's speed is lost


def libaio_ok() -> bool | None:
    """Whether DeepSpeed's async_io op can build here (needs libaio); None without deepspeed.

    DeepSpeed answers by compiling and linking a test program (2-3 s with its import), so the answer is kept in
    the validation cache, keyed by DeepSpeed's version and by what the probe depends on: libaio.h where the
    compiler looks and the CFLAGS/LDFLAGS/CPATH/LIBRARY_PATH it reads. Installing libaio-dev changes the key."""
    if not available():
        return None
    key, cache = _cache_key({"probe": "async_io"}, _libaio_fingerprint())
    if key in cache:
        return cache[key]
    import sys
    with quiet():
        from deepspeed.ops.op_builder import AsyncIOBuilder
        # The builder probes with a compile that needs real file descriptors: give it the real stdout object.
        with contextlib.redirect_stdout(sys.__stdout__), contextlib.redirect_stderr(sys.__stderr__):
            ok = bool(AsyncIOBuilder().is_compatible(verbose=False))
    _remember(key, cache, ok)
    return ok


def _libaio_fingerprint() -> list:
    import os
    env = {k: os.environ.get(k) for k in ("CFLAGS", "LDFLAGS", "CPATH", "C_INCLUDE_PATH", "LIBRARY_PATH")}
    dirs = ["/usr/include", "/usr/local/include"] + [d for k in ("CPATH", "C_INCLUDE_PATH")
                                                     for d in (env[k] or "").split(os.pathsep) if d]
    headers = []
    for d in dirs:
        try:
            headers.append([d, os.stat(os.path.join(d, "libaio.h")).st_mtime_ns])
        except OSError:
            pass
    return [env, headers]
