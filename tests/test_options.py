"""One option layer (issue 14): values checked once and meaning the same in every command, the rules that
relate options in one place, and every option of every command shown changing the result or refused.

The walk at the bottom fails when a command gains an option with no entry in WALK: add one that shows what
the option does (or how it is refused).
"""
import contextlib
import json
import os

import pytest
from click.testing import CliRunner
from conftest import FIXTURES

from gputopo import gpus as catalog
from gputopo import request
from gputopo.cli import cli
from gputopo.errors import BadInput
from gputopo.units import parse_size, size

GIB, MIB = 2 ** 30, 2 ** 20
TOPO = FIXTURES / "topo"


def run(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


def one_line_usage_error(r, text):
    """Every refusal: exit 2, one `Error:` line naming the problem, no traceback, nothing on stdout."""
    assert r.exit_code == 2, (r.exit_code, r.output)
    assert r.output.startswith("Error: ") and r.output.count("\n") == 1 and text in r.output, r.output
    assert r.stdout == "" and "Traceback" not in r.output


# --- sizes: binary units as GPUs are sold and printed -----------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("80GB", 80 * GIB), ("80G", 80 * GIB), ("80GiB", 80 * GIB), ("80 GB", 80 * GIB), ("16000MiB", 16000 * MIB),
    ("16000MB", 16000 * MIB), ("1.5TB", int(1.5 * 2 ** 40)), ("512K", 512 * 1024), ("4096B", 4096),
])
def test_sizes_are_binary(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["24Gb", "80 gb", "16000Mib", "100b"])
def test_a_lowercase_b_is_bits_so_a_size_refuses_it(text):
    """Issue 18: `--gpu-mem 24Gb` was 24 GiB while `200Gb/s` is bits; a lowercase b now means bits everywhere."""
    with pytest.raises(ValueError, match="a lowercase b is bits; sizes are bytes"):
        parse_size(text)
    r = run("plan", "--model", "gpt2", "--gpus", "1", "--gpu-mem", text)
    assert r.exit_code == 2 and r.stderr.startswith(f"Error: --gpu-mem {text}: a lowercase b is bits")


@pytest.mark.parametrize("text,msg", [("24", "give a unit, e.g. 24GB"), ("-3GB", "positive"), ("0GB", "positive"),
                                      ("lots", "expected a positive size"), ("12XB", "expected a positive size")])
def test_sizes_refused(text, msg):
    with pytest.raises(ValueError, match=msg):
        parse_size(text)


def test_80gb_card_is_not_7_percent_short():
    """Issue 14: `--gpu-mem 80GB` became 74.5 GiB; an 80GB A100 has 81920 MiB as nvidia-smi prints it."""
    data = json.loads(run("plan", "--json", "--model", "gpt2", "--gpus", "8", "--gpu-mem", "80GB").output)
    assert data["layout"]["gpu_mem_bytes"] == 80 * GIB == 81920 * MIB
    data = json.loads(run("plan", "--json", "--model", "gpt2", "--gpus", "1", "--gpu-mem", "16GB").output)
    assert data["layout"]["gpu_mem_bytes"] == 16 * GIB


def test_bare_number_refused_everywhere():
    one_line_usage_error(run("plan", "--model", "gpt2", "--gpus", "2", "--gpu-mem", "24"),
                         "Error: --gpu-mem 24: give a unit, e.g. 24GB")
    one_line_usage_error(run("deepspeed-config", "--auto", "--model", "gpt2", "--gpus", "2", "--gpu-mem", "24GB",
                             "--cpu-mem", "64"), "--cpu-mem 64: give a unit")
    one_line_usage_error(run("inspect", "--example", "dgx-a100", "--model", "gpt2", "--nvme-free", "4"),
                         "--nvme-free 4: give a unit")
    one_line_usage_error(run("bench-nvlink", "--allreduce-sizes", "1MB,4"), "--allreduce-sizes 4: give a unit")


def flat(text):
    return " ".join(text.split())


def test_help_states_the_unit_rule():
    assert "80GB (= 80 GiB, as the card is sold)" in flat(run("plan", "--help").output)
    assert ("are binary, as GPUs are sold and nvidia-smi and `free -g` print them: 80GB = 80 GiB"
            in flat(run("--help").output))


# --- counts, bandwidths, GPU models, link types -----------------------------------------------------------------

@pytest.mark.parametrize("cmd,opt", [
    ("plan", "--gpus"), ("plan", "--batch-size"), ("plan", "--nodes"), ("plan", "--grad-accum"), ("plan", "--seq-len"),
    ("plan", "--global-batch"), ("deepspeed-config", "--gpus"), ("deepspeed-config", "--nodes"),
    ("bench-nvlink", "--nproc"), ("bench-nvlink", "--steps"), ("bench-nvlink", "--repeat"), ("inspect", "--best"),
])
def test_counts_are_one_or_more(cmd, opt):
    base = {"plan": ["--model", "gpt2", "--gpu-mem", "24GB"], "deepspeed-config": ["--stage", "1"]}.get(cmd, [])
    one_line_usage_error(run(cmd, *base, opt, "0"), f"Error: {opt} must be 1 or more, not 0")


def test_bandwidth_must_be_positive():
    """Issue 14: `--inter-node-gbps -5` printed a traffic time of -0.149 s."""
    one_line_usage_error(run("plan", "--model", "gpt2", "--gpus", "2", "--gpu-mem", "24GB", "--nodes", "2",
                             "--inter-node-gbps", "-5"), "--inter-node-gbps -5: a bandwidth must be above 0 GB/s")
    one_line_usage_error(run("plan", "--model", "gpt2", "--gpus", "2", "--gpu-mem", "24GB", "--inter-node-gbps", "0"),
                         "above 0")
    bits = json.loads(run("plan", "--json", "--model", "gpt2", "--gpus", "2", "--gpu-mem", "24GB", "--nodes", "2",
                          "--inter-node-gbps", "200Gb/s").output)
    assert bits["layout"]["inter_node_gbps"] == 25.0  # network speeds are sold in bits
    tera = json.loads(run("plan", "--json", "--model", "gpt2", "--gpus", "2", "--gpu-mem", "24GB", "--nodes", "2",
                          "--inter-node-gbps", "3.2Tb/s").output)   # 8 x 400G NICs per node
    assert tera["layout"]["inter_node_gbps"] == 400.0


def test_unknown_gpu_model_refused_naming_the_known_ones():
    r = run("plan", "--model", "gpt2", "--gpus", "2", "--gpu-model", "Z9000")
    one_line_usage_error(r, "--gpu-model Z9000: unknown GPU model; known: ")
    assert "A100" in r.output and "RTX 4090" in r.output and "V100" in r.output


@pytest.mark.parametrize("name,mib,bf16", [
    ("A100-80GB", 81920, True), ("NVIDIA A100-SXM4-80GB", 81920, True), ("NVIDIA H100 80GB HBM3", 81559, True),
    ("H100", 81559, True), ("RTX 4090", 24564, True), ("NVIDIA GeForce RTX 4090", 24564, True),
    ("Tesla V100-SXM2-16GB", 16160, False), ("V100-32GB", 32 * 1024, False), ("TITAN RTX", 24 * 1024, False),
    ("A10G", 24 * 1024, True), ("NVIDIA L40S", 48 * 1024, True), ("T4", 16 * 1024, False),
])
def test_gpu_model_fills_memory_and_precision(name, mib, bf16):
    data = json.loads(run("plan", "--json", "--model", "gpt2", "--gpus", "2", "--gpu-model", name).output)
    assert data["layout"]["gpu_mem_bytes"] == mib * MIB
    assert data["training"]["precision"] == ("bf16" if bf16 else "fp16")
    assert any("GPU memory" in n and name in n for n in data["notes"])


def test_gpu_model_sold_in_several_sizes_asks_which(tmp_path_factory):
    one_line_usage_error(run("plan", "--model", "gpt2", "--gpus", "2", "--gpu-model", "A100"),
                         "A100 is sold as 40GB or 80GB: name one (e.g. --gpu-model A100-80GB) or give --gpu-mem")
    # a paste that names an RTX 3080 (10GB or 12GB): --gpu-model says which
    named = tmp_path_factory.mktemp("paste") / "topo.txt"
    named.write_text("GPU 0: NVIDIA GeForce RTX 3080 (UUID: GPU-1)\nGPU 1: NVIDIA GeForce RTX 3080 (UUID: GPU-2)\n"
                     "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPHB\t0-7\t0\nGPU1\tPHB\t X \t0-7\t0\n")
    plan = json.loads(run("inspect", "-f", str(named), "--gpu-model", "RTX3080-12GB", "--model", "gpt2",
                          "--json").output)["plan"]
    assert plan["layout"]["gpu_mem_bytes"] == 12 * GIB
    # the same answer for a paste that does not name its GPUs (inspect -f, its plan)
    one_line_usage_error(run("inspect", "-f", str(TOPO / "consumer_x2_pcie_phb_numa_na.txt"), "--gpu-model", "A100",
                             "--model", "gpt2"),
                         "A100 is sold as 40GB or 80GB: name one (e.g. --gpu-model A100-80GB) or give --gpu-mem")
    ok = json.loads(run("plan", "--json", "--model", "gpt2", "--gpus", "2", "--gpu-model", "A100",
                        "--gpu-mem", "40GB").output)
    assert ok["layout"]["gpu_mem_bytes"] == 40 * GIB and ok["training"]["precision"] == "bf16"
    one_line_usage_error(run("plan", "--model", "gpt2", "--gpus", "2", "--gpu-model", "A100-60GB"),
                         "A100 is sold as 40GB or 80GB, not 60GB")


def test_catalog_names_are_unique_and_found():
    assert len(set(catalog.KNOWN)) == len(catalog.KNOWN)
    for key, _, arch, variants in catalog.CATALOG:
        for gb in variants:
            found = catalog.known(f"{key} {gb}GB")
            assert found.key == key and found.arch == arch, (key, gb, found)


def test_link_type_refused_once_for_every_command():
    one_line_usage_error(run("plan", "--model", "gpt2", "--gpus", "2", "--gpu-mem", "24GB", "--link", "QQ"),
                         "--link QQ: not a link type of nvidia-smi")
    one_line_usage_error(run("deepspeed-config", "--auto", "--model", "gpt2", "--gpus", "2", "--gpu-mem", "24GB",
                             "--link", "QQ"), "--link QQ: not a link type")


# --- the rules that relate options ------------------------------------------------------------------------------

def test_bf16_needs_ampere_in_every_command():
    """Issue 14: plan refused bf16 on V100, the config generator wrote it."""
    for args in (["plan", "--model", "gpt2", "--gpus", "2"], ["deepspeed-config", "--stage", "2", "--gpus", "2"],
                 ["deepspeed-config", "--auto", "--model", "gpt2", "--gpus", "2"]):
        one_line_usage_error(run(*args, "--gpu-model", "V100-16GB", "--precision", "bf16"),
                             "--precision bf16 needs an Ampere or newer GPU; V100-16GB is older")
    cfg = json.loads(run("deepspeed-config", "--stage", "2", "--no-hf", "--gpu-model", "V100-16GB", "--json").output)
    assert cfg["config"]["fp16"]["enabled"] is True and cfg["config"]["bf16"]["enabled"] is False
    with pytest.raises(BadInput, match="bf16 needs"):
        request.precision("bf16", "Tesla V100-SXM2-16GB")  # bench-nvlink uses the same rule for live GPUs


def test_global_batch_sets_concrete_values_with_no_hf():
    """Issue 14: `--no-hf --gpus 8 --batch-size 4 --global-batch 128` wrote train_batch_size 32, accumulation 1."""
    cfg = json.loads(run("deepspeed-config", "--stage", "2", "--no-hf", "--gpus", "8", "--batch-size", "4",
                         "--global-batch", "128", "--json").output)["config"]
    assert (cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"],
            cfg["gradient_accumulation_steps"]) == (128, 4, 4)
    two = json.loads(run("deepspeed-config", "--stage", "2", "--no-hf", "--gpus", "8", "--nodes", "2",
                         "--batch-size", "4", "--global-batch", "128", "--json").output)["config"]
    assert (two["train_batch_size"], two["gradient_accumulation_steps"]) == (128, 2)


def test_global_batch_with_hf_prints_the_training_arguments():
    r = run("deepspeed-config", "--stage", "2", "--gpus", "8", "--batch-size", "4", "--global-batch", "128", "--json")
    data = json.loads(r.output)
    assert data["training_arguments"] == {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 4}
    assert data["config"]["train_batch_size"] == "auto"
    text = run("deepspeed-config", "--stage", "2", "--gpus", "8", "--batch-size", "4", "--global-batch", "128")
    said = " ".join(text.output.split())   # the note, wrapped into 100 columns
    assert "TrainingArguments(per_device_train_batch_size=4, gradient_accumulation_steps=4)" in said
    assert "4 x 4 x 8 GPU(s) = 128 per step" in said


@pytest.mark.parametrize("args,msg", [
    (["--gpus", "8", "--batch-size", "4", "--global-batch", "100"],
     "--global-batch 100 is not a multiple of --batch-size x GPUs (4 x 8 = 32): try 96 or 128"),
    (["--gpus", "8", "--batch-size", "4", "--grad-accum", "2", "--global-batch", "128"],
     "--global-batch 128 is not --batch-size x --grad-accum x GPUs (4 x 2 x 8 = 64)"),
    (["--gpus", "8", "--batch-size", "4", "--global-batch", "16"], "try 32"),
])
def test_global_batch_must_be_exact(args, msg):
    """Issue 14: `--global-batch 100` was accepted."""
    one_line_usage_error(run("deepspeed-config", "--stage", "2", "--no-hf", *args), msg)
    one_line_usage_error(run("plan", "--model", "gpt2", "--gpu-mem", "24GB", *args), msg)


def test_global_batch_plan_and_config_agree():
    plan = json.loads(run("plan", "--json", "--model", "gpt2", "--gpus", "4", "--gpu-mem", "24GB", "--nodes", "2",
                          "--batch-size", "2", "--global-batch", "64").output)
    cfg = json.loads(run("deepspeed-config", "--json", "--stage", "1", "--no-hf", "--gpus", "4", "--nodes", "2",
                         "--batch-size", "2", "--global-batch", "64").output)["config"]
    assert plan["training"]["grad_accum"] == cfg["gradient_accumulation_steps"] == 4


def test_example_excludes_from_file():
    """Issue 14: `inspect --example dgx-a100 --from-file topo.txt` ignored the file."""
    one_line_usage_error(run("inspect", "--example", "dgx-a100", "--from-file", str(TOPO / "rtx5090x2_phb.txt")),
                         "--example and --from-file exclude each other")


def test_model_and_params_exclude_each_other():
    one_line_usage_error(run("plan", "--model", "gpt2", "--params", "7B", "--hidden-size", "4096", "--layers", "32",
                             "--gpus", "2", "--gpu-mem", "24GB"), "--model and --params exclude each other")
    one_line_usage_error(run("plan", "--model", "gpt2", "--hidden-size", "4096", "--gpus", "2", "--gpu-mem", "24GB"),
                         "describe a --params model")


def test_paste_model_fills_memory_for_inspect():
    """A bundled machine names its GPU: --model plans on it without --gpu-mem."""
    data = json.loads(run("inspect", "--json", "--example", "dgx-a100", "--model", "llama-2-7b",
                          "--batch-size", "1").output)
    assert data["plan"]["layout"]["gpu_mem_bytes"] == 81920 * MIB


def test_usage_errors_are_one_line():
    one_line_usage_error(run("plan", "--bogus"), "No such option")
    one_line_usage_error(run("nope"), "No such command")
    one_line_usage_error(run("plan", "--precision", "fp8"), "--precision 'fp8' is not one of")


# --- the walk: every option of every command shows an effect or a refusal ---------------------------------------

PLAN = ["--model", "gpt2", "--gpus", "2", "--gpu-mem", "24GB", "--cpu-mem", "64GB", "--nvme-free", "1TB",
        "--batch-size", "4", "--json"]   # pinned: searched, the micro-batch would follow --seq-len
DS = ["--stage", "2", "--json"]
DSL = DS + ["--gpus", "2"]   # a launch counts GPUs: none here, so --gpus
AUTO = ["--auto", "--model", "gpt2", "--gpus", "2", "--gpu-mem", "24GB", "--cpu-mem", "64GB", "--batch-size", "4",
        "--json"]
INSPECT = ["--example", "dgx-a100", "--json"]
INSPECT_PLAN = INSPECT + ["--model", "gpt2", "--cpu-mem", "64GB", "--nvme-free", "1TB", "--batch-size", "4"]
PARAMS = ["--params", "1B", "--hidden-size", "2048", "--layers", "16"]


def js(r):
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def by(name):
    return lambda d: next(s for s in d["strategies"] if s["name"] == name)


def strategy(name, key):
    return lambda d: by(name)(d)["per_gpu_bytes"][key]


def phases(name):
    """Every phase of the step's memory (the worst one can stay put while the others move)."""
    return lambda d: by(name)(d)["peak"]["phases"]


# Options shared by plan, inspect --model and deepspeed-config --auto, with one effect each, read from the plan:
# (extra args for the base, extra args for the changed run, what differs in the plan).
SHARED = {
    "model": ([], ["--model", "gpt2-medium"], lambda p: p["model"]["name"]),
    "params": (["--model", "gpt2"], PARAMS, lambda p: p["model"]["params"]),
    "hidden_size": (PARAMS, PARAMS + ["--hidden-size", "4096"], lambda p: p["model"]["hidden_size"]),
    "layers": (PARAMS, PARAMS + ["--layers", "32"], lambda p: by("ddp")(p)["peak"]["phases"]),
    "vocab_size": (PARAMS, PARAMS + ["--vocab-size", "50000"], lambda p: p["model"]["vocab_size"]),
    "precision": ([], ["--precision", "fp32"], lambda p: p["training"]["precision"]),
    "optimizer": ([], ["--optimizer", "sgd"], strategy("ddp", "optimizer")),
    "batch_size": ([], ["--batch-size", "8"], phases("ddp")),
    "seq_len": ([], ["--seq-len", "256"], phases("ddp")),
    "grad_checkpointing": ([], ["--grad-checkpointing"], phases("ddp")),
    "grad_accum": ([], ["--grad-accum", "2"], lambda p: by("zero2")(p)["comm_bytes_per_step"]),
    "global_batch": (["--batch-size", "4"], ["--batch-size", "4", "--global-batch", "64"],
                     lambda p: p["training"]["grad_accum"]),
    "attention": ([], ["--attention", "eager"], phases("ddp")),   # auto is sdpa for gpt2
    "flash_attention": (["--attention", "eager"], ["--flash-attention"], phases("ddp")),
    "offload_params": ([], ["--no-offload-params"], strategy("zero3_offload_cpu", "weights")),
    "kernels": ([], ["--kernels", "fused"], phases("ddp")),            # fused norms and GeLU keep less
    "loss": ([], ["--loss", "chunked"], phases("ddp")),                # no whole logits
    "selective_checkpointing": ([], ["--selective-checkpointing"], phases("ddp")),
    "pure_16bit": ([], ["--pure-16bit"], strategy("ddp", "weights")),   # 2 bytes a weight, not 4
    # an old stack's context: 1343 MB where CUDA loads every module at start (issue 44)
    "cuda_module_loading": ([], ["--cuda-module-loading", "eager"],
                            lambda p: by("ddp")(p)["per_gpu_bytes"]["overhead"]),
    # torch's fused AdamW keeps no sqrt(v) of the whole model at the step (foreach's, the default on a GPU, does)
    "optimizer_impl": ([], ["--optimizer-impl", "fused"], phases("ddp")),
    # zero_grad(set_to_none=False): last step's gradients still there at the loss
    "zero_grad": ([], ["--zero-grad", "zeros"], phases("ddp")),
    # no_sync (the HF Trainer's accumulation) all-reduces once a step; --sync-each-batch on every micro-batch
    "sync_each_batch": (["--grad-accum", "4"], ["--grad-accum", "4", "--sync-each-batch"],
                        lambda p: by("ddp")(p)["comm_bytes_per_step"]),
    # a LoRA unit's flat gradient covers its frozen base too
    "fsdp_use_orig_params": (["--finetune", "lora"], ["--finetune", "lora", "--fsdp-use-orig-params"],
                             strategy("fsdp", "gradients")),
    # batches padded to their longest: the allocator keeps an earlier, shorter step's segments (reserved only)
    "variable_length": ([], ["--variable-length"], lambda p: by("ddp")(p)["reserved_bytes"]),
    # bitsandbytes before 0.43.2: every block keeps its 4-bit matmuls' inputs (no checkpointing here)
    "bnb_keeps_input": (["--finetune", "qlora", "--no-grad-checkpointing"],
                        ["--finetune", "qlora", "--no-grad-checkpointing", "--bnb-keeps-input"], phases("ddp")),
    # non-reentrant checkpointing's hooks never see the old bitsandbytes' ctx: every block keeps its inputs
    "non_reentrant_checkpointing": (["--finetune", "qlora", "--grad-checkpointing", "--bnb-keeps-input"],
                                    ["--finetune", "qlora", "--grad-checkpointing", "--bnb-keeps-input",
                                     "--non-reentrant-checkpointing"], phases("ddp")),
    # litgpt's loop: the last micro-batch's logits (and graph) beside the next forward
    "loop_keeps_graph": (["--finetune", "lora"], ["--finetune", "lora", "--loop-keeps-graph"], phases("ddp")),
    # torchtune's OffloadActivations: the checkpointed inputs but the last 3 go to the host
    "activation_offload": (["--grad-checkpointing"], ["--grad-checkpointing", "--activation-offload"],
                           phases("ddp")),
    # Lightning's BitsandbytesPrecision quantizes the head too: gpt2's tied embedding stays beside its NF4 copy
    "quantizer": (["--finetune", "qlora"], ["--finetune", "qlora", "--quantizer", "lightning"],
                  strategy("ddp", "weights")),
    "cpu_cores": ([], ["--cpu-cores", "64"], lambda p: (p["layout"]["cpu_cores"], p["layout"]["cpu_cores_range"])),
    "cpu_mem": ([], ["--cpu-mem", "512GB"], lambda p: p["layout"]["cpu_mem_bytes"]),
    "nvme_path": (["--nvme-path", "/"], ["--nvme-path", os.path.dirname(os.path.abspath(__file__))],
                  lambda p: [n for n in p["notes"] if "NVMe free" in n or "nvme" in n]),
    "nvme_free": ([], ["--nvme-free", "2TB"], lambda p: p["layout"]["nvme_free_bytes"]),
    "nodes": ([], ["--nodes", "2"], lambda p: p["layout"]["gpus"]),
    "inter_node_gbps": (["--nodes", "2"], ["--nodes", "2", "--inter-node-gbps", "50"],
                        lambda p: by("ddp")(p)["comm_seconds_per_step"]),
    "gpus": ([], ["--gpus", "4"], lambda p: p["layout"]["gpus"]),
    "gpu_mem": ([], ["--gpu-mem", "40GB"], lambda p: p["layout"]["gpu_mem_bytes"]),
    "gpu_model": ([], ["--gpu-model", "TITAN RTX"], lambda p: p["training"]["precision"]),
    "link": ([], ["--link", "NV2"], lambda p: by("ddp")(p)["comm_seconds_per_step"]),
    # LoRA: no base gradients (issue 48); its shape options each change the adapters
    "finetune": ([], ["--finetune", "lora"], strategy("ddp", "gradients")),
    "lora_rank": (["--finetune", "lora"], ["--finetune", "lora", "--lora-rank", "64"], strategy("ddp", "gradients")),
    "lora_targets": (["--finetune", "lora"], ["--finetune", "lora", "--lora-targets", "all-linear"],
                     strategy("ddp", "gradients")),
    "lora_dropout": (["--finetune", "lora"], ["--finetune", "lora", "--lora-dropout", "0.1"], phases("ddp")),
}


def _base_without_nvme_free(base):
    """nvme_path shows its effect where --nvme-free does not override the measurement."""
    out = list(base)
    if "--nvme-free" in out:
        i = out.index("--nvme-free")
        del out[i:i + 2]
    return out


def shared_effect(cmd, base, plan_of):
    def check(name):
        before, after, read = SHARED[name]
        b = _base_without_nvme_free(base) if name == "nvme_path" else base
        if name.startswith(("params", "hidden", "layers", "vocab")):
            b = [x for i, x in enumerate(b) if not (x == "--model" or (i and b[i - 1] == "--model"))]
        x, y = plan_of(js(run(cmd, *overridden(b, before)))), plan_of(js(run(cmd, *overridden(b, after))))
        assert read(x) != read(y), (cmd, name, read(x))
    return check


def overridden(base: list, extra: list) -> list:
    """`base` then `extra`, each option kept where it is given last (given twice with two values it would be
    refused)."""
    args, out, seen = list(base) + list(extra), [], set()
    i = len(args) - 1
    while i >= 0:   # from the end: an option's value follows it
        x, value = args[i], []
        if not x.startswith("--") and i and args[i - 1].startswith("--"):
            x, value, i = args[i - 1], [x], i - 1
        if x not in seen:
            out[:0] = [x] + value
            if x.startswith("--"):
                seen.add(x)
        i -= 1
    return out


def plan_check(name):
    shared_effect("plan", PLAN, lambda d: d)(name)


def inspect_check(name):
    shared_effect("inspect", INSPECT_PLAN, lambda d: d["plan"])(name)


def auto_check(name):
    shared_effect("deepspeed-config", AUTO, lambda d: d["plan"])(name)


def differs(cmd, before, after, read):
    def check(_):
        assert read(js(run(cmd, *before))) != read(js(run(cmd, *after))), (cmd, before, after)
    return check


def refused(cmd, args, msg):
    def check(_):
        one_line_usage_error(run(cmd, *args), msg)
    return check


def ds_cfg(*args):
    return js(run("deepspeed-config", *args, "--json"))


def _ds_output(tmp):
    def check(_):
        out = tmp / "ds.json"
        assert not out.exists()
        data = ds_cfg("--stage", "2", "-o", str(out))
        assert data["path"] == str(out) and json.loads(out.read_text())["zero_optimization"]["stage"] == 2
    return check


def _ds_force(tmp):
    def check(_):
        out = tmp / "force.json"
        out.write_text("keep")
        one_line_usage_error(run("deepspeed-config", "--stage", "2", "-o", out), "exists; pass --force")
        assert out.read_text() == "keep"
        ds_cfg("--stage", "2", "-o", str(out), "--force")
        assert json.loads(out.read_text())["zero_optimization"]["stage"] == 2
    return check


def _json_flag(cmd, args):
    def check(_):
        assert json.loads(run(cmd, *args, "--json").stdout)["schema_version"] == 1
        text = run(cmd, *args).stdout
        try:
            assert "schema_version" not in json.loads(text)  # deepspeed-config prints the bare config
        except ValueError:
            pass  # a table
    return check


class _Builder:
    """A DeepSpeed op builder as doctor asks it (tests/test_doctor.py has the full set of cases)."""

    def __init__(self, ok):
        self.ok = ok

    def is_compatible(self, verbose=False):
        return self.ok

    def sources(self):
        return []


@contextlib.contextmanager
def _no_fused_adam():
    """DeepSpeed's builders replaced by one whose FusedAdam cannot build (fast: no deepspeed import)."""
    from gputopo import dsops
    with pytest.MonkeyPatch.context() as m:
        m.setattr(dsops, "builders", lambda: ({"fused_adam": _Builder(False)}, {}, "cuda"))
        m.setenv("TORCH_EXTENSIONS_DIR", "/nonexistent")  # no JIT-built copy from other tests either
        yield


def _text_shape(cmd, args, flag):
    """--explain adds the reasons, sources and notes the text leaves out; --wide prints what the text folds into
    100 columns at full width (doctor: a check whose finding is long); both refused with --json."""
    def check(_):
        with pytest.MonkeyPatch.context() as mp:
            if cmd == "doctor":   # a long finding, whatever this machine holds
                from gputopo import doctor
                real = doctor.run
                mp.setattr(doctor, "run", lambda *a, **k: {**(d := real(*a, **k)), "checks": [
                    {**d["checks"][0], "found": "a finding " * 20}, *d["checks"][1:]]})
            plain, shaped = run(cmd, *args), run(cmd, *args, f"--{flag}")
        assert plain.exit_code == shaped.exit_code and plain.exit_code in (0, 1), shaped.output
        lines = lambda r: r.stdout.splitlines() + r.stderr.splitlines()   # noqa: E731
        if flag == "wide":
            assert max(map(len, lines(plain))) <= 100 < max(map(len, lines(shaped)))
        else:
            assert len(lines(shaped)) > len(lines(plain)) and "--explain: " in plain.output + plain.stderr
            assert "--explain: " not in shaped.output
        one_line_usage_error(run(cmd, *args, f"--{flag}", "--json"), "shape")
    return check


def _ds_check(_):
    with _no_fused_adam():
        assert run("deepspeed-config", "--stage", "2").exit_code == 0
        r = run("deepspeed-config", "--stage", "2", "--check")
        assert r.exit_code == 1 and "doctor: fused_adam: cannot build here" in r.stderr


def _doctor_config(tmp):
    def check(_):
        path = tmp / "ds.json"
        path.write_text(json.dumps({"optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 2}}))
        with _no_fused_adam():
            without, with_ = js(run("doctor", "--json")), json.loads(run("doctor", "--config", path, "--json").stdout)
        assert without["ds_ops"] == [] and [o["op"] for o in with_["ds_ops"]] == ["fused_adam"]
        assert with_["config"] == str(path) and with_["exit_code"] == 1
    return check


def _calibrate_check(args):
    """--calibrate times this machine in child processes (tests/test_speed.py runs them); here they are faked,
    and the plan's rates become this machine's instead of the TITAN RTX datasheet's."""
    def check(_):
        from conftest import fake_calibration_result
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("gputopo.calibrate.run", lambda req, copies=1, **k: fake_calibration_result(req, copies))
            sheet, mine = js(run("plan", *args)), js(run("plan", *args, "--calibrate"))
        assert "TITAN RTX" in sheet["rates"]["basis"]["summary"] and "CPU twin" in mine["rates"]["basis"]["summary"]
        assert sheet["strategies"][0]["time"]["compute_s"] != mine["strategies"][0]["time"]["compute_s"]
    return check


def _calibrate_seconds_check(args):
    """--calibrate-seconds is the whole calibration's budget (the children get its deadline, the parent stops them
    GRACE seconds past it; 300 without it); 0 is no budget and is refused; without --calibrate it is refused."""
    def check(_):
        from conftest import fake_calibration_result

        from gputopo import calibrate
        seen = []
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("gputopo.calibrate.run", lambda req, copies=1, **k: seen.append(req)
                       or fake_calibration_result(req, copies))
            js(run("plan", *args, "--calibrate", "--calibrate-seconds", "90"))
            js(run("plan", *args, "--calibrate"))
        assert seen[0]["budget"] == 90 and seen[1]["budget"] == calibrate.DEFAULT_SECONDS == 300
        if seen[0]["deepspeed"]:   # DeepSpeed installed: every ZeRO strategy's config, within the budget
            assert "zero3" in seen[0]["deepspeed"]
        one_line_usage_error(run("plan", *args, "--calibrate", "--calibrate-seconds", "0"), "--calibrate-seconds")
        one_line_usage_error(run("plan", *args, "--calibrate-seconds", "5"), "--calibrate-seconds needs --calibrate")
    return check


def _walk(tmp):
    """{(command, option name): check}. A new option needs an entry here."""
    w = {}
    for name in SHARED:
        w[("plan", name)] = plan_check
        w[("deepspeed-config", name)] = auto_check
        if name not in ("gpus", "gpu_mem", "gpu_model", "link"):
            w[("inspect", name)] = inspect_check
    # torch's own optimizer loop, which a DeepSpeed config replaces: refused there, --auto or not
    for name, value in (("optimizer_impl", ["fused"]), ("zero_grad", ["zeros"]),
                        ("sync_each_batch", ["--grad-accum", "4"]), ("fsdp_use_orig_params", ["--finetune", "lora"]),
                        ("activation_offload", ["--grad-checkpointing"])):
        flag = "--" + name.replace("_", "-")
        args = [flag, *value] if name in ("optimizer_impl", "zero_grad") else [*value, flag]
        w[("deepspeed-config", name)] = refused("deepspeed-config", AUTO[:-1] + args,
                                                f"{flag} describes torch's own optimizer loop")
    w[("plan", "as_json")] = _json_flag("plan", PLAN[:-1])
    w.update({(cmd, flag): _text_shape(cmd, args, flag) for cmd, args in (
        ("plan", PLAN[:-1] + ["--gpu-model", "TITAN RTX", "--link", "NV2"]), ("inspect", INSPECT[:-1]),
        ("doctor", [])) for flag in ("explain", "wide")})
    w[("deepspeed-config", "explain")] = _text_shape("deepspeed-config", AUTO[:-1], "explain")
    # --measure trains in a child process (tests/test_memory.py runs it); here, its refusal before any work.
    w[("plan", "measure")] = refused("plan", PARAMS + ["--gpus", "1", "--gpu-mem", "80GB", "--measure"],
                                     "--measure builds causal LMs")
    timed = ["--gpu-model", "TITAN RTX", "--link", "NV2"]
    w[("plan", "steps")] = differs("plan", PLAN + timed, PLAN + timed + ["--steps", "100"],
                                   lambda d: d["strategies"][0]["time"].get("run_s"))
    w[("inspect", "steps")] = differs("inspect", INSPECT_PLAN, INSPECT_PLAN + ["--steps", "100"],
                                      lambda d: d["plan"]["strategies"][0]["time"].get("run_s"))
    # --auto: the plan's run and the launch's --max_steps; without --auto it only feeds the plan: refused
    w[("deepspeed-config", "steps")] = lambda _: (
        differs("deepspeed-config", AUTO + timed, AUTO + timed + ["--steps", "100"],
                lambda d: d["plan"]["strategies"][0]["time"].get("run_s"))(_),
        refused("deepspeed-config", DS + ["--steps", "100"], "--steps only feeds the memory plan")(_))
    w[("plan", "calibrate")] = _calibrate_check(PLAN + timed)
    w[("plan", "calibrate_seconds")] = _calibrate_seconds_check(PLAN + timed)
    # deepspeed-config: options of its own, and the shared ones where they change the config without --auto.
    w.update({
        ("deepspeed-config", "stage"): differs("deepspeed-config", DS, ["--stage", "3", "--json"],
                                               lambda d: d["config"]["zero_optimization"]["stage"]),
        ("deepspeed-config", "offload"): differs("deepspeed-config", DS, DS + ["--offload", "cpu"],
                                                 lambda d: d["config"]["zero_optimization"].get("offload_optimizer")),
        ("deepspeed-config", "auto_"): differs("deepspeed-config", ["--stage", "2", "--model", "gpt2", "--json"], AUTO,
                                               lambda d: d["plan"] and d["plan"]["recommendation"]["strategy"]),
        ("deepspeed-config", "hf"): differs("deepspeed-config", DS, DS + ["--no-hf"],
                                            lambda d: d["config"]["train_micro_batch_size_per_gpu"]),
        ("deepspeed-config", "output"): _ds_output(tmp),
        ("deepspeed-config", "force"): _ds_force(tmp),
        ("deepspeed-config", "launcher"): differs("deepspeed-config", DSL, DSL + ["--launcher", "torchrun"],
                                                  lambda d: d["launch"]),
        ("deepspeed-config", "script"): differs("deepspeed-config", DSL + ["--launcher", "torchrun"],
                                                DSL + ["--launcher", "torchrun", "--script", "mine.py"],
                                                lambda d: d["launch"]["command"]),
        ("deepspeed-config", "as_json"): _json_flag("deepspeed-config", ["--stage", "2"]),
        ("deepspeed-config", "check"): _ds_check,
        ("deepspeed-config", "no_compile_ops"): differs("deepspeed-config", DS, DS + ["--no-compile-ops"],
                                                        lambda d: d["config"]["optimizer"]["params"].get("torch_adam")),
        # --launcher accelerate: the script's own optimizer unless --ds-optimizer (DummyOptim) puts DeepSpeed's in.
        ("deepspeed-config", "ds_optimizer"): differs("deepspeed-config", DSL + ["--launcher", "accelerate"],
                                                      DSL + ["--launcher", "accelerate", "--ds-optimizer"],
                                                      lambda d: "optimizer" in d["config"]),
        ("deepspeed-config", "master_addr"): differs("deepspeed-config",
                                                     DSL + ["--launcher", "torchrun", "--nodes", "2"],
                                                     DSL + ["--launcher", "torchrun", "--nodes", "2", "--master-addr",
                                                           "head0"], lambda d: d["launch"]["command"]),
        ("deepspeed-config", "master_port"): differs("deepspeed-config", DSL + ["--launcher", "accelerate"],
                                                     DSL + ["--launcher", "accelerate", "--master-port", "31337"],
                                                     lambda d: d["launch"]["files"]["accelerate_config.yaml"]),
        ("deepspeed-config", "cpus_per_task"): differs("deepspeed-config", DSL + ["--launcher", "slurm"],
                                                       DSL + ["--launcher", "slurm", "--cpus-per-task", "3"],
                                                       lambda d: next(iter(d["launch"]["files"].values()))),
        ("doctor", "config_path"): _doctor_config(tmp),
        ("doctor", "as_json"): _json_flag("doctor", []),
        ("doctor", "nvme_path"): differs("doctor", ["--json"], ["--nvme-path", tmp, "--json"],
                                         lambda d: [c["subject"] for c in d["checks"] if c["id"] == "nvme_path"]),
    })
    # inspect: its own options.
    pasted = str(TOPO / "consumer_x2_pcie_phb_numa_na.txt")
    w.update({
        # GPUs described by count and link are plan's: refused naming the plan command (or --gpu-ids on a paste)
        ("inspect", "gpus"): refused("inspect", ["--model", "gpt2", "--gpus", "2", "--gpu-model", "H100"],
                                     "count are plan's: gputopo plan --model gpt2 --gpus 2 --gpu-model H100"),
        ("inspect", "link"): refused("inspect", ["--example", "h100x8", "--link", "NV4"],
                                     "--link NV4: inspect reads the links of its topology"),
        ("inspect", "from_file"): differs("inspect", INSPECT, ["-f", pasted, "--json"], lambda d: d["inputs"]),
        ("inspect", "example"): differs("inspect", INSPECT, ["--example", "h100x8", "--json"], lambda d: d["inputs"]),
        ("inspect", "gpu_ids"): differs("inspect", INSPECT, INSPECT + ["--gpu-ids", "0,1"], lambda d: d["selected"]),
        ("inspect", "best"): differs("inspect", INSPECT, INSPECT + ["--best", "2"], lambda d: d["best"]),
        ("inspect", "gpu_model"): differs("inspect", ["-f", pasted, "--json"],
                                          ["-f", pasted, "--gpu-model", "RTX 4090", "--json"],
                                          lambda d: d["gpus"][0]["model"]),
        ("inspect", "gpu_mem"): differs("inspect", INSPECT_PLAN, INSPECT_PLAN + ["--gpu-mem", "40GB"],
                                        lambda d: d["plan"]["layout"]["gpu_mem_bytes"]),
        ("inspect", "as_json"): _json_flag("inspect", ["--example", "dgx-a100"]),
        # --nccl-log explains the log instead, checked against the example's topology (tests/test_nccllog.py).
        ("inspect", "nccl_log"): differs("inspect", INSPECT, INSPECT + ["--nccl-log", str(
            FIXTURES / "nccl" / "ncclUNK-8xA100-nvswitch-p2p-level-LOC-shm-part2-channels.log")],
            lambda d: d.get("nccl") and d["nccl"]["cross_check"]["pairs"]),
        ("inspect", "markdown"): _inspect_markdown,
        ("inspect", "plot"): _inspect_plot(tmp),
        ("inspect", "force"): _inspect_force(tmp),
        ("inspect", "fleet"): _inspect_fleet(tmp),
        # Where the nodes come from, and how each is asked: refused without --fleet; their effect on real
        # engines (srun, pdsh, ssh) is in tests/test_engines.py (test_fleet_*).
        **{("inspect", name): refused("inspect", [flag, value], f"{flag} is for --fleet")
           for name, flag, value in (("hosts", "--hosts", "h.txt"), ("slurm_nodes", "--slurm-nodes", "n[1-2]"),
                                     ("partition", "--partition", "p"), ("timeout", "--timeout", "5"),
                                     ("remote_command", "--remote-command", "true"))},
    })
    return w


def _inspect_fleet(tmp):
    """--fleet -f: each file one node's report, compared (the same files without --fleet: one topology)."""
    def check(_):
        report = tmp / "node7.json"
        report.write_text(run("inspect", "--example", "dgx-a100", "--json").stdout)
        data = js(run("inspect", "--fleet", "-f", str(report), "--json"))
        assert data["fleet"]["nodes"] == ["node7"] and "gpus" not in data
    return check


def _inspect_markdown(_):
    out = run("inspect", "--example", "h100x8", "--markdown").stdout
    assert out.startswith("### GPU topology") and "```mermaid" in out
    one_line_usage_error(run("inspect", "--example", "h100x8", "--markdown", "--json"), "exclude each other")


def _inspect_plot(tmp):
    def check(_):
        pytest.importorskip("matplotlib")
        out = tmp / "topo.svg"
        assert run("inspect", "--example", "h100x8", "--plot", str(out)).exit_code == 0 and b"<svg" in out.read_bytes()
    return check


def _inspect_force(tmp):
    def check(_):
        pytest.importorskip("matplotlib")
        out = tmp / "keep.png"
        out.write_text("keep")
        one_line_usage_error(run("inspect", "--example", "h100x8", "--plot", str(out)), "exists; pass --force")
        assert out.read_text() == "keep"
        assert run("inspect", "--example", "h100x8", "--plot", str(out), "--force").exit_code == 0
        assert out.read_bytes()[:4] == b"\x89PNG"
        one_line_usage_error(run("inspect", "--example", "h100x8", "--force"), "--force overwrites --plot")
    return check


# bench-nvlink: the runs are faked at the process boundary (bench.run_child), so the walk shows each option
# reaching the torchrun command, its environment or the report, in milliseconds.
def _fake_child(calls):
    def run_child(label, cmd, env, timeout, progress, log_dir=None):
        calls.append({"label": label, "cmd": cmd, "env": env, "timeout": timeout, "progress": progress})
        progress(label, "a line of the child")
        progress(label, "step 1/3: 0.100 s", True)
        args = cmd[cmd.index("gputopo.worker") + 1:]
        steps = int(args[args.index("--steps") + 1])
        warm = int(args[args.index("--warmup-steps") + 1])
        sizes = ([int(x) for x in args[args.index("--allreduce-sizes") + 1].split(",")]
                 if "--allreduce-sizes" in args else [])
        t = [0.1] * (steps - warm)
        return {"world_size": 2, "steps": steps, "warmup_steps": warm, "train_runtime_s": 1.0, "timed_runtime_s": 0.5,
                "samples_per_second": 10.0, "step_times_s": t, "step_time_s": {"median": 0.1, "p10": 0.1, "p90": 0.1},
                "loss_finite": True, "model": {"name": "gpt2"},
                "dataset": "synthetic",
                "allreduce": [{"bytes": s, "seconds": s / 1e9, "algbw_gbps": 1.0, "busbw_gbps": 1.0} for s in sizes]}
    return run_child


@pytest.fixture
def bench_calls(monkeypatch, fake_nvml, fake_calibration):
    import fake_nvml as fm

    from gputopo import bench
    fake_nvml(init_error=fm.NVMLError_LibraryNotFound)   # the CPU twin, here and in CI
    calls = []
    monkeypatch.setattr(bench, "run_child", _fake_child(calls))
    return calls


def _bench(calls, *args):
    calls.clear()
    steps = [] if "--allreduce-only" in args else ["--steps", "3"]  # the sweep refuses training options
    r = run("bench-nvlink", *overridden(steps, [str(a) for a in args]))
    return r, list(calls)


def _worker_arg(calls, flag):
    args = calls[0]["cmd"]
    return args[args.index(flag) + 1] if flag in args else None


BENCH = {
    "model": (["--model", "gpt2-medium"], lambda r, c: _worker_arg(c, "--model")),
    "gpus": (["--gpus", "3"], lambda r, c: _worker_arg(c, "--nproc_per_node")),
    "nproc": (["--nproc", "3"], lambda r, c: (_worker_arg(c, "--nproc_per_node"), "spelled --gpus now" in r.output)),
    "steps": (["--steps", "5"], lambda r, c: _worker_arg(c, "--steps")),
    "warmup_steps": (["--warmup-steps", "2"], lambda r, c: _worker_arg(c, "--warmup-steps")),
    "batch_size": (["--batch-size", "3"], lambda r, c: _worker_arg(c, "--batch-size")),
    "seq_len": (["--seq-len", "64"], lambda r, c: _worker_arg(c, "--seq-len")),
    "precision": (["--precision", "bf16"], lambda r, c: _worker_arg(c, "--precision")),
    # auto resolves before any run (here: synthetic, with a note); a local text file reaches the workers
    "dataset": (["--dataset", __file__], lambda r, c: _worker_arg(c, "--dataset")),
    "repeat": (["--repeat", "2"], lambda r, c: len(c)),
    "timeout": (["--timeout", "30"], lambda r, c: c[0]["timeout"]),
    "train_only": (["--train-only"], lambda r, c: [x["label"] for x in c]),
    "allreduce_only": (["--allreduce-only"], lambda r, c: [x["label"] for x in c]),
    "allreduce_sizes": (["--allreduce-sizes", "1MB,2MB"], lambda r, c: _worker_arg(c[-1:], "--allreduce-sizes")),
    "node_rank": (["--nodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--master-port", "1"],
                  lambda r, c: _worker_arg(c, "--node_rank")),
    "master_addr": (["--master-addr", "127.0.0.1"], lambda r, c: _worker_arg(c, "--rdzv_endpoint")),
    "master_port": (["--master-addr", "127.0.0.1", "--master-port", "1"],
                    lambda r, c: _worker_arg(c, "--rdzv_endpoint") == "127.0.0.1:1"),
    "rdzv_endpoint": (["--rdzv-endpoint", "127.0.0.1:1"], lambda r, c: (_worker_arg(c, "--rdzv_endpoint"),
                                                                       "--master-addr HOST --master-port" in r.output)),
    "verbose": (["--verbose"], lambda r, c: "[p2p] a line of the child" in r.output),
    "quiet": (["--quiet"], lambda r, c: "[p2p] step 1/3" in r.output),
    "as_json": (["--json"], lambda r, c: r.stdout.lstrip().startswith("{")),
    # the text: its notes and the prediction's basis whole; at full width, the verdict on one line
    "explain": (["--explain"], lambda r, c: ("Note: no GPU" in r.stdout, "assumes device: cpu" in r.stdout)),
    "wide": (["--wide"], lambda r, c: max(map(len, r.stdout.splitlines())) > 100),
}


def _bench_check(name, tmp):
    def check(calls):
        if name == "gpu_ids":
            # the same answer as inspect's on a machine without GPUs: one line, exit 3
            bench_, inspect_ = run("bench-nvlink", "--gpu-ids", "0,1"), run("inspect", "--gpu-ids", "0,1")
            assert bench_.exit_code == inspect_.exit_code == 3 and bench_.output.count("\n") == 1
            assert bench_.output.startswith("Error: --gpu-ids needs a topology and no GPU is visible (")
            assert inspect_.output.startswith(bench_.output.split("(")[0])
            return
        if name in ("nodes", "nnodes"):
            one_line_usage_error(run("bench-nvlink", f"--{name}", "2"), "--nodes > 1 needs --master-addr")
            r, c = _bench(calls, f"--{name}", "2", "--master-addr", "127.0.0.1")
            assert r.exit_code == 0 and _worker_arg(c, "--nnodes") == "2"
            assert ("spelled --nodes now" in r.output) == (name == "nnodes")
            return
        if name in ("output", "force"):
            out = tmp / "ab.json"
            out.write_text("keep")
            one_line_usage_error(run("bench-nvlink", "--output", out), "exists; pass --force")
            assert out.read_text() == "keep"
            r, _ = _bench(calls, "--output", out, "--force")
            assert r.exit_code == 0 and json.loads(out.read_text())["complete"] is True
            return
        if name == "plot":
            out = tmp / "ab.png"
            out.write_text("keep")
            one_line_usage_error(run("bench-nvlink", "--plot", out), "exists; pass --force")
            return
        args, read = BENCH[name]
        r0, c0 = _bench(calls)
        r1, c1 = _bench(calls, *args)
        assert r0.exit_code == 0 and r1.exit_code == 0, (r0.output, r1.output)
        assert read(r0, c0) != read(r1, c1), (name, read(r1, c1))
    return check


def _group(name):
    def check(_):
        if name == "version":
            r = run("--version")
            assert r.exit_code == 0 and "gputopo, version" in r.output
        elif name == "debug":
            quiet = run("plan", "--model", "nope", "--gpus", "1", "--gpu-mem", "8GB")
            loud = CliRunner().invoke(cli, ["--debug", "plan", "--model", "nope", "--gpus", "1", "--gpu-mem", "8GB"])
            assert quiet.exit_code == 2 and loud.exception is not None and isinstance(loud.exception, BadInput)
    return check


def all_options():
    out = [("gputopo", p.name) for p in cli.params if p.name != "help"]
    for name, cmd in cli.commands.items():
        out += [(name, p.name) for p in cmd.params if p.name != "help"]
    return out


def test_walk_covers_every_option(tmp_path):
    walked = set(_walk(tmp_path)) | {("bench-nvlink", n)
                                     for n in list(BENCH) + ["gpu_ids", "nodes", "nnodes", "output", "force", "plot"]}
    walked |= {("gputopo", "version"), ("gputopo", "debug")}
    missing = sorted(set(all_options()) - walked)
    assert not missing, f"options with no entry in tests/test_options.py (show their effect or refusal): {missing}"


@pytest.mark.parametrize("cmd,name", [o for o in all_options() if o[0] not in ("bench-nvlink", "gputopo")])
def test_option_has_an_effect_or_is_refused(cmd, name, tmp_path):
    check = _walk(tmp_path).get((cmd, name))
    assert check is not None, f"{cmd} {name}: no entry"
    check(name)


@pytest.mark.parametrize("name", [n for c, n in all_options() if c == "bench-nvlink"])
def test_bench_option_has_an_effect_or_is_refused(name, bench_calls, tmp_path):
    _bench_check(name, tmp_path)(bench_calls)


@pytest.mark.parametrize("name", [n for c, n in all_options() if c == "gputopo"])
def test_group_option(name):
    _group(name)(None)


# --- words from the same figures as the table -------------------------------------------------------------------

NOFIT = ["--model", "llama-2-70b", "--gpus", "1", "--gpu-mem", "8GB", "--cpu-mem", "16GB", "--nvme-free", "10GB",
         "--batch-size", "4", "--no-grad-checkpointing"]


def test_nothing_fits_shows_the_whole_table_and_exits_1():
    """Issue 14: when nothing fit, plan printed one error line: no table, no JSON, exit 1 with stdout empty."""
    r = run("plan", *NOFIT, "--json")
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert data["recommendation"]["strategy"] is None and len(data["strategies"]) == 5   # single and the four offloads
    for s in data["strategies"]:
        assert not s["fits"] and s["short_bytes"]
        b = s["per_gpu_bytes"]
        if "gpu" in s["short_bytes"]:   # short of the whole GPU (between 90 and 100 % it is "tight", and fits)
            assert s["short_bytes"]["gpu"] == b["total"] - 8 * GIB
    nvme = next(s for s in data["strategies"] if s["name"] == "zero3_offload_nvme")
    assert nvme["short_bytes"]["nvme"] == nvme["nvme_bytes"] - 10 * GIB
    assert r.stderr.startswith("Error: llama-2-70b (68.98B params) fits no strategy") and r.stderr.count("\n") == 1
    text = run("plan", *NOFIT)
    assert text.exit_code == 1 and "Recommendation: none fits" in text.stdout
    short = nvme["short_bytes"]   # zero3_offload_nvme's row, in the table's words
    assert f"no: GPU {size(short['gpu'])} short, NVMe {size(short['nvme'])} short" in text.stdout
    assert text.stdout.count("\n") > 8


def test_nothing_fits_in_auto_is_one_line():
    r = run("deepspeed-config", "--auto", *NOFIT)
    assert r.exit_code == 1 and r.output.startswith("Error: llama-2-70b") and r.output.count("\n") == 1


def _reasons(*args):
    return " ".join(json.loads(run("plan", "--json", *args).stdout)["recommendation"]["reasons"])


def test_traffic_words_match_the_table():
    """Issue 14: ZeRO-1 picked on NVLink with "ZeRO's extra traffic is cheap" while it sends half of DDP's."""
    args = ["--model", "llama-2-7b", "--gpus", "8", "--gpu-mem", "80GB", "--link", "NV12", "--gpu-model", "A100-80GB",
            "--batch-size", "1", "--cpu-mem", "512GB", "--nvme-free", "1TB"]
    data = json.loads(run("plan", "--json", *args).stdout)
    s = {x["name"]: x for x in data["strategies"]}
    chosen = data["recommendation"]["strategy"]
    # ZeRO-3 and FSDP hide their gathers behind compute on NVLink; ZeRO-1's all-gather after the step stays exposed
    assert chosen in ("zero3", "fsdp")
    ddp, z1, z2, z3 = (s[n]["comm_bytes_per_step"] for n in ("ddp", "zero1", "zero2", "zero3"))
    # 3 passes of bf16 (bucket all-reduce + parameter all-gather; ZeRO-3: 2 gathers + reduce-scatter) vs DDP's 2 of fp32
    assert z1 == z2 == pytest.approx(0.75 * ddp, rel=1e-6) and z3 == pytest.approx(z1, rel=1e-6)
    words = " ".join(data["recommendation"]["reasons"])
    assert "extra traffic" not in words and "0.75x DDP's 43.9 GiB" in words and "32.9 GiB sent per GPU" in words


def test_zero1_traffic_is_once_per_step_zero2_every_micro_step():
    base = ["--model", "gpt2", "--gpus", "4", "--gpu-mem", "24GB", "--link", "NV4", "--cpu-mem", "64GB",
            "--nvme-free", "1TB"]
    one = {x["name"]: x["comm_bytes_per_step"] for x in json.loads(run("plan", "--json", *base).stdout)["strategies"]}
    four = {x["name"]: x["comm_bytes_per_step"] for x in
            json.loads(run("plan", "--json", *base, "--grad-accum", "4").stdout)["strategies"]}
    assert four["ddp"] == one["ddp"] and four["zero1"] == one["zero1"]
    assert four["zero2"] == one["zero2"] * 3 and four["zero3"] == one["zero3"] * 4  # (2 x 4 + 1) / (2 + 1)


def test_accumulation_advised_only_where_it_cuts_traffic():
    """Issue 14: accumulation was advised "to sync less often" for ZeRO-2, which reduces on every micro-step."""
    pcie = ["--gpus", "4", "--gpu-mem", "16GB", "--link", "SYS", "--cpu-mem", "64GB", "--nvme-free", "1TB",
            "--batch-size", "1", "--no-grad-checkpointing"]
    ddp = _reasons("--model", "gpt2", *pcie)
    assert "Gradient accumulation cuts it: ddp syncs once per optimizer step" in ddp
    sharded = json.loads(run("plan", "--json", "--model", "gpt2-xl", *pcie).stdout)["recommendation"]
    assert sharded["strategy"].startswith(("zero2", "zero3"))
    words = " ".join(sharded["reasons"])
    assert "cuts it" not in words and "sync less often" not in words and "every micro-step" in words


def test_unknown_link_said_plainly():
    """Issue 14: "over the unknown link (unknown GB/s per direction, unknown)"."""
    data = json.loads(run("plan", "--json", "--model", "gpt2", "--gpus", "4", "--gpu-mem", "24GB", "--cpu-mem", "64GB",
                          "--nvme-free", "1TB").stdout)
    words = " ".join(data["recommendation"]["reasons"])
    assert "unknown GB/s" not in words and "The link between the GPUs is unknown, so no time is estimated" in words
    assert data["recommendation"]["interconnect"] == "unknown"
    text = run("plan", "--model", "gpt2", "--gpus", "4", "--gpu-mem", "24GB", "--cpu-mem", "64GB", "--nvme-free", "1TB",
               "--explain")   # comm/step: in the table of what adds up to each figure
    assert "(link unknown)" in text.stdout


# --- plan and deepspeed-config --auto: the same inputs, the same answer -----------------------------------------

AGREE = [
    ["--model", "gpt2", "--gpus", "2", "--gpu-model", "TITAN RTX", "--link", "NV2", "--cpu-mem", "64GB"],
    ["--model", "llama-2-7b", "--gpus", "8", "--gpu-model", "A100-80GB", "--link", "NV12", "--batch-size", "1",
     "--cpu-mem", "1TB"],
    ["--model", "t5-3b", "--gpus", "1", "--gpu-mem", "16GB", "--batch-size", "1", "--cpu-mem", "128GB"],
    # the case: plan said NVMe offload, --auto measured the folder instead of using --nvme-free
    ["--model", "llama-2-7b", "--gpus", "1", "--gpu-mem", "24GB", "--cpu-mem", "32GB", "--nvme-free", "4TB",
     "--grad-checkpointing", "--batch-size", "1", "--nvme-path", "{tmp}"],
    ["--model", "llama-2-70b", "--gpus", "8", "--gpu-model", "H100", "--link", "NV18", "--grad-checkpointing",
     "--batch-size", "1", "--cpu-mem", "256GB", "--nvme-free", "4TB", "--nvme-path", "{tmp}"],
    ["--model", "gpt2-xl", "--gpus", "4", "--gpu-mem", "16GB", "--link", "SYS", "--batch-size", "1",
     "--cpu-mem", "64GB"],
    ["--model", "llama-2-13b", "--gpus", "8", "--nodes", "2", "--gpu-model", "A100-40GB", "--link", "NV12",
     "--inter-node-gbps", "200Gb/s", "--batch-size", "2", "--global-batch", "64", "--grad-checkpointing",
     "--cpu-mem", "1TB"],
    ["--model", "qwen2.5-7b", "--gpus", "4", "--gpu-model", "RTX 4090", "--link", "PHB", "--batch-size", "1",
     "--seq-len", "2048", "--grad-checkpointing", "--flash-attention", "--cpu-mem", "128GB", "--nvme-free", "100GB"],
    ["--model", "qwen2.5-7b", "--gpus", "4", "--gpu-model", "RTX 4090", "--link", "PHB", "--batch-size", "1",
     "--seq-len", "2048", "--grad-checkpointing", "--flash-attention", "--cpu-mem", "256GB", "--nvme-free", "100GB"],
    ["--model", "mistral-7b", "--gpus", "2", "--gpu-model", "V100-32GB", "--link", "NV2", "--batch-size", "1",
     "--optimizer", "adamw-8bit", "--cpu-mem", "256GB", "--grad-checkpointing", "--nvme-free", "1TB"],
    ["--params", "3B", "--hidden-size", "2560", "--layers", "32", "--gpus", "2", "--gpu-mem", "24GB",
     "--precision", "fp32", "--cpu-mem", "32GB", "--no-offload-params", "--nvme-free", "1TB", "--nvme-path", "{tmp}"],
    ["--model", "llama-2-70b", "--gpus", "1", "--gpu-mem", "8GB", "--cpu-mem", "16GB", "--nvme-free", "10GB",
     "--batch-size", "4", "--no-grad-checkpointing"],   # nothing fits
]


@pytest.mark.parametrize("case", range(len(AGREE)))
def test_plan_and_auto_agree(case, tmp_path):
    args = [a.replace("{tmp}", str(tmp_path)) for a in AGREE[case]]
    if "--nvme-free" not in args:  # the free space of a shared /tmp moves between two runs
        args += ["--nvme-free", "1TB"]
    p = run("plan", "--json", *args)
    plan = json.loads(p.stdout)
    r = run("deepspeed-config", "--auto", "--json", *args)
    if plan["recommendation"]["strategy"] is None:  # nothing fits: both say so, with the same reason
        assert p.exit_code == r.exit_code == 1 and plan["recommendation"]["reasons"][0] in r.output
        return
    if plan["recommendation"]["strategy"].startswith("fsdp") and r.exit_code == 1:   # FSDP alone fits
        assert "(PyTorch FSDP) and no DeepSpeed strategy fits" in r.output
        return
    assert r.exit_code == 0, r.output
    auto = json.loads(r.stdout)
    shown = plan.pop("deepspeed_config", None)   # plan's view of the config this command writes
    nxt = plan.pop("next", None)   # the command plan names next: this one, writing that config
    assert nxt is None or nxt["same"] and nxt["command"].startswith("gputopo deepspeed-config --auto ")
    assert auto["plan"] == plan  # the same resolved inputs, the same figures
    assert shown is None or shown["config"] == auto["config"]
    from gputopo.dsconfig import STRATEGY_TO_CONFIG
    chosen = plan["recommendation"]["strategy"]
    if chosen not in STRATEGY_TO_CONFIG:   # PyTorch FSDP: --auto writes the fastest DeepSpeed strategy that fits
        said = next(w for w in auto["warnings"] if w.startswith("--auto: "))
        chosen = said.split("the fastest DeepSpeed one that fits is ", 1)[1].split(",", 1)[0]
    stage, offload = STRATEGY_TO_CONFIG[chosen]
    zero = auto["config"]["zero_optimization"]
    assert zero["stage"] == stage
    assert (zero.get("offload_optimizer") or {}).get("device", "none") == offload
    said = f"--auto: gputopo plan recommends {plan['recommendation']['strategy']}"
    assert any(w.startswith(said) and ", micro-batch " in w for w in auto["warnings"])


def test_agreement_table_is_held_apart():
    """The cases above are not one answer repeated: they span every kind of recommendation."""
    seen = set()
    with_tmp = "/tmp"
    for args in AGREE:
        args = [a.replace("{tmp}", with_tmp) for a in args]
        seen.add(json.loads(run("plan", "--json", *args).stdout)["recommendation"]["strategy"])
    # Since the recommendation follows predicted speed (issue 19), ZeRO-1's 16-bit reduce and fused optimizer
    # beat DDP's fp32 all-reduce and torch's AdamW wherever both fit in these cases.
    assert {"zero1", "zero3", "zero3_offload_nvme", None} <= seen and any("offload_cpu" in (s or "") for s in seen)
    assert len(seen) >= 5


def test_explicit_nvme_free_wins_over_the_folder_with_a_note(tmp_path):
    args = ["--model", "llama-2-7b", "--gpus", "1", "--gpu-mem", "24GB", "--cpu-mem", "32GB", "--nvme-free", "4TB",
            "--grad-checkpointing", "--batch-size", "1", "--nvme-path", str(tmp_path), "--offload-params"]
    plan = json.loads(run("plan", "--json", *args).stdout)
    assert plan["layout"]["nvme_free_bytes"] == 4 * 2 ** 40
    assert any(n.startswith("--nvme-free 4096.0 GiB is used; " + str(tmp_path)) for n in plan["notes"])
    auto = json.loads(run("deepspeed-config", "--auto", "--json", *args).stdout)
    assert auto["config"]["zero_optimization"]["offload_param"]["nvme_path"] == str(tmp_path)
    assert any("--nvme-free 4096.0 GiB is used" in w for w in auto["warnings"])


def test_explicit_cpu_mem_wins():
    a = json.loads(run("plan", "--json", "--model", "gpt2", "--gpus", "1", "--gpu-mem", "8GB",
                       "--cpu-mem", "3GB").stdout)
    assert a["layout"]["cpu_mem_bytes"] == 3 * GIB and not any("CPU RAM" in n for n in a["notes"])
    b = json.loads(run("plan", "--json", "--model", "gpt2", "--gpus", "1", "--gpu-mem", "8GB").stdout)
    # GPUs described: the default is not this machine's RAM but none (issue 43), said in a note
    assert b["layout"]["cpu_mem_bytes"] is None and any(n.startswith("CPU RAM per node not given") for n in b["notes"])


# --- output paths: checked before the work, written atomically --------------------------------------------------

def test_output_folder_checked_before_any_work(tmp_path):
    """Issue 14: `deepspeed-config --stage 2 -o missing/ds.json` ended in a FileNotFoundError traceback."""
    missing = tmp_path / "missing" / "ds.json"
    one_line_usage_error(run("deepspeed-config", "--stage", "2", "-o", missing),
                         f"--output {missing}: folder {missing.parent} does not exist")
    # checked first: a model that would fail later is not even looked at
    one_line_usage_error(run("deepspeed-config", "--auto", "--model", "nope", "-o", missing), "does not exist")
    one_line_usage_error(run("deepspeed-config", "--stage", "2", "-o", tmp_path), "is a directory")
    (tmp_path / "ds.json").write_text("{}")   # a file where the path wants a folder
    one_line_usage_error(run("deepspeed-config", "--stage", "2", "-o", tmp_path / "ds.json" / "x.json"),
                         f"{tmp_path / 'ds.json'} is a file, not a folder")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_output_folder_not_writable(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        one_line_usage_error(run("deepspeed-config", "--stage", "2", "-o", ro / "ds.json"), "is not writable")
    finally:
        ro.chmod(0o700)


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path, monkeypatch):
    from gputopo import files
    out = tmp_path / "ds.json"
    out.write_text("old")
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    from gputopo.errors import WriteFailed
    with pytest.raises(WriteFailed, match=r"ds.json: not written \(No space left on device\)"):   # one line, issue 33
        files.write_atomic(str(out), "new")
    assert out.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["ds.json"]
    monkeypatch.undo()
    files.write_atomic(str(out), "new")
    assert out.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["ds.json"]
    assert (out.stat().st_mode & 0o777) == 0o666 & ~files._umask()


# --- deepspeed-config: --optimizer and the plan-only options ----------------------------------------------------

def test_optimizer_reaches_the_config():
    assert ds_cfg("--stage", "2")["config"]["optimizer"]["type"] == "AdamW"
    d = ds_cfg("--stage", "2", "--optimizer", "adafactor")
    assert "optimizer" not in d["config"] and d["config"]["zero_allow_untested_optimizer"] is True
    assert d["training_arguments"]["optim"] == "adafactor"
    n = ds_cfg("--stage", "1", "--no-hf", "--optimizer", "sgd")
    assert "optimizer" not in n["config"] and any("deepspeed.initialize(optimizer=" in w for w in n["warnings"])
    one_line_usage_error(run("deepspeed-config", "--stage", "3", "--offload", "cpu", "--optimizer", "sgd"),
                         "ZeRO-Offload steps the optimizer on the host")


@pytest.mark.parametrize("opt,value", [("--seq-len", "512"), ("--gpu-mem", "24GB"), ("--link", "NV2"),
                                       ("--flash-attention", None), ("--attention", "eager"), ("--cpu-mem", "64GB"),
                                       ("--inter-node-gbps", "12.5"), ("--nvme-free", "1TB")])
def test_plan_only_options_refused_without_auto(opt, value):
    args = [opt] + ([value] if value else [])
    one_line_usage_error(run("deepspeed-config", "--stage", "2", *args),
                         f"{opt} only feeds the memory plan: add --auto (with --model), or drop it")


def test_grad_checkpointing_reaches_the_trainer_or_is_refused():
    assert ds_cfg("--stage", "2", "--grad-checkpointing")["training_arguments"]["gradient_checkpointing"] is True
    one_line_usage_error(run("deepspeed-config", "--stage", "2", "--no-hf", "--grad-checkpointing"),
                         "--grad-checkpointing only feeds the memory plan")


# --- help, README, packaging ------------------------------------------------------------------------------------

ROOT = FIXTURES.parent.parent


def test_every_option_has_help():
    """Issue 14: bench --seq-len had no help; --allreduce-sizes read "-32 MiB on CPU"."""
    bare = [(name, p.name) for name, cmd in cli.commands.items() for p in cmd.params
            if getattr(p, "help", None) is None and p.name != "help"]
    assert not bare, f"options without help: {bare}"
    text = flat(run("bench-nvlink", "--help").output)
    assert "1 MiB to 32 MiB on CPU" in text and "-32 MiB" not in text and "Tokens per sample" in text


def test_readme_documents_units_nothing_fits_completion():
    """README asks the four questions; docs/options.md holds units and completion, docs/plan.md "nothing fits"."""
    readme = (ROOT / "README.md").read_text()
    assert "answers four questions" in readme and "1. **" in readme and "4. **" in readme and "5. **" not in readme
    options = (ROOT / "docs" / "options.md").read_text()
    assert "80GB` = `80G` = `80GiB`" in options and "A number without a unit (`--gpu-mem 24`) is refused" in options
    assert "_GPUTOPO_COMPLETE=bash_source gputopo" in options
    plan = (ROOT / "docs" / "plan.md").read_text()
    assert "**When nothing fits**" in plan and "exits with\nstatus 1" in plan and '"short_bytes"' in plan


def test_license_is_an_spdx_string():
    """setuptools >= 77 reads `license` as an SPDX expression; a TOML table prints a deprecation warning."""
    import re
    text = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^license = "Apache-2.0"$', text, re.M)
    assert re.search(r'^requires = \["setuptools>=(\d+)"\]', text, re.M).group(1) >= "77"


@pytest.mark.parametrize("args", [["--batch-size", "8"], ["--gpu-mem", "40GB"], ["--cpu-mem", "1TB"],
                                  ["--grad-checkpointing"], ["--nodes", "2"], ["--precision", "fp32"]])
def test_inspect_plan_options_need_a_model(args):
    """Without --model, inspect has no plan to feed: the option would be dropped, so it is refused."""
    r = run("inspect", "--example", "dgx-a100", *args)
    one_line_usage_error(r, "feeds the memory plan: add --model (or --params)")
    assert r.output.startswith(f"Error: {args[0]}")


def test_inspect_model_nothing_fits_shows_the_plan_and_exits_1():
    r = run("inspect", "--example", "rtx4090x8-pcie", "--model", "llama-2-70b", "--gpu-ids", "0", "--cpu-mem", "16GB",
            "--nvme-free", "10GB", "--json")
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert data["plan"]["recommendation"]["strategy"] is None and data["recommendation"]["strategy"] is None
    # the nearest is the one missing the least GPU memory: an offload strategy, not the single GPU
    assert "fits no strategy on 1 x 24.0 GiB: the nearest, " in r.stderr and "_offload_" in r.stderr


def test_auto_with_nvme_free_warns_when_the_folder_here_is_too_small(tmp_path):
    """--nvme-free wins, as in plan; but the config writes to a folder here that could not hold the swap."""
    args = ["--model", "llama-2-70b", "--gpus", "8", "--gpu-model", "H100", "--link", "NV18", "--grad-checkpointing",
            "--batch-size", "1", "--cpu-mem", "256GB", "--nvme-free", "1PB", "--nvme-path", str(tmp_path),
            "--offload-params"]
    auto = json.loads(run("deepspeed-config", "--auto", "--json", *args).stdout)
    assert auto["config"]["zero_optimization"]["offload_param"]["device"] == "nvme"
    st = os.statvfs(tmp_path)
    if st.f_bavail * st.f_frsize < 1.1 * 2 ** 40:  # the 70B swap (1.1 TiB) does not fit this disk
        assert any(w.startswith(f"{tmp_path} has ") and "else pass --nvme-path" in w for w in auto["warnings"])


# --- issue 33: numbers that cannot be true, and outputs checked as they will be written ---------------------------

@pytest.mark.parametrize("args,named", [
    (["plan", "--model", "gpt2", "--gpus", "1", "--gpu-mem", "1e400GB"], "--gpu-mem"),
    (["plan", "--model", "gpt2", "--gpus", "99999999999999999999", "--gpu-mem", "24GB"], "--gpus"),
    (["plan", "--params", "1e30", "--hidden-size", "64", "--layers", "2", "--gpus", "1", "--gpu-mem", "24GB"],
     "--params"),
    (["plan", "--model", "gpt2", "--gpus", "1", "--gpu-mem", "24GB", "--steps", "99999999999999999999999"], "--steps"),
    (["plan", "--model", "gpt2", "--gpus", "1", "--gpu-mem", "24GB", "--calibrate", "--calibrate-seconds", "nan"],
     "--calibrate-seconds"),
    (["plan", "--model", "gpt2", "--gpus", "1", "--gpu-mem", "24GB", "--calibrate", "--calibrate-seconds", "inf"],
     "--calibrate-seconds"),
    (["plan", "--model", "gpt2", "--gpus", "2", "--gpu-mem", "24GB", "--nodes", "2", "--inter-node-gbps", "1e400"],
     "--inter-node-gbps"),
    (["inspect", "--fleet", "--timeout", "nan"], "--timeout"),
    (["bench-nvlink", "--timeout", "inf"], "--timeout"),
    (["doctor", "--nvme-path", "/proc"], "--nvme-path /proc"),
    (["deepspeed-config", "--stage", "3", "--offload", "nvme", "--nvme-path", "/proc"], "--nvme-path /proc"),
])
def test_numbers_and_places_that_cannot_be_true_are_refused(args, named):
    """Each by the owner of its rule, in one line, exit 2: no OverflowError, no "67906407639384264.0 TiB", no
    /proc taken for the root disk."""
    r = run(*args)
    assert r.exit_code == 2 and r.output.count("\n") == 1 and r.output.startswith("Error: ") and named in r.output, \
        r.output


@pytest.mark.parametrize("cmd", [["deepspeed-config", "--stage", "2", "-o"], ["inspect", "--example", "dgx-a100",
                                                                             "--plot"]])
def test_an_output_the_write_would_refuse_is_refused_before_the_work(cmd):
    """/proc passes the permission bits and refuses files: probed by making one, as the write will."""
    name = "/proc/x.png" if "--plot" in cmd else "/proc/x.json"
    r = run(*cmd, name)
    assert r.exit_code == 2 and r.output.count("\n") == 1 and f"{name}: files cannot be created in /proc" in r.output


def test_help_speaks_one_metavar_style_and_summaries_are_whole():
    """Issue 34: `INTEGER RANGE` / `TEXT` beside `N` / `SIZE` / `NAME|PATH`, and top-level summaries cut
    mid-sentence ("Train the same DDP run with and without...")."""
    import re

    from gputopo.configure import PLAN_ONLY
    top = run("--help").output
    assert "..." not in top.split("Commands:", 1)[1].split("\n\n", 1)[0]
    for cmd in ("inspect", "plan", "deepspeed-config", "doctor", "bench-nvlink"):
        text = run(cmd, "--help").output
        assert not re.search(r"\b(INTEGER|FLOAT|TEXT)( RANGE)?\b", text), cmd
    epilog = " ".join(run("deepspeed-config", "--help").output.split("Only with --auto", 1)[1].split())
    for name in PLAN_ONLY:
        flag = "--" + name.replace("_", "-")
        assert flag in epilog.replace("--[no-]grad- checkpointing", "--grad-checkpointing").replace(
            "--[no-]grad-checkpointing", "--grad-checkpointing"), flag


def test_no_hf_says_the_micro_batch_global_batch_chose():
    r = run("deepspeed-config", "--stage", "2", "--no-hf", "--gpus", "4", "--global-batch", "60")
    assert r.exit_code == 0
    assert "the config holds micro-batch 1 x 15 accumulation x 4 GPU(s) = 60 per step" in r.stderr
    hf = run("deepspeed-config", "--stage", "2", "--launcher", "accelerate", "--gpus", "4", "--global-batch", "60")
    assert hf.exit_code == 0 and "the config holds" not in hf.stderr   # "auto": accelerate's HF form fills it
