"""README.md and docs/*.md run as typed: every shell command in their code blocks is run here.

The convention (also in docs/options.md, "Commands in these pages"):

- Commands live in ```bash blocks, one per line (a line ending in `\\` continues on the next; `# ...` lines
  are comments). Output is shown in ```text blocks, drawings in ```mermaid: never run. Every fence names
  its language, so no command hides in an untyped block.
- A block whose first line is `# needs a GPU...` or `# on another machine...` (a cluster, another node) is
  not run on this machine (no GPU): its test is skipped with that line as the reason.
- `# exit N` as the first line of a block: each of its commands exits with N. A command ending in a
  comment `# exit N` exits with N. Otherwise 0.
- A block holding a command that trains (`--measure`, `bench-nvlink`, a torchrun/deepspeed/accelerate
  launch) is marked slow (`pytest -m "not slow"` leaves it out).
- README starts with `bash .ci/setup && .venv/bin/...`: the set-up is the environment running this test,
  so only the part after `&&` runs; a command that runs pytest is this suite itself and is left out.

Each block runs in a fresh temporary folder (so nothing is written into the repository) holding a copy of
`tests/fixtures/` and `.venv` -> this interpreter's environment, with PATH starting at its `bin/` (as after
`source .venv/bin/activate`) and PYTHONPATH at this checkout, so `gputopo` is the code under test.
Commands of one block run in order in the same folder (a later one may read what an earlier one wrote).
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SKIP_MARKERS = ("# needs a GPU", "# on another machine")
SLOW = re.compile(r"--measure|bench-nvlink|^\s*(torchrun|deepspeed|accelerate launch)\b")
EXIT = re.compile(r"#\s*exit\s+(\d+)\s*$")
SETUP = "bash .ci/setup && "


def fenced_blocks(path: Path):
    """(language, first line number, lines) of every fenced block."""
    lines = path.read_text().split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\S*)\s*$", lines[i])
        if m:
            j = i + 1
            while j < len(lines) and lines[j] != "```":
                j += 1
            yield m.group(1), i + 1, lines[i + 1:j]
            i = j
        i += 1


def commands(lines: list[str]) -> list[tuple[str, int]]:
    """Logical command lines (continuations joined) and the exit status each must give."""
    block_rc = 0
    if lines and EXIT.match(lines[0].strip()):
        block_rc = int(EXIT.match(lines[0].strip()).group(1))
    out, cur = [], ""
    for line in lines:
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        cmd = cur + line
        cur = ""
        m = EXIT.search(cmd)
        out.append((cmd, int(m.group(1)) if m else block_rc))
    return out


def bash_blocks():
    for page in PAGES:
        for lang, line, lines in fenced_blocks(page):
            if lang == "bash":
                yield page, line, lines


def cases():
    for page, line, lines in bash_blocks():
        marks = []
        first = lines[0].strip() if lines else ""
        if first.startswith(SKIP_MARKERS):
            marks.append(pytest.mark.skip(reason=first.lstrip("# ")))
        elif any(SLOW.search(c) for c, _ in commands(lines)):
            marks.append(pytest.mark.slow)
        yield pytest.param(page, line, lines, id=f"{page.relative_to(ROOT)}:{line}", marks=marks)


def runnable(cmd: str) -> str | None:
    """The command as this test runs it, or None when it is left out (see the module docstring)."""
    if cmd.startswith(SETUP):
        cmd = cmd[len(SETUP):]
    if re.search(r"(^|\s)(-m\s+)?pytest\b", cmd):
        return None
    return cmd


@pytest.fixture
def docs_cwd(tmp_path):
    shutil.copytree(ROOT / "tests" / "fixtures", tmp_path / "tests" / "fixtures")
    (tmp_path / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    bindir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
           "PYTHONPATH": str(ROOT) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""),
           "VIRTUAL_ENV": sys.prefix, "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    return tmp_path, env


@pytest.mark.parametrize("page,line,lines", list(cases()))
def test_documented_commands_run(page, line, lines, docs_cwd):
    cwd, env = docs_cwd
    ran = 0
    for cmd, want in commands(lines):
        cmd = runnable(cmd)
        if cmd is None:
            continue
        timeout = 900 if SLOW.search(cmd) else 300
        r = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        assert r.returncode == want, (f"{page.name}:{line}: `{cmd}` exited {r.returncode}, documented {want}\n"
                                      f"stdout: {r.stdout[-2000:]}\nstderr: {r.stderr[-2000:]}")
        ran += 1
    assert ran, f"{page.name}:{line}: a bash block with nothing to run"


def test_readme_starts_with_the_two_commands():
    """A fresh machine needs nothing else; .ci/run runs the second line."""
    text = (ROOT / "README.md").read_text()
    assert text.startswith("# gputopo\n\n```bash\n"
                           "bash .ci/setup && .venv/bin/gputopo inspect\n"
                           "bash .ci/setup && .venv/bin/python -m pytest\n```\n")
    assert "bash .ci/setup && .venv/bin/python -m pytest" in (ROOT / ".ci" / "run").read_text()
    assert len(text.split("\n")) < 250


def test_every_fence_names_its_language():
    for page in PAGES:
        for lang, line, _ in fenced_blocks(page):
            assert lang in ("bash", "text", "mermaid"), f"{page.name}:{line}: fence ```{lang}"


def test_gputopo_is_typed_one_way():
    """After `source .venv/bin/activate` every example says `gputopo`; only README's first lines say .venv/bin/."""
    for page, line, lines in bash_blocks():
        for cmd, _ in commands(lines):
            if re.search(r"\.venv/bin/(gputopo|python)", cmd):
                assert page.name == "README.md" and cmd.startswith(SETUP), f"{page.name}:{line}: {cmd}"


def test_links_between_pages_resolve():
    """Relative links and `sources.md#<anchor>` citations (in the pages and in code comments) point somewhere."""
    anchors = set(re.findall(r'<a id="([\w-]+)"></a>', (ROOT / "docs" / "sources.md").read_text()))
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if "://" in target or target.startswith("#"):
                continue
            path, _, frag = target.partition("#")
            assert (page.parent / path).exists(), f"{page.name}: link to {target}"
            if path.endswith("sources.md") and frag:
                assert frag in anchors, f"{page.name}: {target}"
    for folder in ("gputopo", "benchmarks", "launchers", "tests"):
        for f in (ROOT / folder).rglob("*"):
            if f.suffix in (".py", ".sh", ".md", ".sbatch", ".json") and f.is_file():
                for frag in re.findall(r"sources\.md#([\w-]+)", f.read_text(errors="replace")):
                    assert frag in anchors, f"{f.relative_to(ROOT)} cites docs/sources.md#{frag}"
