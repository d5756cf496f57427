import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fake_nvml import FakeNvml  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"
# DeepSpeed's JIT ops for every run the suite starts: this environment's own folder (kept between runs), not
# ~/.cache/torch_extensions, which every virtualenv of the user shares and rebuilds (gputopo doctor: jit_shared).
os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(Path(sys.prefix) / "torch_extensions"))


@pytest.fixture
def fake_nvml(monkeypatch, tmp_path):
    """Install a fake `pynvml` built from a scenario; no nvidia-smi on PATH, an empty sysfs."""
    from gputopo import probe

    def install(*args, **kwargs):
        fake = FakeNvml(*args, **kwargs)
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        return fake
    monkeypatch.setattr(probe, "SYSFS_PCI", tmp_path / "sysfs")
    monkeypatch.setattr(shutil, "which", lambda name: None)   # as gputopo.probe finds nvidia-smi
    return install


def fixture_text(name: str) -> str:
    return (FIXTURES / "topo" / name).read_bytes().decode()


TINY_GPT2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 64, "n_layer": 2, "n_head": 2,
             "vocab_size": 1000, "n_positions": 128, "bos_token_id": 0, "eos_token_id": 0}


def make_model_dir(path: Path, **overrides) -> Path:
    """A folder with a tiny GPT-2 config.json (no weights): the worker builds it with random weights."""
    import json
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({**TINY_GPT2, **overrides}))
    return path


@pytest.fixture
def tiny_model(tmp_path):
    return make_model_dir(tmp_path / "tiny-gpt2")


def bin_path(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def run_worker(args, *, cwd, nproc=2, env=None, timeout=900, launcher=None):
    """Run `python -m gputopo.worker` under torchrun; returns (result dict or None, completed process)."""
    import json
    import os
    import subprocess
    cmd = launcher or [bin_path("torchrun"), "--standalone", "--nproc_per_node", str(nproc), "-m", "gputopo.worker"]
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    proc = subprocess.run(cmd + list(args), cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)
    line = next((l for l in proc.stdout.splitlines() if l.startswith("GPUTOPO_RESULT ")), None)
    return (json.loads(line[len("GPUTOPO_RESULT "):]) if line else None), proc


def fake_calibration_result(req: dict, copies: int = 1, **_) -> dict:
    """What gputopo.calibrate.run returns, for tests that fake the calibration's child processes: a block of
    10 ms and 20 ms of embeddings, head and loss, 10 GB/s elementwise, 100 M params/s AdamW."""
    ew = {str(n): {"stream": 1e10, "math": 1e10, "inplace": 1e10} for n in req["sizes"]}
    return {"device": "cpu", "threads": req.get("threads") or 1, "copies": copies, "torch": "fake",
            "matmul_seconds": {k: 1e-4 for k in req["shapes"]}, "matmul_flops": 1e10, "mem_bytes_per_s": 1e10,
            "elementwise": ew, "optimizer_params_per_s": 1e8, "cpu_adam_params_per_s": None,
            "sampled": {"block_s": 0.01, "head_s": 0.02}, "allreduce": None}


@pytest.fixture
def fake_calibration(monkeypatch):
    """calibrate.run without children; returns the requests it was given."""
    from gputopo import calibrate
    seen = []

    def run(req, copies=1, **k):
        seen.append((req, copies))
        return fake_calibration_result(req, copies)
    monkeypatch.setattr(calibrate, "run", run)
    return seen


ENGINES = Path(__file__).parent / "engines"


@pytest.fixture(scope="session")
def engines(tmp_path_factory):
    """Real engines on this machine for the whole test run: munge, slurmctld, two slurmd (node1, node2, 2 GPUs
    each as gres), sshd with a root key for ssh/pdsh to node1 and node2 (tests/engines/start.sh); stopped by the
    PIDs start.sh recorded at the end (stop.sh), /etc/hosts and ~/.ssh/config restored. Skips with start.sh's
    reason where they cannot run (not root, no apt-get, the install failed) or with GPUTOPO_NO_ENGINES=1.
    Yields the variables start.sh printed (SLURM_CONF, ENGINES_*)."""
    import os
    import subprocess
    if os.environ.get("GPUTOPO_NO_ENGINES") == "1":
        pytest.skip("GPUTOPO_NO_ENGINES=1: no Slurm, sshd or pdsh started")
    state = tmp_path_factory.mktemp("engines")
    try:
        proc = subprocess.run(["bash", str(ENGINES / "start.sh"), str(state)], capture_output=True, text=True,
                              timeout=900)
        if proc.returncode == 77:
            pytest.skip("engines: " + proc.stderr.strip().splitlines()[-1].removeprefix("reason: "))
        assert proc.returncode == 0, f"tests/engines/start.sh {state} failed:\n{proc.stderr[-5000:]}"
        yield dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    finally:
        subprocess.run(["bash", str(ENGINES / "stop.sh"), str(state)], capture_output=True, timeout=300)


# Nothing of gputopo's is left in TMPDIR by a test run (issue 33: the fast suite left 57 empty gputopo-bench-*
# folders and a gputopo-mermaid-* folder each time): what a run adds there fails the session, named.
_TMP_BEFORE: set = set()


def pytest_sessionstart(session):
    import tempfile
    _TMP_BEFORE.update(p.name for p in Path(tempfile.gettempdir()).glob("gputopo-*"))


def pytest_sessionfinish(session, exitstatus):
    import tempfile
    if hasattr(session.config, "workerinput"):   # pytest-xdist workers: the controller checks once
        return
    left = sorted(p.name for p in Path(tempfile.gettempdir()).glob("gputopo-*") if p.name not in _TMP_BEFORE)
    if left:
        print(f"\nleft in {tempfile.gettempdir()} by this run: {', '.join(left[:10])}")
        session.exitstatus = 1


def readable_paste(path) -> bool:
    """A fixture gputopo's parser reads (some fixtures are kept to test its refusals)."""
    from gputopo import parse
    try:
        parse.texts([path.read_bytes().decode("utf-8", "replace")])
        return True
    except Exception:
        return False
