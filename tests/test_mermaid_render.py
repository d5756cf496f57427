"""The Mermaid picture of `inspect --markdown` reads where it is pasted (a GitHub comment, ~800 px wide).

Two layers: a structural check of the Mermaid text that always runs (every classDef sets a text colour, no
edge from a node to the box it sits in, rows of bounded width, unique labels), and a real rendering with
Mermaid in headless chromium (tests/mermaid/render.mjs) that runs when node, chromium and the npm packages
are installed (tests/mermaid/install.sh) and otherwise skips saying what is missing.

`python tests/test_mermaid_render.py [PNG_DIR]` prints the measured sizes (benchmarks/mermaid_widths.md
keeps a copy) and, given PNG_DIR, writes a screenshot per diagram and theme.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from conftest import FIXTURES  # noqa: E402 (conftest's folder is on sys.path only after the insert above)

from gputopo import markdown  # noqa: E402

MERMAID_DIR = HERE / "mermaid"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
PAGE = 800            # a GitHub comment's width, px
SLACK = 1.10          # a diagram up to 880 px is shown scaled to 91 %: still readable
MAX_ROW = 4           # most GPUs side by side in one row of the Mermaid text


def _report(args: list[str]) -> dict:
    """`inspect --json` of `args`; a synthetic paste (SYNTHETIC) goes in on stdin: no file is left behind."""
    from click.testing import CliRunner

    from gputopo.cli import cli
    paste = synthetic(*SYNTHETIC[args[1]]) if args[0] == "--synthetic" else None
    r = CliRunner().invoke(cli, ["inspect", "--json", *(["-f", "-"] if paste else args)], input=paste)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


ISLANDS = {"all": lambda i, gpus, numa: 0, "numa": lambda i, gpus, numa: i * numa // gpus,
           "across": lambda i, gpus, numa: i % (gpus // numa) // 2}   # GPUs 0,1,4,5 | 2,3,6,7: across nodes


def synthetic(gpus: int, numa: int, nics_per_gpu: int, nvlink: str | None, islands: str = "all") -> str:
    """A `topo -m` paste no fixture has: `gpus` GPUs over `numa` NUMA nodes, PIX pairs (or NVLink within
    ISLANDS[islands]), `nics_per_gpu` NICs PIX to each GPU (B200-class boards have 2), NODE within a node,
    SYS across."""
    island = ISLANDS[islands]
    names = [f"GPU{i}" for i in range(gpus)]
    nics = [f"NIC{i}" for i in range(gpus * nics_per_gpu)]
    node = {n: i * numa // gpus for i, n in enumerate(names)} | {n: i * numa // len(nics) for i, n in enumerate(nics)}
    near = {n: names[i // nics_per_gpu] for i, n in enumerate(nics)} | {n: n for n in names}

    def cell(a, b):
        if a == b:
            return " X "
        if nvlink and a in names and b in names and island(int(a[3:]), gpus, numa) == island(int(b[3:]), gpus, numa):
            return nvlink
        if near[a] == near[b] or (a in names and b in names and int(a[3:]) // 2 == int(b[3:]) // 2):
            return "PIX"
        return "NODE" if node[a] == node[b] else "SYS"
    labels = names + nics
    rows = ["\t" + "\t".join(labels + ["CPU Affinity", "NUMA Affinity"])]
    for a in labels:
        extra = [f"{node[a] * 16}-{node[a] * 16 + 15}", str(node[a])] if a in names else []
        rows.append("\t".join([a] + [cell(a, b) for b in labels] + extra))
    return "\n".join(rows + ["", "NIC Legend:", ""] + [f"  {n}: mlx5_{i}" for i, n in enumerate(nics)]) + "\n"


SYNTHETIC = {"synthetic:8gpu-nv18-16nic-2numa": (8, 2, 2, "NV18"), "synthetic:16gpu-pix-4numa": (16, 4, 0, None),
             "synthetic:4gpu-pix-1nic-each": (4, 1, 1, None),
             "synthetic:8gpu-nv12-island-per-numa": (8, 2, 0, "NV12", "numa"),
             "synthetic:8gpu-nv12-islands-across-numa": (8, 2, 0, "NV12", "across")}


def cases() -> dict[str, list[str]]:
    """Every bundled example and every readable `topo -m` fixture, selections (highlighted GPUs), and
    synthetic pastes shaped like no fixture (many NICs, many NUMA nodes)."""
    from gputopo.sources import examples as _examples
    out = {f"example:{k}": ["--example", k] for k in sorted(_examples()) if not k.startswith("_")}
    for p in sorted((FIXTURES / "topo").glob("*.txt")):
        if (p.with_suffix(".expected.json")).exists():
            out[p.stem] = ["-f", str(p)]
    out["example:dgx-a100 --best 4"] = ["--example", "dgx-a100", "--best", "4"]
    out["example:pcie8-dual-socket --gpu-ids 0,1"] = ["--example", "pcie8-dual-socket", "--gpu-ids", "0,1"]
    for name in SYNTHETIC:
        out[name] = ["--synthetic", name]
    return out


def diagrams() -> dict[str, str]:
    return {name: markdown.mermaid(_report(args)) for name, args in cases().items()}


# ---------------------------------------------------------------- structure (always runs)

NODE = re.compile(r'^\s*(n_\w+)(\["|\(\["|\{\{"|\[\["|\[\(")(.*?)("\]|"\]\)|"\}\}|"\]\]|"\)\])\s*$')
SUB = re.compile(r'^\s*subgraph (n_\w+)\["(.*)"\]\s*$')
EDGE = re.compile(r'^\s*(n_\w+) (===|---|-\.-|~~~)(?:\|"(.*?)"\|)? (n_\w+)\s*$')


def structure(code: str) -> dict:
    """Nodes, boxes (with what is inside), edges and classDefs read back from the Mermaid text."""
    nodes, boxes, edges, classdefs, stack, junctions = {}, {}, [], {}, [], set()
    for line in code.splitlines():
        if m := SUB.match(line):
            boxes[m.group(1)] = {"title": m.group(2), "inside": set()}
            stack.append(m.group(1))
        elif line.strip() == "end":
            stack.pop()
        elif m := NODE.match(line):
            nodes[m.group(1)] = m.group(3)
            if m.group(2) == "{{\"":
                junctions.add(m.group(1))
            for b in stack:
                boxes[b]["inside"].add(m.group(1))
        elif m := EDGE.match(line):
            edges.append((m.group(1), m.group(2), m.group(3), m.group(4)))
        elif line.strip().startswith("classDef "):
            _, name, style = line.split(None, 2)
            classdefs[name] = dict(kv.split(":", 1) for kv in style.split(","))
    return {"nodes": nodes, "boxes": boxes, "edges": edges, "classdefs": classdefs, "junctions": junctions}


def _ranks(s: dict) -> dict[str, int]:
    """Rank of every node as dagre would give it (longest path over drawn and invisible edges, in order)."""
    rank = {n: 0 for n in s["nodes"]}
    for _ in range(len(rank)):
        changed = False
        for a, _arrow, _label, b in s["edges"]:
            if a in rank and b in rank and rank[b] < rank[a] + 1:
                rank[b], changed = rank[a] + 1, True
        if not changed:
            break
    return rank


@pytest.mark.parametrize("name", sorted(cases()))
def test_mermaid_structure(name):
    data = _report(cases()[name])
    code = markdown.mermaid(data)
    s = structure(code)
    assert s["nodes"], code
    for cls, style in s["classdefs"].items():  # text colour set with the fill: dark mode keeps contrast
        assert {"fill", "color", "stroke"} <= set(style), (cls, style)
    for a, _arrow, _label, b in s["edges"]:     # a node's box already says it is in it
        for n, box in ((a, b), (b, a)):
            assert not (box in s["boxes"] and n in s["boxes"][box]["inside"]), (a, b)
    # Names are unique (a junction's label is a class: PIX twice is two switches); every GPU and NIC once.
    texts = [t for n, t in s["nodes"].items() if n not in s["junctions"]] + [b["title"] for b in s["boxes"].values()]
    assert len(texts) == len(set(texts)), [t for t in texts if texts.count(t) > 1]
    words = [w for t in texts for w in re.split(r"<br/>|[ ,()]+", t)]
    for who in [g["name"] for g in data["gpus"]] + [n["name"] for n in data["nics"]]:
        assert words.count(who) == 1 or who.startswith("GPU") and words.count(who) >= 1, (who, texts)
    # Width: at most MAX_ROW nodes side by side in any row (GPUs, NIC nodes, junctions, hubs alike).
    per_rank: dict[int, list[str]] = {}
    for n, r in _ranks(s).items():
        per_rank.setdefault(r, []).append(s["nodes"][n])
    assert max(len(row) for row in per_rank.values()) <= MAX_ROW, per_rank


# ---------------------------------------------------------------- real Mermaid (when installed)

def missing() -> str | None:
    """Why Mermaid cannot run here, or None."""
    if not shutil.which("node"):
        return "node not on PATH"
    if not Path(CHROMIUM).exists():
        return f"no chromium at {CHROMIUM} (apt-get install -y chromium)"
    for pkg in ("mermaid", "puppeteer-core"):
        if not (MERMAID_DIR / "node_modules" / pkg / "package.json").exists():
            return f"npm package {pkg} not installed: run tests/mermaid/install.sh"
    return None


def render(codes: dict[str, str], png_dir: str | None = None) -> dict:
    """{"mermaid": version, "results": [...]} from tests/mermaid/render.mjs."""
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "in.json", Path(tmp) / "out.json"
        src.write_text(json.dumps([{"name": k, "code": v} for k, v in codes.items()]))
        cmd = ["node", str(MERMAID_DIR / "render.mjs"), str(src), str(out)] + ([png_dir] if png_dir else [])
        r = subprocess.run(cmd,
                           capture_output=True, text=True, timeout=600, check=False)
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(out.read_text())


@pytest.mark.slow
def test_real_mermaid_renders_every_diagram_readably():
    why = missing()
    if why:
        pytest.skip(why)
    got = render(diagrams())
    bad = []
    for r in got["results"]:
        where = f"{r['name']} ({r['theme']}, mermaid {got['mermaid']})"
        if r.get("error"):
            bad.append(f"{where}: {r['error']}")
            continue
        if r["width"] > PAGE * SLACK:
            bad.append(f"{where}: {r['width']} px wide")
        if r["worst_contrast"]["ratio"] < 4.5:
            bad.append(f"{where}: text contrast {r['worst_contrast']}")
        if r["clashes"] or r["hidden_labels"]:
            bad.append(f"{where}: labels overlap {r['clashes']}, {r['hidden_labels']} hidden")
    assert not bad, "\n".join(bad)


if __name__ == "__main__":
    why = missing()
    if why:
        sys.exit(why)
    got = render(diagrams(), sys.argv[1] if len(sys.argv) > 1 else None)
    print(f"Mermaid {got['mermaid']}, page {PAGE} px")
    print("| diagram | theme | width | height | worst contrast | label clashes |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in got["results"]:
        if r.get("error"):
            print(f"| {r['name']} | {r['theme']} | error: {r['error'][:80]} | | | |")
        else:
            print(f"| {r['name']} | {r['theme']} | {r['width']} | {r['height']} | {r['worst_contrast']['ratio']}"
                  f" | {len(r['clashes'])} |")
