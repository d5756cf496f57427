"""DeepSpeed really trains with the configs gputopo writes: 2 processes, gloo on CPU, a tiny GPT-2.

Slow: the first run on a machine compiles DeepSpeed's CPU ops (shm_comm, fused_adam, cpu_adam; async_io
for NVMe) into ~/.cache/torch_extensions, a few minutes once; later runs take ~15 s each.
fp16 is not run: DeepSpeed refuses it on CPU ("Type fp16 is not supported on your device").
"""
import json
import shlex
import subprocess
from pathlib import Path

import pytest
from conftest import bin_path, make_model_dir, run_worker

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    __import__("importlib").util.find_spec("deepspeed") is None, reason="deepspeed not installed")]


def generate(tmp_path, *args) -> str:
    out = tmp_path / "ds_config.json"
    cmd = [bin_path("gputopo"), "deepspeed-config", *args, "-o", str(out), "--force"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return str(out)


def train(tmp_path, model, config, precision, steps=4, batch=2, seq=32, extra=()):
    result, proc = run_worker(["--model", str(model), "--steps", str(steps), "--batch-size", str(batch),
                               "--seq-len", str(seq), "--precision", precision, "--deepspeed", config, *extra],
                              cwd=tmp_path)
    assert result is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert result["loss_finite"] and len(result["losses"]) == steps
    assert result["world_size"] == 2 and result["backend"] == "gloo"
    # LOCAL_SIZE as DeepSpeed's launcher sets it: else its CPU accelerator runs `numactl` at every ZeRO-3 bucket
    assert result["info"]["accelerator_devices"] == 2
    # DeepSpeed's shared-memory comm op made a 66 MB buffer per rank and never unlinks it: the worker did
    buffer = result["info"]["shm_buffer"]
    assert buffer and not (Path("/dev/shm") / buffer).exists() and not (Path("/dev/shm") / f"{buffer[:-1]}1").exists()
    return result["info"]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_stages_train(tmp_path, tiny_model, stage, precision):
    # --model sizes ZeRO's buckets from stage 1 on; stage 0 has none, so there it would be refused
    sized = ["--model", str(tiny_model)] if stage else []
    cfg = generate(tmp_path, "--stage", str(stage), "--no-hf", "--precision", precision, "--batch-size", "2", *sized)
    info = train(tmp_path, tiny_model, cfg, precision)
    assert info["zero_stage"] == stage and info["bf16"] == (precision == "bf16")
    assert info["offload_optimizer"] == "none" and info["basic_optimizer"] != "DeepSpeedCPUAdam"


@pytest.mark.parametrize("stage,params,expect_param", [(1, None, "none"), (2, None, "none"), (3, None, "cpu"),
                                                       (3, "--no-offload-params", "none")])
def test_cpu_offload_trains(tmp_path, tiny_model, stage, params, expect_param):
    args = ["--stage", str(stage), "--offload", "cpu", "--no-hf", "--precision", "bf16", "--batch-size", "2"]
    cfg = generate(tmp_path, *args, *([params] if params else []))
    info = train(tmp_path, tiny_model, cfg, "bf16")
    assert info["zero_stage"] == stage and info["offload_optimizer"] == "cpu" and info["offload_param"] == expect_param
    assert info["basic_optimizer"] == "DeepSpeedCPUAdam"


def test_nvme_offload_trains_and_swaps(tmp_path):
    from gputopo import validate
    if not validate.libaio_ok():
        pytest.skip("libaio is missing: DeepSpeed's async_io op cannot build (apt-get install libaio-dev)")
    # Swap files are written only for tensors of 1 MiB or more: n_embd 512.
    model = make_model_dir(tmp_path / "gpt2-512", n_embd=512, n_head=4, n_positions=64)
    nvme = tmp_path / "nvme"
    nvme.mkdir()
    cfg = generate(tmp_path, "--stage", "3", "--offload", "nvme", "--nvme-path", str(nvme), "--no-hf",
                   "--precision", "bf16", "--batch-size", "2", "--model", str(model))
    info = train(tmp_path, model, cfg, "bf16")
    assert info["offload_optimizer"] == "nvme" and info["offload_param"] == "nvme"
    assert info["nvme_swap_files"] > 0 and any(nvme.rglob("*.swp"))


def test_hf_trainer_accepts_auto_config(tmp_path, tiny_model):
    cfg = generate(tmp_path, "--stage", "2")  # "auto" everywhere the Trainer fills values
    assert json.loads(open(cfg).read())["train_micro_batch_size_per_gpu"] == "auto"
    result, proc = run_worker(["--model", str(tiny_model), "--steps", "3", "--batch-size", "2", "--seq-len", "32",
                               "--precision", "bf16", "--deepspeed", cfg, "--hf-trainer"], cwd=tmp_path)
    assert result is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert result["info"]["engine"] == "hf-trainer+deepspeed" and result["info"]["zero_stage"] == 2
    assert result["loss_finite"] and result["losses"]


def test_printed_deepspeed_launch_command_runs(tmp_path, tiny_model):
    from gputopo import launch
    cfg = generate(tmp_path, "--stage", "1", "--no-hf", "--precision", "fp32", "--batch-size", "2")
    (tmp_path / "train.py").write_text(
        "import runpy, sys\n"
        f"sys.argv += ['--model', {str(tiny_model)!r}, '--steps', '3', '--batch-size', '2', '--seq-len', '32']\n"
        "runpy.run_module('gputopo.worker', run_name='__main__')\n")
    cmd = launch.command("deepspeed", cfg, gpus=2)["command"]
    argv = shlex.split(cmd)
    argv[0] = bin_path("deepspeed")
    result, proc = run_worker([], cwd=tmp_path, launcher=argv)
    assert result is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert result["world_size"] == 2 and result["info"]["zero_stage"] == 1 and result["loss_finite"]


@pytest.mark.parametrize("offload", ["none", "cpu"])
def test_no_compile_ops_trains_with_torch_adamw(tmp_path, tiny_model, offload):
    """`--no-compile-ops` ("torch_adam": true): DeepSpeed steps torch's AdamW, no FusedAdam/CPUAdam to build."""
    cfg = generate(tmp_path, "--stage", "2", "--offload", offload, "--no-hf", "--precision", "bf16",
                   "--batch-size", "2", "--no-compile-ops")
    assert json.loads(open(cfg).read())["optimizer"]["params"]["torch_adam"] is True
    info = train(tmp_path, tiny_model, cfg, "bf16")
    assert info["basic_optimizer"] == "AdamW" and info["offload_optimizer"] == offload
