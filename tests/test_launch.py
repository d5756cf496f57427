"""Launch files and commands: written beside the config under the --force rule, no shell variable in any file,
the accelerate shape, and refusals. The runs themselves are in test_launch_runs.py."""
import json
import os
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gputopo import dsconfig
from gputopo.cli import cli
from gputopo.errors import BadInput


def run(*args):
    return CliRunner().invoke(cli, list(args))


def generate(tmp_path, *args):
    out = tmp_path / "cfg" / "ds.json"
    out.parent.mkdir(exist_ok=True)
    r = run("deepspeed-config", *args, "-o", str(out), "--force", "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout), out


def shell_vars_undefined(script: str) -> set[str]:
    """$NAME / ${NAME} in a shell script that neither Slurm nor the script itself sets."""
    used = set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", script))
    assigned = set(re.findall(r"^\s*([A-Za-z_][A-Za-z0-9_]*)=", script, re.M))
    return {v for v in used - assigned if not v.startswith("SLURM_")}


LAYOUTS = [(launcher, nodes, master) for launcher in ("torchrun", "deepspeed", "accelerate", "slurm")
           for nodes in (1, 2, 3) for master in (None, "10.1.2.3")
           if not (master and (nodes == 1 or launcher == "slurm"))]


@pytest.mark.parametrize("launcher,nodes,master", LAYOUTS)
def test_files_are_written_beside_the_config_without_shell_variables(tmp_path, launcher, nodes, master):
    data, out = generate(tmp_path, "--stage", "3", "--offload", "cpu", "--gpus", "4", "--nodes", str(nodes),
                         "--launcher", launcher, *(["--master-addr", master] if master else []))
    info = data["launch"]
    written = sorted(p.name for p in out.parent.iterdir())
    assert written == sorted(["ds.json"] + [Path(p).name for p in info["files"]])
    for path, text in info["files"].items():
        assert Path(path).parent == out.parent and Path(path).read_text() == text
        if path.endswith(".sbatch"):
            assert not shell_vars_undefined(text), text
        else:  # YAML, hostfiles and JSON expand nothing
            assert "$" not in text, text
        assert any(path in r["command"] for r in info["run"]), (path, info["run"])  # the command names it
    assert "$" not in out.read_text()
    if master:
        assert any(master in text for text in info["files"].values()) or master in info["command"]
    commands = " ".join(r["command"] for r in info["run"])
    if nodes > 1 and launcher == "accelerate":
        assert "--machine_rank 0" in commands and '--machine_rank "$NODE_RANK"' in commands
        assert ('--main_process_ip "$MASTER_ADDR"' in commands) == (master is None)
        from accelerate.utils.constants import DEEPSPEED_MULTINODE_LAUNCHERS
        assert DEEPSPEED_MULTINODE_LAUNCHERS[1] == "standard"  # torchrun per node, as accelerate names it
        assert "deepspeed_multinode_launcher: standard" in next(iter(info["files"].values()))
    if nodes > 1 and launcher == "torchrun":
        assert ('"$MASTER_ADDR:29500"' in commands) == (master is None)
    assert info["script_needs"] and all(r["where"] for r in info["run"])


def test_launcher_files_obey_force_before_any_work(tmp_path):
    out = tmp_path / "ds.json"
    (tmp_path / "accelerate_config.yaml").write_text("mine")
    r = run("deepspeed-config", "--stage", "2", "--gpus", "1", "--launcher", "accelerate", "-o", str(out))
    assert r.exit_code == 2 and "accelerate_config.yaml exists; pass --force" in r.output
    assert not out.exists() and (tmp_path / "accelerate_config.yaml").read_text() == "mine"
    r = run("deepspeed-config", "--stage", "2", "--gpus", "1", "--launcher", "accelerate", "-o", str(out), "--force")
    assert r.exit_code == 0 and ("deepspeed_config_file: " + str(out)
                                 in (tmp_path / "accelerate_config.yaml").read_text())
    # one node needs no hostfile: an existing one is left alone
    (tmp_path / "hostfile").write_text("mine")
    r = run("deepspeed-config", "--stage", "2", "--gpus", "1", "--launcher", "deepspeed", "-o", str(out), "--force")
    assert r.exit_code == 0 and (tmp_path / "hostfile").read_text() == "mine"


def test_deepspeed_env_carries_this_shell_to_the_ssh_nodes(tmp_path, monkeypatch):
    """Several deepspeed nodes: .deepspeed_env beside the hostfile, named by DS_ENV_FILE in the ssh command (not in
    the --no_ssh one, where each node runs in its own shell); PATH starts at this Python's folder; a value the
    remote shell would expand is left out with a note; no blank line (DeepSpeed splits every line at '=')."""
    monkeypatch.setenv("PATH", f"/usr/bin:{os.path.dirname(sys.executable)}:/bin")  # this venv's bin moves first
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", "/ops here")
    monkeypatch.setenv("HF_HOME", "/cache/$USER")
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    data, out = generate(tmp_path, "--stage", "2", "--gpus", "2", "--nodes", "2", "--launcher", "deepspeed")
    env_file = out.parent / ".deepspeed_env"
    here = os.path.dirname(sys.executable)
    assert env_file.read_text() == f"PATH={here}:/usr/bin:/bin\nTORCH_EXTENSIONS_DIR=/ops here\n"
    ssh, no_ssh = data["launch"]["run"]
    assert ssh["command"].startswith(f"DS_ENV_FILE={env_file} deepspeed --hostfile ")
    assert "DS_ENV_FILE" not in no_ssh["command"]
    assert any(n.startswith(f"HF_HOME is not in {env_file}") for n in data["launch"]["notes"])
    # one node: no ssh, no file
    data, _ = generate(tmp_path, "--stage", "2", "--gpus", "2", "--launcher", "deepspeed")
    assert data["launch"]["files"] == {} and "DS_ENV_FILE" not in data["launch"]["command"]


def auto_paths(cfg, prefix=""):
    for k, v in cfg.items():
        if isinstance(v, dict):
            yield from auto_paths(v, prefix + k + ".")
        elif v == "auto":
            yield prefix + k


# What accelerator.prepare fills (accelerate/accelerator.py, _prepare_deepspeed).
ACCELERATE_FILLS = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"}
DUMMY_FILLS = {"optimizer.params.lr", "optimizer.params.weight_decay", "scheduler.params.warmup_min_lr",
               "scheduler.params.warmup_max_lr", "scheduler.params.warmup_num_steps",
               "scheduler.params.total_num_steps"}


@pytest.mark.parametrize("stage,offload", [(0, "none"), (1, "none"), (2, "none"), (3, "none"), (2, "cpu"), (3, "cpu")])
@pytest.mark.parametrize("ds_optimizer", [False, True])
def test_accelerate_shape(stage, offload, ds_optimizer):
    cfg = dsconfig.build(stage, offload, accelerate=True, ds_optimizer=ds_optimizer, precision="bf16")
    assert ("optimizer" in cfg, "scheduler" in cfg) == (ds_optimizer, ds_optimizer)
    assert set(auto_paths(cfg)) == ACCELERATE_FILLS | (DUMMY_FILLS if ds_optimizer else set())
    assert cfg["bf16"]["enabled"] is True and cfg["fp16"]["enabled"] is False
    assert ("zero_force_ds_cpu_optimizer" in cfg) == (offload != "none")
    concrete = dsconfig.build(stage, offload, accelerate=True, hf=False, batch_size=3, grad_accum=2, gpus=4)
    assert not set(auto_paths(concrete)) & ACCELERATE_FILLS
    assert (concrete["train_micro_batch_size_per_gpu"], concrete["train_batch_size"]) == (3, 24)


@pytest.mark.parametrize("optimizer,force", [("adamw", True), ("sgd", False), ("adafactor", False)])
def test_offload_optimizer_choice(optimizer, force):
    cfg = dsconfig.build(2, "cpu", accelerate=True, optimizer=optimizer)
    assert cfg["zero_force_ds_cpu_optimizer"] is force
    notes = " ".join(dsconfig.accelerate_notes(cfg, hf=True, ds_optimizer=False, optimizer=optimizer))
    assert ("DeepSpeedCPUAdam (same update" in notes) == force and ("runs on the CPU as written" in notes) != force
    # --no-compile-ops: torch's AdamW stays (DeepSpeedCPUAdam is compiled); without offload it would change nothing
    assert dsconfig.build(2, "cpu", accelerate=True, torch_adam=True)["zero_force_ds_cpu_optimizer"] is False
    with pytest.raises(BadInput, match="nothing of DeepSpeed's Adam is compiled"):
        dsconfig.build(2, accelerate=True, torch_adam=True)


def test_printed_text_names_node_and_script_needs(tmp_path):
    r = run("deepspeed-config", "--stage", "2", "--launcher", "accelerate", "--nodes", "2", "--gpus", "8",
            "--ds-optimizer")
    assert r.exit_code == 0
    assert "# on node 0, the head node, after saving the config printed above as ds_config.json" in r.output
    assert "DummyOptim(model.parameters()" in r.output
    assert "# set MASTER_ADDR to the head node's address on every node" in r.output
    r = run("deepspeed-config", "--stage", "2", "--launcher", "deepspeed", "--no-hf", "--nodes", "2", "--gpus", "1",
            "--master-addr", "head.example")
    assert "head.example slots=1" in r.output and "--master_addr head.example" in r.output
    assert "--no_ssh --node_rank \"$NODE_RANK\"" in r.output and "--local_rank" in r.output


@pytest.mark.parametrize("args,msg", [
    (["--ds-optimizer"], "--ds-optimizer is for --launcher accelerate"),
    (["--ds-optimizer", "--launcher", "torchrun"], "--ds-optimizer is for --launcher accelerate"),
    (["--ds-optimizer", "--launcher", "accelerate", "--optimizer", "sgd"], "cannot be --optimizer sgd"),
    (["--master-addr", "h", "--launcher", "torchrun"], "--master-addr is for"),
    (["--master-addr", "h", "--launcher", "slurm", "--nodes", "2"], "Slurm finds its head node itself"),
    (["--master-addr", "$MASTER_ADDR", "--launcher", "torchrun", "--nodes", "2"], "a host name or IP address"),
    (["--master-port", "1234"], "--master-port is for --launcher"),
    (["--master-port", "1234", "--launcher", "torchrun"], "picks a free port itself"),
])
def test_launch_option_refusals(args, msg):
    r = run("deepspeed-config", "--stage", "2", *args)
    assert r.exit_code == 2 and msg in r.output and r.output.count("\n") == 1, r.output


def test_master_port_reaches_every_launcher(tmp_path):
    for launcher in ("deepspeed", "accelerate", "slurm"):
        data, _ = generate(tmp_path, "--stage", "1", "--gpus", "1", "--launcher", launcher, "--master-port", "31337")
        text = data["launch"]["command"] + "".join(data["launch"]["files"].values())
        assert "31337" in text, launcher


def test_every_launcher_names_what_the_plan_assumed():
    """The micro-batch and gradient checkpointing the fit was planned with reach the script's lines of every
    launcher shape; accelerate's also the DataLoader's batch size (it fills the "auto" micro-batch)."""
    base = ["deepspeed-config", "--stage", "3", "--gpus", "2", "--batch-size", "3", "--grad-checkpointing"]
    acc = run(*base, "--launcher", "accelerate", "--json")
    assert acc.exit_code == 0, acc.output
    needs = json.loads(acc.stdout)["launch"]["script_needs"]
    assert any(n.startswith("train_dataloader = DataLoader(dataset, batch_size=3)") for n in needs), needs
    assert any(n.startswith("model.gradient_checkpointing_enable()  # before prepare()") for n in needs), needs
    plain = json.loads(run("deepspeed-config", "--auto", "--model", "gpt2", "--gpu-mem", "24GB", *base[3:], "--no-hf",
                           "--launcher", "torchrun", "--json").stdout)["launch"]["script_needs"]
    assert plain[1].startswith("parser.add_argument('--gradient_checkpointing', action='store_true'); if it is"
                               " given: model.gradient_checkpointing_enable()  # before deepspeed.initialize"), plain
    hf = json.loads(run(*base, "--launcher", "deepspeed", "--json").stdout)["launch"]["script_needs"]
    assert "gradient_checkpointing=True: the plan assumed it" in hf[0]
    without = json.loads(run(*base[:-1], "--launcher", "accelerate", "--json").stdout)["launch"]["script_needs"]
    assert not any("gradient_checkpointing_enable" in n for n in without)


def test_accelerate_without_a_gpu_asks_for_gloo():
    """accelerate finds no process-group backend for DeepSpeed without CUDA and counts one process: where no GPU
    is visible the script's lines say to pass InitProcessGroupKwargs(backend="gloo")."""
    if "No NVIDIA GPU" not in run("inspect").stdout:
        pytest.skip("a GPU is visible here")
    needs = json.loads(run("deepspeed-config", "--stage", "2", "--gpus", "2", "--launcher", "accelerate",
                           "--json").stdout)["launch"]["script_needs"]
    assert any('InitProcessGroupKwargs(backend="gloo")' in n for n in needs), needs


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_a_pinned_half_precision_says_the_trainer_needs_its_flag(precision):
    r = run("deepspeed-config", "--stage", "2", "--precision", precision, "--json")
    data = json.loads(r.stdout)
    assert data["config"][precision]["enabled"] is True
    assert any(f"refuses it unless TrainingArguments({precision}=True) (--{precision} on its command line)" in w
               for w in data["warnings"]), data["warnings"]
    plain = json.loads(run("deepspeed-config", "--stage", "2", "--no-hf", "--precision", precision, "--json").stdout)
    assert not any("refuses it unless" in w for w in plain["warnings"])


def test_slurm_cpus_per_task_is_derived_said_and_settable():
    """Not a hard-coded 8 (a job asking more CPUs than a node has pends for ever): 2 per GPU process unless
    --cpus-per-task, which only the Slurm launch takes."""
    r = run("deepspeed-config", "--stage", "2", "--gpus", "3", "--launcher", "slurm", "--json")
    launch = json.loads(r.stdout)["launch"]
    assert "#SBATCH --cpus-per-task=6\n" in next(iter(launch["files"].values()))
    assert any(n.startswith("--cpus-per-task=6 asks 2 CPUs per process") for n in launch["notes"])
    launch = json.loads(run("deepspeed-config", "--stage", "2", "--gpus", "3", "--launcher", "slurm",
                            "--cpus-per-task", "5", "--json").stdout)["launch"]
    assert "#SBATCH --cpus-per-task=5\n" in next(iter(launch["files"].values()))
    assert not any("--cpus-per-task=" in n for n in launch["notes"])
    r = run("deepspeed-config", "--stage", "2", "--gpus", "3", "--launcher", "torchrun", "--cpus-per-task", "5")
    assert r.exit_code == 2 and r.output.strip() == ("Error: --cpus-per-task sizes the Slurm job (#SBATCH"
                                                     " --cpus-per-task): it needs --launcher slurm")
