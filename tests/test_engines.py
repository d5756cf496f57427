"""What gputopo generates, run unmodified by real engines on this machine (the session's `engines` fixture,
tests/engines/start.sh): Slurm 22.05 with two slurmd "nodes", node1 and node2 (2 GPUs each, gres backed by
device files, so --gpus-per-node is accepted; the workers train on CPU with gloo), and sshd + pdsh for the
deepspeed launcher's ssh path. node1/node2 resolve to 127.0.0.1.

- `sbatch train.sbatch` of --launcher slurm, 1 and 2 nodes: waits for COMPLETED (scontrol: no accounting, so no
  sacct), then world size, losses and one result per node from the job's output file;
- launchers/slurm_deepspeed.sbatch and slurm_nvlink_ab.sbatch submitted as their first comment says;
- `deepspeed --hostfile ... --num_nodes 2` of --launcher deepspeed over pdsh/ssh, with its .deepspeed_env;
- the printed torchrun c10d command on both Slurm nodes through srun.

Every run uses the suite's TORCH_EXTENSIONS_DIR (conftest: this environment's own, unless the run was given one):
DeepSpeed's JIT ops (shm_comm, fused_adam) are built there once (1-3.5 min on 2 cores), not in
~/.cache/torch_extensions, where builds of two checkouts undo each other and wait on each other's locks.
"""
import json
import math
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_launch_runs import ROOT, STEPS, env_for, finish, free_port, generate, one, results, start

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    __import__("importlib").util.find_spec("deepspeed") is None, reason="deepspeed not installed")]

ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
         "PREEMPTED"}
WAITING = {"None", "Priority", "Resources"}  # any other reason to pend (PartitionConfig, ...) is for ever here
SMALL = ["--batch-size", "2", "--seq-len", "32"]
VENV_BIN = str(Path(sys.executable).parent)


@pytest.fixture(scope="session")
def ops_dir():
    """TORCH_EXTENSIONS_DIR for these tests: the suite's (conftest), passed on explicitly to every engine."""
    return Path(os.environ["TORCH_EXTENSIONS_DIR"])


@pytest.fixture
def env(tmp_path, engines, ops_dir):
    """The submitting shell: the venv first on PATH, the fake cluster's SLURM_CONF, the session's ops folder."""
    return env_for(tmp_path, SLURM_CONF=engines["SLURM_CONF"], TORCH_EXTENSIONS_DIR=str(ops_dir))


def job_fields(job: str, env) -> dict:
    """scontrol's fields of a job (JobState, Reason, ExitCode, StdOut, NodeList, ...)."""
    r = subprocess.run(["scontrol", "-o", "show", "job", job], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return dict(re.findall(r"(\S+?)=(\S*)", r.stdout))


def submit(command: str, cwd, env, timeout=600, expect="COMPLETED") -> tuple[dict, str]:
    """Run a printed `sbatch ...` command as is; wait for the job to end as `expect`; (its scontrol fields, its
    output)."""
    r = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("Submitted batch job "), r.stdout + r.stderr
    job = r.stdout.split()[-1]
    end = time.monotonic() + timeout
    while (f := job_fields(job, env)).get("JobState") not in ENDED:
        stuck = f.get("JobState") == "PENDING" and f.get("Reason") not in WAITING
        if stuck or time.monotonic() > end:
            subprocess.run(["scancel", job], env=env)
            pytest.fail(f"job {job} {f.get('JobState')} ({f.get('Reason')}): {command}")
        time.sleep(0.5)
    out = Path(f["StdOut"]).read_text()
    assert f["JobState"] == expect and (f["ExitCode"] == "0:0") == (expect == "COMPLETED"), \
        (f["JobState"], f["ExitCode"], out[-5000:])
    return f, out


@pytest.mark.parametrize("nodes", [1, 2])
def test_generated_sbatch_trains_on_the_nodes(tmp_path, env, engines, nodes):
    gpus = int(engines["ENGINES_GPUS_PER_NODE"])
    info = generate(tmp_path / "cfg", "--stage", "1", "--no-hf", "--precision", "fp32", "--batch-size", "2",
                    "--gpus", str(gpus), "--nodes", str(nodes), "--launcher", "slurm",
                    "--master-port", str(free_port()), env=env)
    (script,) = info["files"]
    assert info["command"] == f"sbatch {script}"
    job, out = submit(info["command"], tmp_path, env)
    assert job["NumNodes"] == str(nodes) and job["NodeList"] == ("node1" if nodes == 1 else "node[1-2]")
    assert job["JobName"] == "gputopo-train" and f"gres:gpu:{gpus}" in job["TresPerNode"]
    assert len(results(out)) == nodes, out[-3000:]  # one torchrun per node, each reporting the run
    r = one([(out, "")], world=gpus * nodes)
    assert r["info"]["zero_stage"] == 1 and r["backend"] == "gloo"


def rank_threads(out: str) -> list[dict]:
    """Every rank's `GPUTOPO_THREADS {json}` (tests/launch_train.py), wherever it stands in the job's output."""
    decode = json.JSONDecoder().raw_decode
    return [decode(part.lstrip())[0] for part in out.split("GPUTOPO_THREADS ")[1:]]


def test_generated_sbatch_gives_each_rank_the_threads_priced(tmp_path, env, engines):
    """Issue 50: the sbatch of a plan whose CPU Adam runs on the nodes' cores (CPU offload) gives every rank the
    threads its step time was priced on (the plan's time.threads_per_rank: the node's cores over its ranks), as
    each rank of the job reads them; torchrun alone would give it 1 (Slurm's own CPUs here: 4 per node, 2 GPUs)."""
    gpus, cpus, nodes = int(engines["ENGINES_GPUS_PER_NODE"]), int(engines["ENGINES_CPUS_PER_NODE"]), 2
    d = generate(tmp_path / "cfg", "--auto", "--model", "gpt2", "--gpu-model", "T4", "--gpu-mem", "1GB",
                 "--cpu-cores", str(cpus), "--cpu-mem", "64GB", "--no-hf", "--precision", "fp32", *SMALL,
                 "--gpus", str(gpus), "--nodes", str(nodes), "--launcher", "slurm", "--master-port", str(free_port()),
                 env=env, whole=True)
    chosen = d["plan"]["recommendation"]["strategy"]
    assert chosen == "zero3_offload_cpu", chosen   # 1 GB a GPU: gpt2's states on the host, CPU Adam there
    priced = next(s for s in d["plan"]["strategies"] if s["name"] == chosen)["time"]["threads_per_rank"]
    assert priced == cpus // gpus > 1
    job, out = submit(d["launch"]["command"], tmp_path, env)   # the submitting shell has OMP_NUM_THREADS=1
    assert job["NodeList"] == "node[1-2]" and f"cpu={cpus * nodes}" in job["TRES"], job
    ranks = rank_threads(out)
    assert sorted(r["rank"] for r in ranks) == list(range(gpus * nodes)), out[-3000:]
    assert sorted(r["node"] for r in ranks) == ["node1"] * gpus + ["node2"] * gpus
    assert all(r["torch_threads"] == priced and r["omp_num_threads"] == str(priced) for r in ranks), ranks
    # not pinned below them by the step (its CPUs: Slurm's, at most this machine's, which the fake nodes outnumber)
    assert all(r["affinity"] >= min(priced, len(os.sched_getaffinity(0))) for r in ranks), ranks
    r = one([(out, "")], world=gpus * nodes)
    assert r["info"]["zero_stage"] == 3 and r["backend"] == "gloo"


def header(script: str) -> list[str]:
    """A launchers/ script's first comment, the command that runs it: `# sbatch ...`."""
    line = (ROOT / "launchers" / script).read_text().splitlines()[1]
    assert line.startswith("# sbatch "), line
    return shlex.split(line[2:])


def as_header_says(script: str, engines, env) -> str:
    """The header's command with this cluster's GPUs per node, the repository's files by absolute path (it is
    submitted elsewhere), the tiny model for --model, few steps and short sequences."""
    argv = header(script)
    out = []
    for i, a in enumerate(argv):
        if a.startswith("--gpus-per-node="):
            a = f"--gpus-per-node={engines['ENGINES_GPUS_PER_NODE']}"
        elif (ROOT / a).is_file():
            a = str(ROOT / a)
        elif i and argv[i - 1] in ("--model", "--steps"):
            a = env["LAUNCH_TEST_MODEL"] if argv[i - 1] == "--model" else str(STEPS)
        out.append(a)
    return shlex.join(out + SMALL)


def test_launchers_slurm_deepspeed_sbatch(tmp_path, env, engines):
    """As its header: 2 nodes, the repository's ds_configs/zero3.json (bf16), `--model gpt2` -> the tiny one."""
    argv = header("slurm_deepspeed.sbatch")
    assert argv[:2] == ["sbatch", "--nodes=2"] and argv[4] == "ds_configs/zero3.json"
    command = as_header_says("slurm_deepspeed.sbatch", engines, env)
    assert str(ROOT / "ds_configs/zero3.json") in command and "--gpus-per-node=2" in command
    job, out = submit(command, tmp_path, {**env, "MASTER_PORT": str(free_port())})
    assert job["JobName"] == "gputopo-deepspeed" and len(results(out)) == 2, out[-3000:]
    r = one([(out, "")], world=4)
    assert r["info"]["zero_stage"] == 3 and r["info"]["bf16"] is True


def test_launchers_slurm_nvlink_ab_sbatch(tmp_path, env, engines):
    """As its header: two arms (P2P, then NCCL_P2P_DISABLE=1), each a world of 4 across both nodes."""
    command = as_header_says("slurm_nvlink_ab.sbatch", engines, env)
    out_dir = tmp_path / "ab"
    job, out = submit(command, tmp_path, {**env, "OUT": str(out_dir)})
    assert len(results(out)) == 4, out[-3000:]  # 2 arms x 2 nodes
    for arm in ("p2p", "no_p2p"):
        r = json.loads((out_dir / f"{arm}.json").read_text())
        assert r["world_size"] == 4 and len(r["losses"]) == STEPS and all(math.isfinite(x) for x in r["losses"])


@pytest.mark.parametrize("script", ["slurm_deepspeed.sbatch", "slurm_nvlink_ab.sbatch"])
def test_launchers_sbatch_on_nodes_without_gpus_say_so(tmp_path, env, engines, script):
    """Submitted without --gpus-per-node on nodes with no nvidia-smi: one line naming the node and the fix, not
    `nvidia-smi: command not found` (and no torchrun started)."""
    command = as_header_says(script, engines, env)
    command = re.sub(r" --gpus-per-node=\d+", "", command)
    job, out = submit(command, tmp_path, env, expect="FAILED")
    lines = out.strip().splitlines()
    assert lines[-1].startswith("error: no GPU on node1 for this job: submit with --gpus-per-node=N"), out[-3000:]
    assert "command not found" not in out and "torchrun" not in out


@pytest.mark.parametrize("source", ["generated", "slurm_deepspeed.sbatch", "slurm_nvlink_ab.sbatch"])
def test_first_node_line_survives_pipefail_on_a_long_node_list(tmp_path, env, source):
    """The scripts run under `set -euo pipefail`: a reader that stops after the first name (head -n 1) kills
    the real scontrol with SIGPIPE and the job ends without a word. 20000 names overflow the pipe, so that
    always shows (`scontrol show hostnames` expands the list itself, no job needed)."""
    if source == "generated":
        info = generate(tmp_path / "cfg", "--stage", "1", "--gpus", "1", "--nodes", "2", "--launcher", "slurm",
                        env=env)
        script = Path(next(iter(info["files"]))).read_text()
    else:
        script = (ROOT / "launchers" / source).read_text()
    (line,) = [x for x in script.splitlines() if x.startswith("head=")]
    r = subprocess.run(["bash", "-c", f"set -euo pipefail\n{line}\necho \"$head\""], capture_output=True, text=True,
                       env={**env, "SLURM_JOB_NODELIST": "n[1-20000]"})
    assert (r.returncode, r.stdout) == (0, "n1\n"), r.stderr


def test_deepspeed_hostfile_over_pdsh(tmp_path, env):
    """The printed head-node command, its hostfile (node1, node2) as written: DeepSpeed's launcher checks ssh to
    node1 and starts both nodes over pdsh; each node's processes get the launching shell's PATH and
    TORCH_EXTENSIONS_DIR only through the generated .deepspeed_env (DS_ENV_FILE in the command)."""
    info = generate(tmp_path / "cfg", "--stage", "2", "--no-hf", "--precision", "fp32", "--batch-size", "2",
                    "--gpus", "2", "--nodes", "2", "--launcher", "deepspeed", "--master-port", str(free_port()),
                    env=env)
    head = info["run"][0]
    assert "--num_nodes 2" in head["command"] and "ssh" in head["where"]
    files = {Path(p).name: Path(p) for p in info["files"]}
    assert files["hostfile"].read_text() == "node1 slots=2\nnode2 slots=2\n"
    carried = dict(line.split("=", 1) for line in files[".deepspeed_env"].read_text().splitlines())
    assert carried["PATH"].split(":")[0] == VENV_BIN and carried["TORCH_EXTENSIONS_DIR"] == env["TORCH_EXTENSIONS_DIR"]
    with files[".deepspeed_env"].open("a") as f:  # the script's own variables, as the printed note asks
        f.writelines(f"{k}={env[k]}\n" for k in ("LAUNCH_TEST_MODEL", "LAUNCH_TEST_STEPS", "OMP_NUM_THREADS"))
    outs = finish([start(head["command"], tmp_path, env)])
    seen = dict(re.findall(r"^(node\d): GPUTOPO_ENV (.*)$", outs[0][0], re.M))
    assert sorted(seen) == ["node1", "node2"], outs[0][0][-3000:] + outs[0][1][-3000:]  # both started by pdsh
    for text in seen.values():
        got = json.loads(text)
        assert got["PATH"].split(":")[0] == VENV_BIN and got["TORCH_EXTENSIONS_DIR"] == env["TORCH_EXTENSIONS_DIR"]
    assert len(results(outs[0][0])) == 2
    assert one(outs, world=4)["info"]["zero_stage"] == 2


def test_torchrun_c10d_across_the_slurm_nodes(tmp_path, env):
    """The printed multi-node torchrun command (c10d, "$MASTER_ADDR:PORT"), the same on both Slurm nodes: srun
    starts it once per node, MASTER_ADDR the first node's name."""
    info = generate(tmp_path / "cfg", "--stage", "2", "--no-hf", "--precision", "fp32", "--batch-size", "2",
                    "--gpus", "1", "--nodes", "2", "--launcher", "torchrun", "--master-port", str(free_port()),
                    env=env)
    (run,) = info["run"]
    assert "--rdzv_backend c10d" in run["command"] and '"$MASTER_ADDR:' in run["command"]
    srun = f"srun --nodes=2 --ntasks-per-node=1 --gpus-per-node=1 --label bash -c {shlex.quote(run['command'])}"
    outs = finish([start(srun, tmp_path, {**env, "MASTER_ADDR": "node1"})])
    assert sorted(set(re.findall(r"^(\d): GPUTOPO_RESULT", outs[0][0], re.M))) == ["0", "1"], outs[0][1][-3000:]
    r = one(outs)
    assert r["info"]["zero_stage"] == 2 and r["backend"] == "gloo"


# --- inspect --fleet on the same engines: each "node" answers with the report recorded for its name
# (tests/fleet_answer.sh), made by `gputopo inspect --json` under a fake NVML (test_fleet.node_reports).

ANSWER = ROOT / "tests" / "fleet_answer.sh"


def fleet(args: list, env, timeout=120) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    r = subprocess.run([str(Path(VENV_BIN) / "gputopo"), "inspect", "--fleet", *map(str, args), "--json"],
                       capture_output=True, text=True, env=env, timeout=timeout)
    return r, time.monotonic() - t0


def hang(folder: Path, node: str) -> str:
    """Make `node` never answer; the `sleep` it runs, unique to this test, so no survivor can hide."""
    seconds = f"{3000 + (os.getpid() % 500)}.{time.monotonic_ns() % 10 ** 6}"
    (folder / f"{node}.hang").write_text(seconds)
    return f"sleep {seconds}"


def survivors(pattern: str) -> str:
    return subprocess.run(["pgrep", "-af", pattern], capture_output=True, text=True).stdout.strip()


def same_as_from_files(live: dict, folder: Path) -> None:
    """--from-file with the reports of the nodes that answered gives the live report's groups and differences."""
    answered = [n for n in live["nodes"] if n not in {u["node"] for u in live["unreachable"]}]
    r = subprocess.run([str(Path(VENV_BIN) / "gputopo"), "inspect", "--fleet", "--json",
                        *[x for n in answered for x in ("-f", str(folder / f"{n}.json"))]],
                       capture_output=True, text=True)
    saved = json.loads(r.stdout)["fleet"]
    assert (saved["groups"], saved["odd"], saved["nodes"]) == (live["groups"], live["odd"], answered)


@pytest.mark.parametrize("engine", ["pdsh", "ssh"])
def test_fleet_over_hosts(tmp_path, env, engines, fake_nvml, engine):
    """Four hosts and one that does not resolve: the odd one named with what differs, the hanging one after
    the timeout, the missing one with ssh's reason; under 30 s; nothing left running on the nodes."""
    from test_fleet import node_reports
    hosts = engines["ENGINES_SSH_HOSTS"].split(",")
    assert hosts == ["node1", "node2", "node3", "node4"]
    folder = tmp_path / "answers"
    node_reports(fake_nvml, folder, {"node1": "norm", "node2": "norm", "node3": "x8"})
    sleeper = hang(folder, "node4")
    (tmp_path / "hostfile").write_text("".join(f"{h} slots=4\n" for h in hosts) + "nosuchnode9 slots=4\n")
    run_env = dict(env)
    if engine == "ssh":   # no pdsh on PATH: one ssh per host
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        (bin_dir / "ssh").symlink_to(subprocess.run(["which", "ssh"], capture_output=True, text=True).stdout.strip())
        run_env["PATH"] = f"{VENV_BIN}:{bin_dir}"
    r, took = fleet(["--hosts", tmp_path / "hostfile", "--timeout", "5", "--remote-command", f"bash {ANSWER} {folder}"],
                    run_env)
    assert r.returncode == 1, r.stderr
    f = json.loads(r.stdout)["fleet"]
    assert f["nodes"] == ["node1", "node2", "node3", "node4", "nosuchnode9"]
    assert [g["nodes"] for g in f["groups"]] == [["node1", "node2"], ["node3"]]
    assert {"node": "node3", "what": "GPU3 PCIe", "norm": "Gen5 x16", "value": "Gen5 x8 (max x16)"} in f["odd"]
    reasons = {u["node"]: u["reason"] for u in f["unreachable"]}
    assert reasons["node4"] == "no answer within 5 s"
    assert "nosuchnode9" in reasons["nosuchnode9"] and "resolve" in reasons["nosuchnode9"], reasons
    assert 5 <= took < 30
    time.sleep(1)
    assert not survivors(sleeper), survivors(sleeper)
    same_as_from_files(f, folder)


@pytest.mark.parametrize("signum", [2, 1, 15])
def test_fleet_ctrl_c_ends_every_remote_command(signum, tmp_path, env, engines):
    """Ctrl-C, an SSH drop (SIGHUP) and a scheduler's kill (SIGTERM) end every node's command alike, in one line,
    exit 128 + the signal (issue 33: the fleet's own Ctrl-C handler said 130 to all three)."""
    from gputopo import children
    folder = tmp_path / "answers"
    folder.mkdir()
    sleepers = [hang(folder, h) for h in ("node1", "node2")]
    (tmp_path / "hosts").write_text("node1\nnode2\n")
    p = subprocess.Popen([str(Path(VENV_BIN) / "gputopo"), "inspect", "--fleet", "--hosts", str(tmp_path / "hosts"),
                          "--timeout", "300", "--remote-command", f"bash {ANSWER} {folder}"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 20
    while not all(survivors(s) for s in sleepers) and time.monotonic() < end:
        time.sleep(0.2)
    assert all(survivors(s) for s in sleepers), "the nodes never started their command"
    p.send_signal(signum)
    _, err = p.communicate(timeout=20)
    time.sleep(1)
    assert p.returncode == 128 + signum and not any(survivors(s) for s in sleepers)
    assert err.strip().splitlines() == [f"Error: interrupted ({children.NAMES[signum]}): gputopo inspect stopped, with"
                                        " every process it started; nothing more was written"]


def test_fleet_inside_a_slurm_allocation(tmp_path, env, engines, fake_nvml):
    """`salloc -N 2` then inspect --fleet: one srun task per node of the allocation, each node its report."""
    from test_fleet import node_reports
    folder = tmp_path / "answers"
    node_reports(fake_nvml, folder, {"node1": "norm", "node2": "driver"})
    t0 = time.monotonic()
    r = subprocess.run(["salloc", "-N", "2", "--immediate=60", str(Path(VENV_BIN) / "gputopo"), "inspect", "--fleet",
                        "--timeout", "20", "--remote-command", f"bash {ANSWER} {folder}", "--json"],
                       capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert time.monotonic() - t0 < 30
    assert r.returncode == 1, r.stderr
    f = json.loads(r.stdout)["fleet"]
    assert f["nodes"] == ["node1", "node2"] and f["norm_by"] == "first node (no majority)"
    assert {"node": "node2", "what": "driver", "norm": "550.54.15", "value": "535.129.03"} in f["odd"]
    same_as_from_files(f, folder)


def test_fleet_from_a_login_node_names_down_and_silent_nodes(tmp_path, env, engines, fake_nvml):
    """--slurm-nodes with a node Slurm lists down (no slurmd) and one that hangs: both named, node1 reported."""
    from test_fleet import node_reports
    folder = tmp_path / "answers"
    node_reports(fake_nvml, folder, {"node1": "norm"})
    sleeper = hang(folder, "node2")
    silent = engines["ENGINES_SILENT_NODE"]
    r, took = fleet(["--slurm-nodes", f"node[1-2],{silent}", "--partition", "gputopo", "--timeout", "5",
                     "--remote-command", f"bash {ANSWER} {folder}"], env)
    assert r.returncode == 1, r.stderr
    f = json.loads(r.stdout)["fleet"]
    reasons = {u["node"]: u["reason"] for u in f["unreachable"]}
    assert [g["nodes"] for g in f["groups"]] == [["node1"]]
    assert reasons["node2"] == "no answer within 5 s" and reasons[silent].startswith("Slurm lists it "), reasons
    assert took < 30
    time.sleep(1)
    assert not survivors(sleeper)
