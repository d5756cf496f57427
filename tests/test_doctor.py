"""`gputopo doctor`: each check on a recorded real host tree, DeepSpeed's op builders mocked, exit codes."""
import json
import os
import subprocess

import pytest
from click.testing import CliRunner
from conftest import FIXTURES

from gputopo import doctor, dsconfig, dsops, system
from gputopo.cli import cli

HOSTS = FIXTURES / "hosts"
CONTAINER, VM, ACS = HOSTS / "k8s-container", HOSTS / "firecracker-vm", HOSTS / "acs-bridge"
NVME_CFG = dsconfig.build(3, "nvme", nvme_path="/local_nvme", precision="bf16")
HAS_LIBAIO = b"libaio.so" in subprocess.run(["sh", "-c", "ldconfig -p 2>/dev/null"], capture_output=True).stdout


def host(tree, **kw):
    return system.Host(tree, **kw)


def run(*args):
    return CliRunner().invoke(cli, list(args))


class FakeBuilder:
    """What doctor asks of a DeepSpeed op builder: is_compatible() and sources()."""

    def __init__(self, compatible=True, sources=("csrc/adam/cpu_adam.cpp",), raises=None):
        self.compatible, self._sources, self.raises = compatible, list(sources), raises

    def is_compatible(self, verbose=False):
        if self.raises:
            raise self.raises
        return self.compatible

    def sources(self):
        return self._sources


TOOLS = {"ninja": "/usr/bin/ninja", "cxx": "/usr/bin/c++", "nvcc": "12.4", "torch_cuda": "12.4",
         "cuda_home": "/usr/local/cuda"}


# --- /dev/shm, temp dir, disks ---------------------------------------------------------------------------------

def test_container_shm_of_64_mib_blocks_a_gpu_run():
    h = host(CONTAINER)
    c = doctor.check_shm(h, system.disks(h), n_gpus=2)
    assert c.status == "fail" and c.found.startswith("64.0 MiB tmpfs") and "Docker's default" in c.found
    assert "--shm-size=1g" in c.fix and "--ipc=host" in c.fix and "failed to extend /dev/shm" in c.why
    # Without a GPU there is no NCCL: the same mount is a warning, not a blocker.
    assert doctor.check_shm(h, system.disks(h), n_gpus=None).status == "warn"


def test_shm_of_this_build_machine_is_fine():
    h = host(VM)
    c = doctor.check_shm(h, system.disks(h), n_gpus=None)
    assert c.status == "ok" and c.found.startswith("23.5 GiB tmpfs")


def test_buffers_deepspeeds_cpu_comm_left_in_dev_shm_are_named_unless_a_process_maps_them(tmp_path):
    shm, name = tmp_path / "dev/shm", "deepspeed_allreduce_buffer_0_localhost_{}_{}"
    shm.mkdir(parents=True)
    assert doctor.check_shm_leftovers(host(tmp_path)) == []
    for port, rank in [(29500, 0), (29500, 1), (33211, 0)]:
        (shm / name.format(port, rank)).write_bytes(b"\0" * 1000)
    (shm / "nccl-abc").write_bytes(b"\0" * 5000)   # NCCL's own: not DeepSpeed's
    (tmp_path / "proc/4242").mkdir(parents=True)
    (tmp_path / "proc/4242/maps").write_text(f"7f00-7f10 rw-s 00000000 00:1a 7 /dev/shm/{name.format(33211, 0)}\n")
    [c] = doctor.check_shm_leftovers(host(tmp_path))
    assert c.id == "shm_leftovers" and c.status == "warn"
    assert c.found.startswith("2 buffer(s)") and "2.0 KiB of RAM" in c.found
    assert "1 more open by a running job" in c.found and "once no DeepSpeed job runs" in c.fix
    (tmp_path / "proc/4242/maps").unlink()
    [c] = doctor.check_shm_leftovers(host(tmp_path))
    assert c.found.startswith("3 buffer(s)") and c.fix == "rm /dev/shm/deepspeed_allreduce_buffer_*"


def test_tmpfs_without_size_is_half_of_ram(tmp_path):
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/mounts").write_text("tmpfs /dev/shm tmpfs rw,nosuid,nodev,inode64 0 0\n")
    (tmp_path / "proc/meminfo").write_text("MemTotal:       16384000 kB\n")
    d = system.disks(host(tmp_path))[0]
    assert d.kind == "ram" and d.total_bytes == 16384000 * 1024 // 2


def test_disks_name_nvme_tmpfs_network_and_skip_file_mounts(tmp_path):
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/mounts").write_text(
        "/dev/nvme0n1p2 / ext4 rw,relatime 0 0\n"
        "/dev/sda1 /data xfs rw 0 0\n"
        "/dev/mapper/vg-scratch /scratch ext4 rw 0 0\n"
        "fs1:/export/home /home nfs4 rw,vers=4.2 0 0\n"
        "tmpfs /run tmpfs rw,size=1g 0 0\n"
        "/dev/nvme0n1p2 /etc/hosts ext4 rw 0 0\n"
        "proc /proc proc rw 0 0\n")
    for disk, rot in (("nvme0n1", "0"), ("sda", "1"), ("dm-0", None), ("nvme1n1", "0")):
        (tmp_path / f"sys/block/{disk}/queue").mkdir(parents=True)
        if rot:
            (tmp_path / f"sys/block/{disk}/queue/rotational").write_text(rot + "\n")
    (tmp_path / "sys/block/vg-scratch/slaves/nvme1n1").mkdir(parents=True)
    kinds = {d.mountpoint: (d.kind, d.block) for d in system.disks(host(tmp_path))}
    assert kinds == {"/": ("nvme", "nvme0n1"), "/data": ("rotational", "sda"), "/scratch": ("nvme", "nvme1n1"),
                     "/home": ("network", None), "/run": ("ram", None)}


def _disk(mp, kind, free, ro=False):
    return system.Disk(mountpoint=mp, device="/dev/x", fstype="ext4" if kind != "ram" else "tmpfs", kind=kind,
                       block=None, rotational=None, read_only=ro, total_bytes=free * 2, free_bytes=free)


class Writable(system.Host):
    def __init__(self, ok):
        super().__init__(VM)
        self.ok = ok

    def writable(self, path):
        return path in self.ok


def test_offload_dir_prefers_nvme_then_the_roomiest_local_disk_never_tmpfs():
    disks = [_disk("/", "rotational", 900), _disk("/mnt/nvme1", "nvme", 100), _disk("/mnt/nvme2", "nvme", 300),
             _disk("/dev/shm", "ram", 5000), _disk("/nfs", "network", 9000)]
    folder, d, why = system.pick_offload_dir(Writable({"/mnt/nvme1", "/mnt/nvme2", "/tmp"}), disks, "/tmp")
    assert (folder, why) == ("/mnt/nvme2", "the NVMe mount with the most free space")
    # The roomiest NVMe is read-only for us: the next one.
    folder, _, _ = system.pick_offload_dir(Writable({"/mnt/nvme1", "/tmp"}), disks, "/tmp")
    assert folder == "/mnt/nvme1"
    # No NVMe: the local disk with the most free space, through the temp dir that lies on it.
    folder, d, why = system.pick_offload_dir(Writable({"/tmp"}), disks[:1] + disks[3:], "/tmp")
    assert folder == "/tmp" and d.mountpoint == "/" and why.startswith("no writable NVMe mount")
    # The temp dir is not writable for us: the home folder on the same disk.
    folder, d, _ = system.pick_offload_dir(Writable({"/home/me"}), disks[:1] + disks[3:], "/tmp/x", "/home/me")
    assert (folder, d.mountpoint) == ("/home/me", "/")
    # Only RAM and the network: nowhere.
    assert system.pick_offload_dir(Writable({"/dev/shm", "/nfs", "/tmp"}), disks[3:], "/tmp") is None


def test_nvme_path_on_tmpfs_or_rotational_disk_warns():
    disks = [_disk("/", "rotational", 10 ** 11), _disk("/dev/shm", "ram", 10 ** 10), _disk("/nvme", "nvme", 10 ** 12)]
    h = host(VM)
    assert doctor.check_nvme_path(h, disks, "/dev/shm/x").status == "warn"
    assert "RAM" in doctor.check_nvme_path(h, disks, "/dev/shm/x").found
    assert "not NVMe" in doctor.check_nvme_path(h, disks, "/data").found
    assert doctor.check_nvme_path(h, disks, "/nvme/swap").status == "ok"
    assert doctor.check_nvme_path(h, disks, "/nvme/swap", need=2 * 10 ** 12).status == "fail"


# --- memlock -----------------------------------------------------------------------------------------------

def test_memlock_of_64_kib_blocks_nvme_offload():
    h = host(CONTAINER)
    assert system.memlock(h) == 65536
    need = doctor.pinned_bytes(NVME_CFG)
    assert need == 5 * 100_000_000 * 2 + 4 * dsconfig.NVME_SUB_GROUP * 4  # param + optimizer swap buffers
    c = doctor.check_memlock(h, NVME_CFG, rdma=[])
    assert c.status == "fail" and "64 KiB" in c.found and "2.4 GiB" in c.found and "memlock=-1" in c.fix
    assert doctor.check_memlock(h, None, rdma=[]).status == "info"  # nothing locks memory without offload
    assert doctor.check_memlock(h, None, rdma=["mlx5_0"]).status == "warn"


def test_cap_ipc_lock_lifts_the_limit():
    c = doctor.check_memlock(host(VM), NVME_CFG, rdma=[])
    assert c.status == "ok" and "CAP_IPC_LOCK" in c.found


# --- PCIe ACS, IOMMU ---------------------------------------------------------------------------------------

def test_acs_enabled_lspci_dump_parses():
    dev, = system.lspci((ACS / "cmd" / "lspci -vvv.txt").read_text())
    assert dev.bus_id == "0000:03:02.0" and dev.secondary == (6, 6) and dev.acs_redirects
    assert dev.acs_ctl == {"SrcValid": True, "TransBlk": False, "ReqRedir": True, "CmpltRedir": True,
                           "UpstreamFwd": True, "EgressCtrl": False, "DirectTrans": False}
    assert system.bridges_above([dev], "0000:06:00.0") == [dev] and system.bridges_above([dev], "0000:07:00.0") == []


def test_acs_above_two_gpus_blocks_and_without_gpu_warns():
    h = host(ACS)
    c = doctor.check_acs(h, system.nvidia_gpus_sysfs(h), n_gpus=2)
    assert c.status == "fail" and "0000:03:02.0" in c.found and "0000:06:00.0" in c.found and "setpci" in c.fix
    assert doctor.check_acs(h, [], n_gpus=0).status == "warn"


def test_acs_from_grep_lines_and_hidden_capabilities(tmp_path):
    # `lspci -vvv | grep ACSCtl` lines as posted in NVIDIA/nccl#629.
    grep = ("\t\tACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-\n"
            "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n")
    assert [d.acs_redirects for d in system.lspci(grep)] == [False, True]
    (tmp_path / "cmd").mkdir()
    (tmp_path / "cmd" / "lspci -vvv.txt").write_text(
        "03:00.0 PCI bridge: PLX Technology, Inc. PEX 8747 48-Lane, 5-Port PCI Express Gen 3 (8.0 GT/s) Switch\n"
        "\tCapabilities: <access denied>\n")
    c = doctor.check_acs(host(tmp_path), [], 2)
    assert c.status == "unknown" and "root" in c.found
    assert doctor.check_acs(host(VM), [], 0).status == "unknown"  # no lspci recorded: said so, not guessed


def test_iommu_translation_mode_for_gpus_warns(tmp_path):
    gpu = tmp_path / "sys/bus/pci/devices/0000:17:00.0"
    (gpu / "iommu_group").mkdir(parents=True)
    (gpu / "iommu_group" / "type").write_text("DMA-FQ\n")
    (tmp_path / "sys/class/iommu/dmar0").mkdir(parents=True)
    (tmp_path / "sys/kernel/iommu_groups/0").mkdir(parents=True)
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cmdline").write_text("BOOT_IMAGE=/vmlinuz ro intel_iommu=on quiet\n")
    c = doctor.check_iommu(host(tmp_path), ["0000:17:00.0"], n_gpus=2)
    assert c.status == "warn" and "intel_iommu=on" in c.found and "iommu=pt" in c.fix
    (gpu / "iommu_group" / "type").write_text("identity\n")
    assert doctor.check_iommu(host(tmp_path), ["0000:17:00.0"], n_gpus=2).status == "ok"
    assert doctor.check_iommu(host(VM), [], 0).found.startswith("off")


# --- variables, CUDA stack ----------------------------------------------------------------------------------

def test_env_reuses_inspect_findings_and_lists_the_rest():
    checks = doctor.check_env({"NCCL_P2P_DISABLE": "1", "NCCL_SOCKET_IFNAME": "eth0", "CUDA_LAUNCH_BLOCKING": "1"},
                              None, [])
    by = {c.id: c for c in checks}
    assert by["env:nccl_p2p_disabled"].found.startswith("NCCL_P2P_DISABLE is set")
    assert by["env:cuda_launch_blocking"].status == "warn"
    assert by["env:variables"].found == "set: NCCL_SOCKET_IFNAME=eth0"


def test_cuda_home_from_a_wrapper_nvcc_is_reported():
    checks, tc = doctor.cuda_stack(host(VM), None, {})
    nvcc = next(c for c in checks if c.id == "nvcc")
    assert tc["nvcc"] == "13.0" and tc["cuda_home"] == "/usr/local"
    assert "has no include/cuda_runtime.h" in nvcc.found


def test_driver_older_than_torch_cuda_blocks(monkeypatch):
    from gputopo.topology import Gpu, Topology
    monkeypatch.setattr(system, "torch_build", lambda: {"version": "2.5.1+cu124", "cuda": "12.4", "hip": None})
    topo = Topology(gpus=(Gpu(name="GPU0", index=0),))
    checks, _ = doctor.cuda_stack(host(VM), topo, {"version": "470.256.02", "cuda": "11.4"})
    drv = next(c for c in checks if c.id == "cuda_driver")
    assert drv.status == "fail" and "supports CUDA 11.4; torch needs 12.4" in drv.found
    checks, _ = doctor.cuda_stack(host(VM), topo, {"version": "550.54", "cuda": "12.2"})
    assert next(c for c in checks if c.id == "cuda_driver").status == "warn"
    monkeypatch.setattr(system, "torch_build", lambda: {"version": "2.13.0+cpu", "cuda": None, "hip": None})
    checks, _ = doctor.cuda_stack(host(VM), topo, {})
    assert next(c for c in checks if c.id == "torch").status == "fail"  # a CPU torch with a GPU present


# --- DeepSpeed ops -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg,ops", [
    (dsconfig.build(2), ["fused_adam"]),
    (dsconfig.build(2, "cpu"), ["cpu_adam"]),
    (dsconfig.build(3, "nvme", nvme_path="/n"), ["cpu_adam", "async_io"]),
    (dsconfig.build(3, "nvme", nvme_path="/n", torch_adam=True), ["async_io"]),
    (dsconfig.build(2, torch_adam=True), []),
    ({"optimizer": {"type": "Lamb"}}, ["fused_lamb"]),
    ({"optimizer": {"type": "Lion"}, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}},
     ["cpu_lion"]),
    ({"zero_optimization": {"stage": 3}}, []),
])
def test_ops_a_config_needs(cfg, ops):
    assert [n.op for n in dsops.needed(cfg)] == ops


def test_incompatible_builder_is_blocking_with_its_fix(tmp_path):
    needs = dsops.needed(NVME_CFG)
    out = dsops.status(needs, TOOLS, ops={"cpu_adam": FakeBuilder(True), "async_io": FakeBuilder(False)},
                       installed={}, cache_dir=str(tmp_path))
    by = {s.op: s for s in out}
    assert by["cpu_adam"].state == "buildable" and "about 41 s" in by["cpu_adam"].detail
    assert by["async_io"].state == "not_buildable" and "libaio" in by["async_io"].detail
    assert "apt-get install libaio-dev" in by["async_io"].fix


def test_fused_adam_without_nvcc_is_the_h100_failure(tmp_path):
    """FusedAdam's builder says compatible; its CUDA sources still need nvcc matching torch's CUDA."""
    cu = FakeBuilder(True, sources=["csrc/adam/fused_adam_frontend.cpp", "csrc/adam/multi_tensor_adam.cu"])
    need = dsops.needed(dsconfig.build(2))
    s, = dsops.status(need, {**TOOLS, "nvcc": None}, ops={"fused_adam": cu}, installed={}, cache_dir=str(tmp_path))
    assert s.state == "not_buildable" and "no nvcc" in s.detail
    assert "DS_BUILD_FUSED_ADAM=1" in s.fix and '"torch_adam": true' in s.fix
    s, = dsops.status(need, {**TOOLS, "nvcc": "11.8"}, ops={"fused_adam": cu}, installed={}, cache_dir=str(tmp_path))
    assert "does not match torch's CUDA 12.4" in s.detail
    s, = dsops.status(need, TOOLS, ops={"fused_adam": cu}, installed={"fused_adam": True}, cache_dir=str(tmp_path))
    assert s.state == "prebuilt"
    (tmp_path / "fused_adam").mkdir()
    (tmp_path / "fused_adam" / "fused_adam.so").write_bytes(b"")
    s, = dsops.status(need, {**TOOLS, "nvcc": None}, ops={"fused_adam": cu}, installed={}, cache_dir=str(tmp_path))
    assert s.state == "cached"
    s, = dsops.status(need, {**TOOLS, "ninja": None}, ops={"fused_adam": FakeBuilder(True)}, installed={},
                      cache_dir=str(tmp_path / "none"))
    assert s.state == "not_buildable" and "ninja" in s.detail


def test_a_builder_whose_probe_raises_is_not_buildable(tmp_path):
    s, = dsops.status(dsops.needed(dsconfig.build(2, "cpu")), TOOLS,
                      ops={"cpu_adam": FakeBuilder(
                          raises=RuntimeError("MissingCUDAException: CUDA_HOME does not exist"))},
                      installed={}, cache_dir=str(tmp_path))
    assert s.state == "not_buildable" and "MissingCUDAException" in s.detail


# --- the command: exit codes, JSON, the other commands ---------------------------------------------------------

@pytest.fixture
def tree(monkeypatch):
    def use(path):
        monkeypatch.setattr(system, "ROOT", path)
    return use


def test_exit_1_in_a_container_with_gpus_and_64_mib_shm(tree, fake_nvml):
    import fake_nvml as fm
    tree(CONTAINER)
    fake_nvml(fm.rtx3090_pair())
    r = run("doctor")
    assert r.exit_code == 1, r.output
    assert r.stdout.splitlines()[0].startswith("gputopo doctor: 2 blocking")
    assert r.stdout.splitlines()[1] == "Exit 1: something below will break a run."   # the answer first
    first = r.stdout.splitlines()[4]
    assert first.startswith("FAIL") and "shm" in first and "64.0 MiB tmpfs for 2 GPU(s)" in first
    data = json.loads(run("doctor", "--json").stdout)
    assert data["ok"] is False and data["exit_code"] == 1 and data["gpus"] == 2
    # The second blocker is real too: this machine's torch is a CPU build, and the fake NVML shows GPUs.
    assert [c["id"] for c in data["checks"] if c["blocking"]] == ["shm", "torch"]
    assert sorted(data["checks"][0]) == ["blocking", "fix", "found", "id", "status", "subject", "why"]


def test_exit_0_without_gpu_on_this_build_machine(tree, fake_nvml):
    import fake_nvml as fm
    tree(VM)
    fake_nvml(init_error=fm.NVMLError_LibraryNotFound)
    r = run("doctor")
    assert r.exit_code == 0, r.output
    assert "no NVIDIA GPU visible" in r.stdout and "not checked here" in r.stdout
    assert "Nothing blocks a run here." in r.stdout


def test_exit_1_for_acs_above_the_gpus(tree, fake_nvml):
    import fake_nvml as fm
    tree(ACS)
    fake_nvml(fm.rtx3090_pair())
    data = json.loads(run("doctor", "--json").stdout)
    assert data["exit_code"] == 1 and "pcie_acs" in [c["id"] for c in data["checks"] if c["blocking"]]


def test_config_exit_code_follows_the_op_builders(tree, fake_nvml, monkeypatch, tmp_path):
    import fake_nvml as fm
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "jit"))  # nothing JIT-built by other tests
    tree(VM)
    fake_nvml(init_error=fm.NVMLError_LibraryNotFound)
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(dsconfig.build(3, "nvme", nvme_path=str(tmp_path))))
    monkeypatch.setattr(dsops, "builders", lambda: ({"cpu_adam": FakeBuilder(True), "async_io": FakeBuilder(False)},
                                                     {"cpu_adam": True}, "cuda"))
    r = run("doctor", "--config", str(path), "--json")
    data = json.loads(r.stdout)
    assert r.exit_code == 1 and [s["state"] for s in data["ds_ops"]] == ["prebuilt", "not_buildable"]
    monkeypatch.setattr(dsops, "builders", lambda: ({"cpu_adam": FakeBuilder(True), "async_io": FakeBuilder(True)},
                                                     {"cpu_adam": True, "async_io": True}, "cuda"))
    assert run("doctor", "--config", str(path)).exit_code == 0
    assert run("doctor", "--config", str(tmp_path / "missing.json")).exit_code == 2
    (tmp_path / "bad.json").write_text("{not json")
    r = run("doctor", "--config", str(tmp_path / "bad.json"))
    assert r.exit_code == 2 and r.stderr.startswith("Error: ") and "not JSON" in r.stderr
    # numbers and nesting DeepSpeed's reader takes but no setting means: one line naming the key, never exit 70
    # (1e400 overflowed int(), a 400-digit number float(), 1000 nested lists Python's reader's stack)
    for text, said in (('{"zero_optimization": {"offload_param": {"buffer_count": 1e400}}}',
                        "zero_optimization.offload_param.buffer_count is inf"),
                       ('{"zero_optimization": {"sub_group_size": 1' + "0" * 400 + "}}",
                        "zero_optimization.sub_group_size is a 401-digit number"),
                       ('{"a": ' + "[" * 1000 + "1" + "]" * 1000 + "}", "not JSON (JSON nested more than 32 deep)"),
                       ('{"train_batch_size": NaN}', "NaN is not a number JSON has")):
        (tmp_path / "odd.json").write_text(text)
        r = run("doctor", "--config", str(tmp_path / "odd.json"))
        assert r.exit_code == 2 and r.stderr.count("\n") == 1 and said in r.stderr, r.stderr


def test_inspect_shows_blocking_host_problems_only_for_this_machine(tree, fake_nvml):
    import fake_nvml as fm
    tree(CONTAINER)
    fake_nvml(fm.rtx3090_pair())
    r = run("inspect")
    assert r.exit_code == 0 and "!! /dev/shm: 64.0 MiB tmpfs" in r.stdout and "`gputopo doctor`" in r.stdout
    assert [c["id"] for c in json.loads(run("inspect", "--json").stdout)["host_checks"]] == ["shm", "torch"]
    pasted = json.loads(run("inspect", "--json", "--example", "dgx-a100").stdout)
    assert "host_checks" not in pasted


def test_deepspeed_config_nvme_without_path_picks_a_local_disk(tmp_path):
    """`gputopo deepspeed-config --stage 3 --offload nvme`, typed exactly so (no GPU, no NVMe here)."""
    r = run("deepspeed-config", "--stage", "3", "--offload", "nvme")
    assert r.exit_code == 0, r.output
    cfg = json.loads(r.stdout)
    chosen = cfg["zero_optimization"]["offload_param"]["nvme_path"]
    assert os.path.isdir(chosen) and os.access(chosen, os.W_OK)
    assert f"--nvme-path not given: using {chosen}" in r.stderr
    assert ("the NVMe mount with the most free space" in r.stderr) != ("NOT NVMe" in r.stderr)


def test_deepspeed_config_nvme_refuses_when_no_local_disk(monkeypatch):
    monkeypatch.setattr(system, "disks", lambda host: [_disk("/dev/shm", "ram", 10 ** 10)])
    r = run("deepspeed-config", "--stage", "3", "--offload", "nvme")
    assert r.exit_code == 2 and "no writable local disk here (tmpfs is RAM, not NVMe)" in r.stderr


def test_check_without_libaio_says_so_in_one_line_and_writes_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "jit"))
    monkeypatch.setattr(dsops, "builders", lambda: ({"cpu_adam": FakeBuilder(True), "async_io": FakeBuilder(False)},
                                                     {"cpu_adam": True}, "cuda"))
    out = tmp_path / "ds.json"
    r = run("deepspeed-config", "--stage", "3", "--offload", "nvme", "--nvme-path", str(tmp_path), "--check",
            "-o", str(out))
    assert r.exit_code == 1 and not out.exists()
    line, = [l for l in r.stderr.splitlines() if "async_io" in l]
    assert "libaio" in line and "fix: install libaio: apt-get install libaio-dev" in line


@pytest.mark.skipif(not HAS_LIBAIO, reason="libaio is not installed here (.ci/setup installs libaio-dev)")
def test_check_with_libaio_says_the_op_builds(tmp_path):
    """DeepSpeed's real AsyncIOBuilder on this machine."""
    r = run("deepspeed-config", "--stage", "3", "--offload", "nvme", "--nvme-path", str(tmp_path), "--check")
    assert r.exit_code == 0, r.output
    line, = [l for l in r.stderr.splitlines() if l.startswith("note: doctor: async_io:")]
    assert "builds here at first use" in line or "JIT-built before" in line or "compiled into" in line


@pytest.mark.skipif(HAS_LIBAIO, reason="libaio is installed here")
def test_check_on_a_machine_without_libaio_exits_1(tmp_path):
    """DeepSpeed's real AsyncIOBuilder where libaio is missing (e.g. CI before .ci/setup)."""
    r = run("deepspeed-config", "--stage", "3", "--offload", "nvme", "--nvme-path", str(tmp_path), "--check")
    assert r.exit_code == 1 and "libaio-dev" in r.stderr


def test_no_compile_ops_writes_torch_adam_and_needs_no_optimizer_op():
    r = run("deepspeed-config", "--stage", "2", "--offload", "cpu", "--no-compile-ops")
    cfg = json.loads(r.stdout)
    assert cfg["optimizer"]["params"]["torch_adam"] is True and dsops.needed(cfg) == []
    assert "torch_adam" not in json.loads(run("deepspeed-config", "--stage", "2").stdout)["optimizer"]["params"]


def test_gpus_on_the_bus_without_a_driver_block(tree, fake_nvml):
    import fake_nvml as fm
    tree(ACS)  # sysfs shows an NVIDIA GPU at 0000:06:00.0
    fake_nvml(init_error=fm.NVMLError_DriverNotLoaded)
    data = json.loads(run("doctor", "--json").stdout)
    gpus = next(c for c in data["checks"] if c["id"] == "gpus")
    assert gpus["blocking"] and "1 NVIDIA GPU(s) on the PCI bus (0000:06:00.0)" in gpus["found"]
    assert "--gpus all" in gpus["fix"]


def test_persistence_driver_and_peermem_through_nvml(tmp_path, fake_nvml):
    import fake_nvml as fm
    scenario = fm.rtx3090_pair()
    scenario["gpus"][1]["persistence"] = 0
    scenario["driver"] = ("535.183.01", 12020)
    fake_nvml(scenario)
    (tmp_path / "sys/class/infiniband/mlx5_0").mkdir(parents=True)
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/modules").write_text("nvidia_uvm 1531904 0 - Live 0x0000000000000000 (PO)\n")
    data = doctor.run(host=host(tmp_path))
    by = {c["id"]: c for c in data["checks"]}
    assert by["persistence"]["status"] == "warn" and by["persistence"]["subject"] == "GPU1"
    assert by["peermem"]["status"] == "warn" and "mlx5_0" in by["peermem"]["found"]
    assert "nvidia-peermem" in by["peermem"]["fix"]
    (tmp_path / "proc/modules").write_text("nvidia_peermem 16384 0 - Live 0x0000000000000000 (O)\n")
    assert {c["id"]: c for c in doctor.run(host=host(tmp_path))["checks"]}["peermem"]["status"] == "ok"
    # this machine's torch is a CPU build: with GPUs present that is the blocking finding, not the driver
    assert by["torch"]["blocking"] and by["cuda_driver"]["found"].startswith("driver 535.183.01, CUDA 12.2")


def _config(vendor, cls, bridge=False, buses=(0, 0), acs_ctl=None, size=4096):
    """Config space bytes as sysfs gives root: type-0/1 header and, optionally, an ACS extended capability."""
    cfg = bytearray(size)
    cfg[0:2] = vendor.to_bytes(2, "little")
    cfg[0x0A:0x0C] = cls.to_bytes(2, "little")
    cfg[0x0E] = 1 if bridge else 0
    cfg[0x19], cfg[0x1A] = buses
    if acs_ctl is not None and size > 0x2a8:
        cfg[0x100:0x104] = (0x0001 | 1 << 16 | 0x2a0 << 20).to_bytes(4, "little")  # AER, then ACS at 0x2a0
        cfg[0x2a0:0x2a4] = (0x000D | 1 << 16).to_bytes(4, "little")
        cfg[0x2a6:0x2a8] = acs_ctl.to_bytes(2, "little")
    return bytes(cfg)


def test_acs_from_sysfs_config_space_matches_lspci(tmp_path):
    """Without lspci (as on this build machine), root reads ACSCtl from config space: the same flags."""
    devs = tmp_path / "sys/bus/pci/devices"
    for bus, cfg in (("0000:03:02.0", _config(0x1022, 0x0604, True, (6, 6), acs_ctl=0x001D)),
                     ("0000:06:00.0", _config(0x10DE, 0x0302))):
        (devs / bus).mkdir(parents=True)
        (devs / bus / "config").write_bytes(cfg)
    bridge, gpu = system.pci_sysfs(host(tmp_path))
    lspci, = system.lspci((ACS / "cmd" / "lspci -vvv.txt").read_text())
    assert bridge.acs_ctl == lspci.acs_ctl and bridge.secondary == lspci.secondary == (6, 6)
    assert gpu.is_nvidia_gpu and gpu.secondary is None
    c = doctor.check_acs(host(tmp_path), [], n_gpus=2)
    assert c.status == "fail" and "above GPU(s) 0000:06:00.0" in c.found
    # Not root: sysfs gives the first 64 bytes only, so ACS cannot be read, and doctor says so.
    (devs / "0000:03:02.0" / "config").write_bytes(_config(0x1022, 0x0604, True, (6, 6), size=64))
    assert doctor.check_acs(host(tmp_path), [], n_gpus=2).status == "unknown"


def test_odd_hand_written_configs_do_not_crash(tree, fake_nvml, tmp_path, monkeypatch):
    import fake_nvml as fm
    tree(VM)
    fake_nvml(init_error=fm.NVMLError_LibraryNotFound)
    monkeypatch.setattr(dsops, "builders", lambda: ({}, {}, "cuda"))
    for cfg in ({"zero_optimization": "3"}, {"optimizer": "adam"}, {"optimizer": {"type": "Adam", "params": None}},
                {"zero_optimization": {"stage": 3, "sub_group_size": "auto",
                                       "offload_param": {"device": "nvme", "nvme_path": str(tmp_path),
                                                         "buffer_size": "auto"}}}):
        path = tmp_path / "ds.json"
        path.write_text(json.dumps(cfg))
        r = run("doctor", "--config", str(path), "--json")
        assert r.exit_code in (0, 1) and json.loads(r.stdout)["schema_version"] == 1, (cfg, r.output)


def _jit_root(tmp_path, ops: dict) -> str:
    """A JIT build root: op -> (site-packages its build.ninja names, seconds since its lock was left or None)."""
    root = tmp_path / "py311_cpu"
    for op, (site, lock_age) in ops.items():
        (root / op).mkdir(parents=True)
        (root / op / "build.ninja").write_text(f"cflags = -I{site}/deepspeed/ops/csrc/includes"
                                               f" -isystem {site}/torch/include\n")
        if lock_age is not None:
            (root / op / "lock").write_text("")
            os.utime(root / op / "lock", (1e9 - lock_age, 1e9 - lock_age))
    return str(root)


def test_a_lock_left_by_a_killed_build_is_named_with_its_fix(tmp_path):
    """A lock no process builds under hangs every later run; a lock a build is working under, or a young one (a
    build may run on another machine sharing the folder), is not stale."""
    mine = "/venvs/a/lib/python3.11/site-packages"
    root = _jit_root(tmp_path, {"fused_adam": (mine, 1200), "cpu_adam": (mine, 1200), "async_io": (mine, 300)})
    builds = dsops.jit_builds(None, root=root, now=1e9, busy={f"{root}/cpu_adam/build"})
    assert {b.op: (b.lock_age_s, b.building) for b in builds} == {"async_io": (300, False), "cpu_adam": (1200, True),
                                                                  "fused_adam": (1200, False)}
    checks = doctor.check_jit_builds(builds, mine, {})
    assert [(c.id, c.status, c.fix) for c in checks] == [("jit_lock:fused_adam", "warn",
                                                         f"rm {root}/fused_adam/lock (when no machine sharing the"
                                                         " folder is building)")]
    assert checks[0].found == "a lock 20 min old and no process here building there"


def test_ops_built_for_another_environment_are_named_with_the_fix(tmp_path):
    mine, theirs = "/venvs/a/lib/python3.11/site-packages", "/venvs/b/lib/python3.11/site-packages"
    root = _jit_root(tmp_path, {"fused_adam": (theirs, None), "cpu_adam": (mine, None), "shm": (theirs, None)})
    builds = dsops.jit_builds(None, root=root, now=1e9, busy=set())
    assert [b.built_for for b in builds] == [mine, theirs, theirs]
    (c,) = doctor.check_jit_builds(builds, mine, {"VIRTUAL_ENV": "/venvs/a"})
    assert (c.id, c.status, c.subject) == ("jit_shared", "warn", root)
    assert c.found == f"fused_adam, shm built for {theirs}, not this environment ({mine})"
    assert c.fix == "export TORCH_EXTENSIONS_DIR=/venvs/a/torch_extensions in this environment (its activate script)"
    assert doctor.check_jit_builds(builds, theirs, {}) and not doctor.check_jit_builds(
        dsops.jit_builds(None, root=_jit_root(tmp_path / "x", {"cpu_adam": (mine, None)}), busy=set()), mine, {})


def test_doctor_reads_the_jit_folder_it_is_given(tmp_path, monkeypatch):
    """Live: TORCH_EXTENSIONS_DIR is where the ops are looked for (the suite and the fix both set it)."""
    jit = tmp_path / "jit"
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(jit))
    site = os.path.dirname(system.torch_dir())
    assert site and os.path.isdir(os.path.join(site, "torch"))
    _jit_root(tmp_path, {"fused_adam": ("/elsewhere/site-packages", 3600)})
    (tmp_path / "py311_cpu").rename(jit)   # torch builds in TORCH_EXTENSIONS_DIR itself, no py*_cpu folder under it
    assert dsops._jit_dir(None) == str(jit)
    data = json.loads(run("doctor", "--json").stdout)
    ids = {c["id"]: c for c in data["checks"]}
    assert ids["jit_lock:fused_adam"]["status"] == "warn" and "jit_shared" in ids


def test_check_and_doctor_agree_on_an_op_built_for_another_environment(tmp_path):
    """Issue 33: `deepspeed-config --check` said "JIT-built before" where `doctor` said built for another
    virtualenv; one owner (gputopo.dsops.built_for) now reads build.ninja for both."""
    need = dsops.needed(dsconfig.build(2))
    op = tmp_path / "fused_adam"
    op.mkdir()
    (op / "fused_adam.so").write_bytes(b"")
    (op / "build.ninja").write_text("cflags = -isystem /other/venv/lib/python3.11/site-packages/torch/include\n")
    s, = dsops.status(need, TOOLS, ops={"fused_adam": FakeBuilder(True)}, installed={}, cache_dir=str(tmp_path))
    assert s.state == "buildable" and "for another environment (/other/venv/lib/python3.11/site-packages)" in s.detail
    shared = doctor.check_jit_builds(dsops.jit_builds(None, root=str(tmp_path), busy=set()), dsops.this_site(), {})
    assert [c.id for c in shared] == ["jit_shared"] and "/other/venv" in shared[0].found


# --- TORCH_CUDA_ARCH_LIST as DeepSpeed's op builder parses it (issue 41, item 7) --------------------------------

CUDA_TORCH = {"version": "2.5.1+cu124", "cuda": "12.4", "hip": None}
ARCH_LISTS = ["8.0;9.0a", "9.0a+PTX;9.0", "12.0a;10.0f", "Hopper", "native", "8.0,9.0", "9", "+PTX",
              "9.0+PTX", "8.0 9.0", " 8.0 ; 9.0 ", "8.0;;9.0", "7.5;8.6+PTX;9.0", "9.0+ptx"]


@pytest.mark.parametrize("value", ARCH_LISTS)
def test_arch_list_rule_is_deepspeeds_own(value, monkeypatch):
    """dsops mirrors DeepSpeed's parser (doctor imports no DeepSpeed without --config); here the installed
    DeepSpeed's own FusedAdamBuilder.compute_capability_args (JIT mode: no GPU, no build) decides, and it reads
    every mended list in JIT mode and in its prebuild (DS_BUILD_*) mode alike."""
    pytest.importorskip("deepspeed")
    from deepspeed.ops.op_builder.fused_adam import FusedAdamBuilder

    def parses(arch, jit=True):
        b = FusedAdamBuilder()
        b.jit_mode = jit
        monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", arch)   # it rewrites the variable; monkeypatch restores it
        try:
            b.compute_capability_args()
        except (ValueError, IndexError):
            return False
        return True
    assert parses(value) == (not dsops.arch_unparsed(value))
    mended = dsops.arch_for_deepspeed(value)
    assert mended is None or (parses(mended) and parses(mended, jit=False))


@pytest.mark.parametrize("value,mended", [
    ("8.0;9.0a", "8.0;9.0"), ("9.0a", "9.0"), ("9.0;9.0a", "9.0"), ("8.0 9.0a+PTX", "8.0;9.0+PTX"),
    ("12.0a;10.0f;9.0", "12.0;10.0;9.0"), ("9.0+PTX", "9.0+PTX"), ("8.0 9.0", "8.0;9.0"),
    ("Hopper", None), ("8.0;native", None), ("8.0,9.0a", None), ("", None)])
def test_arch_list_mended_for_deepspeed(value, mended):
    assert dsops.arch_for_deepspeed(value) == mended


def test_arch_list_matters_only_where_deepspeed_builds_cuda_ops(monkeypatch):
    env = {"TORCH_CUDA_ARCH_LIST": "8.0;9.0a"}
    monkeypatch.setattr(dsops, "installed_version", lambda: None)
    assert doctor.check_arch_list(env, "12.4", None) == []           # no DeepSpeed: nothing parses it so
    monkeypatch.setattr(dsops, "installed_version", lambda: "0.19.8")
    assert doctor.check_arch_list({}, "12.4", None) == []            # unset: it builds for the GPUs it sees
    c, = doctor.check_arch_list(env, None, None)
    assert c.status == "info" and c.found.endswith("unused here: torch has no CUDA")
    assert doctor.check_arch_list(env, "12.4", False)[0].status == "warn"   # the config's ops all prebuilt
    assert doctor.check_arch_list(env, "12.4", True)[0].status == "fail"
    c, = doctor.check_arch_list({"TORCH_CUDA_ARCH_LIST": "Hopper"}, "12.4", None)
    assert c.status == "fail" and c.fix.startswith("unset TORCH_CUDA_ARCH_LIST")


def _image(tree, tmp_path, arch):
    """This build machine's recorded tree, its process environment holding TORCH_CUDA_ARCH_LIST."""
    import shutil
    root = tmp_path / "host"
    if not root.exists():
        shutil.copytree(VM, root)
    (root / "proc/self/environ").write_text(f"TORCH_CUDA_ARCH_LIST={arch}\0")
    tree(root)


def test_doctor_blocks_an_arch_list_deepspeed_cannot_parse(tree, fake_nvml, monkeypatch, tmp_path):
    """On an H200 image TORCH_CUDA_ARCH_LIST="8.0;9.0a" stopped FusedAdam's build (ValueError: invalid literal
    for int() with base 10: '0a') where doctor had said nothing blocks."""
    import fake_nvml as fm

    from gputopo.errors import GputopoError
    fake_nvml(init_error=fm.NVMLError_LibraryNotFound)
    monkeypatch.setattr(system, "torch_build", lambda: CUDA_TORCH)
    monkeypatch.setattr(dsops, "installed_version", lambda: "0.19.8")
    _image(tree, tmp_path, "8.0;9.0a")
    r = run("doctor")
    assert r.exit_code == 1 and "Exit 1: something below will break a run." in r.stdout, r.output
    c, = [c for c in json.loads(run("doctor", "--json").stdout)["checks"] if c["blocking"]]
    line = ('doctor: env: TORCH_CUDA_ARCH_LIST="8.0;9.0a": DeepSpeed 0.19.8 cannot parse 9.0a (its op builder'
            ' int()s each part) - fix: set TORCH_CUDA_ARCH_LIST="8.0;9.0" (drop the arch-specific suffix)'
            ' before building ops')
    assert c["id"] == "ds_arch_list" and f"doctor: {c['subject']}: {c['found']} - fix: {c['fix']}" == line
    with pytest.raises(GputopoError) as e:   # what deepspeed-config --check runs before it writes
        doctor.preflight("deepspeed-config --check")
    assert e.value.details == (line,)
    assert doctor.preflight("bench-nvlink", own_children=True)["exit_code"] == 1   # its children get 8.0;9.0
    for good in ("8.0;9.0", "9.0+PTX"):
        _image(tree, tmp_path, good)
        r = run("doctor", "--json")
        assert r.exit_code == 0, r.output
        assert {c["id"]: c["status"] for c in json.loads(r.stdout)["checks"]}["ds_arch_list"] == "ok"


def test_children_get_the_mended_list_and_it_is_said_once(monkeypatch):
    from gputopo import bench
    monkeypatch.setattr(dsops, "installed_version", lambda: "0.19.8")
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0;9.0a")
    # every torchrun arm and bench's calibration copies
    assert bench.child_env(bench.Options(), None)["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0"
    said = []
    env = dsops.deepspeed_env(os.environ, said.append)   # calibrate.run's copies (plan --calibrate)
    assert env["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0" and os.environ["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0a"
    assert said == dsops.arch_notes(os.environ) == ["TORCH_CUDA_ARCH_LIST 8.0;9.0a given to the processes gputopo"
                                                    " starts as 8.0;9.0: DeepSpeed 0.19.8 cannot parse 9.0a"]
    assert dsops.deepspeed_env(env, said.append) == env and len(said) == 1   # bench's env, mended already
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0;Hopper")
    assert "TORCH_CUDA_ARCH_LIST" not in dsops.deepspeed_env(os.environ)
    monkeypatch.setattr(dsops, "installed_version", lambda: None)   # no DeepSpeed: left as it is
    assert dsops.deepspeed_env(os.environ)["TORCH_CUDA_ARCH_LIST"] == "8.0;Hopper" and not dsops.arch_notes(os.environ)
