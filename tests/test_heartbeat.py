"""Never silent (issue 43 (5)): every step that runs for minutes says on stderr what it is doing, at least every
15 s (gputopo.children.Heartbeat; .ci/setup's `beating`). The interval is injectable (GPUTOPO_HEARTBEAT_SECONDS),
so these tests walk the long operations with sleeping children in place of the minutes-long work and a fraction
of a second in place of 15 s, and hold each silence on stderr to a few intervals."""
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gputopo import bench, children
from gputopo.commands import bench_nvlink

ROOT = Path(__file__).parent.parent
EVERY = 0.2     # seconds between beats in these tests (15 in use)
SILENT = 1.0    # the longest silence allowed: five beats, and shorter than each faked step (1.5 s or more)


def stamped(cmd, *, env, cwd=None, timeout=60) -> tuple[int, str, list[tuple[float, str]]]:
    """Run cmd; (exit status, stdout, each stderr line with the second it arrived)."""
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines, out = [], []
    reader = threading.Thread(target=lambda: lines.extend((time.monotonic(), l.rstrip("\n"))
                                                          for l in iter(proc.stderr.readline, "")))
    reader.start()
    try:
        out.append(proc.stdout.read())
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
        reader.join(5)
    return proc.returncode, "".join(out), lines


def longest_silence(lines: list[tuple[float, str]], first: str, last: str) -> float:
    """The longest gap between lines on stderr from the line holding `first` to the one holding `last`."""
    start = next(i for i, (_, l) in enumerate(lines) if first in l)
    end = next(i for i, (_, l) in enumerate(lines) if last in l)
    times = [t for t, _ in lines[start:end + 1]]
    assert len(times) > 1, lines
    return max(b - a for a, b in zip(times, times[1:]))


def test_heartbeat_says_what_and_for_how_long_until_stopped():
    said = []
    with children.Heartbeat("measuring: the model's step in a child process", said.append, every=0.05) as beat:
        time.sleep(0.28)
        beat.said()     # the caller said something itself: the next beat waits a whole interval again
        n = len(said)
        time.sleep(0.03)
        assert len(said) == n
        time.sleep(0.1)
    stopped = len(said)
    time.sleep(0.15)
    assert len(said) == stopped >= 5
    assert said[0] == "measuring: the model's step in a child process (0 s so far)"
    with children.Heartbeat(lambda s: f"still {s:.1f}", said.append, every=0.05):
        time.sleep(0.08)
    assert said[-1].startswith("still 0.")


def test_heartbeat_interval_is_injectable(monkeypatch):
    monkeypatch.delenv("GPUTOPO_HEARTBEAT_SECONDS", raising=False)
    assert children.heartbeat_seconds() == children.HEARTBEAT_SECONDS == 12
    monkeypatch.setenv("GPUTOPO_HEARTBEAT_SECONDS", "0.5")
    assert children.Heartbeat("x").every == 0.5
    monkeypatch.setenv("GPUTOPO_HEARTBEAT_SECONDS", "soon")
    assert children.heartbeat_seconds() == 12


FAKE_CHILD = """#!{python}
# python -m gputopo.measure|gputopo.calibrate REQUEST: sleeps in place of the model's steps, then a result
import json
import sys
import time

sys.path.insert(0, {tests!r})
module, req = sys.argv[2], json.loads(sys.argv[3])
if module == "gputopo.calibrate":
    print("GPUTOPO_CALIBRATE_PROGRESS the model's sample (faked)", file=sys.stderr, flush=True)
    time.sleep({sleep})
    from conftest import fake_calibration_result
    print("GPUTOPO_CALIBRATE " + json.dumps(fake_calibration_result(req)), flush=True)
else:
    time.sleep({sleep})
    for one in req:
        print("GPUTOPO_MEASURE " + json.dumps(
            {{"device": "cpu", "step_times_s": [0.5, 0.5, 0.5]}} if one.get("time_only") else
            {{"device": "cpu", "attention": one["attention"], "weights": 1, "gradients": 1, "optimizer": 2, "step": 3,
              "baseline": 3, "peak": 6, "reserved": None, "nvml_process_bytes": None, "torch": "fake",
              "transformers": "fake"}}), flush=True)
"""


def test_plan_measure_says_each_child_and_beats_while_it_runs(tmp_path):
    """The new user's 3 min 21 s of silence: the memory child, the timed child and its calibration each say
    what they are as they start and beat while they run; stdout holds the JSON alone."""
    fake = tmp_path / "python"
    fake.write_text(FAKE_CHILD.format(python=sys.executable, tests=str(ROOT / "tests"), sleep=1.5))
    fake.chmod(0o755)
    # the real CLI, with sys.executable pointing at the fake, as calibrate's OOM test fakes its child
    code = "import sys; sys.executable = sys.argv.pop(1); from gputopo.cli import cli; cli(prog_name='gputopo')"
    env = {**os.environ, "GPUTOPO_HEARTBEAT_SECONDS": str(EVERY)}
    rc, out, lines = stamped([sys.executable, "-c", code, str(fake), "plan", "--model", "gpt2", "--gpus", "1",
                              "--gpu-mem", "80GB", "--batch-size", "1", "--seq-len", "128", "--measure", "--json"],
                             env=env, cwd=tmp_path)
    err = [l for _, l in lines]
    assert rc == 0, err
    assert json.loads(out)["measured"]["time"]["measured_s"] == 0.5   # stdout: the JSON alone
    for part in ("measuring: the model's memory (a warm-up step, then the measured one) in a child process",
                 "measuring: the model's step time (2 warm-up steps, then 3 timed) in a child process"):
        assert part in err and any(l.startswith(part + " (") and l.endswith(" s so far)") for l in err), err
    assert any(l.startswith("calibrating: 1 process(es) time the model") for l in err), err
    assert "calibrating: the model's sample (faked)" in err, err
    assert any(l.startswith("calibrating: still the model's sample (faked) (") for l in err), err
    assert any(l.startswith("calibrated in ") for l in err) and any(l.startswith("measured in ") for l in err)
    assert longest_silence(lines, "measuring: the model's memory", "measured in ") < SILENT, lines


def test_plan_calibrate_beats_between_the_parts(tmp_path, monkeypatch, capsys):
    """plan --calibrate (and bench-nvlink's calibration): a part that runs long gets a line naming it."""
    from gputopo import calibrate
    fake = tmp_path / "python"
    fake.write_text(FAKE_CHILD.format(python=sys.executable, tests=str(ROOT / "tests"), sleep=1.0))
    fake.chmod(0o755)
    monkeypatch.setattr(calibrate.sys, "executable", str(fake))
    monkeypatch.setenv("GPUTOPO_HEARTBEAT_SECONDS", str(EVERY))
    said = []
    cal = calibrate.run({"sizes": [1024], "shapes": [], "threads": 1}, say=lambda l: said.append((time.monotonic(), l)))
    assert cal["device"] == "cpu"
    text = [l for _, l in said]
    assert text[1] == "calibrating: the model's sample (faked)" and text[-1].startswith("calibrated in ")
    beats = [l for l in text if l.startswith("calibrating: still the model's sample (faked) (")]
    assert len(beats) >= 3, text
    assert max(b - a for (a, _), (b, _) in zip(said, said[1:])) < SILENT, said


@pytest.mark.parametrize("tty", [False, True])
def test_bench_nvlink_beats_while_torchrun_is_silent(monkeypatch, tty):
    """bench-nvlink: torchrun starting and the model building print nothing for a while; the arm's line comes
    again with its seconds so far, on a terminal and in a log."""
    shown = []
    monkeypatch.setattr(bench_nvlink.click, "echo", lambda text="", err=False, nl=True: shown.append(
        (time.monotonic(), text, err)))
    monkeypatch.setenv("GPUTOPO_HEARTBEAT_SECONDS", str(EVERY))
    progress = bench_nvlink.Progress(verbose=False)
    progress.tty = tty
    build = json.dumps({"phase": "build", "model": "tiny", "world": 2})
    script = f"echo '{bench.PROGRESS}{build}'; sleep 1.5; echo '{bench.RESULT}{{\"ok\": 1}}'"
    assert bench.run_child("p2p", ["sh", "-c", script], dict(os.environ), 30, progress) == {"ok": 1}
    progress.done()
    assert all(err for _, _, err in shown)
    text = [t.strip("\r").rstrip() for _, t, _ in shown]
    assert text[0] == "[p2p] starting torchrun"
    beats = [t for t in text if t.startswith("[p2p] building tiny in 2 process(es) (") and t.endswith(" s so far)")]
    assert len(beats) >= 3, text
    assert max(b - a for (a, _, _), (b, _, _) in zip(shown, shown[1:])) < SILENT, shown


FAKE_DEEPSPEED = """
import time

NAMES = {"ShareMemCommBuilder": "deepspeed_shm_comm", "CPUAdamBuilder": "cpu_adam", "FusedAdamBuilder": "fused_adam",
         "PinMemoryBuilder": "pin_memory", "AsyncIOBuilder": "async_io"}


class Builder:
    def __init__(self, name):
        self.NAME = NAMES[name]

    def is_compatible(self, verbose=False):
        return True

    def load(self, verbose=False):
        time.sleep(2.0 if self.NAME == "async_io" else 0.0)   # async_io: 529 s silent on the issue's machine


class Accelerator:
    def create_op_builder(self, name):
        return Builder(name)


def get_accelerator():
    return Accelerator()
"""


def test_setup_beats_through_pip_and_the_op_builds(tmp_path):
    """.ci/setup on a fake .venv: pip (a sleep) and DeepSpeed's async_io build (a fake builder that sleeps)
    each say they are still running, with their seconds so far."""
    (tmp_path / ".ci").mkdir()
    for f in (".ci/setup", ".ci/constraints.txt", "pyproject.toml"):
        shutil.copy(ROOT / f, tmp_path / f)
    venv = tmp_path / ".venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text(f'#!/bin/sh\n# pip: a sleep in place of the install\nif [ "$1 $2" = "-m pip" ]; then\n'
                                 f'  case "$*" in *" -U pip"*) exit 0;; esac\n  sleep 2; exit 0\nfi\n'
                                 f'exec {sys.executable} "$@"\n')
    (venv / "python").chmod(0o755)
    (venv / "activate").write_text('export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$VIRTUAL_ENV/x}"\n')
    fakes = tmp_path / "fakes"
    (fakes / "deepspeed").mkdir(parents=True)
    (fakes / "deepspeed" / "__init__.py").write_text("")
    (fakes / "deepspeed" / "accelerator.py").write_text(FAKE_DEEPSPEED)
    (fakes / "ldconfig").write_text("#!/bin/sh\necho '\tlibaio.so (libc6,x86-64) => /usr/lib/libaio.so'\n")
    (fakes / "ldconfig").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "GPUTOPO_RENDER_TESTS", "PYTHON")}
    env.update(GPUTOPO_HEARTBEAT_SECONDS=str(EVERY), PYTHONPATH=f"{fakes}:{ROOT}", PATH=f"{fakes}:{env['PATH']}",
               TORCH_EXTENSIONS_DIR=str(tmp_path / "ext"))
    rc, out, lines = stamped(["bash", str(tmp_path / ".ci" / "setup")], env=env)
    err = [l for _, l in lines]
    assert rc == 0 and out == "", err
    assert any(l.startswith("setup:   pip: still running (") and l.endswith(" s so far)") for l in err), err
    beats = [l for l in err if l.startswith("setup:   async_io: still building (") and l.endswith(" s so far)")]
    assert len(beats) >= 3, err
    assert any(l.startswith("setup:   async_io: loading, built first if it is not yet (") for l in err), err
    assert "setup:   async_io: ready in 2 s" in err and err[-1].startswith("setup: done")
    assert longest_silence(lines, "setup: installing gputopo", "setup: done") < SILENT, lines


def test_bench_nvlink_beat_replaces_a_calibrations_seconds(monkeypatch):
    """bench-nvlink's calibration beats too (calibrate.run's heartbeat, through Progress): Progress's own beat
    gives its seconds once, not a second "(N s so far)" after the first."""
    shown = []
    monkeypatch.setattr(bench_nvlink.click, "echo", lambda text="", err=False, nl=True: shown.append(text))
    monkeypatch.setenv("GPUTOPO_HEARTBEAT_SECONDS", str(EVERY))
    progress = bench_nvlink.Progress(verbose=False)
    progress.tty = False
    progress("calibrating", "the model's sample", True)
    progress("calibrating", "still the model's sample (15 s so far)", True)   # within 10 s of the last: held
    time.sleep(EVERY * 1.6)
    progress.done()
    assert shown[0] == "[calibrating] the model's sample"
    assert shown[1].startswith("[calibrating] still the model's sample (0 s so far)") and "so far) (" not in shown[1]
