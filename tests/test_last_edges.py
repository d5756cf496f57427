"""Issue 49, the last sharp edges: inputs that were exit 70 (an internal error), reads without a bound, and output
that was untrue or broke when pasted. Each is one `Error:` line with its documented exit status, or a right answer."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gputopo.cli import cli

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
KELVIN = "\u212a"   # KELVIN SIGN: under re.I it matched [KMGTP], and SCALE had no entry for it


def run(*args, input=None, env=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input, env=env)


def one_line(r, text, code=2):
    """exit `code`, one `Error:` line holding `text`, no traceback."""
    assert r.exit_code == code, (r.exit_code, r.output)
    assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1 and text in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr


# --- sizes are ASCII: the Kelvin sign and the Turkish I's -------------------------------------------------------

@pytest.mark.parametrize("args, option", [
    (["plan", "--model", "gpt2", "--gpus", "2", "--gpu-mem", f"80{KELVIN}B"], "--gpu-mem"),
    (["plan", "--model", "gpt2", "--gpus", "2", "--gpu-mem", "80GB", "--cpu-mem", f"64{KELVIN}"], "--cpu-mem"),
    (["plan", "--model", "gpt2", "--gpus", "2", "--gpu-mem", "80GB", "--nvme-free", f"1{KELVIN}iB"], "--nvme-free"),
    (["bench-nvlink", "--allreduce-only", "--allreduce-sizes", f"1MB,4{KELVIN}B"], "--allreduce-sizes"),
    (["plan", "--model", "gpt2", "--gpus", "2", "--gpu-mem", "80G\u0131B"], "--gpu-mem"),   # dotless i
])
def test_a_size_with_a_letter_outside_ascii_is_refused_naming_it(args, option):
    r = run(*args)
    one_line(r, f"{option} ")
    assert "is not ASCII" in r.stderr and "U+" in r.stderr


def test_an_option_given_twice_with_a_kelvin_sign_is_one_line():
    one_line(run("plan", "--model", "gpt2", "--gpus", "2", "--gpu-mem", "80GB", "--gpu-mem", f"80{KELVIN}B"),
             "--gpu-mem given twice")


# --- a GPU's name: digits runs bounded, a fleet report's names bounded, a typed model is the model -------------

def test_a_gpu_name_with_a_4301_digit_number_is_read_without_int_failing():
    from gputopo import fleet, gpus
    name = "NVIDIA H100 " + "9" * 5000 + "GB"
    assert gpus.lookup(name).key == "H100" and gpus.lookup(name).memory_bytes is not None   # no size: H100's one
    assert not fleet._same_model(name, "NVIDIA L40S")


def fleet_report(tmp_path, name, **gpu):
    report = json.loads((FIXTURES / "fleet" / "node01.json").read_text())
    for g in report["gpus"]:
        g.update(gpu)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(report))
    return path


def test_a_fleet_report_whose_gpu_model_is_longer_than_nvml_writes_is_refused(tmp_path):
    """The issue's node: a 5000-digit number in its GPUs' model, which differ from the others' (exit 70 in
    gpus.lookup); from a file (exit 2, naming the bound) and live (the node has no report, the others do)."""
    from gputopo import gather
    odd = fleet_report(tmp_path, "odd", model="NVIDIA H100 " + "9" * 5000 + "GB")
    r = run("inspect", "--fleet", "-f", FIXTURES / "fleet" / "node01.json", "-f", FIXTURES / "fleet" / "node02.json",
            "-f", odd)
    one_line(r, "gpus[0].model has 5,014 characters, more than 96")
    report, why = gather.answer(odd.read_text().splitlines(), 0, "", 30)
    assert report is None and why == "its report: gpus[0].model has 5,014 characters, more than 96"
    long_env = json.loads((FIXTURES / "fleet" / "node01.json").read_text())
    long_env["env"] = {"NCCL_X" * 1000: "1"}
    assert gather.problem(long_env) == "a key of env has 6,000 characters, more than 4096"


@pytest.mark.parametrize("name", ["H100-FOO", "H100 XYZ", "H100\u00df", "H100\u00e9", "H1000", "H100 80GB XYZ"])
def test_a_gpu_model_with_more_than_a_known_name_is_refused(name):
    r = run("plan", "--model", "gpt2", "--gpus", "2", "--gpu-model", name)
    one_line(r, f"--gpu-model {name}: unknown GPU model; known: ")


@pytest.mark.parametrize("name, key", [("NVIDIA A100-SXM4-80GB", "A100"), ("Tesla P100-PCIE-16GB", "P100"),
                                       ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA RTX 6000 Ada Generation",
                                                                          "RTX 6000 Ada"),
                                       ("NVIDIA H200 NVL", "H200"), ("Quadro RTX 8000", "Quadro RTX 8000"),
                                       ("NVIDIA GeForce RTX 4090", "RTX 4090"), ("rtx4090", "RTX 4090")])
def test_a_gpu_model_as_nvidia_smi_names_it_is_known(name, key):
    from gputopo import gpus
    assert gpus.known(name).key == key
