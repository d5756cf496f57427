"""One training process, launched by torchrun (or deepspeed): DDP, DeepSpeed or the HF Trainer, plus an
all-reduce sweep. The same code runs on CUDA with NCCL (cuda:LOCAL_RANK) and on CPU with gloo.

    torchrun --nproc_per_node 2 -m gputopo.worker --model gpt2 --steps 200 --output result.json

Local rank 0 of every node prints rank 0's result as one line `GPUTOPO_RESULT {json}` and writes --output.
Workers end with os._exit after a flush: a DeepSpeed/HF worker sometimes aborts at interpreter exit
("terminate called without an active exception").
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

RESULT = "GPUTOPO_RESULT "
PROGRESS = "GPUTOPO_PROGRESS "   # rank 0's lines as it works: bench-nvlink turns them into its live line
WIKITEXT = "wikitext-2-raw-v1"  # the reference experiment's data
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}  # no model hub: nothing is downloaded at run time


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m gputopo.worker", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt2", help="catalog name, HF cache name, or a folder with config.json")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup-steps", type=int, default=2, help="steps left out of the timing")
    ap.add_argument("--batch-size", type=int, default=4, help="per process")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--precision", choices=["fp32", "fp16", "bf16"], default="fp32")
    ap.add_argument("--dataset", default="synthetic",
                    help="auto, synthetic, wikitext-2-raw-v1 (local cache only) or a .txt file")
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--grad-checkpointing", action="store_true", help="recompute the blocks' activations in backward")
    ap.add_argument("--deepspeed", metavar="CONFIG", help="train through deepspeed.initialize with this config")
    ap.add_argument("--hf-trainer", action="store_true",
                    help="train through the HF Trainer (with --deepspeed: its config)")
    ap.add_argument("--allreduce-sizes", default="", help="comma-separated byte sizes for an all-reduce sweep")
    ap.add_argument("--allreduce-iters", type=int, default=10)
    ap.add_argument("--train", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--output", help="results JSON (rank 0)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--local_rank", "--local-rank", type=int, help=argparse.SUPPRESS)  # the deepspeed launcher adds it
    return ap.parse_args(argv)


def device_and_backend():
    """cuda:LOCAL_RANK with NCCL where CUDA is, else CPU with gloo."""
    import torch
    local = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local)
        return torch.device("cuda", local), "nccl"
    deepspeed_local_size()
    return torch.device("cpu"), "gloo"


def deepspeed_local_size() -> None:
    """On a CPU, DeepSpeed's accelerator counts its devices by running `numactl --hardware` unless LOCAL_SIZE is
    set, as DeepSpeed's own launcher sets it (launcher/launch.py) and torchrun does not; ZeRO-3 asks for that
    count at every gradient bucket (stage3.py, __avg_scatter_grads), so under torchrun each bucket spawned a
    process. Set as DeepSpeed's launcher would, the CPU twin pays what a GPU run does not."""
    os.environ.setdefault("LOCAL_SIZE", os.environ.get("LOCAL_WORLD_SIZE", "1"))


DS_SHM_PREFIX = "deepspeed_allreduce_buffer_"   # shm.cpp's name for it; doctor looks for leftovers by it


def deepspeed_shm_buffer() -> Path:
    """This rank's buffer of DeepSpeed's shared-memory comm op on CPUs (csrc/cpu/comm/shm.cpp, shm_initialize):
    /dev/shm/deepspeed_allreduce_buffer_<uid>_<MASTER_ADDR>_<MASTER_PORT>_<rank>, 66 MB, made at init and never
    unlinked (nothing calls its shared_close). Each CPU run left one per rank: RAM that nothing returns until a
    reboot; 332 of them held 22 GB here, until the kernel's OOM killer stopped a calibration."""
    parts = [str(os.getuid()), os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", ""),
             os.environ.get("RANK", "0")]
    return Path("/dev/shm", DS_SHM_PREFIX + "_".join(parts))


def release_deepspeed_shm() -> None:
    """Unlink this rank's buffer as the process ends: every rank mapped every buffer at init, and mappings
    outlive the name."""
    if "deepspeed" in sys.modules:
        deepspeed_shm_buffer().unlink(missing_ok=True)


def run_child(main, on_error=None) -> None:
    """A child process's whole life (this worker's, calibration's, --measure's): main() (its status, or 0),
    sys.exit's status, its message printed (exit 2), a traceback (exit 1); on_error(exception) for the last two;
    DeepSpeed's shared-memory buffer released. Then a flush and os._exit: with DeepSpeed or transformers
    imported, the interpreter's own exit sometimes aborts ("terminate called without an active exception")
    after the work is done and printed."""
    code = 1
    try:
        code = main() or 0
    except SystemExit as e:   # our own one-line errors
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
            if on_error:
                on_error(e)
        code = e.code if isinstance(e.code, int) else 2
    except BaseException as e:
        import traceback
        traceback.print_exc()
        if on_error:
            on_error(e)
    finally:
        release_deepspeed_shm()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def synchronize(device):
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def progress(**fields) -> None:
    """One progress line on stdout, from global rank 0 only (the others train the same steps)."""
    if os.environ.get("RANK", "0") == "0":
        print(PROGRESS + json.dumps(fields), flush=True)


class StepTimer:
    """Step boundaries without stalling the loop: CUDA events on the GPU's stream (read once, after the last
    step), perf_counter on CPU. A host sync per step (torch.cuda.synchronize, loss.item()) would stop the CPU
    from queueing the next step while the GPU finishes this one, and the bench would time its own stalls.
    Each mark after the first reports progress with the host's clock, which the queue keeps near the GPU's."""

    def __init__(self, device, steps: int | None = None):
        self.cuda = device.type == "cuda"
        self.marks: list = []
        self.steps, self.host = steps, []

    def mark(self) -> None:
        if self.cuda:
            import torch
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())
        self.host.append(time.perf_counter())
        if self.steps and len(self.host) > 1:
            progress(phase="train", step=len(self.host) - 1, steps=self.steps,
                     seconds=self.host[-1] - self.host[-2])

    def intervals(self) -> list[float]:
        """Seconds between consecutive marks."""
        if self.cuda:
            self.marks[-1].synchronize()
            return [a.elapsed_time(b) / 1000 for a, b in zip(self.marks, self.marks[1:])]
        return [b - a for a, b in zip(self.marks, self.marks[1:])]


def loss_values(losses: list) -> list[float]:
    """Detached loss tensors -> floats, with one host transfer at the end instead of one per step."""
    import torch
    return [float(x) for x in torch.stack([x.float() for x in losses]).cpu()] if losses else []


def build_model(name: str):
    """Local weights when present (a folder, or the HF cache offline), else the architecture with random
    weights from its configuration. Returns (model, description)."""
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM
    transformers.logging.set_verbosity_error()
    path = Path(name)
    local = dict(local_files_only=True, trust_remote_code=False)   # a folder's own code is never run
    if path.is_dir():
        cfg = AutoConfig.from_pretrained(path, **local)
        if any((path / f).exists() for f in ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json")):
            return AutoModelForCausalLM.from_pretrained(path, **local), f"{name} (local weights)"
        return AutoModelForCausalLM.from_config(cfg, trust_remote_code=False), \
            f"{name} (random weights from its config.json)"
    try:
        return (AutoModelForCausalLM.from_pretrained(name, **local), f"{name} (weights from the local HF cache)")
    except Exception:  # not cached: build the architecture from gputopo's catalog
        pass
    from .models import CATALOG, CAUSAL_FAMILIES, catalog_key, hf_config, named
    key = catalog_key(name)
    c = CATALOG.get(key)
    if c is None or c["family"] not in CAUSAL_FAMILIES:
        raise SystemExit(f"error: --model {name}: no local copy, and not a causal LM in gputopo's catalog"
                         " (gpt2*, llama*, mistral*, qwen*, gemma-2*, phi*); give a folder with config.json")
    cfg = transformers.AutoConfig.for_model(**hf_config(named(key)))   # its own model_type: Qwen2, Gemma 2, Phi-3
    return AutoModelForCausalLM.from_config(cfg), f"{key} (random weights: no local copy; step time is the same)"


def load_tokens(dataset: str, vocab: int, seq: int, samples: int, seed: int, model_dir: str | None):
    """(tensor [samples, seq] of token ids, description). Never downloads."""
    import torch
    g = torch.Generator().manual_seed(seed)
    if dataset == "auto":  # wikitext-2 as in the reference when it is in the local cache, else synthetic
        try:
            return load_tokens(WIKITEXT, vocab, seq, samples, seed, model_dir)
        except SystemExit as e:
            tokens, what = load_tokens("synthetic", vocab, seq, samples, seed, model_dir)
            return tokens, f"{what}; {WIKITEXT} unavailable: {str(e.code).split(': ', 2)[-1]}"
    if dataset == "synthetic":
        return torch.randint(0, vocab, (samples, seq), generator=g), "synthetic (random token ids)"
    if dataset.startswith("wikitext"):
        text, what = "\n".join(wikitext_lines(dataset))[:MOST_DATASET_BYTES], f"{dataset} (local datasets cache)"
    else:
        if not Path(dataset).is_file():
            raise SystemExit(f"error: --dataset {dataset}: no such file (or synthetic / wikitext-2-raw-v1)")
        with open(dataset, "rb") as f:
            text, what = f.read(MOST_DATASET_BYTES).decode(errors="replace"), f"{dataset} (local text)"
    need = samples * seq
    ids = _tokenize(text, vocab, model_dir, need)
    if len(ids) < seq:
        raise SystemExit(f"error: --dataset {dataset}: only {len(ids)} tokens, fewer than one sequence of {seq}")
    reps = -(-need // len(ids))
    flat = torch.tensor((ids * reps)[:need], dtype=torch.long)
    return flat.view(samples, seq), what


def wikitext_lines(name: str) -> list[str]:
    """The non-empty lines of a wikitext config from the local `datasets` cache. Never downloads: SystemExit
    with the reason when the package or the cached copy is missing."""
    os.environ.update(OFFLINE)  # read when datasets / huggingface_hub are first imported
    try:
        import datasets
    except ImportError:
        raise SystemExit(f"error: --dataset {name}: the `datasets` package is not installed"
                         " (pip install datasets)") from None
    try:
        ds = datasets.load_dataset("wikitext", name, split="train")
    except Exception as e:
        raise SystemExit(f"error: --dataset {name}: not in the local datasets cache, and nothing is downloaded"
                         f" ({type(e).__name__})") from None
    return [t for t in ds["text"] if t.strip()]


# A step's time does not depend on which tokens it trains on: a 30 MB .txt read whole and its BPE trained on all of it
# took 6.3 GB and 174 s per worker. Its first MiB trains the tokenizer, and the tokens are the text's first 16 MiB
# (repeated when a run needs more; wikitext-2's train split is 11 MB), encoded a MiB at a time up to what is needed.
MOST_DATASET_BYTES = 16 * 2 ** 20
TOKENIZER_SAMPLE = 2 ** 20


def _tokenize(text: str, vocab: int, model_dir: str | None, need: int) -> list[int]:
    """At most `need` tokens of `text` by the model folder's tokenizer when it has one; else by a byte-level BPE
    trained on the text's first TOKENIZER_SAMPLE characters."""
    if model_dir and Path(model_dir, "tokenizer.json").exists():
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True, trust_remote_code=False)
        encode = lambda part: tok(part)["input_ids"]   # noqa: E731
    else:
        from tokenizers import ByteLevelBPETokenizer
        sample = text[:TOKENIZER_SAMPLE]
        progress(phase="tokenizer", chars=len(sample), of=len(text))
        bpe = ByteLevelBPETokenizer()
        bpe.train_from_iterator([sample], vocab_size=max(260, min(vocab, 8192)), min_frequency=2, show_progress=False)
        encode = lambda part: bpe.encode(part).ids   # noqa: E731
    ids: list[int] = []
    for start in range(0, len(text), TOKENIZER_SAMPLE):
        ids += [i for i in encode(text[start:start + TOKENIZER_SAMPLE]) if i < vocab]
        if len(ids) >= need:
            break
    return ids


def allreduce_sweep(sizes: list[int], iters: int, device, world: int) -> list[dict]:
    """all_reduce timing per size; bus bandwidth as nccl-tests defines it: algbw x 2(n-1)/n."""
    import torch
    import torch.distributed as dist
    out = []
    for i, size in enumerate(sizes):
        progress(phase="allreduce", size=size, index=i + 1, of=len(sizes))
        t = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
        for _ in range(2):
            dist.all_reduce(t)
        synchronize(device)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        synchronize(device)
        elapsed = (time.perf_counter() - start) / iters
        # The slowest rank sets the pace: take the max over ranks.
        e = torch.tensor([elapsed], dtype=torch.float64, device=device)
        dist.all_reduce(e, op=dist.ReduceOp.MAX)
        elapsed = float(e.item())
        nbytes = t.numel() * 4
        algbw = nbytes / elapsed / 1e9
        out.append({"bytes": nbytes, "seconds": elapsed, "algbw_gbps": algbw,
                    "busbw_gbps": algbw * 2 * (world - 1) / world})
    return out


def summarize(step_times: list[float], warmup: int, samples_per_step: int) -> dict:
    timed = step_times[warmup:] or step_times
    qs = statistics.quantiles(timed, n=10) if len(timed) >= 2 else [timed[0]] * 9
    return {"steps": len(step_times), "warmup_steps": warmup, "train_runtime_s": sum(step_times),
            "timed_runtime_s": sum(timed), "samples_per_second": samples_per_step * len(timed) / sum(timed),
            "step_time_s": {"median": statistics.median(timed), "p10": qs[0], "p90": qs[-1]},
            "step_times_s": timed}


def train_plain(args, model, data, device, world, rank):
    """DDP with torch.autocast; the reference experiment's loop without the Trainer's overhead."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    model.to(device).train()
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.AdamW(ddp.parameters(), lr=args.lr)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    scaler = torch.amp.GradScaler(device.type, enabled=args.precision == "fp16" and device.type == "cuda")
    data = data.to(device)  # once: a per-step copy from pageable memory would block the host on CUDA
    timer, losses = StepTimer(device, args.steps), []
    synchronize(device)
    timer.mark()
    for step in range(args.steps):  # each step runs from one mark to the next: nothing in the loop goes untimed
        batch = data[(step * world + rank) % len(data)]
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = ddp(batch, labels=batch).loss
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
        timer.mark()
    return timer.intervals(), loss_values(losses), {"engine": "ddp", "optimizer": type(opt).__name__,
                                                    "zero_stage": None}


def train_deepspeed(args, model, data, device, world, rank):
    import deepspeed
    engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                                   config=args.deepspeed)
    data = data.to(engine.device)
    timer, losses = StepTimer(device, args.steps), []
    synchronize(device)
    timer.mark()
    for step in range(args.steps):
        batch = data[(step * world + rank) % len(data)]
        loss = engine(batch, labels=batch).loss
        engine.backward(loss)
        engine.step()
        losses.append(loss.detach())
        timer.mark()
    times, losses = timer.intervals(), loss_values(losses)
    inner = getattr(engine.optimizer, "optimizer", None)
    zc = engine.zero_optimization() and engine._config.zero_config
    info = {"engine": "deepspeed", "zero_stage": engine.zero_optimization_stage(),
            "optimizer": type(engine.optimizer).__name__, "basic_optimizer": type(inner).__name__ if inner else None,
            "bf16": engine.bfloat16_enabled(), "fp16": engine.fp16_enabled(),
            "offload_optimizer": _device(zc.offload_optimizer) if zc else "none",
            "offload_param": _device(zc.offload_param) if zc else "none",
            "deepspeed_version": deepspeed.__version__,
            "accelerator_devices": deepspeed.get_accelerator().device_count(),
            # what release_deepspeed_shm unlinks at exit (None: no shared-memory op, as on GPUs)
            "shm_buffer": shm.name if (shm := deepspeed_shm_buffer()).exists() else None}
    if zc and zc.offload_param and zc.offload_param.nvme_path:
        root = Path(zc.offload_param.nvme_path)
        info["nvme_swap_files"] = sum(1 for p in root.rglob("*.swp") if p.is_file())
    return times, losses, info


def _device(offload) -> str:
    """An offload config's device as text (DeepSpeed stores enum values or plain strings by version)."""
    if offload is None:
        return "none"
    return str(getattr(offload.device, "value", offload.device))


def train_hf(args, model, data, device):
    """The HF Trainer with an optional DeepSpeed config ("auto" values filled from these arguments)."""
    import tempfile

    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    class Steps(TrainerCallback):
        """Marks at step begin and end: the Trainer's logging between steps stays out of the step time."""

        def __init__(self):
            self.timer = StepTimer(device)   # marks at begin and end: no progress from them

        def on_step_begin(self, *a, **k):
            self.timer.mark()

        def on_step_end(self, *a, **k):
            self.timer.mark()
            t = self.timer.host
            progress(phase="train", step=len(t) // 2, steps=args.steps, seconds=t[-1] - t[-2])

    class Tokens(torch.utils.data.Dataset):
        def __len__(self):
            return len(data)

        def __getitem__(self, i):
            return {"input_ids": data[i], "labels": data[i]}
    cb = Steps()
    with tempfile.TemporaryDirectory() as out:
        targs = TrainingArguments(output_dir=out, per_device_train_batch_size=args.batch_size, max_steps=args.steps,
                                  learning_rate=args.lr, logging_steps=1, report_to=[], save_strategy="no",
                                  bf16=args.precision == "bf16", fp16=args.precision == "fp16",
                                  use_cpu=device.type == "cpu", deepspeed=args.deepspeed,
                                  dataloader_num_workers=0, disable_tqdm=True)
        trainer = Trainer(model=model, args=targs, train_dataset=Tokens(), callbacks=[cb])
        result = trainer.train()
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        info = {"engine": "hf-trainer" + ("+deepspeed" if args.deepspeed else ""),
                "train_runtime_hf": result.metrics["train_runtime"],
                "optimizer": type(trainer.optimizer).__name__ if trainer.optimizer is not None else None}
        if args.deepspeed:
            eng = trainer.model_wrapped
            info.update({"zero_stage": eng.zero_optimization_stage(),
                         "basic_optimizer": type(getattr(eng.optimizer, "optimizer", eng.optimizer)).__name__})
    return cb.timer.intervals()[::2], losses, info


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.update(OFFLINE)  # before transformers imports huggingface_hub, which reads it once
    import torch
    import torch.distributed as dist
    torch.manual_seed(args.seed)
    device, backend = device_and_backend()
    if args.deepspeed:
        import deepspeed
        deepspeed.init_distributed(dist_backend=backend)
    elif not dist.is_initialized():
        dist.init_process_group(backend=backend, device_id=device if device.type == "cuda" else None)
    rank, world = dist.get_rank(), dist.get_world_size()
    result = {"device": device.type, "backend": backend, "world_size": world,
              "env": {"NCCL_P2P_DISABLE": os.environ.get("NCCL_P2P_DISABLE")}}
    if args.train:
        progress(phase="build", model=args.model, world=world)
        model, what = build_model(args.model)
        if args.grad_checkpointing:
            model.gradient_checkpointing_enable()
        vocab = model.config.vocab_size
        seq = min(args.seq_len, getattr(model.config, "n_positions", None)
                  or getattr(model.config, "max_position_embeddings", args.seq_len))
        data, data_what = load_tokens(args.dataset, vocab, seq, max(args.steps * world, 8) * args.batch_size,
                                      args.seed, args.model if Path(args.model).is_dir() else None)
        data = data.view(-1, args.batch_size, seq)
        if args.hf_trainer:
            times, losses, info = train_hf(args, model, data.view(-1, seq), device)
        elif args.deepspeed:
            times, losses, info = train_deepspeed(args, model, data, device, world, rank)
        else:
            times, losses, info = train_plain(args, model, data, device, world, rank)
        params = sum(p.numel() for p in model.parameters())
        result.update({"model": {"name": what, "params": params}, "dataset": data_what, "seq_len": seq, "info": info,
                       "losses": losses, "loss_finite": bool(losses) and all(math.isfinite(x) for x in losses),
                       **summarize(times, min(args.warmup_steps, max(0, len(times) - 1)), args.batch_size * world)})
    sizes = [int(s) for s in args.allreduce_sizes.split(",") if s]
    if sizes:
        result["allreduce"] = allreduce_sweep(sizes, args.allreduce_iters, device, world)
    # Every node gets rank 0's result, so each node's bench can report the combined run (c10d hands out ranks
    # in arrival order: global rank 0 may be on any node).
    shared = [result if rank == 0 else None]
    dist.broadcast_object_list(shared, src=0)
    if int(os.environ.get("LOCAL_RANK", rank)) == 0:
        result = shared[0]
        if args.output:
            Path(args.output).write_text(json.dumps(result, indent=2))
        print(RESULT + json.dumps(result), flush=True)
    dist.barrier()
    return 0


def record_error(e: BaseException) -> None:
    """Write the error where torchrun looks for it (TORCHELASTIC_ERROR_FILE): torchrun's report then names it,
    and the bench finds the first failing rank by the file's time."""
    if os.environ.get("TORCHELASTIC_ERROR_FILE") and "torch" in sys.modules:
        from torch.distributed.elastic.multiprocessing.errors import ErrorHandler
        ErrorHandler().record_exception(e)


if __name__ == "__main__":
    run_child(main, on_error=record_error)
