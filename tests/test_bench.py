"""bench-nvlink runs the real thing on CPU: torchrun, 2 gloo processes, a tiny GPT-2, both arms, the sweep,
two "nodes" on loopback, a child that crashes, one that hangs, Ctrl-C, and no orphan afterwards."""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from conftest import bin_path, make_model_dir

from gputopo import bench
from gputopo.errors import BadInput

pytestmark = pytest.mark.skipif(__import__("importlib").util.find_spec("torch") is None, reason="torch not installed")


@pytest.fixture(autouse=True)
def logs_in_tmp_path(tmp_path, monkeypatch):
    """bench-nvlink keeps each run's logs (gputopo-bench-* in TMPDIR) for the user to read: the real runs here
    keep theirs in the test's own folder, so the suite leaves nothing in /tmp."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))


def gputopo(*args, cwd, timeout=600, env=None):
    return subprocess.run([bin_path("gputopo"), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def leftovers(marker: str) -> list:
    """Processes whose command line names the test's own model folder: must be none after a bench ends."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in part for part in p.info["cmdline"] or []):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_full_bench_on_cpu(tmp_path, tiny_model):
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    r = gputopo("bench-nvlink", "--model", str(tiny_model), "--steps", "5", "--output", str(out), "--plot", str(png),
                "--allreduce-sizes", "1MiB,4MiB", "--json", cwd=tmp_path, env={"NCCL_P2P_DISABLE": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    data = json.loads(r.stdout)
    assert data == json.loads(out.read_text()) and data["complete"]
    assert (data["schema_version"], data["device"], data["backend"], data["nproc"], data["nnodes"]) == \
        (1, "cpu", "gloo", 2, 1)
    p2p, no_p2p = data["runs"]
    # The parent's NCCL_P2P_DISABLE=1 must not leak into the P2P arm.
    assert p2p["env"] == {"NCCL_P2P_DISABLE": None} and no_p2p["env"] == {"NCCL_P2P_DISABLE": "1"}
    for run in data["runs"]:
        assert run["steps"] == 5 and run["warmup_steps"] == 1 and len(run["step_times_s"]) == 4
        assert run["world_size"] == 2 and run["samples_per_second"] > 0 and run["losses_finite"]
        assert run["step_time_s"]["p10"] <= run["step_time_s"]["median"] <= run["step_time_s"]["p90"]
    # gloo ignores NCCL_P2P_DISABLE: the arms are one program, so no speed-up is claimed, whatever the figures.
    cmp_ = data["comparison"]
    assert data["speedup"] is None and cmp_["verdict"] == "identical_arms" and "noise" in cmp_["message"]
    assert cmp_["ratio"] == pytest.approx(no_p2p["step_time_s"]["median"] / p2p["step_time_s"]["median"])
    assert cmp_["ci95_steps"][0] <= cmp_["ratio"] <= cmp_["ci95_steps"][1]
    # Every rank's stdout and stderr are kept per arm; rank 0's stdout holds its result line.
    logs = Path(data["log_dir"])
    assert {f.parent.name for f in logs.glob("p2p/*/attempt_0/*/stderr.log")} == {"0", "1"}
    assert "GPUTOPO_RESULT" in next(logs.glob("p2p/*/attempt_0/0/stdout.log")).read_text()
    assert [(a["bytes"], a["p2p"]) for a in data["allreduce"]] == [(2 ** 20, True), (4 * 2 ** 20, True),
                                                                   (2 ** 20, False), (4 * 2 ** 20, False)]
    assert all(a["busbw_gbps"] == pytest.approx(a["algbw_gbps"]) for a in data["allreduce"])  # 2(n-1)/n = 1 at n=2
    assert "synthetic" in data["dataset"] and "random weights" in data["model"]["name"]
    assert any("gloo, which ignores NCCL_P2P_DISABLE" in n for n in data["notes"])
    assert data["settings"]["dataset"] == "synthetic" and any("--dataset auto" in n for n in data["notes"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Progress from rank 0, on stderr (stdout holds the JSON alone): each arm starts with a line, steps follow.
    for arm in ("p2p", "no_p2p"):
        assert f"[{arm}] starting torchrun" in r.stderr and f"[{arm}] step 5/5: " in r.stderr
    assert "[all-reduce p2p] all-reduce " in r.stderr
    text = gputopo("bench-nvlink", "--model", str(tiny_model), "--steps", "3", "--train-only", "--dataset",
                   str(tmp_path / "r.json"), cwd=tmp_path)
    assert text.returncode == 0, text.stderr[-2000:]
    assert "P2P/NVLink" in text.stdout and "Verdict: no claim: on CPU both arms are the same program" in text.stdout
    assert "\nY " in text.stdout and "\nN " in text.stdout and "local text" in text.stdout
    assert "all_reduce" not in text.stdout


@pytest.mark.slow
def test_two_nodes_on_loopback(tmp_path, tiny_model):
    port = free_port()
    common = ["bench-nvlink", "--model", str(tiny_model), "--steps", "3", "--nproc", "1", "--nnodes", "2",
              "--rdzv-endpoint", f"127.0.0.1:{port}", "--allreduce-sizes", "1MiB", "--json"]
    procs = [subprocess.Popen([bin_path("gputopo"), *common, "--node-rank", str(rank)], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    try:
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
    node0, node1 = (json.loads(o[0]) for o in outs)
    # One combined run: both nodes report the same measured result of the 2-process world; each predicts it
    # from its own calibration (2 nodes x 1 process, the link from the sweep across them).
    assert node0["nnodes"] == 2 and all(r["world_size"] == 2 for r in node0["runs"])
    assert node0["comparison"]["verdict"] == "identical_arms" and node0["comparison"] == node1["comparison"]
    predicted = ("predicted_step_s", "prediction")
    measured = [[{k: v for k, v in r.items() if k not in predicted} for r in n["runs"]] for n in (node0, node1)]
    assert measured[0] == measured[1] and node0["allreduce"] == node1["allreduce"] and len(node0["allreduce"]) == 2
    assert all(r["predicted_step_s"] > 0 for n in (node0, node1) for r in n["runs"])


@pytest.mark.slow
def test_child_crash_shows_the_failing_ranks_own_traceback(tmp_path):
    # n_head must divide n_embd: transformers raises inside every worker, after torchrun started them.
    bad = make_model_dir(tmp_path / "bad-gpt2", n_head=3)
    out = tmp_path / "r.json"
    r = gputopo("bench-nvlink", "--model", str(bad), "--steps", "3", "--output", str(out), cwd=tmp_path)
    assert r.returncode == 5, r.stderr[-3000:]
    first = next(l for l in r.stderr.splitlines() if l.startswith("Error: "))
    assert first.startswith("Error: p2p: torchrun exited with 1 before reporting a result; local rank ")
    assert first.endswith("ValueError: `embed_dim` must be divisible by num_heads"
                          " (got `embed_dim`: 64 and `num_heads`: 3).")
    # the rank's own traceback, from its stderr file, whose path is printed and which holds the whole of it
    assert "Traceback" in r.stderr or "File " in r.stderr
    log = Path(r.stderr.split("Last lines of its stderr (", 1)[1].split("):", 1)[0])
    assert log.name == "stderr.log" and "Traceback (most recent call last)" in log.read_text()
    assert "ChildFailedError" not in first
    data = json.loads(out.read_text())
    assert data["runs"] == [] and not data["complete"] and "ValueError" in data["error"]
    assert "No arm finished" in r.stderr
    assert not leftovers(str(bad))


@pytest.mark.slow
def test_hang_past_timeout_leaves_no_orphan(tmp_path, tiny_model):
    start = time.time()
    r = gputopo("bench-nvlink", "--model", str(tiny_model), "--steps", "1000000", "--timeout", "25", cwd=tmp_path)
    assert r.returncode == 5 and "no result after 25 s (--timeout)" in r.stderr
    assert time.time() - start < 120
    time.sleep(1)
    assert not leftovers(str(tiny_model))


@pytest.mark.slow
def test_ctrl_c_keeps_finished_arms_and_leaves_no_orphan(tmp_path, tiny_model):
    out = tmp_path / "r.json"
    proc = subprocess.Popen([bin_path("gputopo"), "bench-nvlink", "--model", str(tiny_model), "--steps", "3",
                             "--output", str(out), "--allreduce-sizes", "1MiB"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and not (out.exists() and json.loads(out.read_text())["runs"]):
        time.sleep(0.5)
    assert out.exists(), "the first arm never finished"
    time.sleep(3)  # the second arm's torchrun is starting
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0 and "interrupted" in err
    data = json.loads(out.read_text())
    assert data["runs"][0]["label"] == "p2p" and not data["complete"]
    time.sleep(1)
    assert not leftovers(str(tiny_model))


def test_bad_input(tmp_path, tiny_model, fake_nvml):
    import fake_nvml as fm
    from click.testing import CliRunner

    from gputopo.cli import cli
    fake_nvml(init_error=fm.NVMLError_LibraryNotFound)
    (tmp_path / "r.json").write_text("{}")
    for args, msg in ((["--output", str(tmp_path / "r.json")], "exists; pass --force"),
                      (["--output", str(tmp_path / "missing" / "ab.json")], "missing does not exist"),
                      (["--plot", str(tmp_path / "missing" / "ab.png")], "missing does not exist"),
                      (["--dataset", str(tmp_path / "none.txt")], "none.txt: no such file"),
                      (["--train-only", "--allreduce-only"], "exclude each other"),
                      (["--allreduce-only"], "--allreduce-only ignores --model: leave it out"),
                      (["--train-only", "--allreduce-sizes", "1MB"], "--train-only ignores --allreduce-sizes"),
                      (["--nodes", "2"], "needs --master-addr"),
                      (["--nnodes", "2"], "needs --master-addr"),   # the old spelling: still one line
                      (["--nproc", "2", "--gpus", "2"], "--nproc is the old spelling of --gpus: give one"),
                      (["--rdzv-endpoint", "h:1", "--master-addr", "h"], "old spelling of --master-addr"),
                      (["--rdzv-endpoint", "nohost"], "HOST:PORT"),
                      (["--master-port", "29400"], "--master-port needs --master-addr"),
                      (["--nodes", "2", "--node-rank", "1", "--master-addr", "no-such-host.invalid"],
                       "--master-addr no-such-host.invalid: does not resolve here"),
                      # deepspeed-config's host rule: the address reaches torchrun's argv and each node's shell
                      (["--nodes", "2", "--master-addr", "-oProxyCommand=x"], "which ssh would read as an option"),
                      (["--nodes", "2", "--master-addr", "a;b"], "is not a host name or IP address"),
                      (["--nodes", "2", "--master-addr", "fe80::1"], "goes in brackets, [fe80::1]"),
                      (["--nodes", "2", "--master-addr", "[node01]"], "not an IPv6 address in its brackets"),
                      (["--verbose", "--quiet"], "exclude each other"),
                      (["--steps", "0"], "--steps must be 1 or more"),
                      (["--steps", "2", "--warmup-steps", "2"], "leaves no timed step")):
        r = CliRunner().invoke(cli, ["bench-nvlink", "--model", str(tiny_model), *args])
        assert r.exit_code == 2 and msg in r.output and r.output.count("\n") == 1, (args, r.output)
    assert (tmp_path / "r.json").read_text() == "{}"


def test_commands_and_environment():
    o = bench.Options(nproc=4, nnodes=2, node_rank=1, rdzv_endpoint="10.0.0.1:29500")
    cmd = bench.torchrun_command(o, "id")
    assert cmd[1:3] == ["-m", "torch.distributed.run"] and "--standalone" not in cmd
    assert cmd[cmd.index("--rdzv_endpoint") + 1] == "10.0.0.1:29500" and cmd[cmd.index("--node_rank") + 1] == "1"
    assert "--standalone" in bench.torchrun_command(bench.Options(), "id")
    os.environ["NCCL_P2P_DISABLE"] = "1"
    try:
        assert "NCCL_P2P_DISABLE" not in bench.child_env(bench.Options(), None)
        env = bench.child_env(bench.Options(visible_devices="2,3"), "1")
        assert env["NCCL_P2P_DISABLE"] == "1" and env["CUDA_VISIBLE_DEVICES"] == "2,3"
        assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    finally:
        del os.environ["NCCL_P2P_DISABLE"]


def test_bootstrap_interval_contains_the_ratio():
    a = [1.0, 1.02, 0.98, 1.01, 0.99] * 4
    b = [1.3, 1.28, 1.31, 1.29, 1.32] * 4
    lo, hi = bench.bootstrap_ratio(a, b)
    assert lo <= 1.3 / 1.0 <= hi and hi - lo < 0.1


@pytest.fixture
def no_children(monkeypatch):
    """Fail the test if the bench would start a child."""
    def refuse(*a, **k):
        raise AssertionError("a child was started")
    monkeypatch.setattr(bench, "run_child", refuse)


def invoke(*args):
    from click.testing import CliRunner

    from gputopo.cli import cli
    return CliRunner().invoke(cli, ["bench-nvlink", *args])


@pytest.mark.parametrize("scenario,args,why", [
    ("one", [], "only one GPU (GPU0) is available to it"),
    ("one", ["--allreduce-only"], "only one GPU (GPU0) is available to it"),
    ("two", ["--gpus", "1"], "--gpus 1 uses one GPU"),
    ("two", ["--nproc", "1"], "--gpus 1 uses one GPU"),
    ("two", ["--gpu-ids", "1"], "only one GPU (GPU1) is available to it"),
])
def test_one_gpu_is_refused_with_exit_4(fake_nvml, no_children, tmp_path, scenario, args, why):
    import fake_nvml as fm
    fake_nvml(fm.h100_nvswitch(1) if scenario == "one" else fm.rtx3090_pair())
    model = [] if "--allreduce-only" in args else ["--model", "gpt2"]  # the sweep trains no model
    r = invoke(*model, "--output", str(tmp_path / "ab.json"), *args)
    assert r.exit_code == 4 and r.output.count("\n") == 1, r.output
    assert r.output.startswith("Error: bench-nvlink compares P2P on and off between 2 or more GPUs") and why in r.output
    assert "torchrun --nproc_per_node 1 -m gputopo.worker --model gpt2" in r.output
    assert not (tmp_path / "ab.json").exists()


def test_two_gpus_pass_the_gate(fake_nvml, monkeypatch, tmp_path):
    """With two GPUs the bench goes on: NCCL, both GPUs, the link from NVML (the gate is not a blanket refusal)."""
    import fake_nvml as fm
    fake_nvml(fm.rtx3090_pair())
    seen = []
    monkeypatch.setattr(bench, "run", lambda o, link, save, progress: seen.append((o, link)) or {})
    monkeypatch.setattr("gputopo.commands.bench_nvlink.emit", lambda *a, **k: None)
    # doctor's pre-flight rightly blocks fake GPUs with a CPU build of torch; the gate before it is what is tested
    monkeypatch.setattr("gputopo.doctor.preflight", lambda *a, **k: {"counts": {"warn": 0}})
    r = invoke("--model", "gpt2", "--dataset", "synthetic")
    assert r.exit_code == 0, r.output
    o, link = seen[0]
    assert (o.device, o.nproc, o.precision, o.steps) == ("cuda", 2, "bf16", 200) and link["type"] == "NV4"


def test_output_in_a_missing_folder_is_refused_before_any_run(fake_nvml, no_children, tmp_path, monkeypatch):
    import fake_nvml as fm
    fake_nvml(init_error=fm.NVMLError_LibraryNotFound)
    monkeypatch.chdir(tmp_path)
    r = invoke("--model", "gpt2", "--output", "missing/ab.json")
    assert r.exit_code == 2 and r.output == "Error: --output missing/ab.json: folder missing does not exist\n"
    assert not (tmp_path / "missing").exists()


def fake_result(label_time: float) -> dict:
    """What a worker reports (worker.summarize's shape), for tests of what the bench does with it."""
    from gputopo import worker
    times = [label_time * (1 + 0.01 * i) for i in range(4)]
    return {"device": "cpu", "backend": "gloo", "world_size": 2, "env": {}, "model": {"name": "tiny", "params": 1},
            "dataset": "synthetic (random token ids)", "loss_finite": True, **worker.summarize(times, 1, 4)}


def test_a_failing_second_arm_keeps_the_first_in_output(fake_nvml, fake_calibration, monkeypatch, tmp_path):
    import fake_nvml as fm

    from gputopo.errors import BenchmarkFailed
    fake_nvml(init_error=fm.NVMLError_LibraryNotFound)
    calls = []

    def child(label, cmd, env, timeout, progress, log_dir=None):
        calls.append((label, env.get("NCCL_P2P_DISABLE")))
        if len(calls) == 2:
            raise BenchmarkFailed(f"{label}: torchrun exited with 1; local rank 1 failed first: RuntimeError: boom")
        return fake_result(0.5)
    monkeypatch.setattr(bench, "run_child", child)
    out = tmp_path / "ab.json"
    r = invoke("--model", "gpt2", "--dataset", "synthetic", "--output", str(out))
    assert r.exit_code == 5 and calls == [("p2p", None), ("no_p2p", "1")]
    assert "Error: no_p2p: torchrun exited with 1; local rank 1 failed first: RuntimeError: boom" in r.output
    assert f"Finished arms are kept in {out}" in r.output
    data = json.loads(out.read_text())
    assert [run["label"] for run in data["runs"]] == ["p2p"] and data["runs"][0]["step_time_s"]["median"] > 0
    assert not data["complete"] and data["error"].startswith("no_p2p: torchrun exited with 1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ab.json", "tmp"]  # no temporary file left beside it


def test_dataset_without_the_datasets_package(monkeypatch, fake_nvml, no_children):
    """`datasets` not importable: auto falls back to synthetic and says so; asking for wikitext is refused."""
    import fake_nvml as fm

    from gputopo.errors import BadInput
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` now raises ModuleNotFoundError
    name, note = bench.resolve_dataset("auto")
    assert name == "synthetic" and "the `datasets` package is not installed" in note and "synthetic data" in note
    with pytest.raises(BadInput, match="the `datasets` package is not installed"):
        bench.resolve_dataset("wikitext-2-raw-v1")
    fake_nvml(init_error=fm.NVMLError_LibraryNotFound)
    r = invoke("--model", "gpt2", "--dataset", "wikitext-2-raw-v1")
    assert r.exit_code == 2 and r.output.count("\n") == 1
    assert r.output.startswith("Error: --dataset wikitext-2-raw-v1: the `datasets` package is not installed")


def test_worker_auto_dataset_without_datasets(monkeypatch):
    """The worker run directly (no bench in front) falls back the same way and says why in its description."""
    pytest.importorskip("torch")
    from gputopo import worker
    monkeypatch.setitem(sys.modules, "datasets", None)
    for key in worker.OFFLINE:  # the worker sets them for its process; restore them after the test
        monkeypatch.setenv(key, "1")
    tokens, what = worker.load_tokens("auto", 100, 8, 4, 0, None)
    assert tuple(tokens.shape) == (4, 8) and int(tokens.max()) < 100
    assert what.startswith("synthetic (random token ids)") and "`datasets` package is not installed" in what


def arm(device_runs: list[float]) -> dict:
    times = [t for m in device_runs for t in (m * 0.99, m, m * 1.01)]
    return {"step_time_s": {"median": sorted(times)[len(times) // 2]}, "step_times_s": times,
            "run_medians_s": device_runs}


@pytest.mark.parametrize("device,p2p,no_p2p,verdict", [
    ("cpu", [0.50], [0.64], "identical_arms"),            # even a large gap is noise on the CPU twin
    ("cpu", [0.50, 0.52], [0.64, 0.66], "identical_arms"),
    ("cuda", [0.50], [0.64], "cannot_tell"),               # one run per arm
    ("cuda", [0.50, 0.51, 0.52], [0.64, 0.65, 0.66], "p2p_faster"),
    ("cuda", [0.64, 0.65, 0.66], [0.50, 0.51, 0.52], "p2p_slower"),
    ("cuda", [0.50, 0.60, 0.52], [0.55, 0.53, 0.58], "within_noise"),  # the spreads overlap
])
def test_verdict_claims_only_what_the_runs_show(device, p2p, no_p2p, verdict):
    c = bench.compare(device, arm(p2p), arm(no_p2p))
    assert c["verdict"] == verdict
    assert ("speed-up" in c["message"]) == (verdict == "p2p_faster")
    assert c["ratio"] == pytest.approx(arm(no_p2p)["step_time_s"]["median"] / arm(p2p)["step_time_s"]["median"])


def test_failure_report_picks_the_first_failing_rank(tmp_path):
    """Rank 1 raised first; rank 0 failed later on the broken connection: the report shows rank 1's error."""
    attempt = tmp_path / "run_x" / "attempt_0"
    for rank, err in ((1, "ValueError: the real cause"), (0, "RuntimeError: Connection closed by peer")):
        d = attempt / str(rank)
        d.mkdir(parents=True)
        (d / "stderr.log").write_text(f"Traceback (most recent call last):\n  File \"x.py\", line 1\n{err}\n")
        (d / "error.json").write_text("{}")
        time.sleep(0.02)
    msg = bench.failure_report("p2p", 1, False, ["ChildFailedError:"], tmp_path)
    first = msg.splitlines()[0]
    assert first == ("p2p: torchrun exited with 1 before reporting a result;"
                     " local rank 1 failed first: ValueError: the real cause")
    assert str(attempt / "1" / "stderr.log") in msg and "Connection closed" not in msg
    # a rank killed by a signal writes no error.json: torchrun's root cause names it
    for f in attempt.glob("*/error.json"):
        f.unlink()
    lines = ["Root Cause (first observed failure):", "[0]:", "  rank      : 0 (local_rank: 0)", "  exitcode  : -9"]
    assert "local rank 0 failed first: RuntimeError: Connection closed by peer" in bench.failure_report(
        "p2p", 1, False, lines, tmp_path)
    # torchrun itself failed: its own last lines
    msg = bench.failure_report("p2p", 1, False, ["usage: torchrun ...", "error: argument --nproc_per_node"],
                               tmp_path / "none")
    assert msg.startswith("p2p: torchrun exited with 1 before reporting a result: error: argument --nproc_per_node")


def test_auto_dataset_not_in_the_cache(monkeypatch, tmp_path):
    """`datasets` installed but no wikitext cached (this machine, CI): auto says so; wikitext is refused.
    A cache folder that only looks like wikitext is tried by the worker's own loader, offline, in a child."""
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for key in ("HF_DATASETS_CACHE", "HF_HUB_CACHE"):
        monkeypatch.delenv(key, raising=False)
    name, note = bench.resolve_dataset("auto")
    assert name == "synthetic" and "not in the local datasets cache" in note
    (tmp_path / "hf" / "hub" / "datasets--wikitext").mkdir(parents=True)  # an empty leftover: not a copy
    from gputopo.errors import BadInput
    with pytest.raises(BadInput, match="^--dataset wikitext-2-raw-v1: not in the local datasets cache"):
        bench.resolve_dataset("wikitext-2-raw-v1")


def test_each_arm_is_predicted_from_its_own_sweep(fake_nvml, fake_calibration, monkeypatch):
    """Calibration before the arms (as many copies as processes), then each arm's DDP step from that arm's
    all-reduce sweep: a slower link in the no-P2P sweep predicts a slower step, and the ratio follows."""
    import fake_nvml as fm
    fake_nvml(init_error=fm.NVMLError_LibraryNotFound)

    def child(label, cmd, env, timeout, progress, log_dir=None):
        if "--no-train" not in cmd:
            return fake_result(0.5)
        gbps = 1.0 if env.get("NCCL_P2P_DISABLE") is None else 0.25
        return {"allreduce": [{"bytes": b, "seconds": 1e-4 + b / (gbps * 1e9), "algbw_gbps": 0.0,
                               "busbw_gbps": b / (1e-4 + b / (gbps * 1e9)) / 1e9} for b in (2 ** 20, 2 ** 24)]}
    monkeypatch.setattr(bench, "run_child", child)
    r = invoke("--model", "gpt2", "--dataset", "synthetic", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    (req, copies), = fake_calibration
    assert copies == 2 and req["config"]["n_layer"] == 12 and req["batch_size"] == 2
    p2p, no_p2p = data["runs"]
    assert 0 < p2p["predicted_step_s"] < no_p2p["predicted_step_s"]
    assert p2p["prediction"]["compute_s"] == no_p2p["prediction"]["compute_s"]
    # The comm difference is gpt2's gradients over the two fitted bandwidths (1 and 0.25 GB/s).
    from gputopo import models
    grads = 4 * models.named("gpt2").params
    assert no_p2p["prediction"]["comm_s"] - p2p["prediction"]["comm_s"] == pytest.approx(grads * 3 / 1e9, rel=0.01)
    assert data["predicted_ratio"] == pytest.approx(no_p2p["predicted_step_s"] / p2p["predicted_step_s"])
    assert "sampled" in data["prediction_basis"]["compute"]
    text = invoke("--model", "gpt2", "--dataset", "synthetic")
    assert "predicted step (error)" in text.output and "predicted no-P2P / P2P:" in text.output
    # --train-only has no sweep, so no link rate: no prediction, and a note says why.
    only = json.loads(invoke("--model", "gpt2", "--dataset", "synthetic", "--train-only", "--json").stdout)
    assert only["predicted_ratio"] is None and "predicted_step_s" not in only["runs"][0]
    assert any("--train-only skips the all-reduce sweep" in n for n in only["notes"])


def test_checks_before_launch_start_nothing(tmp_path, fake_nvml, monkeypatch):
    """Issue 20: an unknown model, one process, an endpoint that does not resolve: one line, before any child."""
    import fake_nvml as fm
    from click.testing import CliRunner

    from gputopo.cli import cli
    fake_nvml(init_error=fm.NVMLError_LibraryNotFound)
    monkeypatch.setattr(bench, "run_child", lambda *a, **k: pytest.fail("a child was started"))
    monkeypatch.setattr(bench, "calibration", lambda *a, **k: pytest.fail("calibration was started"))
    (tmp_path / "empty").mkdir()
    for args, code, msg in ((["--model", "nope"], 2, "--model nope: not a causal LM of gputopo's catalog"),
                            (["--model", "bert-base-uncased"], 2, "a bert model, not a causal LM"),
                            (["--model", str(tmp_path / "empty")], 2, "no config.json in that folder"),
                            (["--gpus", "1"], 4, "--gpus 1 on one node has no peer"),
                            (["--nproc", "1"], 4, "--gpus 1 on one node has no peer")):
        r = CliRunner().invoke(cli, ["bench-nvlink", *args])
        assert r.exit_code == code and msg in r.output and r.output.count("\n") == 1, (args, r.output)


def test_endpoint_check_lets_a_closed_port_wait_for_node_0():
    """Nothing listening yet is the normal start of a multi-node run: node 0 opens the rendezvous later."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    bench.check_endpoint(f"127.0.0.1:{port}")   # refused connection: accepted
    with pytest.raises(BadInput, match="does not resolve"):
        bench.check_endpoint("no-such-host.invalid:29500")


def arm_result() -> dict:
    """What a fake arm's worker reports: 3 steps, 1 of them warm-up, 0.1 s each."""
    t = [0.1, 0.1]
    return {"world_size": 2, "steps": 3, "warmup_steps": 1, "train_runtime_s": 0.3, "timed_runtime_s": 0.2,
            "samples_per_second": 10.0, "step_times_s": t, "step_time_s": {"median": 0.1, "p10": 0.1, "p90": 0.1},
            "loss_finite": True, "model": {"name": "gpt2"}, "dataset": "synthetic"}


@pytest.mark.parametrize("arms_before", [0, 1])
def test_ctrl_c_says_only_what_is_true(tmp_path, fake_nvml, fake_calibration, monkeypatch, arms_before):
    """Issue 20: after Ctrl-C in the first arm it said "finished arms are in int.json", which did not exist."""
    import fake_nvml as fm
    fake_nvml(init_error=fm.NVMLError_LibraryNotFound)
    calls = []

    def child(label, cmd, env, timeout, progress, log_dir=None):
        calls.append(label)
        progress(label, "step 1/3: 0.100 s", True)
        if len(calls) > arms_before:
            raise KeyboardInterrupt
        return arm_result()
    monkeypatch.setattr(bench, "run_child", child)
    out = tmp_path / "int.json"
    r = invoke("--steps", "3", "--output", str(out))
    last = r.output.strip().splitlines()[-1]
    assert r.exit_code == 130
    if arms_before == 0:
        assert "interrupted during p2p" in last and "no arm had finished, so nothing was written to" in last
        assert not out.exists()
    else:
        assert "interrupted during no_p2p" in last and f"finished: p2p (in {out}, and each arm's output.log" in last
        assert [x["label"] for x in json.loads(out.read_text())["runs"]] == ["p2p"]


NCCL_FIXTURES = Path(__file__).parent / "fixtures" / "nccl"
P2P_LOG = "nccl2.20.5-8xL20-1proc-pcie-p2p-direct-pointer-run2.log"      # real: every channel via P2P/direct pointer
SHM_LOG = "nccl2.20.5-8xL20-1proc-pcie-shm-direct-direct-run1.log"       # real: the same machine through SHM


@pytest.mark.parametrize("swapped", [False, True])
def test_each_arm_reports_the_path_nccl_took(tmp_path, fake_nvml, fake_calibration, monkeypatch, swapped):
    """The CUDA path with recorded real NCCL logs: each arm's child writes its log where NCCL_DEBUG_FILE points
    (one file per process), the bench reads it back per arm and judges the A/B by it."""
    import fake_nvml as fm
    fake_nvml(fm.rtx3090_pair())   # NV4 between the two GPUs: P2P is expected with P2P allowed
    monkeypatch.setattr("gputopo.doctor.preflight", lambda *a, **k: {"counts": {"warn": 0}})  # CPU torch here
    monkeypatch.setattr(bench, "new_log_dir", lambda: tempfile.mkdtemp(dir=tmp_path))   # its logs stay in tmp_path
    envs = []

    def child(label, cmd, env, timeout, progress, log_dir=None):
        envs.append(env)
        disabled = env.get("NCCL_P2P_DISABLE") == "1"
        log = (P2P_LOG if disabled else SHM_LOG) if swapped else (SHM_LOG if disabled else P2P_LOG)
        target = env["NCCL_DEBUG_FILE"].replace("%h", "node").replace("%p", "4242")
        Path(target).write_text((NCCL_FIXTURES / log).read_text())
        return {**arm_result(), "allreduce": [{"bytes": 2 ** 20, "seconds": 1e-3, "algbw_gbps": 1.0,
                                                "busbw_gbps": 1.0}]}
    monkeypatch.setattr(bench, "run_child", child)
    args = ["--model", "gpt2", "--steps", "3", "--warmup-steps", "1", "--allreduce-sizes", "1MB"]
    r = invoke(*args, "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert all(e["NCCL_DEBUG"] == "INFO" and "INIT" in e["NCCL_DEBUG_SUBSYS"] for e in envs)
    p2p, no_p2p = (run["nccl"] for run in data["runs"])
    assert set((no_p2p if swapped else p2p)["transports"]) == {"P2P"} and p2p["pairs"] and no_p2p["pairs"]
    assert set((p2p if swapped else no_p2p)["transports"]) == {"SHM"}
    assert data["allreduce_nccl"]["p2p"]["transports"] == p2p["transports"]
    text = invoke(*args).output
    if swapped:
        assert data["comparison"]["verdict"] == "not_what_it_claims" and data["speedup"] is None
        assert "p2p used no P2P although GPU0-GPU1 share NV4" in data["nccl_check"]
        assert "no_p2p still used P2P" in data["nccl_check"]
        assert "Paths: the A/B did not test what it claims" in text
    else:
        assert data["nccl_check"] is None and data["comparison"]["verdict"] != "not_what_it_claims"
        assert "Paths: each arm took the path it claims" in text and "P2P/direct pointer" in text


def test_cpu_twin_says_gloo_has_no_nccl_log(tmp_path, fake_nvml, fake_calibration, monkeypatch):
    import fake_nvml as fm
    fake_nvml(init_error=fm.NVMLError_LibraryNotFound)

    def child(label, cmd, env, timeout, progress, log_dir=None):
        return arm_result()
    monkeypatch.setattr(bench, "run_child", child)
    r = invoke("--steps", "3", "--train-only")
    assert r.exit_code == 0 and r.output.count("gloo writes no NCCL log") == 1 and "Paths NCCL took" not in r.output


def test_progress_text_and_pace():
    """Rank 0's progress lines as a person reads them: the step, its own seconds, the time left at the median
    pace of the last 5."""
    t = bench.Tracker()
    assert t.text({"phase": "build", "model": "gpt2", "world": 2}) == "building gpt2 in 2 process(es)"
    lines = [t.text({"phase": "train", "step": k, "steps": 200, "seconds": s}) for k, s in enumerate([9, 1, 1, 2], 1)]
    assert lines == ["step 1/200: 9.000 s, ETA 29m51s", "step 2/200: 1.000 s, ETA 16m30s",
                     "step 3/200: 1.000 s, ETA 3m17s", "step 4/200: 2.000 s, ETA 4m54s"]   # ETA: median of the last 5
    assert t.text({"phase": "train", "step": 200, "steps": 200, "seconds": 1}) == "step 200/200: 1.000 s"
    assert t.text({"phase": "allreduce", "size": 2 ** 25, "index": 6, "of": 6}) == "all-reduce 32 MiB (6/6)"
    assert (bench.duration(59), bench.duration(61), bench.duration(3725)) == ("59s", "1m01s", "1h02m")


def test_progress_in_a_log_is_throttled_and_quiet_is_silent(capsys, monkeypatch):
    from gputopo.commands.bench_nvlink import Progress
    clock = iter([0.0, 1.0, 2.0, 12.0, 13.0])
    monkeypatch.setattr("gputopo.commands.bench_nvlink.time.monotonic", lambda: next(clock))
    p = Progress(verbose=False)
    p.tty = False
    for k in range(1, 5):
        p("p2p", f"step {k}/5", True)
    p("p2p", "a warning of the child")       # not progress: only with --verbose
    p("no_p2p", "step 1/5", True)            # a new arm: the last state of the previous one is written
    p.done()
    err = capsys.readouterr().err.splitlines()
    assert err == ["[p2p] step 1/5", "[p2p] step 4/5", "[no_p2p] step 1/5"]
    q = Progress(verbose=False, quiet=True)
    q("p2p", "step 1/5", True)
    q.done()
    assert capsys.readouterr().err == ""


def test_node_0s_rendezvous_is_checked_before_anything_starts(tiny_model, fake_nvml):
    """Issue 33: an address that does not resolve ran 210 s on one node, and a second bench on a port in use failed
    after 201 s ("connection to the C10d store has failed"): both are refused at once, naming the option."""
    import socket

    import fake_nvml as fm
    fake_nvml(init_error=fm.NVMLError_LibraryNotFound)
    base = ["--model", str(tiny_model), "--steps", "3"]
    r = invoke(*base, "--master-addr", "no.such.host")
    assert r.exit_code == 2 and "--master-addr no.such.host: does not resolve here" in r.output
    r = invoke(*base, "--master-addr", "192.0.2.1")   # TEST-NET-1: never this machine's
    assert r.exit_code == 2 and "not an address of this machine" in r.output
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = invoke(*base, "--master-addr", "127.0.0.1", "--master-port", str(port))
    assert r.exit_code == 2 and f"--master-port {port}: already in use" in r.output
