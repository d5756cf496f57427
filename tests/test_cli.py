"""The command line as a user meets it: exit codes, one-line errors, JSON, speed of import."""
import json
import sys

import pytest
from click.testing import CliRunner
from conftest import FIXTURES

from gputopo.cli import cli

TOPO = FIXTURES / "topo"


def run(*args, input=None):
    return CliRunner().invoke(cli, list(args), input=input)


def test_help_lists_commands_and_every_command_has_help():
    r = run("--help")
    assert r.exit_code == 0 and "inspect" in r.output
    for name, cmd in cli.commands.items():
        assert cmd.help and run(name, "--help").exit_code == 0


def test_no_gpu_prints_host_and_reason(fake_nvml):
    import fake_nvml as fm
    fake_nvml(init_error=fm.NVMLError_LibraryNotFound)
    r = run("inspect")
    assert r.exit_code == 0
    assert "No NVIDIA GPU visible: no NVML library" in r.output and "--from-file" in r.output
    assert "--example" in r.output and "RAM" in r.output
    data = json.loads(run("inspect", "--json").output)
    assert data["gpu_status"] == {"visible": False, "reason": data["gpu_status"]["reason"]}
    assert "NVML" in data["gpu_status"]["reason"] and data["host"]["cpus_logical"] >= 1 and data["gpus"] == []


def test_inspect_file_text():
    r = run("inspect", "--from-file", str(TOPO / "dgx1_v100_hybrid_cube_mesh_mlx5_old_format.txt"),
            "--gpu-model", "Tesla V100-SXM2-16GB")
    assert r.exit_code == 0, r.output
    out = r.output[r.output.index("slowest first"):]
    assert out.index("SYS ") < out.index("NV1 ") < out.index("NV2 ")  # slowest first
    assert "NVLink islands: {GPU0, GPU1, GPU2, GPU3, GPU4, GPU5, GPU6, GPU7}" in out
    assert "Weakest link in use: GPU0-GPU5 SYS" in r.output and "50 GB/s" in out   # the weakest: in the answer
    assert "Recommendation (interconnect): ddp" in r.output.splitlines()[2]   # the answer, first


def test_inspect_json_schema():
    r = run("inspect", "--json", "-f", str(TOPO / "gpu3_nv4_pair_node_2nic_numa1.txt"))
    data = json.loads(r.output)
    assert data["schema_version"] == 1
    assert data["gpus"][0]["name"] == "GPU0" and data["gpus"][0]["cpu_affinity"] == "64-71"
    assert data["nics"] == [{"name": "NIC0", "device": "mlx5_0"}, {"name": "NIC1", "device": "mlx5_1"}]
    assert [(l["a"], l["b"], l["type"], l["nvlinks"]) for l in data["links"]][:3] == [
        ("GPU0", "GPU1", "NV4", 4), ("GPU0", "GPU2", "NODE", 0), ("GPU0", "NIC0", "NODE", 0)]
    assert data["islands"] == [["GPU0", "GPU1"]]
    assert data["weakest_link"]["type"] == "NODE"
    assert data["recommendation"]["interconnect"] == "mixed"


def test_best_and_gpus_subset():
    path = str(TOPO / "dgx1_v100_hybrid_cube_mesh_mlx5_old_format.txt")
    data = json.loads(run("inspect", "--json", "-f", path, "--best", "4").output)
    best = data["best"]
    # The quad with no SYS pair in the hybrid cube-mesh: 0-3 or 4-7, every pair NV1/NV2.
    assert best["gpus"] in (["GPU0", "GPU1", "GPU2", "GPU3"], ["GPU4", "GPU5", "GPU6", "GPU7"])
    assert best["weakest_link"]["type"] == "NV1"
    assert best["command"].startswith("CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=")
    text = run("inspect", "-f", path, "--best", "2").output
    assert "CUDA_VISIBLE_DEVICES=0,3" in text
    sub = json.loads(run("inspect", "--json", "-f", path, "--gpu-ids", "0,5").output)
    assert sub["selected"] == ["GPU0", "GPU5"] and sub["weakest_link"]["type"] == "SYS"
    assert sub["recommendation"]["zero_traffic_cost"] == "high"


def test_several_texts_and_stdin():
    text = (TOPO / "p2p_matrix_l4x2_cns.txt").read_text()
    r = run("inspect", "--json", "-f", str(TOPO / "consumer_x2_pcie_phb_numa_na.txt"), "-f", "-", input=text)
    data = json.loads(r.output)
    assert data["links"][0]["p2p"] == {"r": "CNS"}
    assert any(f["code"] == "p2p_unsupported" for f in data["findings"])


def test_examples():
    r = run("inspect", "--example", "list")
    assert r.exit_code == 0 and "dgx-a100" in r.output and "rtx4090x8-pcie" in r.output
    data = json.loads(run("inspect", "--example", "dgx-a100", "--json").output)
    assert len(data["gpus"]) == 8 and len(data["nics"]) == 12 and data["links"][0]["bandwidth_gbps"] == 300.0
    assert json.loads(run("inspect", "--example", "rtx4090x8-pcie",
                          "--json").output)["recommendation"]["interconnect"] == "pcie"


@pytest.mark.parametrize("args,msg,code", [
    (["inspect", "-f", "/nonexistent/topo.txt"], "Error: /nonexistent/topo.txt: no such file\n", 2),
    (["inspect", "-f", str(TOPO)], "is a directory", 2),
    (["inspect", "-f", sys.executable], "binary file", 2),
    (["inspect", "-f", "-"], "Error: stdin: empty", 2),
    (["inspect", "-f", str(TOPO / "rtx5090x2_phb.txt"), "--gpu-ids", "0,7"],
     "Error: --gpu-ids: no GPU 7 in this topology (GPUs: 0,1)\n", 2),
    (["inspect", "-f", str(TOPO / "rtx5090x2_phb.txt"), "--gpu-ids", "a"], "GPU indices like 0,1,3", 2),
    (["inspect", "-f", str(TOPO / "rtx5090x2_phb.txt"), "--best", "3"], "--best 3: this topology has 2 GPU(s)", 4),
    (["inspect", "--example", "nope"], "--example nope: unknown", 2),
])
def test_bad_input_one_line(args, msg, code):
    r = CliRunner().invoke(cli, args, input="")
    assert r.exit_code == code
    assert msg in r.output and r.output.count("\n") == 1 and "Traceback" not in r.output


def test_cut_paste_names_the_file(tmp_path):
    p = tmp_path / "cut.txt"
    p.write_text("\n".join(l[:60] for l in (TOPO / "h100x8_nv18_no_nic_spaces.txt").read_text().splitlines()))
    r = run("inspect", "-f", str(p))
    assert r.exit_code == 2 and r.output.startswith(f"Error: {p}: ") and "cut at the right" in r.output
    assert "nvidia-smi topo -m > topo.txt" in r.output and r.output.count("\n") == 1


def test_env_traps(monkeypatch):
    monkeypatch.setenv("NCCL_P2P_DISABLE", "1")
    monkeypatch.setenv("NCCL_P2P_LEVEL", "PHB")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    data = json.loads(run("inspect", "--json", "--example", "dgx1-v100").output)
    f = {x["code"]: x for x in data["findings"]}
    assert f["nccl_p2p_disabled"]["level"] == "warn" and "NVLink" in f["nccl_p2p_disabled"]["message"]
    assert f["nccl_p2p_level"]["level"] == "warn" and "GPU0-GPU5" in f["nccl_p2p_level"]["message"]
    assert "CUDA_VISIBLE_DEVICES=1,0" in f["cuda_visible_devices"]["message"]
    assert "PCI_BUS_ID" in f["cuda_device_order"]["message"]


# --- encodings of saved pastes (issue 14 item 7) ---

@pytest.mark.parametrize("encode", [
    lambda t: b"\xff\xfe" + t.replace("\n", "\r\n").encode("utf-16-le"),   # PowerShell 5 `>`: UTF-16 LE, BOM, CRLF
    lambda t: b"\xfe\xff" + t.encode("utf-16-be"),
    lambda t: b"\xef\xbb\xbf" + t.replace("\n", "\r\n").encode(),           # UTF-8 with BOM (PowerShell 7 option)
    lambda t: t.replace("\n", "\r\n").encode(),
])
def test_windows_saved_pastes_parse_like_utf8(tmp_path, encode):
    text = (TOPO / "a100x2_nv12_5nic_sglang_check_env.txt").read_text()
    plain = json.loads(run("inspect", "--json", "-f", str(TOPO / "a100x2_nv12_5nic_sglang_check_env.txt")).output)
    f = tmp_path / "topo.txt"
    f.write_bytes(encode(text))
    r = run("inspect", "--json", "-f", str(f))
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["gpus"] == plain["gpus"] and data["links"] == plain["links"] and data["nics"] == plain["nics"]


@pytest.mark.parametrize("blob", [b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", b"\x1f\x8b\x08\x00\x00\x00\x00\x00",
                                  b"\xff\xfe\x00\xd8\x00\xd8", bytes(range(256)), b"GPU0\x01\x02\x03 X"])
def test_binary_files_refused_in_one_line(tmp_path, blob):
    f = tmp_path / "topo.bin"
    f.write_bytes(blob)
    r = run("inspect", "-f", str(f))
    assert r.exit_code == 2 and r.output.strip() == f"Error: {f}: binary file, not nvidia-smi text"


# --- exit codes mean one thing (issue 33): every status docs/options.md documents, made to happen -----------------

def documented_statuses() -> set[int]:
    import re
    from pathlib import Path
    table = (Path(__file__).parent.parent / "docs" / "options.md").read_text().split("## Exit codes")[1]
    return {int(n) for row in re.findall(r"^\| ([\d, ]+) \|", table, re.M) for n in row.split(",")}


def test_every_documented_exit_status_happens(fake_nvml, monkeypatch, tmp_path):
    """0 to 5 and 70 here (the signals' 129, 130 and 143 in tests/test_signals.py, which stops real commands);
    a status not in the table, or one the table lists and nothing produces, fails."""
    import fake_nvml as fm

    from gputopo import report
    fake_nvml(init_error=fm.NVMLError_LibraryNotFound)
    seen = {
        0: run("plan", "--model", "gpt2", "--gpus", "1", "--gpu-mem", "24GB", "--cpu-mem", "8GB").exit_code,
        1: run("plan", "--model", "llama-2-70b", "--gpus", "1", "--gpu-mem", "8GB", "--cpu-mem", "8GB",
               "--nvme-free", "1GB").exit_code,
        2: run("plan", "--model", "gpt2", "--gpus", "1", "--gpu-mem", "24").exit_code,
        3: run("inspect", "--markdown").exit_code,
        4: run("bench-nvlink", "--gpus", "1").exit_code,
    }
    monkeypatch.setattr(report, "plan_for", lambda *a, **k: {}["no such key"])   # a bug, as a user would meet one
    r = run("plan", "--model", "gpt2", "--gpus", "1", "--gpu-mem", "24GB", "--cpu-mem", "8GB")
    seen[70] = r.exit_code
    assert r.output.count("\n") == 1 and "internal error, KeyError" in r.output and "Traceback" not in r.output
    assert all(code == status for status, code in seen.items()), seen
    signals = {129, 130, 143}   # tests/test_signals.py
    assert documented_statuses() == set(seen) | {5} | signals   # 5: tests/test_bench.py's failing children


def single_options():
    """(command, option) for every option that takes one value or is a flag, in every command."""
    import click
    return [(name, p) for name, cmd in sorted(cli.commands.items()) for p in cmd.params
            if isinstance(p, click.Option) and not p.multiple and not p.count and p.name != "help"]


@pytest.mark.parametrize("command,option", single_options(), ids=lambda x: getattr(x, "name", x))
def test_an_option_given_twice_with_two_values_is_refused(command, option):
    """Click kept the last value of `--nccl-log a --nccl-log b` silently; the first was meant as much (issue 33).
    The same value twice changes nothing and passes this check. (Parsed only: nothing runs.)"""
    import click
    name = max(option.opts, key=len)
    if option.is_flag:
        if not option.secondary_opts:
            return   # a flag twice is the flag once
        args, same, shown = [name, option.secondary_opts[0]], [name, name], f"{name}, {option.secondary_opts[0]}"
    else:
        args, same, shown = [name, "1", f"{name}=2"], [name, "1", name, "1"], "1, 2"
    cmd = cli.commands[command]
    with pytest.raises(click.UsageError) as refused:
        cmd.make_context(command, args)
    assert refused.value.format_message() == f"{name} given twice ({shown}): give it once"
    try:
        cmd.make_context(command, same)
    except click.UsageError as e:
        assert "given twice" not in e.format_message()


def test_an_option_given_twice_is_one_line_and_exit_2():
    r = CliRunner().invoke(cli, ["inspect", "--nccl-log", "a.log", "--nccl-log", "b.log"])
    assert r.exit_code == 2 and r.output == "Error: --nccl-log given twice (a.log, b.log): give it once\n"
