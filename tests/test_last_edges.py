"""Issue 49, the last sharp edges: inputs that were exit 70 (an internal error), reads without a bound, and output
that was untrue or broke when pasted. Each is one `Error:` line with its documented exit status, or a right answer."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gputopo.cli import cli

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
KELVIN = "\u212a"   # KELVIN SIGN: under re.I it matched [KMGTP], and SCALE had no entry for it


def run(*args, input=None, env=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input, env=env)


def one_line(r, text, code=2):
    """exit `code`, one `Error:` line holding `text`, no traceback."""
    assert r.exit_code == code, (r.exit_code, r.output)
    assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1 and text in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr


# --- sizes are ASCII: the Kelvin sign and the Turkish I's -------------------------------------------------------

@pytest.mark.parametrize("args, option", [
    (["plan", "--model", "gpt2", "--gpus", "2", "--gpu-mem", f"80{KELVIN}B"], "--gpu-mem"),
    (["plan", "--model", "gpt2", "--gpus", "2", "--gpu-mem", "80GB", "--cpu-mem", f"64{KELVIN}"], "--cpu-mem"),
    (["plan", "--model", "gpt2", "--gpus", "2", "--gpu-mem", "80GB", "--nvme-free", f"1{KELVIN}iB"], "--nvme-free"),
    (["bench-nvlink", "--allreduce-only", "--allreduce-sizes", f"1MB,4{KELVIN}B"], "--allreduce-sizes"),
    (["plan", "--model", "gpt2", "--gpus", "2", "--gpu-mem", "80G\u0131B"], "--gpu-mem"),   # dotless i
])
def test_a_size_with_a_letter_outside_ascii_is_refused_naming_it(args, option):
    r = run(*args)
    one_line(r, f"{option} ")
    assert "is not ASCII" in r.stderr and "U+" in r.stderr


def test_an_option_given_twice_with_a_kelvin_sign_is_one_line():
    one_line(run("plan", "--model", "gpt2", "--gpus", "2", "--gpu-mem", "80GB", "--gpu-mem", f"80{KELVIN}B"),
             "--gpu-mem given twice")


# --- a GPU's name: digits runs bounded, a fleet report's names bounded, a typed model is the model -------------

def test_a_gpu_name_with_a_4301_digit_number_is_read_without_int_failing():
    from gputopo import fleet, gpus
    name = "NVIDIA H100 " + "9" * 5000 + "GB"
    assert gpus.lookup(name).key == "H100" and gpus.lookup(name).memory_bytes is not None   # no size: H100's one
    assert not fleet._same_model(name, "NVIDIA L40S")


def fleet_report(tmp_path, name, **gpu):
    report = json.loads((FIXTURES / "fleet" / "node01.json").read_text())
    for g in report["gpus"]:
        g.update(gpu)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(report))
    return path


def test_a_fleet_report_whose_gpu_model_is_longer_than_nvml_writes_is_refused(tmp_path):
    """The issue's node: a 5000-digit number in its GPUs' model, which differ from the others' (exit 70 in
    gpus.lookup); from a file (exit 2, naming the bound) and live (the node has no report, the others do)."""
    from gputopo import gather
    odd = fleet_report(tmp_path, "odd", model="NVIDIA H100 " + "9" * 5000 + "GB")
    r = run("inspect", "--fleet", "-f", FIXTURES / "fleet" / "node01.json", "-f", FIXTURES / "fleet" / "node02.json",
            "-f", odd)
    one_line(r, "gpus[0].model has 5,014 characters, more than 96")
    report, why = gather.answer(odd.read_text().splitlines(), 0, "", 30)
    assert report is None and why == "its report: gpus[0].model has 5,014 characters, more than 96"
    long_env = json.loads((FIXTURES / "fleet" / "node01.json").read_text())
    long_env["env"] = {"NCCL_X" * 1000: "1"}
    assert gather.problem(long_env) == "a key of env has 6,000 characters, more than 4096"


@pytest.mark.parametrize("name", ["H100-FOO", "H100 XYZ", "H100\u00df", "H100\u00e9", "H1000", "H100 80GB XYZ"])
def test_a_gpu_model_with_more_than_a_known_name_is_refused(name):
    r = run("plan", "--model", "gpt2", "--gpus", "2", "--gpu-model", name)
    one_line(r, f"--gpu-model {name}: unknown GPU model; known: ")


@pytest.mark.parametrize("name, key", [("NVIDIA A100-SXM4-80GB", "A100"), ("Tesla P100-PCIE-16GB", "P100"),
                                       ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA RTX 6000 Ada Generation",
                                                                          "RTX 6000 Ada"),
                                       ("NVIDIA H200 NVL", "H200"), ("Quadro RTX 8000", "Quadro RTX 8000"),
                                       ("NVIDIA GeForce RTX 4090", "RTX 4090"), ("rtx4090", "RTX 4090")])
def test_a_gpu_model_as_nvidia_smi_names_it_is_known(name, key):
    from gputopo import gpus
    assert gpus.known(name).key == key


# --- doctor --config: the NVMe swap buffers' sizes as DeepSpeed reads them ---------------------------------------

def nvme_config(**sizes) -> dict:
    zero = {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/tmp"},
            "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp"}}
    for key, value in sizes.items():
        block, _, name = key.rpartition("__")
        (zero[block] if block else zero)[name] = value
    return {"bf16": {"enabled": True}, "zero_optimization": zero}


@pytest.mark.parametrize("where, value", [("offload_param__buffer_count", "inf"),
                                          ("offload_param__buffer_count", "-inf"),
                                          ("sub_group_size", "inf"), ("offload_optimizer__buffer_count", "nan"),
                                          ("offload_param__buffer_size", 1e308), ("offload_param__buffer_size", -3),
                                          ("offload_param__buffer_size", 2.5), ("sub_group_size", "12abc")])
def test_an_nvme_buffer_size_deepspeed_refuses_is_a_failed_check_naming_it(where, value):
    """Was OverflowError (exit 70) for "inf", and without CAP_IPC_LOCK "integer division result too large" for
    1e308: a check that fails, naming the key, with or without the capability (DeepSpeed refuses it either way)."""
    from test_doctor import CONTAINER, VM, host

    from gputopo import doctor
    for machine in (CONTAINER, VM):   # 64 KiB of memlock; CAP_IPC_LOCK
        c = doctor.check_memlock(host(machine), nvme_config(**{where: value}), rdma=[])
        assert c.status == "fail" and c.subject == "--config", c
        assert c.found.startswith(f"zero_optimization.{where.replace('__', '.')} is {json.dumps(value)}:")


def test_nvme_buffer_sizes_deepspeed_takes_are_counted():
    from gputopo import doctor
    assert doctor.pinned_bytes(nvme_config(offload_param__buffer_count="5", offload_param__buffer_size=1e8,
                                           sub_group_size="1000000000.0")) == 5 * 10 ** 8 * 2 + 4 * 10 ** 9 * 4
    assert doctor.pinned_bytes(nvme_config(offload_param__buffer_count=True, sub_group_size="auto")) == (
        10 ** 8 * 2 + 4 * 10 ** 9 * 4)


def test_doctor_config_with_an_infinite_buffer_count_exits_1_with_the_check(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(nvme_config(offload_param__buffer_count="inf")))
    r = run("doctor", "--config", path, "--json")
    assert r.exit_code == 1, r.output
    found = [c for c in json.loads(r.stdout)["checks"] if c["id"] == "memlock"]
    assert found[0]["status"] == "fail" and "buffer_count is \"inf\"" in found[0]["found"]


# --- config.json values gputopo reads itself ---------------------------------------------------------------------

def llama_folder(tmp_path, **changes) -> Path:
    config = json.loads((FIXTURES / "models" / "tinyllama-1.1b" / "config.json").read_text())
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps({**config, **changes}))
    return tmp_path / "m"


def test_an_activation_that_is_no_name_is_a_key_the_model_ignores(tmp_path):
    """Was .lower() on an int (exit 70): a llama ignores activation_function and uses hidden_act, and so does
    gputopo."""
    from gputopo import models
    spec = models.from_path(str(llama_folder(tmp_path, activation_function=5)))
    assert spec.activation == "silu"
    args = ("--gpus", "2", "--gpu-mem", "80GB", "--gpu-model", "H100", "--json")
    plain = json.loads(run("plan", "--model", FIXTURES / "models" / "tinyllama-1.1b", *args).stdout)
    odd = run("plan", "--model", tmp_path / "m", *args)
    assert odd.exit_code == 0, odd.output
    assert json.loads(odd.stdout)["recommendation"] == plain["recommendation"]


@pytest.mark.parametrize("value, said", [(-5, "max_position_embeddings -5: must be a whole number from 1"),
                                         (0, "max_position_embeddings 0: must be a whole number from 1"),
                                         ("2048", 'max_position_embeddings is the text "2048"'),
                                         (2.5, "max_position_embeddings 2.5: must be a whole number from 1")])
def test_a_context_that_is_no_count_is_refused_naming_it(tmp_path, value, said):
    """-5 gave a math domain error in speed.flash_share (exit 70) with --seq-len, and a sequence of -5 without."""
    folder = llama_folder(tmp_path, max_position_embeddings=value)
    one_line(run("plan", "--model", folder, "--gpus", "2", "--gpu-mem", "80GB", "--gpu-model", "H100"), said)
    one_line(run("plan", "--model", folder, "--gpus", "2", "--gpu-mem", "80GB", "--seq-len", "512"), said)


# --- benchmarks/gpu_truth.py --compare --load: a saved record, read as gputopo reads a user's file -----------------

def gpu_truth(*args, timeout=60):
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_truth.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


# A CPU twin's record of one case (as gpu_truth --device cpu writes it), cut to what --compare reads
RECORD = {"tool": "benchmarks/gpu_truth.py", "machine": {"device": "cpu", "cpu_cores_physical": 2,
                                                          "ram_bytes": 25276182528},
          "cases": [{"name": "gpt2-bf16-8x1024", "strategy": "single", "precision": "bf16", "batch_size": 2,
                     "seq_len": 48, "grad_checkpointing": False, "catalog": None, "peak_bytes": 4915240,
                     "config": {"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 128,
                                "vocab_size": 1001},
                     "step_s": {"median": 0.0576}, "profile": {"idle_s": 0.0, "parts": {"optimizer": 0.002}}}],
          "skipped": []}


def test_gpu_truth_load_reads_a_record_it_wrote(tmp_path):
    (tmp_path / "r.json").write_text(json.dumps(RECORD))
    proc = gpu_truth("--compare", "--load", tmp_path / "r.json", "--gpu-model", "H100")
    assert proc.returncode == 0 and "gpt2-bf16-8x1024 (single, bf16, 2 x 48)" in proc.stdout, proc.stderr


@pytest.mark.parametrize("text, said", [
    ("[]", "not what gpu_truth writes at the top"), ("{}", "not what gpu_truth writes at the top"),
    ("NaN", "not JSON (NaN is not a number JSON has)"),
    ('{"machine": {}, "cases": []}', 'not what gpu_truth writes at "cases"'),
    (json.dumps({**RECORD, "cases": [{**RECORD["cases"][0], "batch_size": -1, "profile": {"parts": []}}]}),
     "not what gpu_truth writes at cases[0].batch_size, cases[0].profile"),
    (json.dumps({**RECORD, "machine": {"gpu": 5}, "skipped": [1]}),
     "not what gpu_truth writes at machine.gpu, skipped[0]"),
    (json.dumps({**RECORD, "cases": [{**RECORD["cases"][0], "strategy": "zero9", "config": None}]}),
     "not what gpu_truth writes at cases[0].strategy, cases[0].config"),
    ("", "empty")])
def test_gpu_truth_load_refuses_what_it_did_not_write_in_one_line(tmp_path, text, said):
    """[], {}, NaN and {"cases": []} were tracebacks."""
    (tmp_path / "r.json").write_text(text)
    proc = gpu_truth("--compare", "--load", tmp_path / "r.json")
    assert proc.returncode == 1 and proc.stderr.startswith(f"Error: --load {tmp_path / 'r.json'}: "), proc.stderr
    assert said in proc.stderr and proc.stderr.count("\n") == 1 and not proc.stdout, proc.stderr


def test_gpu_truth_load_of_a_fifo_or_a_device_is_refused_unread(tmp_path):
    """A FIFO waited for a writer; /dev/zero was read until MemoryError."""
    os.mkfifo(tmp_path / "fifo")
    for path in (tmp_path / "fifo", "/dev/zero", tmp_path):
        proc = gpu_truth("--compare", "--load", path, timeout=30)
        assert proc.returncode == 1 and proc.stderr == f"Error: --load {path}: not a regular file\n", proc.stderr


# --- inspect --fleet: each node's answer is held to MOST_REPORT in memory ----------------------------------------

FLOOD = "head -c 9000000 /dev/zero | tr '\\0' x"   # 9 MB on one line, as a node's broken command might print


def test_a_node_answering_more_than_the_bound_is_read_and_dropped_the_others_reported(tmp_path, monkeypatch):
    """Each node's output was read whole (two nodes printing 1.5 GB took gputopo to 8.6 GB): over ssh, pdsh and
    srun alike, a node past 8 MiB is named with the bound, the rest of its output read and dropped, and the other
    nodes' reports are read."""
    from gputopo import gather
    node = {"node1": f"cat {FIXTURES / 'fleet' / 'node01.json'}", "node2": FLOOD}
    monkeypatch.setattr(gather, "ssh_argv", lambda h, cmd, t: ["sh", "-c", node[h]])
    monkeypatch.setattr(gather, "pdsh_argv", lambda hosts, cmd, t: [
        "sh", "-c", "; ".join(f"({node[h]}; echo) | sed 's/^/{h}: /'" for h in hosts)])
    monkeypatch.setattr(gather, "srun_argv", lambda nodes, cmd, t, **k: [
        "sh", "-c", "; ".join(f"(echo '{gather.MARK} {n}'; {node[n]}; echo) | sed 's/^/{i}: /'"
                              for i, n in enumerate(nodes))])
    monkeypatch.setattr(gather, "unavailable_slurm_nodes", lambda nodes, inside: {})
    for reports, unreachable in (gather.over_hosts(["node1", "node2"], "x", 20, pdsh=False),
                                 gather.over_hosts(["node1", "node2"], "x", 20, pdsh=True),
                                 gather.over_slurm(["node1", "node2"], "x", 20, inside=True)):
        assert list(reports) == ["node1"] and unreachable == {"node2": gather.TOO_LONG}
    assert gather.TOO_LONG.startswith("answered more than 8 MiB")


def test_the_output_kept_of_a_flood_is_bounded_per_node_and_in_all():
    from gputopo import gather
    (status, out, _, over), = gather.run({"n": ["sh", "-c", FLOOD + "; echo; echo end"]}, 20).values()
    assert status == 0 and over == {""} and len(out) <= gather.MOST_REPORT
    # five keys of 5 MB each, from an engine answering for 2 nodes: 16 MiB kept in all
    many = "for i in 1 2 3 4 5; do head -c 5000000 /dev/zero | tr '\\0' x | sed \"s/^/$i: /\"; echo; done"
    (_, out, _, over), = gather.run({"all": ["sh", "-c", many]}, 60, nodes=2, key=gather.SRUN_LINE).values()
    assert len(out) <= 2 * gather.MOST_REPORT and over == {"4", "5"}, over


# --- bench-nvlink --dataset: read in bounded memory, its tokenizer trained on a bounded sample, said -------------

def test_a_dataset_is_read_to_a_bound_and_its_tokenizer_trained_on_a_sample(tmp_path, monkeypatch, capsys):
    """A 30 MB .txt was read whole by each worker and a BPE trained on all of it (6.3 GB and 174 s a worker) while
    the progress line said "building gpt2"."""
    from gputopo import bench, worker
    monkeypatch.setattr(worker, "MOST_DATASET_BYTES", 64 * 1024)
    monkeypatch.setattr(worker, "TOKENIZER_SAMPLE", 8 * 1024)
    words = [f"w{i}x{i * 7 % 13}" for i in range(400)]
    (tmp_path / "big.txt").write_text("\n".join(" ".join(words[(i + j) % 400] for j in range(20))
                                                for i in range(4000)))   # about 500 KB
    tokens, what = worker.load_tokens(str(tmp_path / "big.txt"), 50257, 64, 8, 0, None)
    assert tokens.shape == (8, 64) and what.endswith("(local text)")
    line, = [x for x in capsys.readouterr().out.splitlines() if x.startswith(worker.PROGRESS)]
    fields = json.loads(line[len(worker.PROGRESS):])
    assert fields == {"phase": "tokenizer", "chars": 8 * 1024, "of": 64 * 1024}
    assert bench.Tracker().text(fields) == ("training a byte-level BPE tokenizer on 0.0 MiB of the dataset's 0.1 MiB"
                                            " read")
    assert len(worker._tokenize("ab " * 100_000, 50257, None, need=10)) < 100_000 / 4   # encoded until enough


# --- a printed command line, pasted into bash, gives back the argv it means ---------------------------------------

HOSTILE_WORDS = ["/data/it's model", 'say "hi"', "a b", "$HOME/x", "two\nlines", "naïve ü/模型", "--x='y'", "\\"]


@pytest.mark.parametrize("width", [None, 30, 200])
def test_a_printed_command_line_round_trips_through_bash_and_shlex(width):
    """render.shell_lines re-split a line with shlex(posix=False): `it'"'"'s` became three words, so a pasted
    `plan --model "/data/it's model"` failed and a printed torchrun line ran a script named `it`."""
    import shlex

    from gputopo import render
    argv = ["printf", "%s\\0", *[x for w in HOSTILE_WORDS for x in ("--opt", w)]]
    text = "\n".join(render.shell_lines(shlex.join(argv), width=width))
    assert width != 30 or len(text.splitlines()) > 5   # cut before options, never inside a quoted word
    out = subprocess.run(["bash", "-c", text], capture_output=True, text=True, check=True).stdout
    assert out.split("\0")[:-1] == argv[2:]
    assert shlex.split(text.replace(" \\\n", " ")) == argv


def test_a_line_with_an_unbalanced_quote_is_shown_as_it_is():
    from gputopo import render
    assert render.shell_lines("run 'it --x", width=5) == ["run 'it --x"]


def test_deepspeed_config_prints_a_launch_line_that_runs_the_script_named(tmp_path, monkeypatch):
    import shlex
    monkeypatch.chdir(tmp_path)
    r = run("deepspeed-config", "--stage", "2", "--launcher", "torchrun", "--script", "it's.py", "-o", "o'k.json",
            "--gpus", "2")
    assert r.exit_code == 0, r.output
    line, = [x for x in r.stdout.splitlines() if x.startswith("torchrun ")]
    assert shlex.split(line)[-3:] == ["it's.py", "--deepspeed", "o'k.json"]


def test_a_bad_slurm_node_list_from_the_environment_names_the_variable():
    """Blamed --slurm-nodes, an option the user never gave."""
    one_line(run("inspect", "--fleet", env={"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "-oX"}),
             "Error: SLURM_JOB_NODELIST=-oX: starts with '-'")
    one_line(run("inspect", "--fleet", "--slurm-nodes", "-oX"), "Error: --slurm-nodes -oX: starts with '-'")


@pytest.mark.parametrize("xdg, under", [("relcache", None), ("", None), ("/abs/cache", "/abs/cache")])
def test_a_relative_xdg_cache_home_is_ignored(monkeypatch, tmp_path, xdg, under):
    """A relative XDG_CACHE_HOME wrote ./relcache/gputopo/validated.json into the working folder."""
    from gputopo import validate
    monkeypatch.setenv("XDG_CACHE_HOME", xdg)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert validate._cache_path() == Path(under or tmp_path / ".cache") / "gputopo" / "validated.json"


# --- the GPU NUMA ID column ------------------------------------------------------------------------------------

def test_a_gpu_numa_id_column_is_shown_in_the_matrix(tmp_path):
    """nvidia-smi 550+ prints GPU NUMA ID after NUMA Affinity; the text and markdown matrices dropped it."""
    text = (FIXTURES / "topo" / "rtx5090x2_phb.txt").read_text()
    lines = text.splitlines()
    assert lines[0].endswith("\tGPU NUMA ID") and lines[1].endswith("\tN/A") and lines[2].endswith("\tN/A")
    # As on Grace Hopper, where each GPU's memory is a NUMA node of its own.
    lines[1], lines[2] = lines[1][:-3] + "2", lines[2][:-3] + "3"
    paste = tmp_path / "gh.txt"
    paste.write_text("\n".join(lines) + "\n")
    r = run("inspect", "-f", paste)
    assert r.exit_code == 0, r.output
    head, = [x for x in r.stdout.splitlines() if "CPU Affinity" in x]
    assert head.endswith("NUMA Affinity  GPU NUMA ID")
    assert [x.split()[-1] for x in r.stdout.splitlines() if x.startswith(("GPU0 ", "GPU1 "))] == ["2", "3"]
    md = run("inspect", "-f", paste, "--markdown").stdout
    assert "| NUMA Affinity | GPU NUMA ID |" in md and "| 0 | 2 |" in md
    # N/A in every row (PCIe, HGX) is none: no column of N/A.
    assert "GPU NUMA ID" not in run("inspect", "-f", FIXTURES / "topo" / "rtx5090x2_phb.txt").stdout


# --- bench-nvlink's progress: each step its own line and seconds ------------------------------------------------

def test_each_slow_step_gets_its_own_line_and_seconds_in_a_log(capsys):
    """A pipe showed 'step 1/4', 'step 3/4', 'step 4/4': step 2 fell to the 10 s throttle, and 3 and 4 said the
    same s/step, the median of the last 5 rather than each step's own."""
    from gputopo import bench
    from gputopo.commands.bench_nvlink import Progress
    from gputopo.worker import PROGRESS, RESULT
    said = [PROGRESS + json.dumps({"phase": "train", "step": k, "steps": 4, "seconds": s})
            for k, s in enumerate([6.1, 5.9, 6.0, 6.2], 1)] + [RESULT + "{}"]
    child = [sys.executable, "-c", f"print({chr(10).join(said)!r})"]
    p = Progress(verbose=False)
    p.tty = False
    bench.run_child("p2p", child, dict(os.environ), 60, p)
    p.done()
    err = [x for x in capsys.readouterr().err.splitlines() if "step" in x]
    assert err == ["[p2p] step 1/4: 6.100 s, ETA 18s", "[p2p] step 2/4: 5.900 s, ETA 12s",
                   "[p2p] step 3/4: 6.000 s, ETA 6s", "[p2p] step 4/4: 6.200 s"]


# --- benchmarks/seed_table.py's output formats ----------------------------------------------------------------

def test_seed_table_refuses_json_with_markdown():
    """It printed JSON and said nothing of --markdown; gputopo refuses such pairs."""
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "seed_table.py"), "--json", "--markdown"],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (r.returncode, r.stdout, r.stderr) == (2, "", "Error: --markdown and --json exclude each other\n")


# --- inspect --fleet with no GPU anywhere: exit 1, and the docs say so ------------------------------------------

def test_a_fleet_without_any_gpu_exits_1_as_the_docs_say(tmp_path):
    """Every node alike and none with a GPU exits 1 (no multi-node GPU job can run there); docs/inspect.md's list
    of exit-1 causes and docs/options.md's exit codes did not say so."""
    report = json.loads((FIXTURES / "fleet" / "node01.json").read_text())
    report.update(gpus=[], links=[], selected=[], islands=[], weakest_link=None,
                  gpu_status={"visible": False, "reason": "no NVML library"})
    for node in ("n1", "n2"):
        (tmp_path / f"{node}.json").write_text(json.dumps(report))
    r = run("inspect", "--fleet", "-f", tmp_path / "n1.json", "-f", tmp_path / "n2.json")
    assert r.exit_code == 1 and "no node sees a GPU" in r.stdout, r.output
    inspect_md = " ".join((ROOT / "docs" / "inspect.md").read_text().split())
    assert "or when no node sees a GPU" in inspect_md
    row, = [x for x in (ROOT / "docs" / "options.md").read_text().splitlines() if x.startswith("| 1 |")]
    assert "`inspect --fleet`" in row and "no node that sees a GPU" in row


# --- the heartbeat: a line within every 15 s, under load too ---------------------------------------------------

def test_the_heartbeat_beats_with_a_margin_under_15_s():
    """It beat every 15.0 s, so a loaded machine's late wake-up left silences of 15.x s; .ci/setup's `beating`
    beats as often as gputopo.children's Heartbeat."""
    import re

    from gputopo import children
    assert children.HEARTBEAT_SECONDS <= 12
    setup = (ROOT / ".ci" / "setup").read_text()
    beat = re.findall(r'sleep "\$\{GPUTOPO_HEARTBEAT_SECONDS:-([\d.]+)\}"', setup)
    assert beat == [f"{children.HEARTBEAT_SECONDS:g}"]


# --- .ci/setup's printed ranges hold under load -----------------------------------------------------------------

def test_setup_prints_ranges_that_held_and_says_load_takes_longer():
    """A fresh clone at load average 4-6.5 built cpu_adam in 279 s against a printed "47-134 s", fused_adam in
    187 s against "48-144 s"; each printed time now covers what was measured and says a busier machine is slower."""
    import ast
    import re
    setup = (ROOT / ".ci" / "setup").read_text()
    measured = ast.literal_eval(re.search(r"MEASURED = (\{.*?\})", setup, re.S).group(1))
    upper = {op: int(re.fullmatch(r"\d+-(\d+) s", took).group(1)) for op, took in measured.items()}
    assert upper["cpu_adam"] >= 279 and upper["fused_adam"] >= 187
    lines = setup.replace("\\\n", " ").splitlines()   # a `say` continued over lines is one line said
    said = [x for x in lines if re.search(r"\d+-\d+ (s|min)", x) and not x.lstrip().startswith("#")
            and "MEASURED =" not in x and '"pin_memory"' not in x]
    assert len(said) == 2 and all("a busier machine takes longer" in x for x in said), said
    assert '({took} on 2 cores, quiet to loaded; a busier machine takes longer)' in setup   # each op's line
