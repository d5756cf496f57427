"""Memory arithmetic: exact parameter counts, DeepSpeed's own estimators, the numbers of HF's
single-GPU guide (docs/sources.md#memory-per-parameter), real cases."""
import json

import pytest
from click.testing import CliRunner

from gputopo import advise, models, plan
from gputopo.cli import cli
from gputopo.errors import BadInput

GIB = 2 ** 30


def run(*args):
    return CliRunner().invoke(cli, list(args))


def plan_json(*args):
    r = run("plan", "--json", *args)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def by_name(data):
    return {s["name"]: s for s in data["strategies"]}


@pytest.mark.parametrize("name,cls,cfg", [
    ("gpt2", "GPT2LMHeadModel", dict(model_type="gpt2")),
    ("gpt2-xl", "GPT2LMHeadModel", dict(model_type="gpt2", n_embd=1600, n_layer=48, n_head=25)),
    ("bert-large-uncased", "BertForMaskedLM", dict(model_type="bert", hidden_size=1024, num_hidden_layers=24,
                                                   num_attention_heads=16, intermediate_size=4096)),
    ("t5-3b", "T5ForConditionalGeneration", dict(model_type="t5", d_model=1024, d_ff=16384, d_kv=128, num_heads=32,
                                                 num_layers=24, vocab_size=32128)),
    ("llama-2-70b", "LlamaForCausalLM", dict(model_type="llama", hidden_size=8192, intermediate_size=28672,
                                             num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8,
                                             vocab_size=32000)),
    ("mistral-7b", "MistralForCausalLM", dict(model_type="mistral", hidden_size=4096, intermediate_size=14336,
                                              num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                                              vocab_size=32000)),
])
def test_catalog_counts_equal_transformers_on_meta(tmp_path, name, cls, cfg):
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "architectures": [cls]}))
    built = models.from_path(str(tmp_path))
    spec = models.named(name)
    assert (spec.params, spec.largest_layer_params) == (built.params, built.largest_layer_params)


def test_catalog_well_known_sizes():
    assert models.named("gpt2").params == 124439808
    assert models.named("llama-2-7b").params == 6738415616
    assert round(models.named("bert-base-uncased").params / 1e6) == 110


def test_model_path_tiny(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 2,
                                                      "vocab_size": 1000, "n_positions": 128}))
    spec = models.from_path(str(tmp_path))
    assert spec.params == 1000 * 64 + 128 * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64
    assert (spec.hidden_size, spec.layers, spec.heads, spec.max_positions) == (64, 2, 2, 128)


@pytest.mark.parametrize("bad,msg", [("{", "unreadable"), ('{"model_type": "nope"}', "cannot build")])
def test_model_path_bad_config(tmp_path, bad, msg):
    (tmp_path / "config.json").write_text(bad)
    with pytest.raises(BadInput, match=msg):
        models.from_path(str(tmp_path))


def test_params_only():
    assert models.parse_count("7B") == 7_000_000_000 and models.parse_count("350M") == 350_000_000
    assert models.parse_count("1.5e9") == 1_500_000_000
    for bad in ("-3B", "seven", "0"):
        with pytest.raises(BadInput):
            models.parse_count(bad)
    with pytest.raises(BadInput, match="--hidden-size and --layers"):
        models.from_size("7B", None, 32)


def layout(n=8, mem=80, nodes=1, **kw):
    return plan.Layout(gpus_per_node=n, gpu_mem_bytes=mem * GIB, nodes=nodes, **kw)


def states(name, spec, lay, **kw):
    s = next(x for x in plan.strategies(spec, lay, plan.Training(**kw)) if x.name == name)
    b = s.per_gpu_bytes
    return b["weights"] + b["gradients"] + b["optimizer"], s.cpu_bytes


@pytest.mark.parametrize("gpn,nodes", [(1, 1), (4, 1), (8, 2)])
def test_zero_model_states_agree_with_deepspeed_estimators(gpn, nodes):
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
    spec = models.named("llama-2-7b")
    P, L, N = spec.params, spec.largest_layer_params, gpn * nodes
    lay = layout(gpn, nodes=nodes)
    if N > 1:  # sharding over one GPU buys nothing, so plan lists no plain ZeRO-2/3 there
        cpu, gpu = estimate_zero2_model_states_mem_needs(P, gpn, nodes, cpu_offload=False)
        ours, ours_cpu = states("zero2", spec, lay)
        assert ours == pytest.approx(gpu, abs=4) and ours_cpu == cpu
        cpu, gpu, _ = estimate_zero3_model_states_mem_needs(P, L, gpn, nodes, cpu_offload=False)
        # Knowing differences: DeepSpeed's stage-3 estimate leaves out the 16-bit parameter partition (2P/N),
        # and counts fp32 gradients for the whole partition where DeepSpeed upcasts one sub-group (1e9) at a time.
        ours, ours_cpu = states("zero3", spec, lay)
        expected = 2 * P / N + 4 * min(plan.DS_SUB_GROUP, P / N) - 4 * P / N
        assert ours_cpu == cpu and ours - gpu == pytest.approx(expected, abs=8)
    cpu, gpu = estimate_zero2_model_states_mem_needs(P, gpn, nodes, cpu_offload=True)
    assert states("zero2_offload_cpu", spec, lay) == (gpu, cpu)
    cpu, gpu, _ = estimate_zero3_model_states_mem_needs(P, L, gpn, nodes, cpu_offload=True, cpu_offload_params=True)
    assert states("zero3_offload_cpu", spec, lay) == (gpu, cpu)
    cpu, gpu, _ = estimate_zero3_model_states_mem_needs(P, L, gpn, nodes, cpu_offload=True, cpu_offload_params=False)
    ours, ours_cpu = states("zero3_offload_cpu", spec, lay, offload_params=False)
    assert ours == pytest.approx(gpu, abs=4) and ours_cpu == cpu


def test_seed_numbers():
    bert = models.named("bert-large-uncased")
    single = by_name(plan_json("--model", "bert-large-uncased", "--gpus", "1", "--gpu-mem", "80GiB",
                               "--precision", "fp32"))["single"]
    assert single["per_gpu_bytes"]["weights"] == 4 * bert.params
    assert round(single["per_gpu_bytes"]["weights"] / 1e9, 1) in (1.3, 1.4)   # sources.md#cuda-context: ~1.3 GB
    t5 = models.named("t5-3b").params  # 2.85B; docs/sources.md#memory-per-parameter rounds it to 3B
    for opt, gb in (("adamw", 24), ("adafactor", 12), ("adamw-8bit", 6)):
        got = plan.OPTIMIZER_BYTES[opt] * t5 / 1e9
        assert got == pytest.approx(gb, rel=0.06)
    # docs/sources.md#memory-per-parameter: AdamW in mixed precision is 18 B/param before activations
    # (6 + 4 + 8). The 2 B of 16-bit copies live only from the forward to each layer's backward, so the step
    # counts them (as activations).
    mixed = by_name(plan_json("--model", "gpt2", "--gpus", "1", "--gpu-mem", "80GiB", "--precision", "bf16"))["single"]
    b = mixed["per_gpu_bytes"]
    assert b["weights"] + b["gradients"] + b["optimizer"] == 16 * models.named("gpt2").params


def test_every_strategy_total_is_states_overhead_and_the_step_peak():
    data = plan_json("--model", "gpt2-xl", "--gpus", "4", "--gpu-mem", "80GiB", "--link", "NV4", "--batch-size", "2")
    for st in data["strategies"]:
        b = st["per_gpu_bytes"]
        assert b["total"] == b["weights"] + b["optimizer"] + b["overhead"] + st["peak"]["bytes"]
        assert st["peak"]["bytes"] == st["peak"]["gradients"] + b["activations"] + b["temporaries"]
        assert st["peak"]["gradients"] <= b["gradients"]
        assert st["nvidia_smi_bytes"] - b["total"] == plan.ALLOCATOR_RESERVE_BYTES


def test_variable_length_adds_an_earlier_steps_segments_to_the_reserved_figures_only():
    """--variable-length: the caching allocator keeps the previous longest step's segments (docs/plan.md), counted
    once as the peak phase's length-sized bytes; the allocated peak and the fit do not move."""
    args = ("--model", "qwen2.5-0.5b", "--gpus", "2", "--gpu-mem", "80GiB", "--finetune", "lora",
            "--batch-size", "2", "--seq-len", "2048", "--grad-checkpointing")
    fixed, varied = by_name(plan_json(*args)), by_name(plan_json(*args, "--variable-length"))
    for name, st in varied.items():
        same = fixed[name]
        assert (st["allocated_bytes"], st["per_gpu_bytes"], st["fits"]) == \
            (same["allocated_bytes"], same["per_gpu_bytes"], same["fits"])
        extra = st["reserved_bytes"] - same["reserved_bytes"]
        assert extra == st["nvidia_smi_bytes"] - same["nvidia_smi_bytes"]
        # the logits and their gradients (V = 151936) at the loss are most of it, and never more than the step's
        # own activations and temporaries
        assert 0 < extra <= st["per_gpu_bytes"]["activations"] + st["per_gpu_bytes"]["temporaries"]
    ddp = varied["ddp"]   # its peak: the fp32 log-softmax kept and its two fp32 gradients, 12 bytes a logit
    assert ddp["peak"]["phase"] == "backward, at the loss"
    assert ddp["reserved_bytes"] - fixed["ddp"]["reserved_bytes"] >= 12 * 2 * 2048 * 151936 * 0.99


def test_gpt2_on_two_24gb_nvlink_is_the_fastest_predicted():
    """Everything fits, so speed decides: the fastest predicted step, or a simpler one within the tie margin (the
    host given: offload's CPU Adam is timed on its cores)."""
    data = plan_json("--model", "gpt2", "--gpus", "2", "--gpu-mem", "24GiB", "--link", "NV2",
                     "--gpu-model", "TITAN RTX", "--cpu-mem", "64GiB", "--cpu-cores", "16")
    steps = {s["name"]: s["time"]["step_s"] for s in data["strategies"] if s["fits"]}
    chosen = data["recommendation"]["strategy"]
    assert steps[chosen] <= min(steps.values()) * (1 + advise.TIE)
    assert any(r.startswith(f"Predicted: {steps[chosen]:.3f} s/step") for r in data["recommendation"]["reasons"])
    assert data["training"]["precision"] == "fp16"  # TITAN RTX is Turing: no bf16
    assert by_name(data)["ddp"]["comm_bytes_per_step"] == 4 * models.named("gpt2").params  # 2(n-1)/n x fp32 grads
    assert data["model"] == {**data["model"], "name": "gpt2", "params": 124439808, "hidden_size": 768, "layers": 12}


def test_t5_3b_on_one_16gb_gpu_needs_offload():
    data = plan_json("--model", "t5-3b", "--gpus", "1", "--gpu-mem", "16GiB", "--batch-size", "1",
                     "--cpu-mem", "128GiB")
    assert not by_name(data)["single"]["fits"]
    assert data["recommendation"]["strategy"] in ("zero2_offload_cpu", "zero3_offload_cpu")


def test_7b_on_8x80_nv12_is_zero_without_offload():
    data = plan_json("--model", "llama-2-7b", "--gpus", "8", "--gpu-mem", "80GiB", "--link", "NV12",
                     "--gpu-model", "NVIDIA A100-SXM4-80GB", "--batch-size", "1")
    assert data["recommendation"]["strategy"] in ("zero1", "zero2", "zero3")
    assert not by_name(data)["ddp"]["fits"]


def test_70b_on_8x80_with_little_ram_goes_to_nvme(tmp_path):
    data = plan_json("--model", "llama-2-70b", "--gpus", "8", "--gpu-mem", "80GiB", "--link", "NV12",
                     "--batch-size", "1", "--grad-checkpointing", "--cpu-mem", "256GiB", "--nvme-path", str(tmp_path),
                     "--nvme-free", "4TB", "--offload-params")
    assert data["recommendation"]["strategy"] == "zero3_offload_nvme"
    assert "CPU RAM" in by_name(data)["zero3_offload_cpu"]["why_not"][0]
    nvme = by_name(data)["zero3_offload_nvme"]["nvme_bytes"]
    assert nvme == 18 * models.named("llama-2-70b").params  # bf16 params + fp32 master, moments, grads


def test_pcie_layout_prefers_less_traffic():
    pinned = ("--batch-size", "1", "--no-grad-checkpointing")
    fast = plan_json("--model", "gpt2-xl", "--gpus", "4", "--gpu-mem", "16GiB", "--link", "NV4", *pinned)
    slow = plan_json("--model", "gpt2-xl", "--gpus", "4", "--gpu-mem", "16GiB", "--link", "SYS", *pinned)
    assert fast["recommendation"]["interconnect"] == "nvlink" and slow["recommendation"]["interconnect"] == "pcie"
    z3, z2 = by_name(slow)["zero3"], by_name(slow)["zero2"]
    # DeepSpeed's stage 2 all-reduces its buckets and all-gathers: the bytes of ZeRO-3's two gathers + reduce-scatter.
    assert z3["comm_bytes_per_step"] == pytest.approx(z2["comm_bytes_per_step"], rel=0.01)
    assert any("decision tree puts ZeRO-2 with CPU offload before ZeRO-3" in r
               for r in slow["recommendation"]["reasons"])


def test_global_batch_derives_accumulation():
    data = plan_json("--model", "gpt2", "--gpus", "2", "--gpu-mem", "24GiB", "--batch-size", "8",
                     "--global-batch", "64")
    assert data["training"]["grad_accum"] == 4
    assert any("8 per GPU x 2 GPUs x 4 accumulation" in r for r in data["recommendation"]["reasons"])


def test_8bit_adam_hint_when_optimizer_states_do_not_fit():
    data = plan_json("--model", "gpt2-xl", "--gpus", "1", "--gpu-mem", "24GiB", "--batch-size", "1",
                     "--cpu-mem", "64GiB", "--grad-checkpointing")
    assert any("8-bit Adam" in r for r in data["recommendation"]["reasons"])


@pytest.mark.parametrize("args,msg", [
    (["--model", "gpt2", "--gpus", "0", "--gpu-mem", "24GiB"], "--gpus must be 1 or more"),
    (["--model", "gpt2", "--gpus", "2", "--gpu-mem", "-3GiB"], "--gpu-mem -3GiB: expected a positive size"),
    (["--model", "nope", "--gpus", "2", "--gpu-mem", "24GiB"], "--model nope: not a known model"),
    (["--model", "gpt2", "--gpus", "2", "--gpu-mem", "24GiB", "--gpu-model", "Tesla V100-SXM2-16GB",
      "--precision", "bf16"],
     "bf16 needs an Ampere"),
    (["--model", "gpt2", "--gpus", "2", "--gpu-mem", "24GiB", "--link", "QQ"], "--link QQ: not a link type"),
    (["--model", "gpt2", "--gpus", "2", "--gpu-mem", "24GiB", "--batch-size", "0"], "must be 1 or more"),
    (["--params", "7B", "--gpus", "2", "--gpu-mem", "24GiB"], "--hidden-size and --layers"),
    # 7 parameters, or 100M 8192 wide: less than one block's attention holds (ALBERT's 12M at 768 wide passes)
    (["--params", "7", "--hidden-size", "4096", "--layers", "32", "--gpus", "2", "--gpu-mem", "24GiB"],
     "--params 7: a model of hidden size 4096 holds at least 33,554,432"),
    (["--params", "100M", "--hidden-size", "8192", "--layers", "80", "--gpus", "2", "--gpu-mem", "24GiB"],
     "--params 100M: a model of hidden size 8192"),
    (["--model", "mistralai/Mixtral-8x7B-v0.1", "--gpus", "2", "--gpu-mem", "24GiB"], "reads no hub: put the model's"),
])
def test_impossible_requests_one_line(args, msg):
    r = run("plan", *args)
    assert r.exit_code != 0 and msg in r.output and r.output.count("\n") == 1 and "Traceback" not in r.output


def test_plan_without_gpu_or_layout_says_what_to_give(fake_nvml):
    import fake_nvml as fm
    fake_nvml(init_error=fm.NVMLError_LibraryNotFound)
    r = run("plan", "--model", "gpt2")
    assert r.exit_code == 2 and "give --gpus N and --gpu-mem SIZE" in r.output


def test_inspect_with_model_uses_the_topology():
    r = run("inspect", "--json", "--example", "dgx-a100", "--model", "llama-2-7b", "--gpu-mem", "80GiB",
            "--batch-size", "1")
    data = json.loads(r.output)
    assert data["plan"]["layout"]["gpus_per_node"] == 8 and data["plan"]["layout"]["link_type"] == "NV12"
    assert data["recommendation"]["basis"] == "memory+interconnect"
    text = run("inspect", "--example", "dgx-a100", "--model", "llama-2-7b", "--gpu-mem", "80GiB",
               "--batch-size", "1").output
    assert "zero3_offload_nvme" in text and "Recommendation: zero" in text


def test_parse_bytes():
    from gputopo.units import parse_bytes
    # Issue 14: binary units as GPUs are sold and printed ("80GB" = 80 GiB); a bare number is refused.
    assert parse_bytes("24GiB", "x") == 24 * GIB and parse_bytes("80GB", "x") == 80 * GIB
    assert parse_bytes("16000MiB", "x") == 16000 * 2 ** 20
    with pytest.raises(BadInput, match="give a unit"):
        parse_bytes("24", "x")


def test_cli_optimizer_choices_match_the_arithmetic():
    from gputopo import options
    assert set(options.OPTIMIZERS) == set(plan.OPTIMIZER_BYTES)


@pytest.mark.parametrize("hub,name", [("meta-llama/Llama-2-13b-hf", "llama-2-13b"),
                                      ("meta-llama/Llama-2-70b-chat-hf", "llama-2-70b"),
                                      ("meta-llama/Meta-Llama-3-70B-Instruct", "llama-3-70b"),
                                      ("Qwen/Qwen2.5-0.5B-Instruct", "qwen2.5-0.5b"),
                                      ("openai-community/gpt2-xl", "gpt2-xl"), ("google-t5/t5-11b", "t5-11b"),
                                      ("META-LLAMA/llama-2-7b-HF", "llama-2-7b")])
def test_hub_ids_of_catalog_models(hub, name):
    """A hub id as copied from the model's page names the catalog's model (a chat tuning has its base's shape)."""
    assert models.named(hub) == models.named(name)


def test_config_json_given_for_its_folder(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    r = run("plan", "--model", str(tmp_path / "config.json"), "--gpus", "2", "--gpu-mem", "24GiB")
    assert r.exit_code == 2 and f"give the folder that holds the model's config.json ({tmp_path}/)" in r.output


def test_what_config_json_leaves_out_is_said(tmp_path):
    """A config.json without its depth plans transformers' default depth: the note says which and how much."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 256,
                                                      "num_attention_heads": 4, "vocab_size": 1000}))
    data = plan_json("--model", str(tmp_path), "--gpus", "2", "--gpu-mem", "24GiB")
    assert data["model"]["defaulted"] == ["layers (32)"]
    assert any(f"{tmp_path}/config.json does not give layers (32): these are transformers' defaults for llama" in n
               for n in data["notes"])
    # MPT names its depth n_layers (transformers' attribute_map): given, not defaulted
    mpt = tmp_path / "mpt"
    mpt.mkdir()
    (mpt / "config.json").write_text(json.dumps({"model_type": "mpt", "architectures": ["MptForCausalLM"],
                                                 "d_model": 128, "n_layers": 2, "n_heads": 4, "vocab_size": 1000}))
    assert plan_json("--model", str(mpt), "--gpus", "2", "--gpu-mem", "24GiB")["model"]["defaulted"] == []


@pytest.mark.parametrize("seconds,shown", [(12.3456, "12.346 s"), (600, "10.0 min"), (19494.7 * 60, "13.5 d"),
                                           (7200, "2.0 h")])
def test_run_times_in_readable_units(seconds, shown):
    """One way everywhere (was 7.2min in plan, 7.2 min in deepspeed-config): plan's tables and answer, and
    deepspeed-config's --auto line."""
    from gputopo import advise, render
    assert render._s(seconds) == advise.run_words(seconds) == shown
