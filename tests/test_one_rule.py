"""Issue 49: one figure and one rule for one thing: the NVMe space a config needs, what "short" means, and a
DeepSpeed default that --model would have sized."""
import json

from click.testing import CliRunner

from gputopo.cli import cli


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_the_nvme_note_and_the_plan_say_one_figure():
    """The --auto note said 51.7 GiB free per node where its own plan said 46.0 (the parameters stay on the GPU:
    only the optimizer is on NVMe)."""
    for offload in ("--offload-params", "--no-offload-params"):
        r = run("deepspeed-config", "--auto", "--model", "qwen2.5-3b", "--gpus", "1", "--gpu-mem", "24GiB",
                "--cpu-mem", "16GiB", "--nvme-free", "1TB", offload, "--json")
        d = json.loads(r.stdout)
        rec = d["plan"]["recommendation"]["strategy"]
        assert rec == "zero3_offload_nvme", rec
        row = next(s for s in d["plan"]["strategies"] if s["name"] == rec)
        said = next(w for w in d["warnings"] if "free per node" in w)
        assert f"{row['nvme_bytes'] / 2 ** 30:.1f} GiB free per node" in said


def test_short_says_its_rule():
    """GPU memory is short of all of it (90-100 % is tight); CPU RAM of the 90 % training may take: said so."""
    r = run("plan", "--model", "llama-2-7b", "--gpus", "1", "--gpu-mem", "24GiB", "--cpu-mem", "64GiB", "--json")
    rows = {s["name"]: s for s in json.loads(r.stdout)["strategies"]}
    why = " ".join(rows["zero3_offload_cpu"]["why_not"])
    assert "of CPU RAM, above 90 % of 64.0 GiB" in why and "short of 57.6 GiB" in why


def test_nvme_buffers_without_a_model_are_said_to_be_deepspeed_s_default(tmp_path):
    r = run("deepspeed-config", "--stage", "3", "--offload", "nvme", "--nvme-path", tmp_path, "--json")
    d = json.loads(r.stdout)
    assert d["config"]["zero_optimization"]["offload_param"]["buffer_size"] == 100_000_000
    assert any("--model sizes it" in w and "More elements" in w for w in d["warnings"])
    r = run("deepspeed-config", "--stage", "3", "--offload", "nvme", "--nvme-path", tmp_path, "--model", "llama-3-8b",
            "--nvme-free", "1TB", "--json")
    d = json.loads(r.stdout)
    assert d["config"]["zero_optimization"]["offload_param"]["buffer_size"] == 128256 * 4096
    assert not any("--model sizes it" in w for w in d["warnings"])


# --- the hostile round on the final code (issue 49's last "done when") --------------------------------------------

def test_a_config_key_the_family_ignores_is_still_checked(tmp_path):
    """A GPT-2 config.json with "head_dim": "64" was exit 70 (models.structure read it); num_labels 10**12 made
    transformers build an id2label of that size (unbounded memory)."""
    for key, value in (("head_dim", "64"), ("head_dim", -1), ("num_labels", 10 ** 12)):
        folder = tmp_path / f"{key}{value}"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 128, "n_layer": 2,
                                                        "n_head": 4, "vocab_size": 1000, "n_positions": 128,
                                                        key: value}))
        r = run("plan", "--model", folder, "--gpus", "2", "--gpu-model", "A100-80GB")
        assert r.exit_code == 2 and f"config.json {key}" in r.output and r.output.count("\n") == 1, r.output


def test_the_fsdp_config_is_not_written_over_the_deepspeed_one(tmp_path):
    r = run("deepspeed-config", "--auto", "--model", "llama-2-13b", "--gpus", "2", "--gpu-model", "RTX 4090",
            "--finetune", "lora", "--launcher", "accelerate", "-o", tmp_path / "accelerate_fsdp_config.yaml")
    assert r.exit_code == 2 and "writes a file of that name" in r.output and not list(tmp_path.iterdir())


def test_qlora_on_a_params_model_too_small_for_its_shape_is_refused():
    """Was: 'ddp, -19.5 TiB per GPU' recommended (the NF4 base subtracted more Linear weights than --params holds)."""
    r = run("plan", "--params", "2T", "--hidden-size", "1000000", "--layers", "1", "--finetune", "qlora",
            "--lora-targets", "all-linear", "--gpus", "2", "--gpu-model", "H100")
    assert r.exit_code == 2 and "fewer than the" in r.output


def test_pcie_parts_and_many_gpus_get_a_believable_host():
    from gputopo import datasheets
    assert datasheets.host_cores("H100", None, 8, "PHB")[0] == 16          # the link says PCIe cards
    assert datasheets.host_cores("A100-40GB", None, 8, "NV12")[0] == 128   # the DGX A100 of 8 x 40 GB
    assert datasheets.host_cores("H100", None, 1024, None)[0] == 112       # never more than a whole DGX's
