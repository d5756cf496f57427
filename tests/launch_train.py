"""The training script every launch test runs, as a user's script would be run by the printed commands.

    accelerate launch --config_file accelerate_config.yaml tests/launch_train.py
    torchrun ... tests/launch_train.py --deepspeed ds_config.json   (also deepspeed, srun torchrun)

With --deepspeed it is a deepspeed.initialize script (gputopo.worker's loop). Without, it is an accelerate
script written as accelerate's examples are: its own torch AdamW and scheduler, accelerator.prepare,
accelerator.backward, nothing DeepSpeed-specific; LAUNCH_TEST_DUMMY=1 makes it use DummyOptim/DummyScheduler,
LAUNCH_TEST_OPT=sgd torch's SGD.
The model is a tiny GPT-2 (LAUNCH_TEST_MODEL, a folder with config.json); LAUNCH_TEST_STEPS steps.
Each node's first process prints `GPUTOPO_RESULT {json}` with the losses averaged over all ranks, and under
--deepspeed first `GPUTOPO_ENV {json}` (its PATH and TORCH_EXTENSIONS_DIR, to see what crossed ssh); there every
rank also prints `GPUTOPO_THREADS {json}`: its rank, node, torch.get_num_threads(), OMP_NUM_THREADS and the CPUs
it may run on (sched_getaffinity), the threads its CPU Adam steps on.
"""
import json
import os
import sys

MODEL = os.environ["LAUNCH_TEST_MODEL"]
STEPS = int(os.environ.get("LAUNCH_TEST_STEPS", "3"))
BATCH, SEQ = 2, 32


def deepspeed_initialize():
    import runpy
    if os.environ.get("LOCAL_RANK", "0") == "0":  # what this node's processes got (over ssh: .deepspeed_env)
        seen = {k: os.environ.get(k) for k in ("PATH", "TORCH_EXTENSIONS_DIR")}
        print("GPUTOPO_ENV " + json.dumps(seen), flush=True)
    import torch  # the threads this rank was launched with (DeepSpeed's CPU Adam runs OpenMP's, torch's)
    threads = {"rank": int(os.environ.get("RANK", "0")), "node": os.environ.get("SLURMD_NODENAME") or os.uname()[1],
               "torch_threads": torch.get_num_threads(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
               "affinity": len(os.sched_getaffinity(0))}
    print("GPUTOPO_THREADS " + json.dumps(threads), flush=True)
    sys.argv += ["--model", MODEL, "--steps", str(STEPS), "--batch-size", str(BATCH), "--seq-len", str(SEQ)]
    runpy.run_module("gputopo.worker", run_name="__main__")  # ends the process itself (os._exit)


def accelerate_script():
    import torch
    from accelerate import Accelerator
    from transformers import AutoConfig, AutoModelForCausalLM

    handlers = []
    if not torch.cuda.is_available():
        # The CPU twin: without CUDA, accelerate's state finds no backend and counts 1 process while DeepSpeed
        # runs 2 (so "auto" train_batch_size and data sharding go wrong); naming gloo fixes that. On GPUs the
        # script needs nothing of the kind.
        from accelerate.utils import InitProcessGroupKwargs
        handlers.append(InitProcessGroupKwargs(backend="gloo"))
    accelerator = Accelerator(gradient_accumulation_steps=1, kwargs_handlers=handlers)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(MODEL))  # zero.Init under ZeRO-3
    data = torch.randint(0, model.config.vocab_size, (BATCH * STEPS * accelerator.num_processes, SEQ))
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH)
    dummy = os.environ.get("LAUNCH_TEST_DUMMY") == "1"
    if dummy:
        from accelerate.utils import DummyOptim, DummyScheduler
        optimizer = DummyOptim(model.parameters(), lr=1e-3, weight_decay=0.0)
        scheduler = DummyScheduler(optimizer, total_num_steps=STEPS, warmup_num_steps=1)
    elif os.environ.get("LAUNCH_TEST_OPT") == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    losses = []
    model.train()
    for batch in loader:
        with accelerator.accumulate(model):
            loss = model(input_ids=batch, labels=batch).loss
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        losses.append(float(accelerator.reduce(loss.detach().float(), reduction="mean")))
    engine = model  # accelerate returns the DeepSpeedEngine as the model
    inner = getattr(engine.optimizer, "optimizer", engine.optimizer)
    zc = engine._config.zero_config
    result = {"world_size": accelerator.num_processes, "losses": losses, "dummy": dummy,
              "zero_stage": engine.zero_optimization_stage(), "basic_optimizer": type(inner).__name__,
              "micro_batch": engine.train_micro_batch_size_per_gpu(),
              "offload_optimizer": (str(getattr(zc.offload_optimizer, "device", "none")) if zc.offload_optimizer
                                    else "none"),
              "offload_param": str(getattr(zc.offload_param, "device", "none")) if zc.offload_param else "none",
              "bf16": engine.bfloat16_enabled()}
    if accelerator.is_local_main_process:
        print("GPUTOPO_RESULT " + json.dumps(result), flush=True)
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    if "--deepspeed" in sys.argv:
        deepspeed_initialize()
    code = 1
    try:
        accelerate_script()
        code = 0
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:  # the worker exit flake (NOTES-install.md): end without interpreter teardown
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
