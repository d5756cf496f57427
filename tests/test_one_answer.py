"""Issue 43 (2)-(4), tried as a new user would: one answer from plan, inspect --model and deepspeed-config --auto;
the machine planned, not this one; what the launch must do, said on its line."""
import json
import os
import shlex
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gputopo import dsconfig, probe, search
from gputopo.cli import cli
from gputopo.plan import Training

ROOT = Path(__file__).resolve().parent.parent

# The three questions, each as plan, inspect and deepspeed-config --auto take it.
H100 = ["--gpus", "8", "--gpu-model", "H100", "--link", "NV18"]
RTX3090 = ["--gpus", "2", "--gpu-model", "RTX 3090"]
RTX4090 = ["--gpus", "1", "--gpu-model", "RTX 4090"]
QUESTIONS = {
    # 8x H100 (NV18), full fine-tune of Llama-3-8B with the HF Trainer: how long for 1000 steps?
    "h100x8-llama3-8b": (H100, ["--example", "h100x8"], ["--model", "llama-3-8b", "--steps", "1000"]),
    # 2x RTX 3090 without NVLink (no --link: the card's usual box is PCIe), 64 GB RAM, GPT-2 XL from scratch
    "rtx3090x2-gpt2-xl": (RTX3090, ["--example", "pcie-desktop-2gpu", "--gpu-model", "RTX 3090"],
                          ["--model", "gpt2-xl", "--cpu-mem", "64GiB"]),
    # one RTX 4090, Qwen2.5-0.5B with Liger's kernels and chunked loss, 500 steps
    "rtx4090-qwen-liger": (RTX4090, ["--example", "rtx4090x8-pcie", "--gpu-ids", "0"],
                           ["--model", "qwen2.5-0.5b", "--kernels", "fused", "--loss", "chunked", "--steps", "500"]),
}


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def js(*args) -> dict:
    r = run(*args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def pick(planned: dict) -> tuple:
    r = planned["recommendation"]
    return r["strategy"], r["micro_batch"], r["grad_accum"], r["grad_checkpointing"]


@pytest.mark.parametrize("name", QUESTIONS)
def test_the_three_commands_give_one_pick(name):
    """Was (2x RTX 3090): plan zero1 at micro-batch 1 without --link, fsdp at 16 with --link PHB, --auto zero1 at 8."""
    gpus, machine, question = QUESTIONS[name]
    planned = js("plan", *gpus, *question)
    inspected = js("inspect", *machine, *question)["plan"]
    auto = js("deepspeed-config", "--auto", *gpus, *question)
    assert pick(planned) == pick(inspected) == pick(auto["plan"]), name
    assert planned["recommendation"]["strategy"] and planned["search"]["timed"]
    said = next(w for w in auto["warnings"] if w.startswith("--auto: gputopo plan recommends "))
    strategy, micro, accum, ckpt = pick(planned)
    assert said.startswith(f"--auto: gputopo plan recommends {strategy}, micro-batch {micro} x {accum} accumulation")
    if strategy != "fsdp":   # the config holds the pick (FSDP: the fastest DeepSpeed one, said so)
        assert auto["training_arguments"]["per_device_train_batch_size"] == micro
        assert auto["training_arguments"].get("gradient_checkpointing", False) == ckpt
    else:
        assert "which no DeepSpeed config expresses" in said and "the fastest DeepSpeed one that fits is " in said


def test_inspect_takes_steps_and_gives_plans_run_time():
    """Was: `inspect --example h100x8 --model llama-3-8b --steps 1000` said "No such option '--steps'"."""
    gpus, machine, question = QUESTIONS["h100x8-llama3-8b"]
    inspected = js("inspect", *machine, *question)["plan"]
    planned = js("plan", *gpus, *question)
    run_s = {s["name"]: s["time"].get("run_s") for s in planned["strategies"]}
    assert {s["name"]: s["time"].get("run_s") for s in inspected["strategies"]} == run_s
    chosen = planned["recommendation"]["strategy"]
    assert run_s[chosen] == pytest.approx(1000 * next(s["time"]["step_s"] for s in planned["strategies"]
                                                      if s["name"] == chosen))
    text = run("inspect", *machine, *question, "--explain").output
    assert "for the whole run" in " ".join(text.split())
    auto = js("deepspeed-config", "--auto", *gpus, *question)
    assert any("for 1,000 steps" in w for w in auto["warnings"] if w.startswith("--auto: "))


@pytest.fixture
def odd_host(monkeypatch):
    """This machine, as odd as can be told apart: 7 cores and 13 GiB."""
    real = probe.host()
    monkeypatch.setattr(probe, "host", lambda: {**real, "cpus_logical": 7, "cpus_physical": 7,
                                                "ram_total_bytes": 13 * 2 ** 30, "ram_available_bytes": 13 * 2 ** 30})
    monkeypatch.setattr(os, "cpu_count", lambda: 7)


def nothing_of_the_odd_host(text: str) -> None:
    flat = " ".join(text.split())
    for seen in ("13.0 GiB", "7 cores", "7 per node", "(7 assumed)", "OMP_NUM_THREADS=3 "):
        assert seen not in flat, seen


@pytest.mark.parametrize("machine", [
    ["plan", *H100],
    ["plan", *RTX3090],
    ["inspect", "--example", "h100x8"],
    ["inspect", "--example", "pcie-desktop-2gpu", "--gpu-model", "RTX 3090"],
    ["deepspeed-config", "--auto", *H100],
])
def test_a_described_machine_inherits_nothing_of_this_host(odd_host, machine):
    """Was: "zero2_offload_cpu no: CPU 337.8 GiB short" and offload steps of 39.8 h, from this 2-core, 23 GiB VM."""
    question = ["--model", "llama-3-8b"]
    data = js(*machine, *question)
    planned = data.get("plan") or data
    # RAM not given stays unknown; the cores are its class's, assumed and said (issue 50), never this host's 7
    layout = planned["layout"]
    assert layout["cpu_mem_bytes"] is None and layout["cpu_cores"] in (16, 112)
    assert layout["cpu_cores_range"] == ([56, 112] if layout["cpu_cores"] == 112 else [16, 64])
    for s in planned["strategies"]:
        if "offload" in s["name"]:   # its fit rests on RAM not given: said as its condition; its pace assumed
            assert s["condition"] and "of RAM per node (--cpu-mem SIZE to check)" in s["condition"]
            assert "cpu" not in s["short_bytes"] and s["time"]["step_s"]
    notes = " ".join(planned["notes"])
    assert "CPU RAM per node not given" in notes
    assert f"{layout['cpu_cores']} CPU cores: per node, assumed (not given):" in notes
    nothing_of_the_odd_host(json.dumps(data))
    nothing_of_the_odd_host(run(*machine, *question, "--explain").output)
    # what the options say is used
    given = js(*machine, *question, "--cpu-mem", "512GiB", "--cpu-cores", "64")
    given = given.get("plan") or given
    assert (given["layout"]["cpu_mem_bytes"], given["layout"]["cpu_cores"]) == (512 * 2 ** 30, 64)
    assert all(s["time"]["step_s"] for s in given["strategies"])


@pytest.mark.parametrize("launcher,nodes", [("torchrun", 1), ("deepspeed", 1), ("accelerate", 1), ("slurm", 1),
                                            ("deepspeed", 2), ("accelerate", 2)])
def test_launch_for_a_described_machine_names_no_path_of_this_one(odd_host, launcher, nodes, tmp_path, monkeypatch):
    """Was: accelerate's YAML held this checkout's absolute path, under "# on this machine:"."""
    here = [str(ROOT), os.path.dirname(sys.executable), str(tmp_path)]
    monkeypatch.chdir(tmp_path)
    r = run("deepspeed-config", "--auto", "--model", "llama-3-8b", *H100, "--nodes", nodes, "--launcher", launcher,
            "-o", "ds_config.json", "--json")
    assert r.exit_code == 0, r.output
    launch = json.loads(r.stdout)["launch"]
    written = {name: Path(name).read_text() for name in launch["files"]}
    said = json.dumps(launch) + "".join(written.values())
    for path in here:
        assert path not in said, path
    assert all("this machine" not in run_["where"] for run_ in launch["run"])
    if launcher == "accelerate":
        assert "deepspeed_config_file: ds_config.json\n" in written["accelerate_config.yaml"]
    if ".deepspeed_env" in written:
        assert written[".deepspeed_env"] == ""   # nothing of this shell's PATH
    nothing_of_the_odd_host(said)


def test_an_untimed_search_prefers_the_largest_micro_batch_that_fits():
    """Was: ZeRO-1 at micro-batch 1 beside ZeRO-1 at 8 with checkpointing, "later in HF's decision tree, or more
    recomputation or a smaller micro-batch" said of every row."""
    def c(strategy, micro, ckpt, tokens=None):
        return search.Candidate(strategy, Training(batch_size=micro, grad_checkpointing=ckpt), 10, False,
                                tokens and 1.0, tokens, None if tokens else "GPU model unknown")
    order = ("ddp", "zero1", "zero2")
    ranked, timed = search.rank([c("zero1", 1, False), c("zero1", 8, True), c("zero2", 16, True)], order)
    assert not timed and [(x.strategy, x.training.batch_size) for x in ranked] == [("zero1", 8), ("zero1", 1),
                                                                                    ("zero2", 16)]
    assert search.losing(ranked[1], ranked[0], timed, order) == "a smaller micro-batch (1, not 8)"
    assert search.losing(ranked[2], ranked[0], timed, order) == "later in HF's decision tree than zero1"
    # the same micro-batch: no recomputation first
    ranked, _ = search.rank([c("zero1", 8, True), c("zero1", 8, False)], order)
    assert not ranked[0].training.grad_checkpointing
    # timed ones first; one without a time (offload, cores not given) after them
    ranked, timed = search.rank([c("zero1", 8, True), c("zero2", 1, False, tokens=100.0)], order)
    assert timed and ranked[0].strategy == "zero2"
    # through plan: no GPU model, so no time; the pick is the largest micro-batch its strategy fits
    data = js("plan", "--model", "gpt2-xl", "--gpus", "2", "--gpu-mem", "24GiB", "--cpu-mem", "64GiB")
    assert data["search"]["timed"] is False and data["search"]["untimed"].startswith("GPU model unknown")
    rec = data["recommendation"]
    assert rec["micro_batch"] > 1 and all(n["micro_batch"] <= rec["micro_batch"] for n in data["search"]["next"]
                                          if n["strategy"] == rec["strategy"])


def test_the_link_not_given_is_the_cards_usual_box():
    """An RTX 3090 box is PCIe unless told; an H100 is planned on its SXM board and priced as PCIe cards beside it."""
    pcie = js("plan", "--model", "gpt2-xl", *RTX3090)
    assert pcie["layout"]["link_type"] == "PHB" and pcie["search"]["timed"]
    assert any(n.startswith("link PHB assumed: RTX 3090 joins at most two cards with an NVLink bridge")
               for n in pcie["notes"])
    sxm = js("plan", "--model", "llama-3-8b", "--gpus", "8", "--gpu-model", "H100")
    assert sxm["layout"]["link_type"] == "NV18" and sxm["search"]["timed"]
    note = next(n for n in sxm["notes"] if n.startswith("link NV18 assumed"))
    cards = js("plan", "--model", "llama-3-8b", "--gpus", "8", "--gpu-model", "H100", "--link", "PHB")
    strategy, micro, accum, ckpt = pick(cards)
    assert f"as PCIe cards (--link PHB) the pick is {strategy}, micro-batch {micro} x {accum} accumulation" in note
    assert pick(js("plan", "--model", "llama-3-8b", *H100)) == pick(sxm)


def auto_line(*args) -> tuple[list[str], dict]:
    data = js("deepspeed-config", "--auto", *args, "--launcher", "torchrun", "-o", "ds_config.json", "--force")
    return shlex.split(data["launch"]["command"]), data


def test_the_launch_line_carries_what_the_plan_assumed(tmp_path, monkeypatch):
    """Was: with --kernels fused --loss chunked the line was a plain Trainer line, and no --max_steps."""
    monkeypatch.chdir(tmp_path)
    words, data = auto_line("--model", "llama-3-8b", *H100, "--steps", "1000", "--kernels", "fused", "--loss",
                            "chunked")
    assert "--use_liger_kernel" in words and words[words.index("--max_steps") + 1] == "1000"
    assert data["training_arguments"]["use_liger_kernel"] is True and data["training_arguments"]["max_steps"] == 1000
    need = next(w for w in data["warnings"] if w.startswith("the plan assumed --kernels fused, --loss chunked"))
    assert "the launch needs --use_liger_kernel (with transformers' own kernels and loss" in need
    assert any("pip install liger-kernel" in line for line in data["launch"]["script_needs"])
    # checkpointing, as the plan chose it
    words, data = auto_line("--model", "gpt2-xl", *RTX3090, "--cpu-mem", "64GiB")
    assert ("--gradient_checkpointing" in words) == data["training_arguments"].get("gradient_checkpointing", False)
    assert "--gradient_checkpointing" in words
    # no Liger kernels for GPT-2: fused kernels are torch.compile's; the chunked loss is the script's to do
    words, data = auto_line("--model", "gpt2", *RTX4090, "--kernels", "fused", "--loss", "chunked")
    assert "--torch_compile" in words and "--use_liger_kernel" not in words
    assert any(line.startswith("the plan assumed a chunked loss") for line in data["launch"]["script_needs"])
    # a script of one's own (--no-hf): what no flag says is a line of what the script must do
    r = run("deepspeed-config", "--auto", "--no-hf", "--model", "llama-3-8b", *H100, "--steps", "1000",
            "--kernels", "fused", "--loss", "chunked", "--launcher", "deepspeed", "-o", "ds_config.json", "--force",
            "--json")
    needs = json.loads(r.stdout)["launch"]["script_needs"]
    assert any("apply_liger_kernel_to_llama(model=model)" in line for line in needs)
    assert any(line.startswith("stop after 1,000 optimizer steps") for line in needs)


def test_a_printed_config_is_saved_before_its_launch(tmp_path, monkeypatch):
    """Was: `-o -` printed a launch line naming ds_config.json, which was never written."""
    monkeypatch.chdir(tmp_path)
    for out in (["-o", "-"], []):
        data = js("deepspeed-config", "--auto", "--model", "gpt2", *RTX4090, "--launcher", "torchrun", *out)
        assert data["launch"]["run"][0]["where"].endswith("after saving the config printed above as ds_config.json")
        assert data["launch"]["notes"][0].startswith("the config was printed to stdout, not written: save it as"
                                                     " ds_config.json")
        assert not (tmp_path / "ds_config.json").exists()
    written = js("deepspeed-config", "--auto", "--model", "gpt2", *RTX4090, "--launcher", "torchrun", "-o",
                 "out.json")
    assert "--deepspeed out.json" in written["launch"]["command"] and (tmp_path / "out.json").exists()
    assert "saving" not in written["launch"]["run"][0]["where"]


def test_smaller_untruths():
    # one GPU without --gpu-model: what is missing is the GPU model, not a link
    auto = js("deepspeed-config", "--auto", "--model", "gpt2", "--gpus", "1", "--gpu-mem", "24GiB")
    said = next(w for w in auto["warnings"] if w.startswith("--auto: "))
    assert "link" not in said and "give --gpu-model" in said
    # "no DeepSpeed needed" beside "writes single's config (ZeRO stage 0)"
    planned = js("plan", "--model", "gpt2", *RTX4090)
    assert planned["recommendation"]["strategy"] == "single" == planned["deepspeed_config"]["strategy"]
    words = " ".join(planned["recommendation"]["reasons"])
    assert "no DeepSpeed" not in words and "DeepSpeed at ZeRO stage 0" in words


# --- the review of issues 42/43: the command plan names next gives plan's answer ------------------------------------

def next_words(planned: dict) -> list[str]:
    """plan's `next` command as argv for the CLI (the leading `gputopo` dropped)."""
    return shlex.split(planned["next"]["command"])[1:]


def test_the_next_command_carries_steps_and_writes_plans_pick(tmp_path, monkeypatch):
    """Was: --steps was dropped from the Next line, so its launch line had no --max_steps."""
    monkeypatch.chdir(tmp_path)
    planned = js("plan", "--model", "llama-3-8b", *H100, "--steps", "1000")
    words = next_words(planned)
    assert words[words.index("--steps") + 1] == "1000" and planned["next"]["same"]
    wrote = js(*words)
    launch = shlex.split(wrote["launch"]["command"])
    assert launch[launch.index("--max_steps") + 1] == "1000"
    assert pick(wrote["plan"]) == pick(planned)
    assert wrote["config"] == planned["deepspeed_config"]["config"]
    written = planned["next"]["writes"]
    assert (written["strategy"], written["micro_batch"], written["grad_accum"], written["grad_checkpointing"]) == \
        pick(planned)


def test_every_plan_option_reaches_the_next_command_or_changes_only_plans_output():
    """The Next command is deepspeed-config --auto with plan's options: each is one deepspeed-config takes, but for
    those that shape plan's output, --calibrate (whose pick the answer says deepspeed-config cannot repeat) and
    torch's own optimizer loop, which a DeepSpeed config replaces (deepspeed-config refuses them)."""
    from gputopo.commands.plan import NOT_THERE
    ds = {p.name: p for p in cli.commands["deepspeed-config"].params}
    for p in cli.commands["plan"].params:
        if p.name not in NOT_THERE:
            assert p.name in ds and ds[p.name].opts == p.opts, p.name
    assert set(NOT_THERE) == {"measure", "calibrate", "calibrate_seconds", "as_json", "explain", "wide",
                              "optimizer_impl", "zero_grad", "sync_each_batch", "fsdp_use_orig_params",
                              "activation_offload"}


# The CPU twin's rates as `plan --model gpt2 --gpus 2 --gpu-mem 24GB --calibrate` measured them on a 2-core VM: its
# pick (zero1, no checkpointing) is not the datasheet's (ddp at micro-batch 16 with checkpointing).
CALIBRATED = dict(matmul_flops=4.47e11, mem_bytes_per_s=4.41e9, busbw=7.95e8, busbw_no_p2p=7.95e8, inter_node=1.25e10,
                  latency_s=1.55e-3, host_link=4.41e9, cpu_adam=4.19e8, nvme=2e9)
GPT2 = ["--model", "gpt2", "--gpus", "2", "--gpu-mem", "24GB"]


def test_a_calibrated_pick_says_the_next_command_writes_another(tmp_path, monkeypatch):
    """Was: plan --calibrate recommended zero1 at micro-batch 4, its Next command wrote stage 0 at 16 with
    checkpointing, and nothing said so (the JSON held the calibrated config: text and JSON disagreed)."""
    from gputopo import calibrate, speed
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(calibrate, "for_plan", lambda req, budget=None, say=None: (speed.Rates(**CALIBRATED), "cpu"))
    planned = js("plan", *GPT2, "--calibrate")
    ds, nxt = planned["deepspeed_config"], planned["next"]
    assert not nxt["same"] and pick(planned) == (ds["strategy"], ds["micro_batch"], ds["grad_accum"],
                                                 ds["grad_checkpointing"])
    w = nxt["writes"]
    assert (w["strategy"], w["micro_batch"], w["grad_checkpointing"]) != (ds["strategy"], ds["micro_batch"],
                                                                           ds["grad_checkpointing"])
    wrote = js(*next_words(planned))   # what the named command writes is what `writes` says
    assert wrote["config"]["zero_optimization"]["stage"] == dsconfig.STRATEGY_TO_CONFIG[w["strategy"]][0]
    assert wrote["training_arguments"]["per_device_train_batch_size"] == w["micro_batch"]
    assert wrote["training_arguments"].get("gradient_checkpointing", False) == w["grad_checkpointing"]
    text = " ".join(run("plan", *GPT2, "--calibrate").stdout.split()[:80])
    ckpt = "gradient checkpointing" if w["grad_checkpointing"] else "no checkpointing"
    assert (f"Next (deepspeed-config cannot repeat --calibrate: this writes {w['strategy']} at micro-batch"
            f" {w['micro_batch']} x {w['grad_accum']}, {ckpt}; --json's deepspeed_config holds the calibrated"
            " config):") in text


def test_plan_json_names_no_next_command_when_nothing_fits():
    r = run("plan", "--model", "llama-2-70b", "--gpus", "1", "--gpu-mem", "8GB", "--cpu-mem", "16GB", "--nvme-free",
            "10GB", "--json")
    assert r.exit_code == 1 and json.loads(r.stdout)["next"] is None


@pytest.mark.parametrize("args,product", [
    (["deepspeed-config", "--no-hf", "--stage", "2", "--model", "gpt2", "--gpus", "1024", "--nodes", "100000",
      "--gpu-model", "H100", "--grad-accum", "2147483647", "--batch-size", "2147483647"],
     "2147483647 x 2147483647 x 1024 x 100000 = 472236647847159870361600000"),
    (["deepspeed-config", "--auto", "--no-hf", "--model", "gpt2", "--gpus", "1024", "--gpu-model", "H100", "--nodes",
      "100000", "--inter-node-gbps", "0.01", "--grad-accum", "2147483647"],
     "1 x 2147483647 x 1024 x 100000 = 219902325452800000"),
    (["plan", "--model", "gpt2", "--gpus", "1024", "--gpu-model", "H100", "--grad-accum", "3000000"],
     "1 x 3000000 x 1024 x 1 = 3072000000"),
])
def test_the_derived_global_batch_is_held_to_the_count_bound(args, product):
    """Was: train_batch_size 472236647847159870361600000 (past int64), written and called validated."""
    r = run(*args)
    assert r.exit_code == 2 and r.stdout == "" and r.output.count("\n") == 1, r.output
    assert r.output.startswith("Error: the global batch, micro-batch x accumulation x GPUs per node x nodes = "
                               + product + ", is above 2147483647"), r.output


def test_the_search_tries_no_micro_batch_past_the_bound():
    """At the bound's edge the first micro-batch that fits it is planned, and the search tries none larger."""
    planned = js("plan", "--model", "gpt2", "--gpus", "1024", "--gpu-model", "H100", "--grad-accum", "1000000")
    micro = planned["recommendation"]["micro_batch"]
    assert micro == 2 and micro * 1000000 * 1024 <= 2 ** 31 - 1
    assert all(c["micro_batch"] <= 2 for c in planned["search"]["next"])


def test_auto_explain_gives_the_plans_reasons(tmp_path, monkeypatch):
    """Was: deepspeed-config --auto --explain printed every note but none of the plan's reasons (only in --json)."""
    monkeypatch.chdir(tmp_path)
    args = ["deepspeed-config", "--auto", "--model", "llama-3-8b", *H100, "--steps", "1000", "-o", "ds.json"]
    reasons = js(*args, "--force")["plan"]["recommendation"]["reasons"]
    text = " ".join(run(*args, "--force", "--explain").output.split())
    assert "Why zero3 (gputopo plan's reasons):" in text
    assert all(" ".join(reason.split()) in text for reason in reasons)
    assert "gputopo plan's reasons" not in run(*args, "--force").output   # without --explain: the short form
