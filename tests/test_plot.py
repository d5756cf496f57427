"""inspect --plot: a valid PNG/SVG for every bundled example, labels that do not overlap, refusals."""
import itertools

import pytest
from click.testing import CliRunner

from gputopo.cli import cli
from gputopo.sources import examples as _examples

EXAMPLES = sorted(k for k in _examples() if not k.startswith("_"))
pytest.importorskip("matplotlib", reason="--plot needs matplotlib")


def run(*args):
    return CliRunner().invoke(cli, list(args))


def report(*args):
    import json
    return json.loads(run("inspect", "--json", *args).output)


def overlaps(fig):
    """Pairs of texts whose boxes overlap once drawn (node labels, edge labels, titles, legend)."""
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    texts = [t for t in fig.findobj(lambda a: a.__class__.__name__ == "Text")
             if t.get_text().strip() and t.get_visible()]
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    return [(a, b) for (a, ba), (b, bb) in itertools.combinations(boxes, 2) if ba.overlaps(bb)]


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_example_draws_without_overlapping_labels(name):
    from gputopo import plot
    assert overlaps(plot.figure(report("--example", name))) == []


def test_many_nics_and_selection_without_overlaps():
    from conftest import FIXTURES

    from gputopo import plot
    for args in (["-f", str(FIXTURES / "topo" / "h200x8_nv18_10nic.txt"), "--best", "4"],
                 ["--example", "dgx-a100", "--gpu-ids", "0,3"],
                 ["-f", str(FIXTURES / "topo" / "gpu5_mixed_sys_phb_node_dual_numa.txt")]):
        assert overlaps(plot.figure(report(*args))) == []


@pytest.mark.parametrize("name", EXAMPLES)
def test_png_and_svg_files(tmp_path, name):
    png, svg = tmp_path / "t.png", tmp_path / "t.svg"
    r = run("inspect", "--example", name, "--plot", str(png))
    assert r.exit_code == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert run("inspect", "--example", name, "--plot", str(svg), "--json").exit_code == 0
    assert b"<svg" in svg.read_bytes()[:400]


def test_plot_styles_nvlink_thick_and_sys_dashed():
    from gputopo.plot import style
    assert style("NV12")["lw"] > style("NV2")["lw"] > style("PIX")["lw"] > style("PHB")["lw"] > style("SYS")["lw"]
    assert style("SYS")["ls"] != "-" and style("NODE")["ls"] != "-" and style("PIX")["ls"] == "-"


def test_plot_output_checked_before_work(tmp_path):
    out = tmp_path / "t.png"
    out.write_bytes(b"keep")
    r = run("inspect", "--example", "h100x8", "--plot", str(out))
    assert r.exit_code == 2 and r.output.strip() == f"Error: {out} exists; pass --force to overwrite it"
    assert out.read_bytes() == b"keep"
    assert run("inspect", "--example", "h100x8", "--plot", str(out), "--force").exit_code == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    r = run("inspect", "--example", "h100x8", "--plot", str(tmp_path / "t.pdf"))
    assert r.output.strip() == f"Error: --plot {tmp_path / 't.pdf'}: give a .png or .svg file name"
    r = run("inspect", "--example", "h100x8", "--plot", str(tmp_path / "nope" / "t.png"))
    assert r.exit_code == 2 and "does not exist" in r.output


def test_without_matplotlib_one_line(monkeypatch, tmp_path):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    r = run("inspect", "--example", "h100x8", "--plot", str(tmp_path / "t.png"))
    assert r.exit_code == 2 and r.output == "Error: --plot needs matplotlib: pip install matplotlib\n"
    assert run("inspect", "--example", "h100x8", "--markdown").exit_code == 0


def test_live_nvml_plot_and_markdown_show_bandwidths(fake_nvml, tmp_path):
    """Live (NVML twin): NVLink per-direction bandwidth on the edge, PCIe generation x width on each GPU."""
    from fake_nvml import rtx3090_pair
    fake_nvml(rtx3090_pair())
    md = run("inspect", "--markdown").output
    assert 'n_GPU0 ===|"NV4 · 56.25 GB/s"| n_GPU1' in md and "PCIe gen4 x16 · 31.5 GB/s" in md
    out = tmp_path / "live.png"
    assert run("inspect", "--plot", str(out)).exit_code == 0 and out.read_bytes()[:4] == b"\x89PNG"
    from gputopo import plot
    fig = plot.figure(report())
    texts = [t.get_text() for t in fig.findobj(lambda a: a.__class__.__name__ == "Text")]
    assert "NV4 · 56.25 GB/s" in texts and overlaps(fig) == []


def b200_like_text() -> str:
    """An 8-GPU NV18 board with 16 NICs (two PIX per GPU), two NUMA nodes: the B200-class layout."""
    gpus, nics = [f"GPU{i}" for i in range(8)], [f"NIC{i}" for i in range(16)]
    numa = {n: i // 4 for i, n in enumerate(gpus)} | {n: i // 8 for i, n in enumerate(nics)}
    near = {n: f"GPU{i // 2}" for i, n in enumerate(nics)}

    def cell(a, b):
        if a == b:
            return " X "
        if a in gpus and b in gpus:
            return "NV18"
        if near.get(a) == b or near.get(b) == a or (a in nics and b in nics and near[a] == near[b]):
            return "PIX"
        return "NODE" if numa[a] == numa[b] else "SYS"
    labels = gpus + nics
    rows = ["\t" + "\t".join(labels + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])]
    for a in labels:
        extra = [("0-55,112-167" if numa[a] == 0 else "56-111,168-223"), str(numa[a]), "N/A"] if a in gpus else []
        rows.append("\t".join([a] + [cell(a, b) for b in labels] + extra))
    legend = [f"  NIC{i}: mlx5_{i}" for i in range(16)]
    return "\n".join(rows + ["", "NIC Legend:", ""] + legend) + "\n"


def test_eight_gpus_sixteen_nics_readable(tmp_path):
    from gputopo import plot
    path = tmp_path / "b200.txt"
    path.write_text(b200_like_text())
    data = report("-f", str(path), "--gpu-model", "NVIDIA B200", "--best", "4")
    assert len(data["nics"]) == 16 and len(data["gpus"]) == 8
    assert overlaps(plot.figure(data)) == []
    out = tmp_path / "b200.png"
    assert run("inspect", "-f", str(path), "--gpu-model", "NVIDIA B200", "--plot", str(out)).exit_code == 0


def test_bench_plot_png_from_plot_module():
    """bench-nvlink --plot's drawing lives in plot.bench, with the rest of matplotlib."""
    from gputopo import plot
    runs = [{"label": label, "step_times_s": [0.1, 0.12, 0.11], "step_time_s": {"median": 0.11}}
            for label in ("P2P", "no P2P")]
    allreduce = [{"bytes": 2 ** k, "busbw_gbps": k / 10, "p2p": p2p} for k in (20, 24, 28) for p2p in (True, False)]
    data = {"runs": runs, "allreduce": allreduce}
    png = plot.bench(data)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


@pytest.mark.parametrize("half", ["runs", "allreduce"])
def test_bench_plot_draws_only_the_half_that_ran(half, recwarn):
    """--allreduce-only has no step times: one panel, no empty axes, no matplotlib warning (issue 20)."""
    import io

    from PIL import Image

    from gputopo import plot
    runs = [{"label": "p2p", "step_times_s": [0.1, 0.12], "step_time_s": {"median": 0.11}}]
    allreduce = [{"bytes": 2 ** k, "busbw_gbps": k / 10, "p2p": True} for k in (20, 24)]
    data = {"runs": runs if half == "runs" else [], "allreduce": allreduce if half == "allreduce" else []}
    both = Image.open(io.BytesIO(plot.bench({"runs": runs, "allreduce": allreduce})))
    one = Image.open(io.BytesIO(plot.bench(data)))
    assert one.width < 0.6 * both.width and not [w for w in recwarn if "matplotlib" in str(w.filename)]


def test_only_plot_imports_matplotlib():
    """matplotlib is imported in plot.py only, and there inside functions (the CLI must start fast)."""
    import ast
    from pathlib import Path

    import gputopo
    for path in Path(gputopo.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.split(".")[0] == "matplotlib" for n in names):
                assert path.name == "plot.py", path
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        assert not any("matplotlib" in ast.dump(n) for n in top), path
