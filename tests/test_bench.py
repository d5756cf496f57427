"""bench-nvlink runs the real thing on CPU: torchrun, 2 gloo processes, a tiny GPT-2, both arms, the sweep,
two "nodes" on loopback, a child that crashes, one that hangs, Ctrl-C, and no orphan afterwards."""
import json
import os
import signal
import socket
import subprocess
import time

import psutil
import pytest

from conftest import bin_path
from gputopo import bench

pytestmark = pytest.mark.skipif(__import__("importlib").util.find_spec("torch") is None, reason="torch not installed")


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
    assert (data["schema_version"], data["device"], data["backend"], data["nproc"], data["nnodes"]) == (1, "cpu", "gloo", 2, 1)
    p2p, no_p2p = data["runs"]
    # The parent's NCCL_P2P_DISABLE=1 must not leak into the P2P arm.
    assert p2p["env"] == {"NCCL_P2P_DISABLE": None} and no_p2p["env"] == {"NCCL_P2P_DISABLE": "1"}
    for run in data["runs"]:
        assert run["steps"] == 5 and run["warmup_steps"] == 1 and len(run["step_times_s"]) == 4
        assert run["world_size"] == 2 and run["samples_per_second"] > 0 and run["losses_finite"]
        assert run["step_time_s"]["p10"] <= run["step_time_s"]["median"] <= run["step_time_s"]["p90"]
    sp = data["speedup"]
    assert sp["ci95"][0] <= sp["value"] <= sp["ci95"][1]
    assert [(a["bytes"], a["p2p"]) for a in data["allreduce"]] == [(2 ** 20, True), (4 * 2 ** 20, True),
                                                                   (2 ** 20, False), (4 * 2 ** 20, False)]
    assert all(a["busbw_gbps"] == pytest.approx(a["algbw_gbps"]) for a in data["allreduce"])  # 2(n-1)/n = 1 at n=2
    assert "synthetic" in data["dataset"] and "random weights" in data["model"]["name"]
    assert any("NCCL_P2P_DISABLE changes nothing" in n for n in data["notes"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = gputopo("bench-nvlink", "--model", str(tiny_model), "--steps", "3", "--train-only", "--dataset",
                   str(tmp_path / "r.json"), cwd=tmp_path)
    assert text.returncode == 0, text.stderr[-2000:]
    assert "P2P/NVLink" in text.stdout and "\nY " in text.stdout and "\nN " in text.stdout and "local text" in text.stdout
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
    # One combined run: both nodes report the same result of the 2-process world.
    assert node0["nnodes"] == 2 and all(r["world_size"] == 2 for r in node0["runs"]) and node0["speedup"]
    assert node0["runs"] == node1["runs"] and node0["allreduce"] == node1["allreduce"] and len(node0["allreduce"]) == 2


@pytest.mark.slow
def test_child_crash_is_reported(tmp_path, tiny_model):
    r = gputopo("bench-nvlink", "--model", str(tiny_model), "--steps", "3", "--dataset", "/nonexistent/text.txt",
                cwd=tmp_path)
    assert r.returncode == 5
    first = next(l for l in r.stderr.splitlines() if l.startswith("Error: "))
    assert first.startswith("Error: p2p: torchrun exited with") and "no such file" in first
    assert "Last lines of the child:" in r.stderr
    assert not leftovers(str(tiny_model))


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
                      (["--train-only", "--allreduce-only"], "exclude each other"),
                      (["--nnodes", "2"], "needs --rdzv-endpoint"),
                      (["--gpus", "0,1"], "no NVIDIA GPU visible"),
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
