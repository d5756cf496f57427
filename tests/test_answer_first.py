"""Issue 43: every command's text opens with its answer (at most 5 lines, read from the dict its tables print), fits
100 columns, says what it assumed in a line or two (--explain: all of it), leaves --json as it was, and shows every
cell of a pasted `nvidia-smi topo -m`, the NIC-to-NIC ones included."""
import json

import pytest
from click.testing import CliRunner
from conftest import FIXTURES, readable_paste

from gputopo import parse, render, report
from gputopo.cli import cli
from gputopo.sources import examples
from gputopo.units import size

TOPO = FIXTURES / "topo"
# The three questions a new user asks (issue 43), as command lines.
H100 = ["--model", "llama-3-8b", "--gpus", "8", "--gpu-model", "H100", "--link", "NV18", "--steps", "1000"]
RTX3090 = ["--model", "gpt2-xl", "--gpus", "2", "--gpu-model", "RTX 3090", "--link", "PHB", "--cpu-mem", "64GB"]
PASTE = TOPO / "dgx_a100_nv12_mlx5_old_names_trailing_cmds.txt"   # mlx5_0-mlx5_1 PXB among its cells


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def lines(r) -> list[str]:
    """What a terminal shows: stdout and stderr."""
    return r.stdout.splitlines() + r.stderr.splitlines()


def flat(text: str) -> str:
    """Text with its wrapping undone (prose is cut at spaces into 100 columns)."""
    return " ".join(text.split())


@pytest.mark.parametrize("args", [H100, RTX3090], ids=["8xH100-llama-3-8b-1000-steps", "2xRTX3090-gpt2-xl"])
def test_plan_opens_with_the_answer(args):
    """The configuration, its memory per GPU of the card, the step (and run) time and the command to run next, in
    the first 5 lines, each figure the one --json holds."""
    r, data = run("plan", *args), json.loads(run("plan", *args, "--json").stdout)
    assert r.exit_code == 0, r.output
    head = flat("\n".join(r.stdout.splitlines()[:5]))
    rec, lay = data["recommendation"], data["layout"]
    row = next(s for s in data["strategies"] if s["name"] == rec["strategy"])
    assert head.startswith(f"Recommendation: {rec['strategy']}, micro-batch {rec['micro_batch']} x"
                           f" {rec['grad_accum']} accumulation, ")
    assert ("gradient checkpointing" if rec["grad_checkpointing"] else "no checkpointing") in head
    assert f"{size(row['per_gpu_bytes']['total'])} per GPU of {size(lay['gpu_mem_bytes'])}" in head
    assert f"step {render._s(row['time']['step_s'])}, {row['time']['tokens_per_s']:,.0f} tokens/s" in head
    if "--steps" in args:
        assert f"1,000 steps: {render._s(row['time']['run_s'])}" in head
    # the next command: deepspeed-config --auto with the same options as typed (--steps too: its --max_steps),
    # quoted for the shell, as --json's `next` holds it
    nxt = head[head.index("gputopo deepspeed-config"):].replace(" \\ ", " ")
    typed = " ".join(f"'{a}'" if " " in a else a for a in args)
    assert nxt.startswith(f"gputopo deepspeed-config --auto {typed} --launcher torchrun -o ds_config.json")
    assert data["next"]["command"] == nxt and data["next"]["same"]
    ds = data["deepspeed_config"]
    if ds["strategy"] != rec["strategy"]:   # FSDP: the command writes the fastest DeepSpeed setup, said so
        assert f"{ds['strategy']} at micro-batch {ds['micro_batch']} x {ds['grad_accum']}" in head


def test_the_next_command_plan_names_runs_and_writes_that_config(tmp_path, monkeypatch):
    """What the answer says to run next is a command deepspeed-config accepts, and it writes the plan's config."""
    monkeypatch.chdir(tmp_path)
    text = run("plan", *RTX3090).stdout.splitlines()[:5]
    words = __import__("shlex").split(" ".join(text[text.index(next(x for x in text if "gputopo deepspeed" in x)):])
                                      .split("gputopo ", 1)[1].replace("\\", ""))
    r = run(*words)
    assert r.exit_code == 0, r.output
    planned = json.loads(run("plan", *RTX3090, "--json").stdout)["deepspeed_config"]["config"]
    assert json.loads((tmp_path / "ds_config.json").read_text())["zero_optimization"] == planned["zero_optimization"]


def test_inspect_of_a_paste_opens_with_the_machine_its_weakest_link_and_a_strategy():
    r, data = run("inspect", "-f", PASTE), json.loads(run("inspect", "-f", PASTE, "--json").stdout)
    assert r.exit_code == 0, r.output
    head = r.stdout.splitlines()[:5]
    w, rec = data["weakest_link"], data["recommendation"]
    assert head[0].startswith("Machine: 8 GPU(s)") and "links NV12 (all 28 pairs)" in head[0]
    assert "12 NIC(s)" in flat("\n".join(head))
    assert any(x.startswith(f"Weakest link in use: {w['a']}-{w['b']} {w['type']}") for x in head)
    assert any(x.startswith(f"Recommendation ({rec['basis']}): {rec['strategy']}") for x in head)


def test_inspect_with_a_model_opens_with_the_plan():
    args = ["--example", "dgx-a100", "--model", "llama-2-7b", "--gpu-mem", "80GiB"]
    r, data = run("inspect", *args), json.loads(run("inspect", *args, "--json").stdout)
    head = flat("\n".join(r.stdout.splitlines()[:5]))
    rec = data["plan"]["recommendation"]
    row = next(s for s in data["plan"]["strategies"] if s["name"] == rec["strategy"])
    assert head.startswith("Machine: 8 x NVIDIA A100-SXM4-80GB")
    assert f"Recommendation: {rec['strategy']}, micro-batch {rec['micro_batch']} x" in head
    assert f"{size(row['per_gpu_bytes']['total'])} per GPU of" in head and "step " in head


def test_deepspeed_config_opens_with_what_it_wrote_and_the_launch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["--auto", "--model", "llama-2-7b", "--gpus", "4", "--gpu-model", "RTX 4090", "--cpu-mem", "256GiB",
            "--launcher", "torchrun"]
    data = json.loads(run("deepspeed-config", *args, "--json").stdout)
    r = run("deepspeed-config", *args, "-o", "ds_config.json")
    assert r.exit_code == 0, r.output
    head = r.output.splitlines()[:5]   # CliRunner: what was written (stderr), then the launch (stdout)
    stage = data["config"]["zero_optimization"]["stage"]
    assert head[0].startswith(f"wrote ds_config.json: ZeRO stage {stage}")
    assert any(x.startswith("# on ") for x in head)
    assert flat(" ".join(head)).replace(" \\ ", " ").endswith(data["launch"]["run"][0]["command"])


def test_doctor_and_bench_open_with_their_verdicts():
    r = run("doctor")
    verdict = r.stdout.splitlines()[1]
    assert verdict in ("Nothing blocks a run here.", "Exit 1: something below will break a run.")
    data = {"settings": None, "nnodes": 1, "nproc": 2, "device": "cpu", "backend": "gloo", "runs": [],
            "comparison": {"ratio": 1.29, "message": "P2P is faster: " + "beyond noise " * 20},
            "predicted_ratio": 1.2, "reference": {"hardware": "2x TITAN RTX", "model": "gpt2", "dataset": "w",
                                                  "steps": 200, "p2p_s": 101.9, "no_p2p_s": 131.4},
            "allreduce": [], "notes": [], "link": None}
    text = render.bench(data).splitlines()
    assert text[0].startswith("no-P2P / P2P median step: 1.290x. Verdict: P2P is faster")
    assert any(x.startswith("predicted no-P2P / P2P: 1.200x") for x in text[:5])


# --- 100 columns ------------------------------------------------------------------------------------------------

PASTES = sorted(p.name for p in TOPO.glob("*.txt") if readable_paste(p))
EXAMPLES = sorted(examples())
PLANS = [H100, RTX3090,
         ["--model", "llama-2-7b", "--gpus", "4", "--gpu-model", "RTX 4090", "--cpu-mem", "256GiB", "--cpu-cores",
          "32"],
         ["--model", "llama-2-70b", "--gpus", "8", "--nodes", "2", "--gpu-model", "A100-80GB", "--link", "NV12",
          "--cpu-mem", "1TB", "--steps", "500"],
         ["--model", "gpt2", "--gpus", "2", "--gpu-mem", "24GB"],   # no step time: the GPU model is unknown
         ["--model", "llama-2-70b", "--gpus", "1", "--gpu-mem", "8GB", "--cpu-mem", "16GB", "--nvme-free", "10GB",
          "--batch-size", "4", "--no-grad-checkpointing"]]   # nothing fits (exit 1)


def within_100(r, what):
    """Every line within 100 columns, but for an error (one line, whatever its length: docs/options.md) and the
    launcher files deepspeed-config prints without -o (each line as the file would hold it)."""
    assert r.exit_code in (0, 1), (what, r.output)
    shown, in_file = [], False
    for x in lines(r):
        in_file = x.startswith("--- ") or in_file and not x.startswith(("# on ", "# the training", "note: ", "Assumed"))
        if not in_file and not x.startswith("Error: "):
            shown.append(x)
    wide = [x for x in shown if len(x) > 100]
    assert not wide, (what, wide)


@pytest.mark.parametrize("name", PASTES)
def test_inspect_of_every_paste_fits_100_columns(name):
    within_100(run("inspect", "-f", TOPO / name), name)


@pytest.mark.parametrize("name", EXAMPLES)
def test_inspect_of_every_example_fits_100_columns(name):
    within_100(run("inspect", "--example", name), name)
    within_100(run("inspect", "--example", name, "--best", "2"), name)


def test_inspect_lists_examples_and_plans_within_100_columns():
    within_100(run("inspect", "--example", "list"), "list")
    within_100(run("inspect"), "this machine")
    within_100(run("inspect", "--example", "dgx-a100", "--model", "llama-2-7b", "--gpu-mem", "80GiB"), "with a model")


@pytest.mark.parametrize("args", PLANS, ids=lambda a: " ".join(a[:4]))
def test_plan_fits_100_columns(args):
    within_100(run("plan", *args), args)


@pytest.mark.parametrize("args", [["--stage", "2"], ["--stage", "3", "--offload", "cpu", "--model", "llama-2-7b"],
                                  ["--auto", *RTX3090, "--launcher", "accelerate"],
                                  ["--auto", *H100[:-2], "--launcher", "slurm", "--nodes", "2"],
                                  ["--auto", *H100[:-2], "--launcher", "deepspeed", "--nodes", "2"]])
def test_deepspeed_config_fits_100_columns(args):
    within_100(run("deepspeed-config", *args), args)


def test_doctor_fits_100_columns():
    within_100(run("doctor"), "doctor")


def test_tables_fold_into_100_columns_and_print_whole_with_wide():
    rows = [[f"row{i}", *(f"cell{i}-{j}" * 2 for j in range(12))] for i in range(3)]
    header = ["key", *(f"column {j}" for j in range(12))]
    folded, whole = render.table(rows, header, 100), render.table(rows, header)
    assert max(map(len, folded.splitlines())) <= 100 < max(map(len, whole.splitlines()))
    # every cell is still there, each row's key repeated in the table that continues it
    assert sorted(folded.split()) == sorted(whole.split() + [w for r in [header, *rows] for w in r[:1]] * (
        len(folded.splitlines()) // len(whole.splitlines()) - 1))


def test_wide_prints_the_full_tables():
    r = run("plan", *H100, "--wide")
    header = next(x for x in r.stdout.splitlines() if x.startswith("strategy  ") and "weights" in x)
    assert header.split() == ["strategy", "fits", "weights", "grads", "optim", "activ", "temps", "overhead",
                              "total/GPU", "nvidia-smi", "peak", "falls", "CPU/node", "NVMe/node", "comm/step"]


# --- what was assumed: short by default, whole with --explain ----------------------------------------------------

def test_plan_says_what_it_assumed_in_two_lines_and_all_of_it_with_explain():
    data = json.loads(run("plan", *H100, "--json").stdout)
    short, full = run("plan", *H100).stdout, run("plan", *H100, "--explain").stdout
    said = [x for x in short.splitlines() if x.startswith("Assumed: ")]
    assert len(said) == 1
    block = short[short.index("Assumed: "):].splitlines()
    assert len([x for x in block if x.startswith("  ")]) <= 2 and "--explain" in " ".join(block)
    assert "assumes " not in short and "Note: " not in short
    for k, v in data["rates"]["basis"].items():
        if k != "summary":
            assert f"assumes {k}: {v}" in flat(full), k
    for n in data["notes"]:
        assert f"Note: {n}" in flat(full)
    for reason in data["recommendation"]["reasons"]:
        assert flat(reason) in flat(full)
    assert "total/GPU = weights + optimizer + overhead" in flat(full)


def test_inspect_explains_its_strategy_with_explain():
    data = json.loads(run("inspect", "-f", PASTE, "--json").stdout)
    short, full = run("inspect", "-f", PASTE).stdout, run("inspect", "-f", PASTE, "--explain").stdout
    first = data["recommendation"]["reasons"][0]
    assert flat(first) not in flat(short) and flat(first) in flat(full)


# --- --json: what it was -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("cmd,args,renderer", [
    ("plan", H100, "plan"), ("plan", RTX3090, "plan"), ("inspect", ["-f", PASTE], "inspect"),
    ("inspect", ["--example", "dgx-a100", "--model", "llama-2-7b", "--gpu-mem", "80GiB"], "inspect"),
    ("deepspeed-config", ["--auto", *RTX3090, "--launcher", "torchrun"], "deepspeed_config"),
])
def test_json_is_the_dict_the_text_is_drawn_from(cmd, args, renderer, monkeypatch):
    """The answer, folding and --explain are drawn from the report's dict and add nothing to it: --json prints that
    same dict, byte for byte, whatever the text shows."""
    seen = []
    real = getattr(render, renderer)

    def spy(d, *a, **k):
        before = render.to_json(d)
        out = real(d, *a, **k)
        assert render.to_json(d) == before   # drawing the text changes nothing in the dict
        seen.append(before)
        return out
    monkeypatch.setattr(render, renderer, spy)
    text = run(cmd, *args)
    assert text.exit_code == 0 and seen, text.output
    as_json = run(cmd, *args, "--json").stdout
    if cmd == "deepspeed-config":   # its --json is Result.to_dict(), the dict the text reads
        assert json.loads(as_json) == json.loads(seen[0])
    else:
        assert as_json == seen[0] + "\n"


# --- every cell of the paste (item 6) ----------------------------------------------------------------------------

def nic_pastes():
    """The `topo -m` pastes with two NICs or more: NIC-to-NIC cells to show."""
    out = []
    for p in PASTES:
        try:
            m = parse.matrix((TOPO / p).read_text(errors="replace"))
        except Exception:
            continue
        if m.flavour == "topo" and sum(not x.startswith("GPU") for x in m.labels) > 1:
            out.append(p)
    return out


def row_cells(text: str, label: str) -> list[str]:
    """A row's cells in a text matrix, across the tables it is folded into."""
    return [c for x in text.splitlines() if x.startswith(label + " ") for c in x.split()[1:]]


@pytest.mark.parametrize("name", nic_pastes())
def test_every_nic_cell_of_the_paste_is_shown(name):
    m = parse.matrix((TOPO / name).read_text(errors="replace"))
    nics = [x for x in m.labels if not x.startswith("GPU")]
    want = {n: ["X" if n == c else m.cells[(n, c)] for c in m.labels] for n in nics}
    for args in ([], ["--wide"]):
        out = run("inspect", "-f", TOPO / name, *args).stdout
        for n in nics:
            assert row_cells(out, n)[:len(m.labels)] == want[n], (name, args, n)
    md = run("inspect", "-f", TOPO / name, "--markdown").stdout
    for n in nics:
        row = next(x for x in md.splitlines() if x.startswith(f"| {n} "))
        assert [c.strip() for c in row.strip("|").split("|")][1:len(m.labels) + 1] == want[n], (name, n)


def test_the_admins_paste_shows_mlx5_0_to_mlx5_1():
    """The cell that went missing: mlx5_0-mlx5_1 PXB (DGX A100's paired HCAs), in text and markdown."""
    out = run("inspect", "-f", PASTE).stdout
    assert row_cells(out, "mlx5_0")[8:10] == ["X", "PXB"] and row_cells(out, "mlx5_1")[8:10] == ["PXB", "X"]
    md = run("inspect", "-f", PASTE, "--markdown").stdout
    assert "| mlx5_0 | PXB | PXB | SYS | SYS | SYS | SYS | SYS | SYS | X | PXB |" in md


def test_nic_cells_unknown_live_are_said(fake_nvml, monkeypatch):
    """Live, NVML knows no NICs and nvidia-smi's NIC-to-NIC cells are not kept: a line says so and how to see them."""
    data = json.loads(run("inspect", "-f", PASTE, "--json").stdout)
    out = render.inspect(data, nic_cells={})
    assert "NIC-to-NIC cells: not known here" in flat(out) and "`nvidia-smi topo -m` shows them" in flat(out)
    assert "NIC-to-NIC" not in render.inspect(data, nic_cells=report.nic_cells([("p", PASTE.read_text())]))


# --- the review of issues 42/43: what the text says, and how ------------------------------------------------------

def memory_rows(text: str) -> dict:
    """plan's memory table (the default width): strategy -> its fits cell."""
    block = text[text.index("strategy            fits"):].split("\n\n")[0].splitlines()
    start, end = block[0].index("fits"), block[0].index("total/GPU")
    return {x.split()[0]: x[start:end].strip() for x in block[1:] if x[:1].isalpha() and x.split()[0] != "strategy"}


def test_the_fits_cell_says_what_the_condition_is_on():
    """Was: "yes, if NVMe free" on CPU-offload rows whose condition is the host's RAM."""
    rows = memory_rows(run("plan", *H100).stdout)
    assert rows["zero2_offload_cpu"] == rows["zero3_offload_cpu"] == "yes, if enough RAM"
    assert rows["zero3_offload_nvme"] == "yes, if enough RAM+NVMe" and rows["zero3"] == "yes"
    rows = memory_rows(run("plan", *H100, "--cpu-mem", "1TB").stdout)
    assert rows["zero2_offload_cpu"] == "yes" and rows["zero3_offload_nvme"] == "yes, if enough NVMe"
    data = json.loads(run("plan", *H100, "--json").stdout)
    full = flat(run("plan", *H100, "--explain").stdout)
    for s in data["strategies"]:   # --explain: each condition whole, as --json holds it
        assert (f"{s['name']} fits only with {s['condition']}" in full) == bool(s["condition"]), s["name"]


def test_another_machines_host_is_said_not_given():
    """Was: `CPU RAM N/A/node`."""
    layout = flat(run("plan", *H100).stdout.split("Layout: ")[1].split("Training: ")[0])
    assert layout.endswith("CPU RAM not given, NVMe free not given (another machine)") and "N/A" not in layout
    layout = flat(run("plan", *H100, "--cpu-mem", "1TB", "--nvme-free", "2TB").stdout.split("Layout: ")[1]
                  .split("Training: ")[0])
    assert layout.endswith("CPU RAM 1.0 TiB/node, NVMe free 2.0 TiB/node"), layout


def test_times_are_written_one_way_in_plan_and_deepspeed_config(tmp_path, monkeypatch):
    """Was: 7.2min in plan's answer, 7.2 min in deepspeed-config's --auto line."""
    import re

    from gputopo import advise
    monkeypatch.chdir(tmp_path)
    data = json.loads(run("plan", *H100, "--json").stdout)
    row = next(s for s in data["strategies"] if s["name"] == data["recommendation"]["strategy"])
    out = run("plan", *H100, "--explain").stdout
    assert f"1,000 steps: {advise.run_words(row['time']['run_s'])}" in flat(out)
    assert not re.search(r"\d(s|min|h|d)\b", out), re.search(r".{20}\d(s|min|h|d)\b", out).group(0)
    auto = json.loads(run("deepspeed-config", "--auto", *H100, "-o", "ds.json", "--json").stdout)
    said = next(w for w in auto["warnings"] if w.startswith("--auto: "))
    assert f"{advise.run_words(row['time']['run_s'])} for 1,000 steps" in said


def test_a_paste_without_its_gpu_model_asks_for_it():
    """Was: "give --gpu-mem", where --gpu-model gives the memory and step times too."""
    r = run("inspect", "-f", TOPO / "a100x2_nv12_8mlx5_lmdeploy_check_env.txt", "--model", "gpt2-xl")
    assert r.exit_code == 2 and r.stdout == "" and r.output.count("\n") == 1
    assert r.output.startswith("Error: GPU memory unknown: the topology names no GPU model: give --gpu-model NAME"
                               " (its memory, and step times from its datasheet) or --gpu-mem SIZE"), r.output


def test_inspect_gpus_names_the_command_that_asks_it():
    """inspect reads a machine (this one, a paste, an example); "8 x H100" described by count is plan's: --gpus is
    refused naming that plan command, as typed (or --gpu-ids among a topology's GPUs)."""
    import shlex
    r = run("inspect", *H100)
    assert r.exit_code == 2 and r.output.count("\n") == 1, r.output
    command = r.output.split("count are plan's: ")[1].strip()
    assert command == "gputopo plan " + shlex.join(H100), command
    planned = json.loads(run(*shlex.split(command)[1:], "--json").stdout)
    assert planned["recommendation"]["strategy"]
    r = run("inspect", "--gpus", "2", "--gpu-model", "RTX 4090")
    assert r.output.endswith("gputopo plan --gpus 2 --gpu-model 'RTX 4090' --model NAME\n"), r.output
    r = run("inspect", "--example", "h100x8", "--gpus", "2", "--model", "gpt2")
    assert r.output == ("Error: --gpus 2: inspect reads the GPUs of its topology; --gpu-ids 0,1 (or --best 2) picks"
                        " among them\n")
    r = run("inspect", "--example", "h100x8", "--link", "NV4", "--model", "gpt2")
    assert r.output == "Error: --link NV4: inspect reads the links of its topology (--gpu-ids picks GPUs among them)\n"
