"""Issue 50: a described machine's host is assumed for its class and said, with the step at both ends of what the
assumption spans; the network between nodes, assumed, stands in the Assumed line."""
import json

from click.testing import CliRunner

from gputopo import datasheets
from gputopo.cli import cli


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_the_class_of_a_described_host():
    assert datasheets.host_cores("H100", None, 8)[:2] == (112, (56, 112))    # DGX H100: 2 x 56 cores
    assert datasheets.host_cores("A100-80GB", None, 4)[:2] == (64, (32, 64))  # half a DGX A100's 128
    assert datasheets.host_cores("H100 PCIe", None, 2)[:2] == (16, (16, 64))  # not the board a DGX carries
    assert datasheets.host_cores("RTX 4090", None, 4)[:2] == (16, (16, 64))


def test_offload_gets_a_step_at_the_assumed_cores_and_both_ends():
    """Was "no step time: host link, CPU Adam or NVMe rate unknown" where only the core count was missing."""
    args = ["plan", "--model", "mistral-7b", "--gpus", "4", "--gpu-model", "RTX 4090", "--cpu-mem", "256GiB"]
    d = json.loads(run(*args, "--json").stdout)
    assert d["layout"]["cpu_cores"] == 16 and d["layout"]["cpu_cores_range"] == [16, 64]
    rec = d["recommendation"]["strategy"]
    assert "offload" in rec and next(s for s in d["strategies"] if s["name"] == rec)["time"]["step_s"]
    assert d["host_spread"]["cores"] == [16, 64] and all(d["host_spread"]["step_s"])
    head = " ".join(run(*args).stdout.splitlines()[:4])
    assert "assuming 16 CPU cores per node, --cpu-cores:" in " ".join(head.split())
    given = json.loads(run(*args, "--cpu-cores", "32", "--json").stdout)
    assert given["layout"]["cpu_cores_range"] is None and given["host_spread"] is None


def test_the_network_between_nodes_is_said_when_assumed():
    args = ["plan", "--model", "llama-2-13b", "--gpus", "8", "--nodes", "2", "--gpu-model", "H100", "--cpu-mem", "1TB"]
    text = " ".join(run(*args).stdout.split())
    assert "Assumed: network between nodes (--inter-node-gbps)" in text
    text = " ".join(run(*args, "--inter-node-gbps", "400").stdout.split())
    assert "network between nodes" not in text


def test_the_launch_gives_each_rank_the_cores_the_plan_priced(tmp_path):
    """Was: CPU Adam priced on 112 cores while the sbatch asked for 16 CPUs and torchrun set 1 thread a rank."""
    args = ["deepspeed-config", "--auto", "--model", "llama-2-70b", "--gpus", "8", "--nodes", "2", "--gpu-model",
            "H100", "--cpu-cores", "112", "--cpu-mem", "2TB"]
    r = run(*args, "--launcher", "slurm", "-o", tmp_path / "ds.json", "--json")
    d = json.loads(r.stdout)
    assert "offload" in d["plan"]["recommendation"]["strategy"]
    batch = (tmp_path / "train.sbatch").read_text()
    assert "#SBATCH --cpus-per-task=112" in batch and "export OMP_NUM_THREADS=14" in batch
    d = json.loads(run(*args, "--launcher", "torchrun", "--json").stdout)
    assert d["launch"]["command"].startswith("OMP_NUM_THREADS=14 torchrun ")
    # no offload, no CPU Adam: the launch is left as torchrun makes it
    d = json.loads(run("deepspeed-config", "--auto", "--model", "gpt2", "--gpus", "2", "--gpu-model", "H100",
                       "--cpu-cores", "112", "--launcher", "torchrun", "--json").stdout)
    assert "offload" not in d["plan"]["recommendation"]["strategy"]
    assert d["launch"]["command"].startswith("torchrun ")
