"""The NVML path against a fake pynvml filled with real hardware values."""
import shutil
import stat

import pytest
from conftest import fixture_text
from fake_nvml import h100_nvswitch, rtx3090_pair

from gputopo import health, parse, probe, report
from gputopo.errors import NvmlUnavailable


def test_rtx3090_pair_over_nvlink_bridge(fake_nvml):
    fake_nvml(rtx3090_pair())
    topo = probe.topology()
    assert topo.source == "nvml"
    g0 = topo.gpu("GPU0")
    assert g0.model == "NVIDIA GeForce RTX 3090" and g0.pci_bus_id == "0000:01:00.0"
    assert g0.memory_total_bytes == 24 * 1024 ** 3 and (g0.pcie_gen, g0.pcie_width_max) == (4, 16)
    assert g0.power_draw_w == 118 and g0.power_limit_w == 350 and g0.throttle_reasons == ()
    assert g0.cpu_affinity == "0-23" and g0.numa_affinity == "0"
    link = topo.link("GPU0", "GPU1")
    assert link.type == "NV4" and link.p2p == {"r": "OK"}
    # GA102: 4 links x 14.0625 GB/s per direction.
    assert topo.bandwidth_gbps(link)[0] == 56.25


def test_nvswitch_gives_nv18_and_pcie_levels(fake_nvml):
    fake_nvml(h100_nvswitch(4))
    topo = probe.topology()
    assert {l.type for l in topo.links} == {"NV18"}
    assert topo.bandwidth_gbps(topo.link("GPU0", "GPU3"))[0] == 450.0


def test_no_nvlink_falls_back_to_pcie_level(fake_nvml):
    s = rtx3090_pair()
    for g in s["gpus"]:
        g["nvlinks"] = []
    fake_nvml(s)
    topo = probe.topology()
    assert topo.link("GPU0", "GPU1").type == "PHB" and topo.gpu("GPU0").nvlinks is None
    assert topo.bandwidth_gbps(topo.link("GPU0", "GPU1"))[0] == 31.5  # gen4 x16


def test_not_supported_field_becomes_unknown(fake_nvml):
    fake = fake_nvml(rtx3090_pair(), unsupported={"nvmlDeviceGetTemperature", "nvmlDeviceGetNvLinkRemoteDeviceType",
                                                  "nvmlDeviceGetCurrentClocksEventReasons"})
    topo = probe.topology()
    g = topo.gpu("GPU1")
    assert g.temperature_c is None and g.model == "NVIDIA GeForce RTX 3090"
    assert g.throttle_reasons == ()  # fell back to the older ThrottleReasons call
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" in fake.calls
    assert topo.link("GPU0", "GPU1").type == "NV4"  # remote bus id still says which GPU


def test_lost_gpu_is_reported_and_the_rest_goes_on(fake_nvml):
    s = h100_nvswitch(4)
    fake_nvml(s, lost={2})
    topo = probe.topology()
    assert topo.gpu("GPU2").lost and topo.gpu("GPU3").model == "NVIDIA H100 80GB HBM3"
    assert topo.link("GPU0", "GPU2").type is None and topo.link("GPU0", "GPU1").type == "NV18"
    found = health.check(topo, [g.name for g in topo.gpus], {})
    assert found[0].level == "error" and found[0].code == "gpu_lost" and found[0].subject == "GPU2"


@pytest.mark.parametrize("error,words", [("NVMLError_LibraryNotFound", "no NVML library"),
                                         ("NVMLError_DriverNotLoaded", "not loaded"),
                                         ("NVMLError_NoPermission", "permission")])
def test_no_nvml(fake_nvml, error, words):
    import fake_nvml as fm
    fake_nvml(init_error=getattr(fm, error))
    with pytest.raises(NvmlUnavailable, match=words):
        probe.topology()


def test_driver_with_no_devices(fake_nvml):
    fake_nvml({"gpus": [], "ancestor": {}, "p2p": {}})
    with pytest.raises(NvmlUnavailable, match="no GPUs"):
        probe.nvml_topology()


def test_hot_throttling_capped_degraded_gpu_findings(fake_nvml):
    fake_nvml(rtx3090_pair(), hot={1: {"temp": 86, "reasons": 0x1 | 0x4 | 0x40, "power": 349_000,
                                       "pcie": (1, 4, 8, 16)}})
    topo = probe.topology()
    codes = {(f.subject, f.code) for f in health.check(topo, ["GPU0", "GPU1"], {})}
    assert {("GPU1", "temperature_throttling"), ("GPU1", "throttling"), ("GPU1", "power_cap"),
            ("GPU1", "pcie_width_degraded"), ("GPU1", "pcie_gen_below_max")} <= codes
    assert not any(s == "GPU0" for s, _ in codes)


def test_inactive_nvlink_is_found(fake_nvml):
    s = rtx3090_pair()
    for g in s["gpus"]:
        g["nvlinks"] = [(1, 3, g["nvlinks"][0][2], 0)] * 2 + [(0, 3, g["nvlinks"][0][2], 0)] * 2
    fake_nvml(s)
    topo = probe.topology()
    assert topo.link("GPU0", "GPU1").type == "NV2"
    # What the matrix promises comes from the live count here, so the finding is the informational one.
    found = [f for f in health.check(topo, ["GPU0", "GPU1"], {}) if f.code == "nvlink_inactive"]
    assert found and "2, 3" in found[0].message


def test_nvidia_smi_binary_when_nvml_missing(fake_nvml, monkeypatch, tmp_path):
    import fake_nvml as fm
    fake_nvml(init_error=fm.NVMLError_LibraryNotFound)
    (tmp_path / "topo.txt").write_text(fixture_text("gpu3_nv4_pair_node_2nic_numa1.txt"))
    exe = tmp_path / "nvidia-smi"
    exe.write_text(f"#!/bin/sh\n[ \"$1\" = topo ] && cat {tmp_path / 'topo.txt'} && exit 0\nexit 1\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(shutil, "which", lambda name: str(exe) if name == "nvidia-smi" else None)
    topo = probe.topology()
    assert topo.source == "nvidia-smi" and topo.link("GPU0", "GPU1").type == "NV4" and len(topo.nics) == 2
    assert any("NVML unavailable" in n for n in topo.notes)


def test_cpulist_from_nvml_mask():
    assert probe._cpulist([0xFF0000FF, 0]) == "0-7,24-31"
    assert probe._cpulist([0b1010]) == "1,3"


def test_sysfs_affinity_preferred(fake_nvml, tmp_path):
    fake_nvml(rtx3090_pair())
    d = tmp_path / "sysfs" / "0000:21:00.0"
    d.mkdir(parents=True)
    (d / "local_cpulist").write_text("12-23,36-47\n")
    (d / "numa_node").write_text("1\n")
    g = probe.topology().gpu("GPU1")
    assert (g.cpu_affinity, g.numa_affinity) == ("12-23,36-47", "1")


def test_report_json_shape_from_nvml(fake_nvml):
    fake_nvml(rtx3090_pair())
    data = report.inspect(probe.topology(), env={}, host=probe.host())
    assert data["gpus"][0]["name"] == "GPU0" and data["links"][0]["type"] == "NV4"
    assert data["links"][0]["bandwidth_gbps"] == 56.25 and data["recommendation"]["interconnect"] == "nvlink"


def test_pasted_nvlink_status_with_fewer_links_than_the_matrix():
    from conftest import fixture_text

    from gputopo import parse
    status = "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1)\n" + "".join(
        f"   Link {i}: {'<inactive>' if i in (3, 7) else '25 GB/s'}\n" for i in range(12))
    topo = parse.texts([fixture_text("dgx_a100_nv12_mlx5_old_names_trailing_cmds.txt"), status])
    found = [f for f in health.check(topo, [g.name for g in topo.gpus], {}) if f.code == "nvlink_inactive"]
    assert len(found) == 1 and found[0].level == "warn" and found[0].subject == "GPU0"
    assert "NV12 but only 10" in found[0].message and "3, 7" in found[0].message


# --- one GPU, live (issue 10 item 2) ---

def _fake_smi(monkeypatch, tmp_path, topo_text):
    """An `nvidia-smi` on PATH that prints `topo_text` for `topo -m` and fails otherwise."""
    (tmp_path / "topo.txt").write_bytes(topo_text.encode())
    exe = tmp_path / "nvidia-smi"
    exe.write_text(f"#!/bin/sh\n[ \"$1\" = topo ] && cat {tmp_path / 'topo.txt'} && exit 0\nexit 1\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(shutil, "which", lambda name: str(exe) if name == "nvidia-smi" else None)


def test_one_gpu_numa_from_nvml_memory_affinity(fake_nvml, tmp_path):
    from fake_nvml import h100_single
    fake_nvml(h100_single())
    d = tmp_path / "sysfs" / "0000:19:00.0"
    d.mkdir(parents=True)
    (d / "numa_node").write_text("-1\n")  # firmware that does not say: sysfs is no answer
    g = probe.topology().gpu("GPU0")
    assert g.numa_affinity == "0" and g.gpu_numa_id is None and g.cpu_affinity == "0-23"


def test_one_gpu_numa_from_nvidia_smi_when_nvml_lacks_it(fake_nvml, monkeypatch, tmp_path):
    from fake_nvml import h100_single
    fake_nvml(h100_single(), unsupported={"nvmlDeviceGetMemoryAffinity", "nvmlDeviceGetCpuAffinity"})
    _fake_smi(monkeypatch, tmp_path, fixture_text("h100x1_driver580_ansi_header.txt"))
    topo = probe.topology()
    g = topo.gpu("GPU0")
    assert (g.cpu_affinity, g.numa_affinity) == ("0-15", "0") and topo.source == "nvml"
    assert not any("unreadable" in n for n in topo.notes)


def test_one_gpu_live_inspect_says_one_sentence_not_an_empty_table(fake_nvml, monkeypatch, tmp_path):
    import json

    from click.testing import CliRunner
    from fake_nvml import h100_single

    from gputopo.cli import cli
    fake_nvml(h100_single(), unsupported={"nvmlDeviceGetMemoryAffinity"})
    _fake_smi(monkeypatch, tmp_path, fixture_text("h100x1_driver580_ansi_header.txt"))
    r = CliRunner().invoke(cli, ["inspect"])
    assert r.exit_code == 0, r.output
    assert "Links among" not in r.output and "theoretical/dir" not in r.output
    said = " ".join(r.output.split())   # the sentence, wrapped into 100 columns
    assert ("One GPU (GPU0, NVIDIA H100 80GB HBM3): no GPU-to-GPU interconnect to judge; the plan for it is single"
            in said) and "`--best K` and `gputopo bench-nvlink`" in said and "two or more GPUs" in said
    data = json.loads(CliRunner().invoke(cli, ["inspect", "--json"]).output)
    assert data["gpus"][0]["numa_affinity"] == "0" and data["links"] == [] and data["links_note"].startswith("One GPU")
    planned = CliRunner().invoke(cli, ["inspect", "--model", "gpt2"])
    assert planned.exit_code == 0, planned.output
    assert "the plan for it is single (one GPU, no sharding). `--best K`" in " ".join(planned.output.split())


def test_one_selected_gpu_of_several(fake_nvml):
    fake_nvml(h100_nvswitch(4))
    data = report.inspect(probe.topology(), gpu_ids=(2,), env={})
    assert data["links_note"].startswith("One GPU (GPU2, NVIDIA H100 80GB HBM3, of this machine's 4)")
    assert report.inspect(probe.topology(), env={})["links_note"] is None


def test_one_gpu_from_the_nvidia_smi_binary_when_nvml_is_missing(fake_nvml, monkeypatch, tmp_path):
    # The H100 record: NVML absent, `nvidia-smi topo -m` with the driver-580 escape-wrapped header.
    import fake_nvml as fm
    fake_nvml(init_error=fm.NVMLError_LibraryNotFound)
    _fake_smi(monkeypatch, tmp_path, fixture_text("h100x1_driver580_ansi_header.txt"))
    topo = probe.topology()
    assert topo.source == "nvidia-smi" and [g.name for g in topo.gpus] == ["GPU0"]
    assert (topo.gpus[0].cpu_affinity, topo.gpus[0].numa_affinity) == ("0-15", "0")
    assert report.inspect(topo, env={})["links_note"].startswith("One GPU (GPU0)")


def test_mig_instances_are_read_live_and_warned(fake_nvml):
    """A GPU in MIG mode (NVML's MIG mode, its instances' names): each instance's profile, and a warning."""
    import fake_nvml as fm
    scenario = fm.h100_nvswitch(3)
    scenario["gpus"][0]["mig"] = ["3g.40gb", "2g.20gb"]
    scenario["gpus"][1]["mig"] = None   # MIG-capable, MIG off
    scenario["gpus"][2]["mig"] = []     # MIG on, no instance created yet: CUDA sees nothing on it
    fake_nvml(scenario)
    topo = probe.topology()
    assert [g.mig for g in topo.gpus] == [("3g.40gb", "2g.20gb"), None, ()]
    found = [f for f in health.check(topo, [g.name for g in topo.gpus], {}) if f.code == "mig_mode"]
    assert len(found) == 1 and "GPU0: 3g.40gb, 2g.20gb; GPU2: no instance created" in found[0].message
    assert "GPU1" not in found[0].message


def test_mig_instances_read_from_a_pasted_list():
    """`nvidia-smi -L` lists each MIG instance under its GPU; with `nvlink -s` too, neither hides the other."""
    topo_m = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV12\t0-63\t0\nGPU1\tNV12\t X \t0-63\t0\n"
    listing = ("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1)\n"
               "  MIG 3g.40gb     Device  0: (UUID: MIG-a)\n  MIG  2g.20gb Device 1: (UUID: MIG-b)\n"
               "GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-2)\n")
    links = "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1)\n\t Link 0: 25 GB/s\n"
    topo = parse.texts([topo_m, listing, links])
    assert topo.gpus[0].mig == ("3g.40gb", "2g.20gb") and topo.gpus[1].mig is None
    assert topo.gpus[0].nvlinks and topo.gpus[0].nvlinks[0].speed_gbps == 25
    assert any(f.code == "mig_mode" for f in health.check(topo, ["GPU0", "GPU1"], {}))


def test_gpu_model_a_paste_overrides_is_said():
    """--gpu-model names GPUs a paste leaves unnamed; where the paste names them, a note says it was not used."""
    topo_m = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV12\t0-63\t0\nGPU1\tNV12\t X \t0-63\t0\n"
    listing = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2)\n"
    named = parse.texts([topo_m, listing], gpu_model="A100-80GB")
    assert [g.model for g in named.gpus] == ["NVIDIA H100 80GB HBM3"] * 2
    assert any("--gpu-model A100-80GB not used: the paste names the GPUs (NVIDIA H100 80GB HBM3)" in n
               for n in named.notes)
    unnamed = parse.texts([topo_m], gpu_model="A100-80GB")
    assert [g.model for g in unnamed.gpus] == ["A100-80GB"] * 2 and not any("--gpu-model" in n for n in unnamed.notes)


@pytest.mark.parametrize("visible,rank,gpu", [
    (None, None, "GPU0"), (None, "1", "GPU1"), ("1", None, "GPU1"), ("1,0", "1", "GPU0"),
    ("GPU-6e5b9f3c-1d2a-4c8e-9f0a-7b3c2d1e4f51", None, "GPU1"),   # a UUID, as nvidia-smi -L prints it
    ("GPU-6e5b9f3c", None, None),                                  # a prefix of both UUIDs names neither
    ("", None, None), ("-1", None, None), ("5,0", None, None),    # an entry naming no GPU ends the list
    ("0", "1", None),                                              # LOCAL_RANK past what is visible
])
def test_cuda_device_is_the_one_cuda_would_use(fake_nvml, monkeypatch, visible, rank, gpu):
    # `plan --measure` judges the GPU its child trains on (device LOCAL_RANK of CUDA_VISIBLE_DEVICES) by its free memory
    s = rtx3090_pair()
    s["gpus"][1]["mem_used"] = 20 * 1024 ** 3
    fake_nvml(s)
    for name, value in (("CUDA_VISIBLE_DEVICES", visible), ("LOCAL_RANK", rank)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    d = probe.cuda_device()
    assert (d and d["name"]) == gpu
    if gpu:
        free = {"GPU0": 24 * 1024 ** 3 - 512 * 1024 ** 2, "GPU1": 4 * 1024 ** 3}[gpu]
        assert d == {"name": gpu, "model": "NVIDIA GeForce RTX 3090", "memory_free_bytes": free}


def test_cuda_device_without_nvml_says_so(fake_nvml):
    import fake_nvml as fm
    fake_nvml(init_error=fm.NVMLError_LibraryNotFound)
    with pytest.raises(NvmlUnavailable):
        probe.cuda_device()
