"""inspect --fleet: node reports compared (gputopo.fleet), read from files (gputopo.gather.from_files), and the
refusals. The reports are real `gputopo inspect --json` output, made here under a fake NVML, one machine per
node: the live gathering through Slurm and pdsh/ssh is in test_engines.py."""
import copy
import json

import fake_nvml as fm
import pytest
from click.testing import CliRunner
from conftest import FIXTURES

from gputopo import fleet, render
from gputopo.cli import cli


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def scenario(kind: str) -> dict:
    """A 4x H100 node as NVML shows it; `kind` makes it odd in one way."""
    s = fm.h100_nvswitch(4)
    if kind == "x8":
        s["gpus"][3]["pcie"] = (5, 5, 8, 16)      # GPU3's link trained at x8
    elif kind == "driver":
        s["driver"] = ("535.129.03", 12020)
    elif kind == "no-nvlink":
        for i in (2, 3):
            s["gpus"][i]["nvlinks"] = []          # GPU2 and GPU3 lost their NVLinks: PCIe between them and the rest
    return s


def node_reports(fake_nvml, folder, kinds: dict) -> dict:
    """{node: report}: `gputopo inspect --json` of each node's machine, also written to folder/NODE.json."""
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for node, kind in kinds.items():
        fake_nvml(scenario(kind))
        r = run("inspect", "--json")
        assert r.exit_code == 0, r.output
        (folder / f"{node}.json").write_text(r.stdout)
        out[node] = json.loads(r.stdout)
    return out


FOUR = {"node1": "norm", "node2": "norm", "node3": "x8", "node4": "driver"}


def test_the_odd_nodes_are_named_with_what_differs(fake_nvml, tmp_path):
    reports = node_reports(fake_nvml, tmp_path, {**FOUR, "node5": "no-nvlink"})
    f = fleet.compare(reports)
    assert [g["nodes"] for g in f["groups"]] == [["node1", "node2"], ["node3"], ["node4"], ["node5"]]
    assert f["norm_by"] == "majority" and f["slows"]
    said = [fleet.sentence(o) for o in f["odd"]]
    assert "node3: GPU3 PCIe Gen5 x8 (max x16), the others Gen5 x16" in said
    assert "node4: driver 535.129.03, the others 550.54.15" in said and "node4: cuda 12.2, the others 12.4" in said
    assert "node5: GPU2-GPU3 SYS where the others have NV18" not in said   # both lost theirs: the pair is PCIe
    assert any(s.startswith("node5: GPU0-GPU2 ") and s.endswith("where the others have NV18") for s in said), said
    assert not any(o["node"] in ("node1", "node2") for o in f["odd"])
    drain = [line for line in f["recommendation"] if line.startswith("scontrol update nodename=node3")]
    assert drain == ["scontrol update nodename=node3 state=drain reason='gputopo: GPU3 PCIe Gen5 x8 (max x16)'"]


def test_alike_nodes_exit_0_and_say_so(fake_nvml, tmp_path):
    node_reports(fake_nvml, tmp_path, {"a": "norm", "b": "norm", "c": "norm"})
    r = run("inspect", "--fleet", *[x for n in "abc" for x in ("-f", tmp_path / f"{n}.json")])
    assert r.exit_code == 0, r.output
    assert "Fleet: 3 of 3 node(s) answered" in r.output and "all 3 node(s) alike in everything compared" in r.output


def test_from_file_text_json_and_markdown(fake_nvml, tmp_path):
    node_reports(fake_nvml, tmp_path, FOUR)
    files = [x for n in FOUR for x in ("-f", tmp_path / f"{n}.json")]
    r = run("inspect", "--fleet", *files, "--json")
    assert r.exit_code == 1, r.output   # a node differs in a way that slows or breaks a job
    data = json.loads(r.stdout)["fleet"]
    assert set(data) >= {"nodes", "groups", "odd", "unreachable", "health", "recommendation", "slows"}
    assert data["nodes"] == list(FOUR) and data["unreachable"] == []
    assert {"node": "node4", "what": "driver", "norm": "550.54.15", "value": "535.129.03"} in data["odd"]
    text = run("inspect", "--fleet", *files).output
    assert "What differs from the norm:\n  node3: GPU3 PCIe Gen5 x8 (max x16), the others Gen5 x16" in text
    md = run("inspect", "--fleet", *files, "--markdown").output
    assert "| norm | node1, node2 | 4 x NVIDIA H100 80GB HBM3 | 550.54.15 | 12.4 |" in md
    assert "- `scontrol update nodename=node4 state=drain" in md


def test_a_variable_set_on_one_node_only_differs(fake_nvml, tmp_path, monkeypatch):
    reports = node_reports(fake_nvml, tmp_path, {"a": "norm", "b": "norm"})
    odd = copy.deepcopy(reports["a"])
    odd["env"] = {**odd["env"], "NCCL_IB_DISABLE": "1"}
    f = fleet.compare({**reports, "c": odd})
    assert f["odd"] == [{"node": "c", "what": "env NCCL_IB_DISABLE", "norm": "unset", "value": "1"}] and f["slows"]


def test_a_paste_is_a_node_and_unknowns_are_not_differences(fake_nvml, tmp_path):
    """A pasted topo -m names no driver: that is not a difference that slows anything."""
    paste = tmp_path / "gpu7.txt"
    paste.write_bytes((FIXTURES / "topo" / "dgx_a100_nv12_mlx5_old_names_trailing_cmds.txt").read_bytes())
    (tmp_path / "gpu8.txt").write_bytes(paste.read_bytes())
    r = run("inspect", "--fleet", "-f", paste, "-f", tmp_path / "gpu8.txt", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["fleet"]["nodes"] == ["gpu7", "gpu8"]


def test_unreachable_nodes_are_named_and_fail_the_check(fake_nvml, tmp_path):
    reports = node_reports(fake_nvml, tmp_path, {"a": "norm", "b": "norm"})
    f = fleet.compare(reports, {"c": "no answer within 5 s"})
    assert f["unreachable"] == [{"node": "c", "reason": "no answer within 5 s"}] and f["slows"]
    assert f["nodes"] == ["a", "b", "c"]
    assert any("no report from c" in line for line in f["recommendation"])


@pytest.mark.parametrize("args,msg", [
    (["--hosts", "h.txt"], "--hosts is for --fleet"),
    (["--fleet"], "--fleet needs nodes: run it inside a Slurm allocation"),
    (["--fleet", "--hosts", "h.txt", "--slurm-nodes", "n[1-2]"], "--fleet takes its nodes from one place"),
    (["--fleet", "--partition", "p", "--hosts", "h.txt"], "--partition is for --slurm-nodes"),
    (["--fleet", "--gpu-ids", "0", "--hosts", "h.txt"], "--fleet compares whole nodes: --gpu-ids"),
    (["--fleet", "--hosts", "missing.txt"], "--hosts missing.txt:"),
    (["--fleet", "-f", "a.json", "--timeout", "5"], "--timeout is for nodes asked live"),
])
def test_fleet_refusals(args, msg, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    (tmp_path / "h.txt").write_text("node1 slots=8\n")
    (tmp_path / "a.json").write_text("{}")
    r = run("inspect", *args)
    assert r.exit_code == 2 and r.output.startswith(f"Error: {msg}"), r.output
    assert len(r.output.strip().splitlines()) == 1


def test_hostfile_formats(tmp_path):
    from gputopo import gather
    p = tmp_path / "hostfile"
    p.write_text("# the cluster\nnode1 slots=8\n\nnode2 slots=8  # spare\nnode3\n")
    assert gather.hostfile(str(p)) == ["node1", "node2", "node3"]
    p.write_text("node1\nnode1\n")
    with pytest.raises(Exception, match="node1 listed twice"):
        gather.hostfile(str(p))


def test_two_nodes_without_a_majority_break_the_tie_by_health(fake_nvml, tmp_path):
    """node17 (GPU3 at x8, a health warning) against a healthy node: the healthy one is the norm, whatever the
    order; two nodes that differ with nothing to tell them apart get no drain line at all."""
    reports = node_reports(fake_nvml, tmp_path, {"node17": "x8", "node01": "norm", "node04": "driver"})
    f = fleet.compare({"node17": reports["node17"], "node01": reports["node01"]})
    assert f["norm_by"] == "fewer health findings (no majority)" and f["groups"][0]["nodes"] == ["node01"]
    assert [o["node"] for o in f["odd"]] == ["node17"]
    assert any(line.startswith("scontrol update nodename=node17 ") for line in f["recommendation"])
    f = fleet.compare({"node04": reports["node04"], "node01": reports["node01"]})
    assert f["norm_by"] == "first node (no majority)" and f["slows"]
    assert not any(line.startswith("scontrol") for line in f["recommendation"])
    assert f["recommendation"][0].startswith("the nodes differ (node04, node01) and none is the majority")


def test_a_node_without_a_gpu_is_one_fact_with_its_reason(fake_nvml, tmp_path):
    reports = node_reports(fake_nvml, tmp_path, {"a": "norm", "b": "norm"})
    fake_nvml(init_error=fm.NVMLError_LibraryNotFound)
    blind = json.loads(run("inspect", "--json").stdout)
    f = fleet.compare({**reports, "c": blind})
    gpus = [o for o in f["odd"] if o["what"] == "GPUs"]
    assert len(gpus) == 1 and gpus[0]["value"].startswith("none visible (no NVML library")
    assert not any(o["what"].startswith("GPU0") for o in f["odd"])   # not one line per missing GPU fact
    alone = fleet.compare({"c": blind, "d": blind})
    assert alone["slows"] and alone["recommendation"][0].startswith("no node sees a GPU")


def test_facts_one_report_does_not_carry_are_not_differences(fake_nvml, tmp_path):
    """A report without versions against full ones: said, but no exit 1 and no drain line."""
    reports = node_reports(fake_nvml, tmp_path, {"a": "norm", "b": "norm"})
    bare = copy.deepcopy(reports["a"])
    bare.pop("versions")
    bare["driver"] = None
    f = fleet.compare({**reports, "c": bare})
    assert f["odd"] and not f["slows"]
    assert "c: driver not in its report (the others: 550.54.15)" in [fleet.sentence(o) for o in f["odd"]]
    assert not any(line.startswith("scontrol") for line in f["recommendation"])


def test_node_names_keep_their_dots_and_bad_reports_are_refused(fake_nvml, tmp_path):
    node_reports(fake_nvml, tmp_path, {"10.0.0.5": "norm", "10.0.0.6": "norm"})
    r = run("inspect", "--fleet", "-f", tmp_path / "10.0.0.5.json", "-f", tmp_path / "10.0.0.6.json", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["fleet"]["nodes"] == ["10.0.0.5", "10.0.0.6"]
    for bad, why in (({"gpus": 5}, "the report has no 'schema_version'"),
                     ({"schema_version": 1, "gpus": [], "links": [{"a": "GPU0"}]}, "links[0] has no 'b'"),
                     ({"schema_version": 1, "gpus": [{"name": 1}]}, "gpus[0].name is a whole number, not a text")):
        (tmp_path / "x.json").write_text(json.dumps(bad))
        r = run("inspect", "--fleet", "-f", tmp_path / "x.json")
        assert r.exit_code == 2 and r.output.strip().endswith(f"report this gputopo reads: {why}"), r.output


def test_remote_command_is_a_whole_shell_line():
    from gputopo import gather
    cmd = gather.remote_command("cd /shared && .venv/bin/gputopo inspect --json | cat", 7)
    assert cmd == "timeout -k 2 7 bash -c 'cd /shared && .venv/bin/gputopo inspect --json | cat'"


def test_many_hosts_run_a_bounded_number_at_once(monkeypatch):
    """One ssh per host, but never more than MAX_AT_ONCE at a time (each holds pipes); all answered."""
    import threading

    from gputopo import gather
    monkeypatch.setattr(gather, "MAX_AT_ONCE", 3)
    live, peak, lock = [0], [0], threading.Lock()
    real = gather.subprocess.Popen

    class Counted(real):
        def __init__(self, *a, **k):
            with lock:
                live[0] += 1
                peak[0] = max(peak[0], live[0])
            super().__init__(*a, **k)

        def wait(self, *a, **k):
            try:
                return super().wait(*a, **k)
            finally:
                with lock:
                    live[0] -= 1
    monkeypatch.setattr(gather.subprocess, "Popen", Counted)
    out = gather.run({f"h{i}": ["sh", "-c", f"sleep 0.2; echo {i}"] for i in range(10)}, 30)
    assert {k: v[1].strip() for k, v in out.items()} == {f"h{i}": str(i) for i in range(10)}
    assert peak[0] == 3


# --- issue 33: nobody is told to drain a healthy node, and every odd report is one line -------------------------

NV18_4 = """        GPU0    GPU1    GPU2    GPU3    CPU Affinity    NUMA Affinity   GPU NUMA ID
GPU0     X      NV18    NV18    NV18    0-23    0               N/A
GPU1    NV18     X      NV18    NV18    0-23    0               N/A
GPU2    NV18    NV18     X      NV18    24-47   1               N/A
GPU3    NV18    NV18    NV18     X      24-47   1               N/A

Legend:

  X    = Self
  NV#  = Connection traversing a bonded set of # NVLinks
"""
LISTED = "".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i}abc)\n" for i in range(4))
FLEET = FIXTURES / "fleet"


def fleet_of(tmp_path, paste: str, *more, name="node03.txt"):
    (tmp_path / name).write_text(paste)
    return run("inspect", "--fleet", "-f", FLEET / "node01.json", "-f", FLEET / "node02.json", "-f",
               tmp_path / name, *more)


def test_a_paste_among_reports_is_not_drained(fake_nvml, tmp_path):
    """The same 4x H100 NV18 machine as a `topo -m` paste was "4 x unknown model" and got a drain line. Its
    model is "not reported"; `nvidia-smi -L` lines in the file, or --gpu-model, name it."""
    r = fleet_of(tmp_path, NV18_4)
    assert r.exit_code == 0 and "scontrol" not in r.output, r.output
    assert "node03: not in its report: GPU model, driver, cuda, torch," in r.output
    for paste, more in ((NV18_4 + "\n$ nvidia-smi -L\n" + LISTED, []), (LISTED + "\n" + NV18_4, []),
                        (NV18_4, ["--gpu-model", "H100"])):
        r = fleet_of(tmp_path, paste, *more, "--json")
        odd = json.loads(r.stdout)["fleet"]["odd"]
        assert r.exit_code == 0 and not [o for o in odd if o["what"] in ("GPUs", "GPU model")], odd
    r = fleet_of(tmp_path, NV18_4, "--gpu-model", "A100-80GB")
    assert r.exit_code == 1 and "node03: GPUs 4 x A100-80GB, the others 4 x NVIDIA H100 80GB HBM3" in r.output


@pytest.mark.parametrize("args,msg", [
    (["--fleet", "-f", FLEET / "node01.json", "--gpu-model", "H100"], "--gpu-model names the GPUs of a pasted node;"),
    (["--fleet", "--hosts", "h.txt", "--gpu-model", "H100"], "--gpu-model names the GPUs of a pasted node (--from"),
])
def test_gpu_model_is_for_pasted_nodes(args, msg, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "h.txt").write_text("node1\n")
    r = run("inspect", *args)
    assert r.exit_code == 2 and r.output.startswith(f"Error: {msg}") and r.output.count("\n") == 1, r.output


def test_logging_variables_are_shown_not_judged(fake_nvml, tmp_path):
    """NCCL_DEBUG=INFO or a CUDA_CACHE_PATH changes what is logged or cached, not the job: said, exit 0."""
    reports = node_reports(fake_nvml, tmp_path, {"a": "norm", "b": "norm"})
    chatty = copy.deepcopy(reports["a"])
    chatty["env"] = {**chatty["env"], "NCCL_DEBUG": "INFO", "CUDA_CACHE_PATH": "/scratch/cache"}
    f = fleet.compare({**reports, "c": chatty})
    assert not f["slows"] and not any(line.startswith("scontrol") for line in f["recommendation"])
    assert "c: env NCCL_DEBUG INFO, the others unset (logging or caching only: shown, not judged)" in fleet.said(f)
    chatty["env"]["NCCL_IB_HCA"] = "mlx5_4"   # this one changes the path NCCL takes
    assert fleet.compare({**reports, "c": chatty})["slows"]


def test_two_hundred_nodes_read_in_short_lines(fake_nvml, tmp_path):
    """At 200 nodes the table's lines were 1865 characters and `differs` counted 18 facts against 4 lines: node
    lists are Slurm host lists, nodes odd alike share a line and a drain command, `differs` counts the facts."""
    reports = node_reports(fake_nvml, tmp_path, {"x": "norm", "old": "driver", "slow": "x8"})
    nodes = {f"gpu{i:03d}": reports["old" if 100 <= i < 150 else "slow" if i == 170 else "x"] for i in range(200)}
    f = fleet.compare(nodes)
    text = render.fleet(f)
    assert max(map(len, text.splitlines())) < 200, max(text.splitlines(), key=len)
    assert "gpu[000-099,150-169,171-199]" in text
    assert "gpu[100-149]: driver 535.129.03, the others 550.54.15" in text
    drains = [line for line in f["recommendation"] if line.startswith("scontrol")]
    assert drains[0].startswith("scontrol update nodename='gpu[100-149]' state=drain") and len(drains) == 2
    header, rows = render.fleet_rows(f)
    listed = {row[1]: sum(1 for o in f["odd"] if o["node"] == fleet_nodes(row[1])[0]) for row in rows[1:]}
    assert all(row[-1] == str(listed[row[1]]) for row in rows[1:]) and listed["gpu[100-149]"] == 2


def fleet_nodes(hostlist: str) -> list[str]:
    """The first name a host list like gpu[100-149] stands for."""
    prefix, _, rest = hostlist.partition("[")
    return [prefix + rest.split("-")[0].split(",")[0]] if rest else [hostlist]


def test_hostlist_compresses_as_slurm_writes_it():
    assert fleet.hostlist(["node01", "node02", "node03", "node07", "gpu7", "login"]) == "node[01-03,07],gpu7,login"
    assert fleet.hostlist(["n1", "n2", "n10"]) == "n[1-2,10]" and fleet.hostlist(["a"]) == "a"
    assert fleet.named(["node04", "node01"]) == "node04, node01"   # a few keep their order, for a reader


BAD = {"schema_version 2": (lambda d: d.update(schema_version=2), "schema_version 2: this gputopo reads 1"),
       "schema_version '1'": (lambda d: d.update(schema_version="1"), "schema_version is a text, not a whole"),
       "no schema_version": (lambda d: d.pop("schema_version"), "the report has no 'schema_version'"),
       "a null link": (lambda d: d["links"].append(None), "links[6] is null, not an object"),
       "versions a string": (lambda d: d.update(versions="550"), "versions is a text, not an object"),
       "a width in words": (lambda d: d["gpus"][0].update(pcie_width="x16"), "gpus[0].pcie_width is a text"),
       "a null finding": (lambda d: d.update(findings=[None]), "findings[0] is null, not an object")}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_report_that_is_not_one_is_one_line_exit_2(case, tmp_path):
    """Accepted silently, or a traceback ending in exit 1 (which --fleet uses for "a node differs")."""
    data = json.loads((FLEET / "node01.json").read_text())
    BAD[case][0](data)
    (tmp_path / "bad.json").write_text(json.dumps(data))
    r = run("inspect", "--fleet", "-f", FLEET / "node02.json", "-f", tmp_path / "bad.json")
    assert r.exit_code == 2 and r.output.count("\n") == 1, r.output
    assert f"report this gputopo reads: {BAD[case][1]}" in r.output
    (tmp_path / "nan.json").write_text(json.dumps(data).replace('"driver": "550.54.15"', '"driver": NaN'))
    r = run("inspect", "--fleet", "-f", tmp_path / "nan.json")
    assert r.exit_code == 2 and "not valid JSON (NaN is not a JSON number)" in r.output


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16"])
def test_reports_saved_by_windows_and_stdin_are_read(encoding, tmp_path):
    """A BOM or UTF-16 (PowerShell's `>`) was "not nvidia-smi output"; `-f -` was "No such file"."""
    (tmp_path / "node01.json").write_bytes((FLEET / "node01.json").read_text().encode(encoding))
    r = run("inspect", "--fleet", "-f", tmp_path / "node01.json", "-f", FLEET / "node02.json", "--json")
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["inspect", "--fleet", "-f", "-", "-f", str(FLEET / "node02.json"), "--json"],
                           input=(FLEET / "node01.json").read_text())
    assert r.exit_code == 0 and json.loads(r.stdout)["fleet"]["nodes"] == ["stdin", "node02"], r.output


def test_a_binary_hostfile_is_one_line(tmp_path):
    (tmp_path / "hosts").write_bytes(bytes(range(256)) * 4)
    r = run("inspect", "--fleet", "--hosts", tmp_path / "hosts")
    assert r.exit_code == 2 and r.output == (f"Error: --hosts {tmp_path / 'hosts'}: binary file, not a hostfile (one"
                                             " host per line)\n")


# --- issue 42 review: a node with one GPU of another model ---------------------------------------------------------

@pytest.mark.parametrize("model", ["NVIDIA L40S", "NVIDIA H200", "NVIDIA H800", "NVIDIA H100 80GB HBM3 X", "REDM",
                                   "NVIDIA H100 PCIe", "NVIDIA A100-SXM4-80GB"])
def test_a_node_with_one_gpu_of_another_model_is_odd(tmp_path, model):
    """gpus[3] of another model passed with exit 0 ("all 3 node(s) alike") unless its name sorted first: the
    joined list "NVIDIA H100 80GB HBM3, NVIDIA L40S" was looked up as one name, and the catalog found the H100."""
    base = json.loads((FLEET / "node01.json").read_text())
    odd = copy.deepcopy(base)
    odd["gpus"][3]["model"] = model
    for name, report in (("ok1", base), ("ok2", base), ("mixed", odd)):
        (tmp_path / f"{name}.json").write_text(json.dumps(report))
    r = run("inspect", "--fleet", *[x for n in ("ok1", "ok2", "mixed") for x in ("-f", tmp_path / f"{n}.json")])
    assert r.exit_code == 1, r.output
    mix = ", ".join(sorted(["3 x NVIDIA H100 80GB HBM3", f"1 x {model}"], key=lambda p: p.split(" x ")[1]))
    assert f"mixed: GPUs {mix}, the others 4 x NVIDIA H100 80GB HBM3" in r.output
    assert "scontrol update nodename=mixed state=drain reason='gputopo: GPUs " in r.output
    assert "alike in everything compared" not in r.output


def test_the_same_mix_however_spelt_is_alike():
    """A paste's --gpu-model names the catalog's model; an older driver's name lacks "NVIDIA"; the order of a mix
    is not a difference."""
    h100 = "NVIDIA H100 80GB HBM3"
    assert fleet._same_mix(((4, h100),), ((4, "H100"),)) and fleet._same_mix(((4, h100),), ((4, "H100-80GB"),))
    assert fleet._same_mix(((2, "A100-SXM4-80GB"),), ((2, "NVIDIA A100-SXM4-80GB"),))
    assert fleet._same_mix(((3, h100), (1, "NVIDIA L40S")), ((1, "L40S"), (3, "H100")))
    assert not fleet._same_mix(((4, h100),), ((3, h100), (1, "NVIDIA L40S")))
    assert not fleet._same_mix(((3, h100), (1, "NVIDIA L40S")), ((2, h100), (2, "NVIDIA L40S")))
    assert not fleet._same_mix(((4, "H100"),), ((4, "NVIDIA H200"),))
    assert not fleet._same_mix(((4, "A100-40GB"),), ((4, "NVIDIA A100-SXM4-80GB"),))
