"""Issue 18: one owner per rule, every command asks it, and values that cannot be true are refused or flagged.

Each rule that lived in two or three places (the NVMe folder, its free space and its refusal; notes that
suggested options the command refuses; advice repeated when taken) is checked here across the commands
that use it, so a second copy that drifts shows up as a failing test."""
import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from gputopo import nvme
from gputopo.cli import cli

MODEL = ["--model", "gpt2", "--cpu-mem", "64GB"]
LAYOUT = ["--gpus", "2", "--gpu-mem", "24GB"]


def run(*args, cwd=None):
    if cwd:
        old = os.getcwd()
        os.chdir(cwd)
    try:
        return CliRunner().invoke(cli, [str(a) for a in args])
    finally:
        if cwd:
            os.chdir(old)


def refusal(r) -> str:
    assert r.exit_code == 2 and r.stdout == "" and r.output.count("\n") == 1, (r.exit_code, r.output)
    return r.output.strip()


# --- the NVMe folder: one owner (gputopo.nvme), the same answer in every command ------------------------------

def _every_command(path: str) -> dict:
    return {
        "plan": run("plan", *MODEL, *LAYOUT, "--nvme-path", path),
        "inspect": run("inspect", "--example", "dgx-a100", *MODEL, "--nvme-path", path),
        "deepspeed-config": run("deepspeed-config", "--stage", "3", "--offload", "nvme", "--nvme-path", path),
        "doctor": run("doctor", "--nvme-path", path),
    }


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_a_bad_nvme_path_gets_the_same_refusal_everywhere(tmp_path, kind):
    """Issue 18: `doctor --nvme-path /mnt/nvme0` (missing) said "Nothing blocks a run here" while plan and
    deepspeed-config refused it; a file gave click's "Directory ... is a file."."""
    path = tmp_path / "nvme0"
    if kind == "file":
        path.write_text("x")
    lines = {cmd: refusal(r) for cmd, r in _every_command(str(path)).items()}
    want = f"Error: --nvme-path {path}: " + ("not an existing directory" if kind == "missing" else
                                             "is a file, not a directory")
    assert set(lines.values()) == {want}, lines


def test_a_good_nvme_path_is_the_same_folder_and_free_space_everywhere(tmp_path):
    free = nvme.given(str(tmp_path)).free_bytes
    plan = json.loads(run("plan", *MODEL, *LAYOUT, "--nvme-path", tmp_path, "--json").stdout)
    inspect = json.loads(run("inspect", "--example", "dgx-a100", *MODEL, "--nvme-path", tmp_path, "--json").stdout)
    cfg = json.loads(run("deepspeed-config", "--stage", "3", "--offload", "nvme", "--nvme-path", tmp_path).stdout)
    doctor = json.loads(run("doctor", "--nvme-path", tmp_path, "--json").stdout)
    slack = 256 * 2 ** 20  # the shared disk may move between two statvfs calls
    assert abs(plan["layout"]["nvme_free_bytes"] - free) < slack
    assert abs(inspect["plan"]["layout"]["nvme_free_bytes"] - free) < slack
    assert any(n.startswith("NVMe free:") and f"measured at {tmp_path}" in n for n in plan["notes"])
    assert cfg["zero_optimization"]["offload_param"]["nvme_path"] == str(tmp_path)
    check, = [c for c in doctor["checks"] if c["id"] == "nvme_path"]
    assert check["subject"] == str(tmp_path)


def test_without_nvme_path_plan_and_deepspeed_config_pick_the_same_folder():
    picked = nvme.default()
    if picked is None:
        pytest.skip("no writable local disk on this machine")
    plan = json.loads(run("plan", *MODEL, *LAYOUT, "--nvme-path", picked.path, "--json").stdout)
    cfg = json.loads(run("deepspeed-config", "--stage", "3", "--offload", "nvme").stdout)
    assert any(f"measured at {picked.path}" in n for n in plan["notes"])
    assert cfg["zero_optimization"]["offload_param"]["nvme_path"] == os.path.abspath(picked.path)
    # GPUs described, not this machine's: its disk says nothing of theirs (issue 34)
    other = json.loads(run("plan", *MODEL, *LAYOUT, "--json").stdout)
    assert other["layout"]["nvme_free_bytes"] is None and not any("NVMe free" in n for n in other["notes"])
    row = next(s for s in other["strategies"] if s["name"] == "zero3_offload_nvme")
    assert "nvme" not in row["short_bytes"]
    assert row["condition"].endswith("free on each node's NVMe (--nvme-free SIZE to check)")


def test_no_local_disk_plans_zero_nvme_and_refuses_the_config_with_one_reason(monkeypatch, fake_nvml):
    """Was: plan fell back to the temp folder while deepspeed-config refused."""
    import fake_nvml as fm
    fake_nvml(fm.rtx3090_pair())
    monkeypatch.setattr(nvme, "default", lambda: None)
    # this machine's GPUs are planned with the local disk's rule; a paste or GPUs described leave it unknown
    plan = json.loads(run("plan", *MODEL, "--json").stdout)
    assert plan["layout"]["nvme_free_bytes"] == 0
    assert any(nvme.NOWHERE in n for n in plan["notes"])
    assert nvme.NOWHERE in refusal(run("deepspeed-config", "--stage", "3", "--offload", "nvme"))


def test_a_paste_is_planned_without_this_machines_disk():
    """A pasted topology is another machine's (helper's trial: inspect printed this VM's /tmp as the A800's NVMe)."""
    plan = json.loads(run("inspect", "--example", "dgx-a100", *MODEL, "--json").stdout)["plan"]
    assert plan["layout"]["nvme_free_bytes"] is None
    # nor its cores: a DGX A100's 128, assumed and said (issue 50), whatever this machine has
    assert plan["layout"]["cpu_mem_bytes"] == 64 * 2 ** 30 and plan["layout"]["cpu_cores"] == 128
    assert any(n.startswith("128 CPU cores: per node, assumed (not given): DGX A100") for n in plan["notes"])


# --- values that cannot be true --------------------------------------------------------------------------------

def test_seq_len_beyond_learned_positions_is_refused():
    line = refusal(run("plan", *MODEL, *LAYOUT, "--seq-len", "2048"))
    assert line == ("Error: --seq-len 2048: gpt2 has 1024 learned positions; a longer sequence has no position"
                    " embedding (index error in training)")


def test_seq_len_beyond_rotary_positions_is_a_note():
    r = run("plan", "--model", "llama-2-7b", "--gpus", "8", "--gpu-model", "H100", "--cpu-mem", "1TB",
            "--nvme-free", "1TB", "--seq-len", "8192", "--batch-size", "1", "--grad-checkpointing", "--json")
    notes = json.loads(r.stdout)["notes"]
    assert any(n.startswith("--seq-len 8192 is beyond llama-2-7b's 4096 trained positions") for n in notes)


@pytest.mark.parametrize("link,why", [("NV99", "no GPU has 99 NVLinks (NV1 to NV18)"), ("NV0", "no GPU has 0"),
                                      ("PCIe", "not a link type of nvidia-smi")])
def test_link_that_no_gpu_has_is_refused(link, why):
    assert why in refusal(run("plan", *MODEL, *LAYOUT, "--link", link))


def test_gpu_mem_that_the_model_is_not_sold_with_gets_a_note():
    args = [*MODEL, "--gpus", "2", "--gpu-model", "H100", "--nvme-free", "1TB", "--json"]
    noted = json.loads(run("plan", *args, "--gpu-mem", "40GB").stdout)["notes"]
    assert any(n.startswith("--gpu-mem 40.0 GiB is used, but H100 is sold as 80GB") for n in noted)
    agreed = json.loads(run("plan", *args, "--gpu-mem", "80GB").stdout)["notes"]
    assert not any("is sold as" in n for n in agreed)


def test_more_nvlinks_than_the_gpu_has_is_flagged_once():
    data = json.loads(run("inspect", "--example", "h100x8", "--gpu-model", "A100-80GB", "--json").stdout)
    found = [f for f in data["findings"] if f["code"] == "nvlinks_beyond_model"]
    assert len(found) == 1 and "A100-80GB has 12 NVLink(s)" in found[0]["message"]
    assert "and 25 more" in found[0]["message"]
    own = json.loads(run("inspect", "--example", "h100x8", "--json").stdout)
    assert not [f for f in own["findings"] if f["code"] == "nvlinks_beyond_model"]


# --- notes and advice say only what the command can act on -----------------------------------------------------

def test_deepspeed_config_without_auto_suggests_no_plan_only_option():
    """--attention and --seq-len only feed the plan: without --auto they are refused, so no note names them."""
    r = run("deepspeed-config", "--stage", "2", "--model", "gpt2")
    assert r.exit_code == 0, r.output
    assert "--attention" not in r.stderr and "--seq-len" not in r.stderr
    assert "feeds the memory plan" in refusal(run("deepspeed-config", "--stage", "2", "--attention", "sdpa"))


def test_advice_already_taken_is_not_repeated():
    base = ["--model", "llama-2-70b", "--gpus", "1", "--gpu-mem", "8GB", "--cpu-mem", "16GB", "--nvme-free", "10GB",
            "--json"]
    reasons = json.loads(run("plan", *base, "--no-grad-checkpointing", "--batch-size", "4").stdout)
    assert "use --grad-checkpointing" in " ".join(reasons["recommendation"]["reasons"])
    for taken in (["--grad-checkpointing", "--batch-size", "1"], []):   # given, or tried by the search
        text = " ".join(json.loads(run("plan", *base, *taken).stdout)["recommendation"]["reasons"])
        assert "--grad-checkpointing" not in text and "lower --batch-size" not in text


def test_tensor_core_advice_is_about_matmul_sizes_not_the_batch():
    """Was: "Batch size 4 is not a multiple of 8" for gputopo's own default; alignment is per matmul dimension."""
    reasons = lambda *a: " ".join(json.loads(run("plan", *MODEL, *LAYOUT, "--nvme-free", "1TB", "--json", *a)  # noqa
                                             .stdout)["recommendation"]["reasons"])
    bf16 = reasons("--batch-size", "4", "--precision", "bf16")
    assert "Batch size" not in bf16 and "Vocabulary 50257 is not a multiple of 8" in bf16
    assert "tokens per micro-batch 3 x 129 = 387" in reasons("--batch-size", "3", "--seq-len", "129")
    assert "Tensor Cores" not in reasons("--precision", "fp32")


def test_missing_layout_is_refused_before_transformers_loads(tmp_path):
    """Was: `plan --model <folder>` on a GPU-less machine spent 7 s in transformers before asking for --gpus."""
    model = os.path.join(os.path.dirname(__file__), "fixtures", "models", "tinyllama-1.1b")
    code = ("import sys\nfrom gputopo.cli import cli\ntry:\n    cli(['plan', '--model', sys.argv[1]],"
            " standalone_mode=False)\nexcept BaseException as e:\n    print(type(e).__name__)\n"
            "print('transformers' in sys.modules, 'torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code, model], capture_output=True, text=True, timeout=120)
    if "no GPU visible" not in r.stdout + r.stderr:
        pytest.skip("a GPU is visible: the layout comes from it")
    assert r.stdout.strip().endswith("False False"), r.stdout + r.stderr


# --- output conventions ----------------------------------------------------------------------------------------

def test_dash_output_is_stdout_not_a_file_named_dash(tmp_path):
    r = run("deepspeed-config", "--stage", "2", "-o", "-", cwd=tmp_path)
    assert r.exit_code == 0 and json.loads(r.stdout)["zero_optimization"]["stage"] == 2
    assert not (tmp_path / "-").exists()


def test_accelerate_yaml_names_the_config_by_its_absolute_path(tmp_path):
    (tmp_path / "sub").mkdir()
    r = run("deepspeed-config", "--stage", "2", "--gpus", "2", "--launcher", "accelerate", "-o", "sub/ds.json",
            cwd=tmp_path)
    assert r.exit_code == 0, r.output
    yaml = (tmp_path / "sub" / "accelerate_config.yaml").read_text()
    assert f"deepspeed_config_file: {tmp_path / 'sub' / 'ds.json'}" in yaml


@pytest.mark.parametrize("args", [["inspect", "--example", "dgx-a100", "--plot"],
                                  ["bench-nvlink", "--allreduce-only", "--plot"]])
def test_a_picture_refusal_names_the_option(tmp_path, args):
    assert refusal(run(*args, "-")).startswith("Error: --plot -: give a")


# --- a fresh-eyes review of the new layer: options accepted but dropped, and contradictions ---------------------

@pytest.mark.parametrize("args,line", [
    (["deepspeed-config", "--auto", "--model", "gpt2", "--gpus", "2", "--gpu-mem", "24GB", "--offload", "cpu"],
     "--auto takes the offload from the plan"),
    (["plan", *MODEL, "--gpus", "2", "--gpu-model", "A100-80GB", "--link", "NV18"], "--link NV18: A100 has 12 NVLinks"),
    (["plan", *MODEL, "--gpus", "2", "--gpu-model", "RTX 4090", "--link", "NV12"], "RTX 4090 has no NVLink"),
    (["plan", *MODEL, "--gpus", "1", "--gpu-mem", "24GB", "--link", "NV12"], "--gpus 1 has none"),
    (["plan", *MODEL, *LAYOUT, "--inter-node-gbps", "25"], "with --nodes 1 there is none"),
    (["deepspeed-config", "--stage", "2", "--nodes", "2", "--launcher", "torchrun", "--gpus", "8",
      "--master-addr", "10.0.0.1:29500"], "the port goes in --master-port"),
    (["deepspeed-config", "--stage", "2", "--script", "my.py"], "--script names the training script"),
    (["deepspeed-config", "--stage", "2", "--force"], "--force overwrites --output"),
    (["deepspeed-config", "--stage", "2", "--master-port", "29500"], "--master-port is for --launcher"),
    (["deepspeed-config", "--stage", "2", "--nvme-path", "/tmp"], "--nvme-path only feeds the memory plan"),
    (["deepspeed-config", "--stage", "3", "--no-offload-params"], "--no-offload-params needs --offload cpu or nvme"),
    (["deepspeed-config", "--stage", "0", "--model", "gpt2"], "stage 0 has neither"),
    (["deepspeed-config", "--stage", "3", "--offload", "nvme", "--nvme-free", "1GB", "--model", "llama-2-7b"],
     "--nvme-free 1.0 GiB, offload needs 113.0 GiB"),
    (["deepspeed-config", "--stage", "3", "--offload", "nvme", "--nvme-path", ""], "--nvme-path is empty"),
    (["deepspeed-config", "--stage", "2", "-o", ""], "--output is empty"),
    (["inspect", "-f", ""], "--from-file is empty"),
    (["inspect", "--example", "dgx1-v100", "--gpu-ids", "5,6", "--best", "2"], "--best picks K GPUs among all"),
    (["inspect", "--example", "list", "--model", "gpt2"], "--example list lists the examples; --model"),
    (["bench-nvlink", "--allreduce-only", "--force"], "--force overwrites --output or --plot"),
])
def test_contradictions_and_dropped_options_are_refused(args, line):
    assert line in refusal(run(*args))


def test_output_that_is_a_launcher_file_is_refused_before_anything_is_written(tmp_path):
    """Was: -o accelerate_config.yaml --launcher accelerate overwrote the config with the YAML naming itself."""
    out = tmp_path / "accelerate_config.yaml"
    assert "writes a file of that name" in refusal(run("deepspeed-config", "--stage", "2", "-o", out,
                                                       "--launcher", "accelerate"))
    assert not out.exists()


def test_plan_options_without_a_topology_are_refused_not_dropped():
    r = run("inspect", "--model", "gpt2")
    if "No NVIDIA GPU" not in run("inspect").stdout:
        pytest.skip("a GPU is visible here")
    assert r.exit_code == 3 and r.output.startswith("Error: --model needs a topology")


def test_markdown_report_exits_1_when_nothing_fits_as_the_table_does():
    args = ["inspect", "--example", "pcie-desktop-2gpu", "--model", "llama-2-70b", "--gpu-mem", "24GB",
            "--cpu-mem", "16GB", "--nvme-free", "10GB"]
    assert run(*args).exit_code == run(*args, "--markdown").exit_code == 1


def test_bare_gputopo_prints_its_help():
    r = run()
    assert r.exit_code == 0 and r.stdout.startswith("Usage: ") and "Commands:" in r.stdout
    assert not r.output.startswith("Error")


def test_doctor_config_errors_name_the_option(tmp_path):
    empty = tmp_path / "ds.json"
    empty.write_text("")
    assert refusal(run("doctor", "--config", empty)) == f"Error: --config {empty}: empty, not a DeepSpeed config (JSON)"


@pytest.mark.parametrize("launcher", ["torchrun", "deepspeed", "accelerate", "slurm"])
def test_a_launch_without_a_gpu_count_is_refused_where_none_is_visible(launcher):
    """No GPU here and no --gpus: a launch would start a guessed 1 process per node (`--num_gpus 1`)."""
    r = run("deepspeed-config", "--stage", "2", "--launcher", launcher)
    if "no GPU is visible here" not in r.output and r.exit_code == 0:
        pytest.skip("a GPU is visible here: its count is used")
    assert r.exit_code == 2 and refusal(r) == (f"Error: --launcher {launcher} starts one process per GPU and no GPU"
                                               " is visible here to count: give --gpus N, the GPUs per node where"
                                               " it runs")
    assert run("deepspeed-config", "--stage", "2", "--gpus", "2", "--launcher", launcher).exit_code == 0


def test_bench_one_process_on_cpu_is_refused_like_one_gpu():
    if "No NVIDIA GPU" not in run("inspect").stdout:
        pytest.skip("a GPU is visible here")
    r = run("bench-nvlink", "--gpus", "1", "--allreduce-only")
    assert r.exit_code == 4 and "--gpus 1 on one node has no peer" in r.output
