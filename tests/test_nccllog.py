"""`gputopo inspect --nccl-log` (issue 20): real NCCL_DEBUG=INFO pastes, one test each, with what a person reads
in them written down here as data (counted by eye and grep, never by running the parser); the CLI around it; the
check against a `topo -m`; and junk, cut and shuffled text, which must never raise anything but BadInput."""
import contextlib
import io
import itertools
import json
import os
import re
import subprocess
import sys
import textwrap
import tracemalloc

import pytest
from click.testing import CliRunner
from conftest import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from gputopo import nccllog, parse
from gputopo.cli import cli
from gputopo.errors import BadInput

LOGS = FIXTURES / "nccl"
TOPO = FIXTURES / "topo"
NV12 = TOPO / "dgx_a100_nv12_mlx5_old_names_trailing_cmds.txt"   # 8x A100, every pair NV12, mlx5 NICs


def F(version, hosts, transports, gdrdma, **more):
    """What one fixture holds: NCCL version, hosts in order of appearance, {KIND: connection lines}, GPUDirect RDMA,
    and any other summary key worth checking."""
    return {"version": version, "hosts": hosts, "transports": transports, "gdrdma": gdrdma, **more}


H16 = [f"ip-172-31-{h}" for h in ("11-92", "6-84", "10-82", "10-87", "10-85", "14-180", "0-11", "4-37", "8-187",
                                  "1-93", "6-136", "2-97", "13-243", "8-153", "0-8", "5-166", "12-227")]
H15 = [f"ip-172-31-{h}" for h in ("0-119", "5-237", "7-247", "5-41", "4-37", "8-150", "5-166", "3-134", "0-88",
                                  "1-93", "8-135", "11-219", "13-243", "1-46", "7-227")]
L20 = "sh9-machine-20250813085604-64df4c99dc-m27xf"
K8S = "job-3bb823c0-6d27-4312-8094-1c5910bf9b51-worker-0"
POD = "nvidia-p2p-rdma-test-64ff5b88b-"
OFI = "ncclUNK-8xA100-p4d-sagemaker-ofi-"
EXPECTED = {
    "nccl2.10.3-2gpu-1node-no-p2p-socket-lo-torchrun.log": F("2.10.3", ["ava-s0"], {}, None),
    "nccl2.10.3-2gpu-power9-lassen-ib-channel-ringlist.log": F("2.10.3", ["lassen206"], {}, None, channels=6),
    "nccl2.10.3-4gpu-1node-socket-warn-blank-lines-fence-glued.log": F(
        "2.10.3", ["ai"], {}, None, warnings=["Failed to open libibverbs.so[.1]"]),
    "nccl2.10.3-8gpu-1node-direct-shared-memory-mixed-p2p-ipc.log": F(None, ["ava-s0"], {"P2P": 2, "SHM": 3}, None),
    "nccl2.11.4-2node-8xA100-ib-gdrdma-p2p-ipc-read-part2-channels.log": F(
        None, ["cosmos-hpc-100a45", "cosmos-hpc-100a55"], {"P2P": 7, "NET/IB": 4}, True),
    "nccl2.11.4-2node-8xA100-ib-part1-init.log": F("2.11.4", ["cosmos-hpc-100a55", "cosmos-hpc-100a45"], {}, None),
    "nccl2.11.4-2node-dgxa100-net-socket-forced-env-lines.log": F(
        "2.11.4", ["gpu01", "gpu02"], {}, None, env={"NCCL_SOCKET_IFNAME": "en"}),
    "nccl2.12.12-2proc-1gpu-each-ib-roce-nvml-warn-ringlist.log": F("2.12.12", ["gcn6"], {}, None, channels=2),
    "nccl2.16.2-2pod-1node-roce-ibext-sharp-plugin-backtick.log": F("2.16.2", [POD + "h57l5", POD + "kndtr"], {},
                                                                     None),
    "nccl2.16.2-2pod-1node-roce-net-ibext-no-gdr-channels.log": F(None, [POD + "kndtr", POD + "h57l5"],
                                                                   {"NET/IB": 10}, False),
    "nccl2.18-8xH800-1proc-p2p-direct-pointer-part1-channels.log": F(None, ["036260b61d3a"], {"P2P": 13}, None),
    "nccl2.18-8xH800-1proc-p2p-direct-pointer-part2-trees-nvls0-ncclalgo-env.log": F(
        None, ["036260b61d3a"], {"P2P": 2}, None, channels=16, nvls=False,
        env={"NCCL_ALGO": "Tree,Ring,,CollnetDirect,CollnetChain,NVLS"}),
    "nccl2.18-8xH800-1proc-part0-nccltests-header-init.log": F(None, ["036260b61d3a"], {}, None,
                                                               ranks_per_host={"036260b61d3a": 8}),
    "nccl2.20.5-8xH100-hgx-1proc-p2p-direct-pointer-24ch-snip-marker.log": F(None, ["devcontainer-gpu0005"],
                                                                             {"P2P": 12}, None),
    "nccl2.20.5-8xH100-hgx-1proc-trees-24ch-ringlist.log": F(None, ["devcontainer-gpu0005"], {}, None, channels=24),
    "nccl2.20.5-8xL20-1proc-part0-header-socket.log": F("2.20.5", [L20], {}, None),
    "nccl2.20.5-8xL20-1proc-pcie-p2p-direct-pointer-run2-connidx1.log": F(None, [L20], {"P2P": 11}, None),
    "nccl2.20.5-8xL20-1proc-pcie-p2p-direct-pointer-run2.log": F(None, [L20], {"P2P": 6}, None),
    "nccl2.20.5-8xL20-1proc-pcie-shm-direct-direct-run1.log": F(None, [L20], {"SHM": 11}, None),
    "nccl2.22.3-2node-16gpu-nvswitch-k8s-part1-nvls-affinity.log": F(None, [K8S], {}, None, nvls_available=True,
                                                                     nvls=None),
    "nccl2.22.3-2node-16gpu-nvswitch-k8s-part2-channel-ringlist-16.log": F(None, [K8S], {}, None, channels=16),
    "nccl2.22.3-2node-16gpu-nvswitch-k8s-part3-p2p-cumem.log": F(None, [K8S], {"P2P": 11}, None),
    "nccl2.23.4-4rank-RTX4090-socket-init-blank-line-between-every-line.log": F(
        "2.23.4", ["myles-System-Product-Name"], {}, None),
    "nccl2.24.3-8xH100-nvls-sharp-plugin-prefix-NCCL-INFO-only.log": F(
        "2.24.3", [], {}, None, env={"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_PCI_RELAXED_ORDERING": "1"}),
    "nccl2.24.3-8xH100-nvls-sharp-plugin-prefix-stripped.log": F(
        "2.24.3", [], {}, None, nvls_available=True, env={"NCCL_SOCKET_IFNAME": "eth0",
                                                          "NCCL_IB_PCI_RELAXED_ORDERING": "1"}),
    "nccl2.25.1-2node-16gpu-aks-mpijob-ib-gdrdma-p2p-cumem-read.log": F(
        None, ["nccl-tests-worker-0", "nccl-tests-worker-1"], {"P2P": 12, "NET/IB": 3}, True),
    "nccl2.25.1-2xRTX5090-p2p-disable-socket-init.log": F("2.25.1", ["localhost"], {}, None, nranks=2),
    "nccl2.27.5-2gpu-1node-shm-direct-with-proxy-trace-noise.log": F(None, ["2e5hmh4t0q1th5f"], {"SHM": 2}, None),
    "nccl2.27.5-2gpu-1node-socket-init-version-with-prefix.log": F("2.27.5", ["2e5hmh4t0q1th5f"], {}, None),
    "nccl2.29.2-2gpu-1node-p2p-disable-shm-disable-socket-git-version.log": F(
        "2.29.2", ["VM-16-64-ubuntu"], {}, None,
        env={"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_COMM_ID": "172.17.16.64:23456",
             "NCCL_DEBUG": "INFO"}),
    "nccl2.3.5-8xGPU-1node-ib-init-header-mixed-stdout.log": F("2.3.5", ["learnfair062"], {}, None),
    "nccl2.3x-8xGPU-1node-ring-p2p-ipc-garbled-interleave.log": F(None, ["learnfair062"], {"P2P": 17}, None),
    "nccl2.5.6-4gpu-1node-mpirun-tag-output-prefix-socket-lo.log": F("2.5.6", ["5873af64cf59"], {}, None),
    "nccl2.5.7-2gpu-tensorflow-bogus-cuda-version-p2p-disable-0-env.log": F(
        "2.5.7", ["wangying-system"], {}, None, env={"NCCL_IGNORE_CPU_AFFINITY": "1", "NCCL_P2P_DISABLE": "0"}),
    "nccl2.7.8-2node-p4d-efa-libfabric-nogdr-init-complete-nccltests-table.log": F(
        None, ["ip-172-31-6-104", "ip-172-31-13-103"], {"P2P": 1, "NET/AWS Libfabric": 2}, False, channels=2,
        nranks=16),
    "nccl2.7.8-4rank-1host-direct-shared-memory-and-p2p-ipc-warn.log": F(None, ["emu"], {"P2P": 1, "SHM": 1}, None),
    "nccl2.7.8-4rank-1host-pcie-socket-init-topo-dump.log": F("2.7.8", ["emu"], {}, None),
    "nccl2.9.9-2node-p4d-efa-libfabric-gdrdma-prefix-fully-stripped.log": F(
        None, [], {"P2P": 2, "NET/AWS Libfabric": 5}, True, nranks=16),
    "ncclUNK-2gpu-p2p-level-LOC-ib-disabled-socket-wrapped-trailing-spaces-part1.log": F(
        None, ["ncg12"], {}, None, env={"NCCL_IB_DISABLE": "1", "NCCL_P2P_LEVEL": "LOC"}),
    "ncclUNK-2gpu-p2p-level-LOC-shm-trailing-spaces-part2.log": F(None, ["ncg12"], {"SHM": 3}, None,
                                                                  env={"NCCL_P2P_LEVEL": "LOC"}),
    "ncclUNK-2node-16gpu-H20-sglang-socket-cumem-nvls-disabled-env.log": F(
        None, ["llm-bm-infer-service-prod-17389809006090t9a-1100014361"], {}, None, nvls=False,
        env={"NCCL_SOCKET_IFNAME": "eth0", "NCCL_CUMEM_ENABLE": "0", "NCCL_NVLS_ENABLE": "0"}),
    "ncclUNK-2node-16gpu-accelerate-pdsh-ip-prefix-part1-trees-ringlist.log": F(
        None, ["lambda-scalar02", "lambda-scalar03"], {}, None, channels=2),
    "ncclUNK-2node-16gpu-accelerate-pdsh-ip-prefix-part2-p2p-ipc-mixed-channel-forms.log": F(
        None, ["lambda-scalar02", "lambda-scalar03"], {"P2P": 9}, None),
    "ncclUNK-2node-16gpu-deepspeed-mixed-shm-p2p-ipc-ibext-gdrdma-and-nogdr.log": F(
        None, ["PHLRR3088"], {"P2P": 4, "SHM": 4, "NET/IB": 4}, True),
    "ncclUNK-2node-16gpu-net-socket-multi-nic-p2p-ipc-read.log": F(None, ["user"], {"P2P": 9, "NET/Socket": 3}, False),
    "ncclUNK-2node-16gpu-net-socket-p2p-ipc-read-redacted-hostname-part1.log": F(
        None, ["<cluster_name>"], {"P2P": 14, "NET/Socket": 2}, False),
    "ncclUNK-2node-16gpu-net-socket-p2p-ipc-read-redacted-hostname-part2-init.log": F(
        None, ["<cluster_name>"], {}, None, nvls=False, nvls_available=False, nranks=16),
    "ncclUNK-2node-1gpu-each-h200-efa-min-nchannels-env-ringlist.log": F(
        None, ["8h200-2"], {}, None, channels=8, env={"NCCL_MIN_NCHANNELS": "8"}),
    "ncclUNK-2node-1gpu-each-ib-pdsh-hostname-prefix-connected-tuning.log": F(None, ["gpu1505", "gpu1504"], {}, None,
                                                                              channels=2),
    "ncclUNK-2node-2xH20-ib-gdrdma-p2p-cumem-part0-cmdline-header.log": F(
        None, ["H20-GPU-05", "H20-GPU-06"], {}, None, ranks_per_host={"H20-GPU-05": 2, "H20-GPU-06": 2},
        env={"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,GRAPH", "NCCL_PXN_DISABLE": "1"}),
    "ncclUNK-2node-2xH20-ib-gdrdma-p2p-cumem-part1-channels.log": F(None, ["H20-GPU-06", "H20-GPU-05"],
                                                                    {"P2P": 5, "NET/IB": 9}, True),
    "ncclUNK-2node-2xH20-ib-gdrdma-p2p-cumem-part2-rings-trees-graph.log": F(None, ["H20-GPU-05", "H20-GPU-06"], {},
                                                                             None),
    "ncclUNK-2node-2xH20-ib-gdrdma-p2p-cumem-part3-init-complete-nccltests-interleave.log": F(
        None, ["H20-GPU-06", "H20-GPU-05"], {}, None, channels=8, nvls=False, collnet=False),
    "ncclUNK-2node-8gpu-deepspeed-ibext-nogdr-p2p-ipc-read.log": F(
        None, ["ravg1038", "ravg1040"], {"P2P": 10, "NET/IB": 5}, False, ranks_per_host={"ravg1038": 4,
                                                                                       "ravg1040": 4}),
    "ncclUNK-2node-8gpu-p2p-cumem-interleaved-hosts.log": F(None, ["kolyoz2", "kolyoz1"], {"P2P": 18}, None,
                                                            ranks_per_host={"kolyoz2": 4, "kolyoz1": 4}),
    "ncclUNK-2node-8rank-megatron-blockquote-prefix-nvls-nchannels0.log": F(
        None, ["iv-ydin754tmoxjd1twgixh"], {}, None, nvls=False, nranks=8),
    "ncclUNK-2xL20-1node-shm-direct-direct-accelerate-deepspeed.log": F(
        None, ["Tencent-L20"], {"SHM": 4}, None, channels=2, nvls=False, collnet=False),
    "ncclUNK-3node-1gpu-each-roce-ibext-v8-port-fusion-p2p-level-LOC.log": F(
        None, ["bigo"], {"NET/IB": 3}, False, env={"NCCL_P2P_LEVEL": "LOC"}),
    "ncclUNK-4gpu-1node-anonymized-prefix-podid-num-num.log": F(None, ["pod-id"], {}, None, nvls=False),
    "ncclUNK-4gpu-1node-h800-comm-split-nvmldev-remap-init.log": F(None, ["tj5-sc-ai-h800r-dev01"], {}, None),
    "ncclUNK-4gpu-1node-h800-shm-direct-cudadev-remap.log": F(None, ["tj5-sc-ai-h800r-dev01"], {"SHM": 12}, None),
    "ncclUNK-4gpu-1proc-ringlist-single-spaced-16ch.log": F(None, ["deepseek"], {}, None, channels=16),
    "ncclUNK-4node-8gpu-ibext-v8-gdrdma-p2p-cumem-read-part2-trees-connected.log": F(
        None, ["gpu36", "gpu40", "gpu41"], {"P2P": 3, "NET/IB": 8}, True),
    "ncclUNK-4node-8gpu-ibext-v8-gdrdma-pxn-proxy-rank-p2p-cumem-read-part1.log": F(
        None, ["gpu41", "gpu34", "gpu36", "gpu40"], {"P2P": 10, "NET/IB": 6}, True),
    "ncclUNK-4node-8gpu-ibext-v8-part0-trees-comm-nnodes.log": F(None, ["gpu40", "gpu36", "gpu41", "gpu34"], {},
                                                                 None, nranks=8),
    "ncclUNK-4xT4-ci-runner-collnet-channels-count-symmetric.log": F(
        None, ["mt-l-x86iavx512-45-172-t4-4-csmpw-runner-g4sfw-workflow"], {}, None, channels=2, nvls=False,
        collnet=None),
    "ncclUNK-8gpu-1node-mixed-p2p-ipc-and-shm-accelerate.log": F(None, ["scc-f05"], {"P2P": 11, "SHM": 2}, None),
    "ncclUNK-8gpu-1proc-p2p-level-SYS-direct-pointer-pxn-gdr-connected-line.log": F(
        None, ["10-4-3-3"], {"P2P": 9}, None,
        env={"NCCL_P2P_DISABLE": "0", "NCCL_P2P_LEVEL": "SYS", "NCCL_DEBUG": "info"}),
    "ncclUNK-8gpu-p4d-docker-p2p-ipc-read-24ch-connected-rings.log": F(None, ["09677202c889"], {"P2P": 10}, None),
    "ncclUNK-8gpu-python-logging-prefix-ring-graph-lines.log": F(None, ["g340-cd51-4900-b72a-d104-a9bf-df48"], {},
                                                                 None, channels=24),
    "ncclUNK-8gpu-sagemaker-hf-leading-space-p2p-cumem-read-24ch.log": F(None, ["algo-1"], {"P2P": 7}, None,
                                                                         channels=24),
    "ncclUNK-8xA100-nvswitch-p2p-level-LOC-shm-part1-ib-env.log": F(
        None, ["user"], {}, None, env={"NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "mlx5_2:1,mlx5_0:1"}),
    "ncclUNK-8xA100-nvswitch-p2p-level-LOC-shm-part2-channels.log": F(None, ["user"], {"SHM": 13}, None),
    OFI + "cloudwatch-table-part1-init.log": F(
        None, ["algo-1"], {}, None, env={"NCCL_NVLSTREE_MAX_CHUNKSIZE": "512KiB", "NCCL_NVLS_CHUNKSIZE": "512KiB",
                                         "NCCL_TOPO_FILE": "/usr/local/share/aws-ofi-nccl/xml/p4d-24xl-topo.xml"}),
    OFI + "cloudwatch-table-part2-p2p-cumem-read.log": F(None, ["algo-1"], {"P2P": 9}, None),
    OFI + "cloudwatch-table-part3-libfabric-interleave.log": F(None, ["algo-1"], {"P2P": 9}, None),
    OFI + "cloudwatch-timestamp-own-line-part4-nvls-unavail.log": F(None, ["algo-1"], {}, None, nvls=False,
                                                                     nvls_available=False),
    OFI + "cloudwatch-timestamp-own-line-part5-connected-rings.log": F(None, ["algo-1"], {"P2P": 12}, None),
    OFI + "timestamp-own-line-part6-libfabric-gdrdma-shared-connidx1.log": F(
        None, ["algo-1"], {"P2P": 5, "NET/AWS Libfabric": 4}, True),
    "ncclUNK-8xH100-fastsocket-ring-graph-lines-ellipsis.log": F(None, ["nathan-h100-1"], {}, None),
    "ncclUNK-fmt2.4-2node-16gpu-efa-libfabric-ring-old-channel-ringlist.log": F(
        None, ["ip-192-168-16-255", "ip-192-168-29-243"], {"P2P": 2, "NET/AWS Libfabric": 2}, False, channels=2),
    "ncclUNK-fmt2.4-2node-16xV100pcie-ring-p2p-direct-pointer-ib-gdrdma-and-nogdr.log": F(
        None, ["gpu1", "gpu0"], {"P2P": 12, "NET/IB": 3}, True),
    "ncclUNK-fmt2.4-2node-16xV100pcie-ring-p2p-direct-pointer-ib-part0-nccltests-header.log": F(
        None, ["gpu1", "gpu0"], {}, None, ranks_per_host={"gpu1": 8, "gpu0": 8}),
    "ncclUNK-fmt2.4-64node-1gpu-net-socket-interleaved-part1.log": F(None, H16, {"NET/Socket": 11}, False, nranks=64),
    "ncclUNK-fmt2.4-64node-1gpu-net-socket-interleaved-part2.log": F(None, H15, {"NET/Socket": 10}, False, nranks=64),
    "ncclUNK-fmt2.5to2.6-2node-16gpu-ring-p2p-ipc-ib-gdrdma-stripped-prefix-numbered.log": F(
        None, [], {"P2P": 9, "NET/IB": 2}, True),
    "ncclUNK-fmt2.7-2gpu-pcie-topo-graph-search-old-trees-pipe-format.log": F(None, ["ubuntu"], {}, None),
    "ncclUNK-fmt2.7plus-8xV100-dgx2-trees-12ch-rank-only-prefix.log": F(None, [], {}, None),
    "ncclUNK-fmt2.7to2.11-4node-32gpu-aws-channel-ringlist-truncated.log": F(None, ["ip-172-31-0-226"], {}, None,
                                                                             channels=8),
    "ncclUNK-fmt2.8to2.11-2node-16gpu-p2p-direct-pointer-read-ib-gdrdma-part1.log": F(
        None, ["nodeb", "nodea"], {"P2P": 10, "NET/IB": 2}, True),
    "ncclUNK-fmt2.8to2.11-2node-16gpu-p2p-direct-pointer-read-ib-gdrdma-part2-collnet-warn.log": F(
        None, ["nodea", "nodeb"], {"P2P": 6, "NET/IB": 3}, True, channels=2, collnet=False,
        warnings=["CollNet is not supported or fails to initialize, ignoring NCCL_ALGO=COLLNET"]),
    "ncclUNK-fmt2.8to2.11-4node-16gpu-p2p-ipc-read-interleaved-hosts.log": F(
        None, ["gcn4", "gcn6", "gcn3", "gcn5"], {"P2P": 15}, None),
    "ncclUNK-k8s-2pod-ib-nogdr-p2p-ipc-read-boxdrawing-padded.log": F(None, ["task-420-bzbzn"],
                                                                      {"P2P": 1, "NET/IB": 4}, False),
    "ncclUNK-multinode-64rank-bootstrap-socket-ifname-env-details-tag.log": F(
        None, ["hostname-test"], {}, None, env={"NCCL_SOCKET_IFNAME": "bond0"}),
    "ncclUNK-multinode-64rank-nvls-tree-connected-init-complete.log": F(
        None, ["hostname-test"], {"NVLS": 2}, None, nvls=True, channels=16, collnet=False, nranks=64),
    "ncclUNK-multinode-8gpu-ibext-v8-plugin-nogdr-receive.log": F(None, ["hostname-test"], {"NET/IB": 13}, False),
    "ncclUNK-multinode-8gpu-p2p-cumem-gid-index-env-interleaved.log": F(None, ["hostname-test"], {"P2P": 14}, None,
                                                                        env={"NCCL_IB_GID_INDEX": "3"}),
}


def summary_of(name: str) -> dict:
    return nccllog.summary(nccllog.parse((LOGS / name).read_text(encoding="utf-8")))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_log_is_summarised(name):
    s = summary_of(name)
    for key, value in EXPECTED[name].items():
        assert s[key] == value, (key, s[key])


def test_every_fixture_log_has_expectations_and_a_source():
    logs = sorted(p.name for p in LOGS.glob("*.log"))
    assert logs == sorted(EXPECTED) and len(logs) == 97
    index = (LOGS / "SOURCES.md").read_text()
    assert all(f"{name}\thttps://github.com/" in index for name in logs)


def test_fixtures_cover_every_transport_form():
    """The issue asks for P2P/IPC, P2P/CUMEM, P2P/direct pointer, SHM, NET/IB (GDRDMA), NET/Socket and NVLS,
    single- and multi-node: each is in some real paste."""
    details = {p["detail"] for name in EXPECTED for p in summary_of(name)["pairs"]}
    for form in ("P2P/IPC", "P2P/CUMEM", "P2P/direct pointer", "SHM/direct/direct", "direct shared memory",
                 "NET/IB/0/GDRDMA", "NET/Socket/0", "NET/IBext_v8/5(2)/GDRDMA", "NET/AWS Libfabric/1/GDRDMA/Shared"):
        assert any(d.startswith(form) for d in details), form
    assert any(summary_of(n)["transports"].get("NVLS") for n in EXPECTED)


# --- what the summary says about GPUs, hosts and the variables --------------------------------------------------

def test_brackets_hold_nvml_indices_in_new_logs_and_cuda_devices_in_old_ones():
    """nccl#1609: CUDA_VISIBLE_DEVICES=4,5,6,7, so the prefix says [2] while NCCL prints nvmlDev 6: nvidia-smi's
    GPU 6. The 2.3 `Ring` form prints the CUDA device in brackets."""
    remap = summary_of("ncclUNK-4gpu-1node-h800-shm-direct-cudadev-remap.log")["pairs"]
    assert {(p["from"], p["to"]) for p in remap} == {("tj5-sc-ai-h800r-dev01 GPU 6", "tj5-sc-ai-h800r-dev01 GPU 7"),
                                                      ("tj5-sc-ai-h800r-dev01 GPU 7", "tj5-sc-ai-h800r-dev01 GPU 6")}
    old = summary_of("nccl2.3x-8xGPU-1node-ring-p2p-ipc-garbled-interleave.log")["pairs"]
    assert {"from": "learnfair062 GPU 7", "to": "learnfair062 GPU 3", "transport": "P2P", "detail": "P2P/IPC",
            "side": None, "gdr": None, "lines": 1} in old


def test_interleaved_hosts_keep_their_own_ranks():
    """Two hosts' lines alternate (nccl-tests#252); each pair stays on the host that printed it."""
    s = summary_of("ncclUNK-2node-8gpu-p2p-cumem-interleaved-hosts.log")
    hosts = {p["from"].split()[0] for p in s["pairs"]} | {p["to"].split()[0] for p in s["pairs"]}
    assert hosts == {"kolyoz1", "kolyoz2"}
    assert all(p["from"].split()[0] == p["to"].split()[0] for p in s["pairs"])
    assert {"from": "kolyoz2 GPU 3", "to": "kolyoz2 GPU 1"} in [{k: p[k] for k in ("from", "to")} for p in s["pairs"]]


def test_network_peers_are_placed_on_their_host():
    """A send line names the far rank only; its host comes from the lines that rank printed itself."""
    s = summary_of("ncclUNK-4node-8gpu-ibext-v8-gdrdma-pxn-proxy-rank-p2p-cumem-read-part1.log")
    pxn = next(p for p in s["pairs"] if p["detail"] == "NET/IBext_v8/5(2)/GDRDMA")
    assert (pxn["from"], pxn["to"], pxn["side"], pxn["gdr"]) == ("gpu36 GPU 1", "gpu40 GPU 0", "send", True)
    unknown = summary_of("nccl2.11.4-2node-8xA100-ib-gdrdma-p2p-ipc-read-part2-channels.log")["pairs"]
    assert {"from": "cosmos-hpc-100a45 GPU 3", "to": "rank 6"} in [{k: p[k] for k in ("from", "to")} for p in unknown]


def test_the_findings_a_person_acts_on():
    loc = summary_of("ncclUNK-2gpu-p2p-level-LOC-shm-trailing-spaces-part2.log")
    assert any("went through SHM" in f and "NCCL_P2P_LEVEL=LOC was set" in f for f in loc["findings"])
    assert "NCCL_P2P_LEVEL" in loc["settings"]
    one_way = summary_of("ncclUNK-fmt2.4-2node-16xV100pcie-ring-p2p-direct-pointer-ib-gdrdma-and-nogdr.log")
    assert any(f.startswith("GPUDirect RDMA on receive only: 2 send") for f in one_way["findings"])
    nogdr = summary_of("ncclUNK-2node-8gpu-deepspeed-ibext-nogdr-p2p-ipc-read.log")
    assert any(f.startswith("No GPUDirect RDMA on the 5 NET/IB") and "nvidia-peermem" in f for f in nogdr["findings"])
    failed = summary_of("nccl2.10.3-8gpu-1node-direct-shared-memory-mixed-p2p-ipc.log")
    assert any("could not enable P2P between devices 2-3 and 4-5" in f for f in failed["findings"])
    same_host = summary_of("ncclUNK-2node-16gpu-deepspeed-mixed-shm-p2p-ipc-ibext-gdrdma-and-nogdr.log")
    assert any(f.startswith("Ranks 11 and 12 on host PHLRR3088 connect through NET/IB") for f in same_host["findings"])
    socket = summary_of("ncclUNK-2node-16gpu-net-socket-p2p-ipc-read-redacted-hostname-part1.log")
    assert any(f.startswith("Traffic between hosts went through NET/Socket") for f in socket["findings"])


def log_of(*lines: str) -> str:
    return "\n".join(lines) + "\n"


def test_socket_explained_by_ib_disable_and_versions_that_differ():
    text = log_of("a:1:1 [0] NCCL INFO NCCL version 2.18.3+cuda12.1",
                  "b:2:2 [0] NCCL INFO NCCL version 2.19.3+cuda12.2",
                  "a:1:1 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.",
                  "a:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>",
                  "a:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0",
                  "b:2:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [receive] via NET/Socket/0")
    s = nccllog.summary(nccllog.parse(text))
    assert s["version"] == "2.18.3" and s["transports"] == {"NET/Socket": 2}
    assert s["gdrdma"] is False  # sockets never use GPUDirect RDMA: "no", not "unknown"
    assert any("NET/Socket (TCP): NCCL_IB_DISABLE=1 was set" in f for f in s["findings"])
    assert any(f.startswith("Hosts run different NCCL versions (2.18.3 on a; 2.19.3 on b)") for f in s["findings"])
    assert s["pairs"][0]["from"] == "a GPU 0" and s["pairs"][0]["to"] == "b GPU 0"


def test_hosts_that_connect_their_gpus_differently():
    text = log_of("a:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
                  "b:2:2 [0] NCCL INFO Channel 00 : 2[0] -> 3[1] via SHM/direct/direct")
    found = nccllog.summary(nccllog.parse(text))["findings"]
    assert any(f.startswith("Hosts connect their own GPUs differently in this log: P2P on a; SHM on b") for f in found)


def test_nvls_available_but_off():
    text = log_of("h:1:1 [0] NCCL INFO NVLS multicast support is available on dev 0",
                  "h:1:1 [0] NCCL INFO NCCL_NVLS_ENABLE set by environment to 0.")
    s = nccllog.summary(nccllog.parse(text))
    assert s["nvls"] is False and s["nvls_available"] is True
    assert s["findings"] == ["NVLS multicast (NVLink SHARP) is available but NCCL_NVLS_ENABLE=0 turns it off"]


def test_forms_no_fixture_shows():
    """NCCL's own strings (src/transport/coll_net.cc, nvls.cc, p2p.cc), an OFI plugin, PyTorch's version spelling,
    CRLF, a stripped prefix and a `direct shared memory` line."""
    text = ("NCCL INFO NCCL version 21.0.3\r\n"
            "h:1:1 [0] NCCL INFO CollNet 00/0 : 0 [send] via COLLNET/SHARP/0/GDRDMA\r\n"
            "h:1:1 [0] NCCL INFO Coll 01 : 0 [receive] via COLLNET/SHARP/0\r\n"
            "h:1:1 [0] NCCL INFO NVLS comm 0x5598478a4d90 headRank 2 nHeads 8 buffSize 4194304\r\n"
            "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 2[2] via P2P/indirect/1[1]\r\n"
            "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/OFI/0/GDRDMA\r\n"
            "[3] NCCL INFO Channel 01 : 3[3] -> 0[0] via direct shared memory\r\n")
    s = nccllog.summary(nccllog.parse(text))
    assert s["version"] == "2.10.3"
    assert s["transports"] == {"P2P": 1, "SHM": 1, "NVLS": 1, "COLLNET": 2, "NET/OFI": 1}
    assert s["collnet"] is True and s["nvls"] is True and s["gdrdma"] is True


def test_a_cut_or_wrapped_connection_line():
    """A cut line counts once its transport's name is whole; a line wrapped before it is joined back."""
    cut = nccllog.parse(log_of("h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CU",
                               "h:1:1 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via NET/Sock",
                               "h:1:1 [1] NCCL INFO Channel 01/0 : 1[1] -> 0[0] [se"))
    assert nccllog.transports(cut) == {"P2P": 1}
    wrapped = nccllog.parse(log_of("h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/I",
                                   "B/0/GDRDMA", "=> a line of the program's own"))
    assert [(c.kind, c.detail, c.gdr) for c in wrapped.connections] == [("NET/IB", "NET/IB/0/GDRDMA", True)]


def test_a_hole_of_nul_bytes_is_skipped_and_counted(tmp_path):
    """A crash or a full disk leaves NULs in a log file: the line they fell in is not whole, so it is skipped (a half
    connection line read as whole would count a transport that was never set up); the lines around it are read."""
    text = log_of("h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
                  "h:1:1 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via \x00\x00\x00NET/Socket/0",
                  "\x00" * 4096 + "h:1:1 [1] NCCL INFO Channel 01/0 : 1[1] -> 0[0] via SHM/direct/direct",
                  "h:1:1 [1] NCCL INFO Channel 01/0 : 1[1] -> 0[0] via P2P/CUMEM")
    for source in (text, (tmp_path / "nccl.log")):
        if not isinstance(source, str):
            source.write_text(text, encoding="utf-8")
            source = source.open(encoding="utf-8")
        s = nccllog.summary(nccllog.parse(source))
        assert s["transports"] == {"P2P": 2} and s["lines"]["nul"] == 2, s
        assert any("2 line(s) held NUL bytes" in f for f in s["findings"]), s["findings"]


def test_prose_that_names_a_variable_sets_nothing():
    text = log_of("I tried NCCL_P2P_DISABLE=1 and it hung.", "h:1:1 [0] NCCL INFO Connected all rings",
                  "$ NCCL_P2P_LEVEL=NVL torchrun train.py", "mpirun -x NCCL_IB_HCA=mlx5_0 ./a.out")
    assert nccllog.parse(text).env == {"NCCL_P2P_LEVEL": "NVL", "NCCL_IB_HCA": "mlx5_0"}


# --- the check against the machine's `nvidia-smi topo -m` -------------------------------------------------------

def synthetic(setting: str) -> str:
    """One host, 4 GPUs of the NV12 machine in one process, P2P turned off: NCCL 2.19+ prints NVML indices."""
    lines = [f"node1:100:101 [0] NCCL INFO {setting}"]
    for a, b in ((0, 1), (1, 2), (2, 3), (3, 0)):
        lines += [f"node1:100:10{a} [{a}] NCCL INFO Channel 0{c}/0 : {a}[{a}] -> {b}[{b}] via SHM/direct/direct"
                  for c in (0, 1)]
    return log_of(*lines)


@pytest.mark.parametrize("setting,why", [("NCCL_P2P_DISABLE set by environment to 1", "NCCL_P2P_DISABLE=1 was set"),
                                         ("NCCL_P2P_LEVEL set by environment to LOC", "NCCL_P2P_LEVEL=LOC was set")])
def test_cross_check_names_the_pairs_and_the_variable(setting, why):
    topo = parse.texts([NV12.read_text()])
    s = nccllog.summary(nccllog.parse(synthetic(setting)), topo)
    assert s["findings"][0] == f"GPU 0 -> 1, 1 -> 2, 2 -> 3 and 3 -> 0 went through SHM although they share NV12: {why}"
    assert s["cross_check"]["gpu_numbers"] == "nvml" and s["cross_check"]["hosts"] == ["node1"]
    assert {(r["from"], r["to"], r["link"], r["expected"]) for r in s["cross_check"]["pairs"]} == {
        ("GPU0", "GPU1", "NV12", "SHM"), ("GPU1", "GPU2", "NV12", "SHM"), ("GPU2", "GPU3", "NV12", "SHM"),
        ("GPU3", "GPU0", "NV12", "SHM")}
    assert not any("pair(s) of GPUs went through SHM" in f for f in s["findings"])  # the checked sentence says it


def test_cross_check_of_a_real_log_with_cuda_numbers():
    """nccl-tests#228: every pair through SHM on an NVSwitch A100 (NCCL_P2P_LEVEL=LOC, in the thread's prose only);
    NCCL 2.1x prints bus ids, so the GPU numbers are CUDA's and the check says so."""
    topo = parse.texts([NV12.read_text()])
    s = summary_of_with("ncclUNK-8xA100-nvswitch-p2p-level-LOC-shm-part2-channels.log", topo)
    assert s["findings"][0].startswith("GPU 7 -> 6, 4 -> 3, 3 -> 2, 5 -> 4 and 2 more went through SHM although they"
                                       " share NV12: nothing in the log explains it")
    assert s["cross_check"]["gpu_numbers"] == "cuda" and any("CUDA device numbers" in f for f in s["findings"])


def test_cross_check_p2p_across_sys_and_a_topology_too_small():
    topo = parse.texts([(TOPO / "rtx4090x8_all_sys_2nic.txt").read_text()])
    s = summary_of_with("ncclUNK-8gpu-1proc-p2p-level-SYS-direct-pointer-pxn-gdr-connected-line.log", topo)
    assert any("used P2P across SYS: NCCL_P2P_LEVEL=SYS allowed it" in f for f in s["findings"])
    small = parse.texts([(TOPO / "rtx5090x2_phb.txt").read_text()])
    s = summary_of_with("ncclUNK-8gpu-1proc-p2p-level-SYS-direct-pointer-pxn-gdr-connected-line.log", small)
    assert any(f.startswith("The log names GPU(s) 2, 3, 4, 5 and 1 more that this topology lacks") for f in
               s["findings"])


def test_cross_check_gpudirect_against_the_nic_distance():
    topo = parse.texts([NV12.read_text()])
    s = summary_of_with("ncclUNK-k8s-2pod-ib-nogdr-p2p-ipc-read-boxdrawing-padded.log", topo)
    assert any("share PXB with a NIC, yet NET/IB used no GPUDirect RDMA" in f for f in s["findings"])


def summary_of_with(name: str, topo) -> dict:
    return nccllog.summary(nccllog.parse((LOGS / name).read_text(encoding="utf-8")), topo)


# --- the command line -------------------------------------------------------------------------------------------

def run(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


def one_line_error(r, text, code=2):
    assert r.exit_code == code and r.stdout == "" and r.output.count("\n") == 1 and text in r.output, r.output


def test_cli_text_json_and_stdin():
    path = LOGS / "ncclUNK-2gpu-p2p-level-LOC-shm-trailing-spaces-part2.log"
    text = run("inspect", "--nccl-log", path)
    assert text.exit_code == 0 and "SHM   3      SHM/direct/direct" in text.stdout
    assert "NCCL_P2P_LEVEL=LOC: no P2P over NVLink or PCIe between any GPUs" in text.stdout
    data = json.loads(run("inspect", "--nccl-log", "-", "--json", input=path.read_text()).stdout)
    assert data["schema_version"] == 1 and data["inputs"] == ["stdin"]
    assert set(data["nccl"]) >= {"version", "hosts", "ranks_per_host", "transports", "gdrdma", "channels", "nvls",
                                 "collnet", "env", "pairs", "findings", "cross_check"}
    assert data["nccl"]["transports"] == {"SHM": 3} and data["nccl"]["env"] == {"NCCL_P2P_LEVEL": "LOC"}


def test_cli_cross_check_with_from_file_and_example():
    log = LOGS / "ncclUNK-8xA100-nvswitch-p2p-level-LOC-shm-part2-channels.log"
    data = json.loads(run("inspect", "--nccl-log", log, "-f", NV12, "--json").stdout)
    assert data["inputs"] == [str(log), str(NV12)] and data["nccl"]["cross_check"]["pairs"]
    text = run("inspect", "--nccl-log", log, "--example", "dgx-a100").stdout
    assert "Against the topology (6 pairs; GPU numbers: cuda):" in text


def test_cli_markdown_reads_back():
    log = LOGS / "ncclUNK-2node-8gpu-deepspeed-ibext-nogdr-p2p-ipc-read.log"
    md = run("inspect", "--nccl-log", log, "--markdown").stdout
    assert md.startswith("### NCCL log (gputopo ") and "#### Findings" in md and "```text\n" in md
    again = json.loads(run("inspect", "--nccl-log", "-", "--json", input=md).stdout)["nccl"]
    first = summary_of(log.name)
    assert {k: again[k] for k in ("transports", "hosts", "gdrdma", "pairs")} == {
        k: first[k] for k in ("transports", "hosts", "gdrdma", "pairs")}


@pytest.mark.parametrize("args,input,message", [
    (["--nccl-log", "/nonexistent/nccl.log"], None, "Error: /nonexistent/nccl.log: no such file"),
    (["--nccl-log", "-"], "", "Error: stdin: empty, not an NCCL_DEBUG=INFO log"),
    (["--nccl-log", "-"], "Epoch 1 loss 2.3\nall good\n", "Error: stdin: no NCCL_DEBUG=INFO lines: run the job with"),
    (["--nccl-log", str(TOPO / "rtx5090x2_phb.txt")], None, "no NCCL_DEBUG=INFO lines"),
    (["--nccl-log", "-", "--model", "gpt2"], "x", "--model: nothing to do with --nccl-log"),
    (["--nccl-log", "-", "--gpu-ids", "0,1", "--plot", "x.png"], "x", "--gpu-ids, --plot: nothing to do with"),
    (["--nccl-log", "-", "--markdown", "--json"], "x", "--markdown and --json exclude each other"),
    (["--nccl-log", "-", "-f", "-"], "x", "both read stdin"),
    (["--nccl-log", "-", "--example", "list"], "x", "--example list lists the examples"),
])
def test_cli_refusals_are_one_line(args, input, message):
    one_line_error(run("inspect", *args, input=input), message)


# --- junk never raises anything but BadInput --------------------------------------------------------------------

ALL_TEXT = [(LOGS / n).read_text(encoding="utf-8") for n in sorted(EXPECTED)]


def parse_or_refuse(text: str) -> None:
    try:
        log = nccllog.parse(text)
    except BadInput as e:
        assert str(e).startswith("no NCCL_DEBUG=INFO lines")
        return
    json.dumps(nccllog.summary(log, parse.texts([NV12.read_text()])))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=400))
def test_random_text(text):
    parse_or_refuse(text)


NCCLISH = st.sampled_from(["NCCL INFO ", "NCCL WARN ", "Channel ", "Ring ", " -> ", " via ", "P2P/", "NET/IB/",
                           "NET/", "SHM/", "[send]", "[receive]", "/GDRDMA", "h:1:2 ", "[3] ", "0[0]", "12[1a000]",
                           "00/0 : ", " : ", "\n", "\r\n", "NCCL_P2P_LEVEL set by environment to ", "=", "$ ",
                           "NCCL version 2.", "rank 3 nranks 4 cudaDev 1 nvmlDev ", "coll channels, ", "`", "> "])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(NCCLISH, st.text(max_size=5)), max_size=60))
def test_random_nccl_words(parts):
    parse_or_refuse("".join(parts))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(ALL_TEXT) - 1), st.integers(0, 4000), st.integers(0, 4000), st.randoms())
def test_cut_and_shuffled_fixtures(i, start, length, rnd):
    text = ALL_TEXT[i][start:start + length]
    lines = text.split("\n")
    rnd.shuffle(lines)
    parse_or_refuse("\n".join(lines))
    parse_or_refuse(re.sub(r"NCCL INFO", "", text))


# --- pastes a terminal, an editor or a careless program spoiled, and logs of any size (issue 33) ---------------

def folded(text: str, width: int = 80) -> str:
    """As `fold -w 80` or a terminal's copy cuts it: every `width` characters."""
    return "\n".join(line[i:i + width] for line in text.split("\n") for i in range(0, max(len(line), 1), width))


def word_wrapped(text: str, width: int = 80) -> str:
    """As an editor or a mail client wraps it: at spaces, which it drops."""
    return "\n".join(piece for line in text.split("\n")
                     for piece in (textwrap.wrap(line, width, break_on_hyphens=False) or [""]))


CONNECTED = [name for name in sorted(EXPECTED) if EXPECTED[name]["transports"]]


@pytest.mark.parametrize("name", CONNECTED)
def test_a_log_wrapped_at_80_columns_reads_as_the_log(name):
    """A hard wrap lost half of a log's NET/IB lines: every connection of every real paste is read back, the way
    that makes it whole (a terminal cuts mid-word, an editor at a space it drops)."""
    text = (LOGS / name).read_text(encoding="utf-8")
    first = nccllog.summary(nccllog.parse(text))
    for wrapped, keys in ((folded(text), ("transports", "hosts", "gdrdma", "pairs")),
                          (word_wrapped(text), ("transports", "hosts", "gdrdma"))):
        again = nccllog.summary(nccllog.parse(wrapped))
        assert {k: again[k] for k in keys} == {k: first[k] for k in keys}


def test_glued_lines_invent_no_host_and_no_finding():
    """Two lines written without a newline between them: `...GDRDMAn2:2:2 [0] NCCL INFO`. A host seen before is
    split off; an unknown one leaves both halves out, said so, never a host `GDRDMAn2` with its own finding."""
    name = "nccl2.11.4-2node-8xA100-ib-gdrdma-p2p-ipc-read-part2-channels.log"
    lines = (LOGS / name).read_text(encoding="utf-8").splitlines()
    first = summary_of(name)
    at = next(i for i, line in enumerate(lines) if "GDRDMA" in line)
    once = nccllog.summary(nccllog.parse("\n".join(lines[:at] + [lines[at] + lines[at + 1]] + lines[at + 2:])))
    keys = ("hosts", "transports", "gdrdma", "pairs", "findings")
    assert {k: once[k] for k in keys} == {k: first[k] for k in keys} and once["lines"]["damaged"] == 0
    pairs = nccllog.summary(nccllog.parse("\n".join("".join(lines[i:i + 2]) for i in range(0, len(lines), 2))))
    assert pairs["hosts"] == first["hosts"] and pairs["gdrdma"] is True
    assert pairs["lines"]["damaged"] == 2 and pairs["findings"][0].startswith("2 log lines were glued")
    assert not any("nvidia-peermem" in f or "GPUDirect RDMA on" in f for f in pairs["findings"])
    unknown = nccllog.summary(nccllog.parse(log_of(
        "n1:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA"
        "n2:2:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [receive] via NET/IB/0/GDRDMA",
        "n2:2:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 8[0] [receive] via NET/IB/0/GDRDMA",
        "n1:1:1 [0] NCCL INFO Channel 01/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA")))
    assert unknown["hosts"] == ["n1", "n2"] and unknown["gdrdma"] is True and unknown["lines"]["damaged"] == 2
    assert unknown["transports"] == {"NET/IB": 2} and len(unknown["findings"]) == 1


def test_an_excerpt_read_back_says_it_is_one():
    """--markdown keeps the first 40,000 characters of the log; read back, the summary says its counts are the
    excerpt's and how many lines were left out."""
    text = (LOGS / "ncclUNK-2node-8gpu-deepspeed-ibext-nogdr-p2p-ipc-read.log").read_text(encoding="utf-8") * 200
    md = run("inspect", "--nccl-log", "-", "--markdown", input=text).stdout
    assert "more lines left out (attach the whole log)" in md
    again = json.loads(run("inspect", "--nccl-log", "-", "--json", input=md).stdout)["nccl"]
    whole = nccllog.summary(nccllog.parse(text))
    assert again["lines"]["left_out"] > 0 and again["lines"]["nccl"] + again["lines"]["left_out"] >= whole[
        "lines"]["nccl"]
    assert again["findings"][0].startswith(f"This is an excerpt: {again['lines']['left_out']} more lines")
    md_again = run("inspect", "--nccl-log", "-", "--markdown", input=md).stdout   # an excerpt of an excerpt
    assert f"... {again['lines']['left_out']} more lines left out" in md_again


class Generated(io.TextIOBase):
    """A log of `size` characters made as it is read: parse must not keep it."""

    def __init__(self, size: int):
        self.left = size
        self.lines = (f"node{n % 64}:{1000 + n}:{2000 + n} [{n % 8}] NCCL INFO Channel {n % 32:02d}/0 :"
                      f" {n % 512}[{n % 8}] -> {(n + 1) % 512}[{(n + 1) % 8}] via P2P/CUMEM/read\n"
                      for n in itertools.count())

    def readable(self):
        return True

    def read(self, n=-1):
        out, size = [], 0
        while self.left > 0 and size < n:
            line = next(self.lines)
            out.append(line)
            size += len(line)
            self.left -= len(line)
        return "".join(out)


def peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_log_of_any_size_in_bounded_memory():
    """A 200 MB log took 863 MB: it is streamed now, memory holding what the log says (distinct connections, the
    lines --markdown keeps), not the log: four times the log, not more memory."""
    small = peak_bytes(lambda: nccllog.parse(Generated(1_500_000)))
    large = peak_bytes(lambda: nccllog.parse(Generated(6_000_000)))
    assert large < small * 1.3 and large < 8 * 2**20, (small, large)
    log = nccllog.parse(Generated(6_000_000))
    assert len(log.connections) <= 512 * 32 and sum(len(x) + 1 for x in log.read) <= nccllog.KEPT_CHARS
    assert log.read_left + len(log.read) == log.lines


def test_a_line_without_end_is_read_in_part():
    """A file of one endless line (or binary junk with no newline) costs no more memory than LONGEST_LINE."""
    text = "x" * (3 * nccllog.LONGEST_LINE) + "\nh:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"
    raw = [line for lines in nccllog._raw(io.StringIO(text)) for line in lines]
    assert [len(x) for x in raw[:1]] == [nccllog.LONGEST_LINE] and raw[1].endswith("via P2P/IPC")
    assert nccllog.transports(nccllog.parse(io.StringIO(text))) == {"P2P": 1}


def gputopo_process(*args, **kw):
    return subprocess.run([sys.executable, "-m", "gputopo", *args], capture_output=True, text=True, timeout=60, **kw)


@pytest.mark.parametrize("path,stdin,message", [
    ("/dev/zero", "", "/dev/zero: a device, not a file"),
    ("/dev/urandom", "", "/dev/urandom: a device, not a file"),
    ("-", "/dev/zero", "stdin: binary file, not "),
    ("-", "/dev/urandom", "stdin: binary file, not "),
    ("-", None, "stdin is closed: give a file, or pipe the text in"),
])
def test_devices_and_a_closed_stdin_are_one_line(path, stdin, message):
    """Tracebacks before, for an NCCL log and a topology alike; /dev/zero on stdin was read until memory ran out."""
    for option in ("--nccl-log", "-f"):
        with open(stdin, "rb") if stdin else contextlib.nullcontext() as f:
            how = {"stdin": f} if f else {"preexec_fn": lambda: os.close(0)} if stdin is None else {}
            r = gputopo_process("inspect", option, path, **how)
        assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
        assert r.stderr.startswith(f"Error: {message}"), r.stderr
