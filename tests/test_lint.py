"""ruff holds the code style CI checks (pyproject.toml [tool.ruff]: line length 120 as setup.cfg names it, import
order, bugbear, heavy libraries banned at module level); this test runs it so `.ci/run`'s one command covers it."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def test_ruff_is_clean():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]' installs it)")
    out = subprocess.run([ruff, "check", "gputopo", "tests", "benchmarks", "launchers"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
