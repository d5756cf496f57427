"""Every launch gputopo prints, run by its real launcher on CPU (gloo), 2 processes, a tiny GPT-2:
accelerate with each accelerate-shaped config (plain script and DummyOptim script), torchrun and accelerate
across two "nodes" on localhost, deepspeed with a hostfile naming only this machine, and the launchers/ scripts
with generated configs. What needs real Slurm or ssh/pdsh (sbatch, srun, `deepspeed --hostfile` over pdsh) is
in test_engines.py.

Each run checks the printed result (world size, finite losses, what DeepSpeed really used), not only the exit
status: workers sometimes abort at exit after a good run (NOTES-install.md).
"""
import json
import math
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import bin_path, make_model_dir

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    __import__("importlib").util.find_spec("deepspeed") is None, reason="deepspeed not installed")]

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = str(Path(__file__).resolve().parent / "launch_train.py")
STEPS = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def generate(folder: Path, *args, env=None, whole=False) -> dict:
    """gputopo deepspeed-config ... -o folder/ds.json --json, run in folder (env: the shell it runs in): its launch
    (whole: all its JSON, the plan's too)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = ["--script", SCRIPT] if "--launcher" in args else []  # refused without a launch to name it in
    cmd = [bin_path("gputopo"), "deepspeed-config", *args, *script, "-o", str(folder / "ds.json"), "--force", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=folder, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout) if whole else json.loads(r.stdout)["launch"]


def env_for(tmp_path, **extra) -> dict:
    model = make_model_dir(tmp_path / "tiny-gpt2")
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return {**os.environ, "PATH": path, "OMP_NUM_THREADS": "1", "LAUNCH_TEST_MODEL": str(model),
            "LAUNCH_TEST_STEPS": str(STEPS), **extra}


def results(stdout: str) -> list[dict]:
    # Nodes started as local processes share one stdout: two result lines can run together, so each result is
    # read from its marker wherever it stands, not by whole lines.
    decode = json.JSONDecoder().raw_decode
    return [decode(part.lstrip())[0] for part in stdout.split("GPUTOPO_RESULT ")[1:]]


def start(command: str, cwd, env) -> subprocess.Popen:
    return subprocess.Popen(["bash", "-c", command], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def finish(procs, timeout=600) -> list[tuple[str, str]]:
    try:
        return [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()


def one(outs, world=2) -> dict:
    """The one result of a run of `world` processes, printed by one or more nodes; they must agree."""
    found = [r for out, _ in outs for r in results(out)]
    assert found, "no result printed:\n" + "\n".join(err[-3000:] for _, err in outs)
    assert all(r == found[0] for r in found), found
    r = found[0]
    assert r["world_size"] == world and len(r["losses"]) == STEPS and all(math.isfinite(x) for x in r["losses"])
    return r


ACCELERATE_CONFIGS = {  # id -> deepspeed-config args; every accelerate config gputopo writes, by stage and offload
    "zero0": ["--stage", "0"], "zero1": ["--stage", "1"], "zero2": ["--stage", "2"], "zero3": ["--stage", "3"],
    "zero2-cpu": ["--stage", "2", "--offload", "cpu"], "zero3-cpu": ["--stage", "3", "--offload", "cpu"],
    "zero2-bf16": ["--stage", "2", "--precision", "bf16"],
    # NVMe: ~20 s a run once DeepSpeed's async_io op is built (150 s the first time, under the test's timeout).
    "zero3-nvme": ["--stage", "3", "--offload", "nvme"],
}


@pytest.mark.parametrize("script", ["plain", "dummy"])
@pytest.mark.parametrize("name", list(ACCELERATE_CONFIGS))
def test_accelerate_launch_trains(tmp_path, name, script):
    args = list(ACCELERATE_CONFIGS[name])
    if "nvme" in name:
        from gputopo import validate
        if not validate.libaio_ok():
            pytest.skip("libaio is missing: DeepSpeed's async_io op cannot build (apt-get install libaio-dev)")
        (tmp_path / "nvme").mkdir()
        args += ["--nvme-path", str(tmp_path / "nvme")]
    if "--precision" not in args:
        args += ["--precision", "fp32"]
    info = generate(tmp_path / "cfg", *args, "--gpus", "2", "--launcher", "accelerate",
                    "--master-port", str(free_port()), *(["--ds-optimizer"] if script == "dummy" else []))
    env = env_for(tmp_path, LAUNCH_TEST_DUMMY="1" if script == "dummy" else "0")
    r = one(finish([start(info["command"], tmp_path, env)]))
    stage = int(args[1])
    assert r["zero_stage"] == stage and r["dummy"] == (script == "dummy") and r["micro_batch"] == 2
    assert r["bf16"] == ("bf16" in name)
    offload = "cpu" if "cpu" in name else "nvme" if "nvme" in name else "none"
    assert offload in r["offload_optimizer"] and (offload if stage == 3 else "none") in r["offload_param"]
    # Offload: accelerate swapped the script's AdamW for DeepSpeedCPUAdam (zero_force_ds_cpu_optimizer true);
    # DummyOptim: DeepSpeed built its own AdamW from the config.
    if offload != "none":
        assert r["basic_optimizer"] == "DeepSpeedCPUAdam"
    elif script == "plain":
        assert r["basic_optimizer"] == "AdamW"


def test_accelerate_offload_keeps_another_optimizer(tmp_path):
    """--optimizer sgd: zero_force_ds_cpu_optimizer false, so the script's SGD runs as written (not Adam)."""
    info = generate(tmp_path / "cfg", "--stage", "2", "--offload", "cpu", "--precision", "fp32", "--gpus", "2",
                    "--launcher", "accelerate", "--optimizer", "sgd", "--master-port", str(free_port()))
    r = one(finish([start(info["command"], tmp_path, env_for(tmp_path, LAUNCH_TEST_OPT="sgd"))]))
    assert r["basic_optimizer"] == "SGD" and "cpu" in r["offload_optimizer"]


def test_torchrun_two_nodes_on_localhost(tmp_path):
    """The printed c10d command, the same on both "nodes", MASTER_ADDR from the environment: one world of 2."""
    info = generate(tmp_path / "cfg", "--stage", "2", "--no-hf", "--precision", "fp32", "--batch-size", "2",
                    "--gpus", "1", "--nodes", "2", "--launcher", "torchrun", "--master-port", str(free_port()))
    (run,) = info["run"]
    assert '"$MASTER_ADDR:' in run["command"] and "every node" in run["where"]
    env = env_for(tmp_path, MASTER_ADDR="127.0.0.1")
    r = one(finish([start(run["command"], tmp_path, env) for _ in range(2)]))
    assert r["info"]["zero_stage"] == 2 and r["backend"] == "gloo"


@pytest.mark.parametrize("master", [None, "127.0.0.1"])
def test_accelerate_two_nodes_on_localhost(tmp_path, master):
    info = generate(tmp_path / "cfg", "--stage", "3", "--precision", "fp32", "--gpus", "1", "--nodes", "2",
                    "--launcher", "accelerate", "--master-port", str(free_port()),
                    *(["--master-addr", master] if master else []))
    head, other = info["run"]
    assert "--machine_rank 0" in head["command"] and '"$NODE_RANK"' in other["command"]
    env = env_for(tmp_path, **({} if master else {"MASTER_ADDR": "127.0.0.1"}))
    procs = [start(head["command"], tmp_path, env), start(other["command"], tmp_path, {**env, "NODE_RANK": "1"})]
    r = one(finish(procs))
    assert r["zero_stage"] == 3


def test_deepspeed_hostfile_naming_this_machine(tmp_path):
    """The printed per-node (no ssh) deepspeed command on two "nodes", its hostfile edited (as the printed note
    asks) to name this machine twice: localhost and 127.0.0.1."""
    info = generate(tmp_path / "cfg", "--stage", "2", "--no-hf", "--precision", "fp32", "--batch-size", "2",
                    "--gpus", "1", "--nodes", "2", "--launcher", "deepspeed", "--master-addr", "localhost",
                    "--master-port", str(free_port()))
    hostfile = next(p for p in info["files"] if p.endswith("hostfile"))
    assert Path(hostfile).read_text() == "localhost slots=1\nnode2 slots=1\n"
    Path(hostfile).write_text("localhost slots=1\n127.0.0.1 slots=1\n")
    no_ssh = next(r for r in info["run"] if "--no_ssh" in r["command"])
    env = env_for(tmp_path)
    r = one(finish([start(no_ssh["command"], tmp_path, {**env, "NODE_RANK": str(k)}) for k in (0, 1)]))
    assert r["info"]["zero_stage"] == 2


WORKER = ["--model", "MODEL", "--steps", str(STEPS), "--batch-size", "2", "--seq-len", "32"]


@pytest.mark.parametrize("script", ["torchrun_deepspeed.sh", "deepspeed_multinode.sh"])
def test_launchers_scripts_run_generated_configs(tmp_path, script):
    info_args = ["--stage", "3", "--offload", "cpu", "--no-hf", "--precision", "fp32", "--batch-size", "2"]
    generate(tmp_path / "cfg", *info_args)
    config = str(tmp_path / "cfg" / "ds.json")
    env = env_for(tmp_path, NPROC="2", MASTER_PORT=str(free_port()))
    worker = [env["LAUNCH_TEST_MODEL"] if a == "MODEL" else a for a in WORKER]
    path = ROOT / "launchers" / script
    if script == "deepspeed_multinode.sh":
        (tmp_path / "hostfile").write_text("localhost slots=2\n")
        argv = [str(tmp_path / "hostfile"), config]
    else:
        argv = [config]
    r = one(finish([start(shlex.join(["bash", str(path), *argv, *worker]), tmp_path, env)]))
    assert r["info"]["zero_stage"] == 3 and r["info"]["offload_optimizer"] == "cpu"
