"""Issue 50: --precision tf32, fp32 training whose matmuls run on Ampere's TF32 tensor cores (the HF Trainer's --tf32,
NGC containers by default): fp32 memory, TF32 matmul time."""
import json

import pytest
from click.testing import CliRunner

from gputopo.cli import cli

A100 = ["--model", "gpt2-large", "--gpus", "1", "--gpu-model", "A100-80GB", "--batch-size", "8"]


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def plan(*args) -> dict:
    r = run("plan", *args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_tf32_keeps_fp32_memory_and_prices_the_matmuls_on_tensor_cores():
    fp32, tf32 = plan(*A100, "--precision", "fp32"), plan(*A100, "--precision", "tf32")
    assert tf32["training"]["precision"] == "fp32" and tf32["training"]["tf32"] is True
    assert fp32["training"]["tf32"] is False
    assert tf32["strategies"][0]["per_gpu_bytes"] == fp32["strategies"][0]["per_gpu_bytes"]   # the same tensors
    # A100: 19.5 TFLOPS fp32, 156 TF32 dense: the matmul-bound step several times shorter, not 8x (memory-bound ops)
    ratio = fp32["strategies"][0]["time"]["step_s"] / tf32["strategies"][0]["time"]["step_s"]
    assert 2.5 < ratio < 8, ratio
    assert "TF32 tensor cores" in tf32["rates"]["basis"]["device"]
    assert any("--precision tf32 plans that" in n for n in fp32["notes"])


@pytest.mark.parametrize("gpu", ["V100-32GB", "TITAN RTX", "T4"])   # Volta, Turing's consumer and datacenter cards
def test_tf32_before_ampere_is_refused_in_one_line(gpu):
    r = run("plan", "--model", "gpt2", "--gpus", "1", "--gpu-model", gpu, "--precision", "tf32")
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "needs an Ampere or newer GPU" in r.output
    assert f"{gpu} is older" in r.output


def test_the_launch_runs_tf32():
    r = run("deepspeed-config", "--auto", "--model", "gpt2-large", "--gpus", "2", "--gpu-model", "A100-80GB",
            "--precision", "tf32", "--launcher", "torchrun", "--json")
    d = json.loads(r.stdout)
    assert d["launch"]["command"].endswith("--tf32")
    assert not d["config"]["bf16"]["enabled"] and not d["config"]["fp16"]["enabled"]   # fp32 weights
    r = run("deepspeed-config", "--auto", "--model", "gpt2-large", "--gpus", "2", "--gpu-model", "A100-80GB",
            "--precision", "tf32", "--launcher", "torchrun", "--no-hf", "--json")
    d = json.loads(r.stdout)
    assert any("allow_tf32 = True" in line for line in d["launch"]["script_needs"])
