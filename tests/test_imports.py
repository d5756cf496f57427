"""The CLI's fast paths import neither torch, transformers, datasets nor deepspeed."""
import subprocess
import sys

import pytest
from conftest import FIXTURES

HEAVY = "{'torch', 'transformers', 'datasets', 'deepspeed'}"


def heavy_after(statement: str) -> list[str]:
    """Run `statement` in a fresh interpreter; return the heavy modules loaded by the end."""
    code = ("import atexit, sys\n"
            f"atexit.register(lambda: print('HEAVY', sorted({HEAVY} & set(sys.modules)), file=sys.stderr))\n"
            + statement)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    line = next(l for l in out.stderr.splitlines() if l.startswith("HEAVY"))
    return eval(line[len("HEAVY "):])


def cli(*args) -> str:
    return f"import sys; from gputopo.cli import cli; sys.argv = ['gputopo', *{list(args)!r}]; cli()"


@pytest.mark.parametrize("statement", [
    "import gputopo.cli, gputopo.parse, gputopo.report, gputopo.render, gputopo.plan, gputopo.dsconfig",
    cli("--help"),
    cli("inspect", "-f", str(FIXTURES / "topo" / "rtx5090x2_phb.txt")),
    cli("inspect", "--example", "dgx-a100", "--model", "llama-2-7b", "--gpu-mem", "80GiB"),
    cli("plan", "--model", "llama-2-7b", "--gpus", "8", "--gpu-mem", "80GiB"),
    cli("doctor"),
    cli("inspect", "--example", "dgx-a100", "--markdown"),
    cli("inspect", "--nccl-log", str(FIXTURES / "nccl" / "nccl2.3x-8xGPU-1node-ring-p2p-ipc-garbled-interleave.log"),
        "-f", str(FIXTURES / "topo" / "rtx5090x2_phb.txt")),
    "from gputopo import dsconfig, launch; dsconfig.build(3, 'cpu', hidden_size=64);"
    " launch.command('slurm', 'x', gpus=8)",
])
def test_fast_paths_stay_light(statement):
    assert heavy_after(statement) == []


def test_markdown_imports_no_matplotlib():
    """`inspect --markdown` works without matplotlib (only --plot needs it), and without torch."""
    statement = cli("inspect", "--example", "dgx-a100", "--markdown").replace("cli()", "cli(standalone_mode=False)")
    code = ("import sys\n" + statement + "\n"
            "print('LOADED', sorted({'matplotlib', 'torch', 'transformers', 'deepspeed'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "```mermaid" in out.stdout and "LOADED []" in out.stdout, out.stderr


def test_inspect_of_a_paste_loads_only_what_it_uses():
    """Issue 18 (the CLI answers fast): a pasted topology needs no memory plan, no doctor, no process or host
    probe: those modules are not imported at all (benchmarks/cli_latency.py prints the time against the floor)."""
    statement = cli("inspect", "-f", str(FIXTURES / "topo" / "rtx5090x2_phb.txt")).replace(
        "cli()", "cli(standalone_mode=False)")
    unused = {"psutil", "subprocess", "shutil", "gputopo.plan", "gputopo.memory", "gputopo.models", "gputopo.doctor",
              "gputopo.request", "gputopo.system", "gputopo.nvme", "gputopo.dsconfig", "importlib.resources"}
    code = f"import sys\n{statement}\nprint('LOADED', sorted({unused!r} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "LOADED []" in out.stdout, out.stdout + out.stderr
