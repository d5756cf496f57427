"""Issue 42, safe and bounded: a model folder's code is never run and nothing but a model class is built from its
config.json; a config.json that never ends, hangs or nests without end, counts no machine holds and numbers no
machine has are each one `Error:` line and exit 2. The heavy inputs run in a child process held to 1 GiB of
address space and 60 s (RLIMIT_AS), as a user's machine would not be."""
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURES, TINY_GPT2, make_model_dir

from gputopo import models
from gputopo.cli import cli
from gputopo.errors import BadInput, NvmlUnavailable
from gputopo.options import one_value

GPUS = ["--gpus", "1", "--gpu-mem", "80GB", "--cpu-mem", "64GB", "--cpu-cores", "8"]
MOST_AS = 2 ** 30


def run(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


def one_line(r, text, code=2):
    """exit `code`, one `Error:` line naming `text`, nothing on stdout."""
    assert r.exit_code == code, (r.exit_code, r.output)
    assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1 and text in r.stderr, r.stderr
    assert r.stdout == "" and "Traceback" not in r.stderr
    assert len(r.stderr) < 400, r.stderr   # one readable line, not the 4301 digits back


def bounded(args, cwd, stdin=""):
    """`python -m gputopo ARGS` in a child held to 1 GiB of address space and 60 s."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (MOST_AS, MOST_AS))
    return subprocess.run([sys.executable, "-m", "gputopo", *map(str, args)], cwd=cwd, input=stdin, text=True,
                          capture_output=True, timeout=60, preexec_fn=limit)


def bounded_line(p, text):
    assert p.returncode == 2, (p.returncode, p.stdout[-500:], p.stderr[-2000:])
    assert p.stdout == "" and p.stderr.startswith("Error: ") and p.stderr.count("\n") == 1, p.stderr[-2000:]
    assert text in p.stderr, p.stderr


# --- 1. code run from data ---------------------------------------------------------------------------------------

CODE = """import pathlib
pathlib.Path(__file__).with_name("RAN").write_text("the folder's code ran")
from transformers import PretrainedConfig, PreTrainedModel
class XConfig(PretrainedConfig):
    model_type = "x_remote"
class XModel(PreTrainedModel):
    config_class = XConfig
"""


def remote_code_folder(tmp_path, model_type="x_remote"):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "x.py").write_text(CODE)
    (folder / "config.json").write_text(json.dumps({
        "model_type": model_type, "architectures": ["XModel"], "hidden_size": 64, "num_hidden_layers": 2,
        "auto_map": {"AutoConfig": "x.XConfig", "AutoModel": "x.XModel", "AutoModelForCausalLM": "x.XModel"}}))
    return folder


def test_a_folder_with_auto_map_is_refused_and_its_code_never_runs(tmp_path):
    """`echo y | gputopo plan --model m --json` showed transformers' "Do you wish to run the custom code? [y/N]"
    inside the JSON stream and ran x.py."""
    folder = remote_code_folder(tmp_path)
    p = bounded(["plan", "--model", "m", "--json", *GPUS], cwd=tmp_path, stdin="y\n")
    bounded_line(p, "--model m: config.json has auto_map: the model is code in the folder, and gputopo never runs")
    assert not (folder / "RAN").exists() and "[y/N]" not in p.stdout + p.stderr


def test_auto_map_beside_a_model_type_transformers_knows_is_refused_too(tmp_path):
    """With model_type gpt2, transformers' own class would build: the folder still says its code is the model."""
    remote_code_folder(tmp_path, model_type="gpt2")
    one_line(run("plan", "--model", tmp_path / "m", *GPUS), "has auto_map")
    assert not (tmp_path / "m" / "RAN").exists()


def test_the_config_measure_and_calibrate_rebuild_is_read_as_plan_read_it(tmp_path):
    """--measure and --calibrate rebuild the model from models.hf_config: a folder that gained auto_map (or became a
    FIFO) since the plan read it is refused, never handed to AutoModel.from_config (which would prompt)."""
    folder = make_model_dir(tmp_path / "tiny")
    spec = models.from_path(str(folder))
    assert models.hf_config(spec)["n_embd"] == 64
    (folder / "config.json").write_text(json.dumps({**TINY_GPT2, "auto_map": {"AutoModel": "x.XModel"}}))
    with pytest.raises(BadInput, match="has auto_map"):
        models.hf_config(spec)


def test_the_benchmark_worker_never_runs_a_folder_code(tmp_path):
    """bench-nvlink's worker loads --model FOLDER with transformers: trust_remote_code=False, so an auto_map is an
    error, never a prompt answered by whatever stdin holds."""
    folder = remote_code_folder(tmp_path)
    code = "import sys; from gputopo.worker import build_model; build_model(sys.argv[1])"
    p = subprocess.run([sys.executable, "-c", code, str(folder)], input="y\n", text=True, capture_output=True,
                       timeout=120, cwd=tmp_path)
    assert p.returncode != 0 and not (folder / "RAN").exists(), p.stderr[-1000:]
    assert "[y/N]" not in p.stdout + p.stderr


@pytest.mark.parametrize("name", ["Trainer", "TextStreamer", "DataCollatorWithPadding"])
def test_only_a_model_class_is_built_from_architectures(tmp_path, monkeypatch, name):
    """config.json's architectures was looked up in transformers and whatever it named was called with the config:
    a Trainer, a TextStreamer. Only a transformers model class is built; else the Auto classes build model_type."""
    import transformers
    called = []

    class Named:
        def __init__(self, *a, **k):
            called.append(name)
    monkeypatch.setattr(transformers, name, Named, raising=False)
    make_model_dir(tmp_path / "m", architectures=[name])
    r = run("plan", "--json", "--model", tmp_path / "m", *GPUS)
    assert r.exit_code == 0, r.output
    assert called == [] and json.loads(r.stdout)["model"]["params"] == models.from_path(str(tmp_path / "m")).params
    assert json.loads(r.stdout)["model"]["params"] > 0


# --- 2. inputs that grow without end or hang ---------------------------------------------------------------------

def config_folder(tmp_path, text=None, name="m"):
    folder = tmp_path / name
    folder.mkdir()
    if text is not None:
        (folder / "config.json").write_text(text)
    return folder


def test_a_config_linked_to_dev_zero_is_refused_before_it_is_read(tmp_path):
    """4.2 GB read in 6 s before: a link is followed, but only to a regular file."""
    folder = config_folder(tmp_path)
    os.symlink("/dev/zero", folder / "config.json")
    bounded_line(bounded(["plan", "--model", "m", *GPUS], cwd=tmp_path),
                 "--model m: config.json is a character device (a link to /dev/zero), not a regular file")


def test_a_config_that_is_a_fifo_is_refused_without_waiting(tmp_path):
    """open() of a FIFO waits for a writer: the command hung."""
    folder = config_folder(tmp_path)
    os.mkfifo(folder / "config.json")
    bounded_line(bounded(["plan", "--model", "m", *GPUS], cwd=tmp_path),
                 "--model m: config.json is a FIFO (named pipe), not a regular file")


def test_a_config_over_the_size_cap_is_refused_unread(tmp_path):
    folder = config_folder(tmp_path)
    with open(folder / "config.json", "wb") as f:
        f.truncate(models.MOST_CONFIG_BYTES + 1)
    one_line(run("plan", "--model", folder, *GPUS), "config.json is over 1 MiB")


def test_a_config_nested_without_end_is_refused(tmp_path):
    """100,000 levels: RecursionError, exit 70, before."""
    config_folder(tmp_path, '{"model_type": "gpt2", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    bounded_line(bounded(["plan", "--model", "m", *GPUS], cwd=tmp_path),
                 f"config.json unreadable (JSON nested more than {models.MOST_DEPTH} deep)")


def test_brackets_inside_strings_are_not_nesting(tmp_path):
    folder = make_model_dir(tmp_path / "m", note="[[[[{{{{" * 20 + '"\\"[[[')
    assert models.from_path(str(folder)).layers == 2


@pytest.mark.parametrize("key,value", [("n_layer", 1_000_000_000), ("n_layer", -3), ("n_layer", 0),
                                       ("n_embd", 10 ** 12), ("n_head", 0), ("vocab_size", 10 ** 10),
                                       ("n_layer", 2.5)])
def test_config_counts_are_checked_before_anything_is_built(tmp_path, key, value):
    """1e9 layers grew at 25 MB/s until killed; -3 layers planned negative bytes and a negative step time."""
    make_model_dir(tmp_path / "m", **{key: value})
    bounded_line(bounded(["plan", "--model", "m", *GPUS], cwd=tmp_path),
                 f"--model m: config.json {key} {value}: must be a whole number from 1 to")


def test_config_counts_nested_in_a_sub_config_are_checked_too(tmp_path):
    make_model_dir(tmp_path / "m", text_config={"num_hidden_layers": 10 ** 9})
    one_line(run("plan", "--model", tmp_path / "m", *GPUS),
             "config.json text_config.num_hidden_layers 1000000000: must be")


def test_a_count_no_key_names_stops_the_build_at_the_module_bound(tmp_path):
    """ALBERT builds num_hidden_groups groups of layers: a million is refused once the model passes MOST_MODULES."""
    config_folder(tmp_path, json.dumps({"model_type": "albert", "num_hidden_groups": 10 ** 6, "hidden_size": 8,
                                        "embedding_size": 8, "num_attention_heads": 2, "intermediate_size": 8,
                                        "vocab_size": 16}))
    bounded_line(bounded(["plan", "--model", "m", *GPUS], cwd=tmp_path),
                 f"--model m: the model grows past {models.MOST_MODULES:,} modules")


@pytest.mark.parametrize("args,text", [
    (["--params", "7B", "--hidden-size", "4096", "--layers", "2147483647"], "--layers 2147483647 is more than any"),
    (["--params", "7B", "--hidden-size", "2147483647", "--layers", "32"], "--hidden-size 2147483647 is more than"),
    (["--params", "7B", "--hidden-size", "4096", "--layers", "32", "--vocab-size", "2147483647"], "--vocab-size"),
])
def test_shape_options_are_bounded_as_config_counts_are(tmp_path, args, text):
    """`--layers 2147483647` was a MemoryError (exit 70) in inspect."""
    bounded_line(bounded(["inspect", "--example", "dgx-a100", *args], cwd=tmp_path), text)
    one_line(run("plan", *args, *GPUS), text)


# --- 3. numbers no machine has, and one rule for each kind -------------------------------------------------------

DIGITS = "9" * 4301


@pytest.mark.parametrize("args,text", [
    (["--params", "1e14", "--hidden-size", "4096", "--layers", "32"], "--params 1e14: 32 blocks of hidden size 4096"
                                                                      " hold at most"),
    (["--params", "1.5e9", "--hidden-size", "1", "--layers", "1"], "--params 1.5e9: 1 block of hidden size 1 hold"),
    (["--model", "gpt2", "--nodes", "2147483647"], "--nodes 2147483647 is more than any cluster has (at most"),
    (["--model", "gpt2", "--cpu-cores", "2147483647"], "--cpu-cores 2147483647 is more than a node has (at most"),
    (["--model", "gpt2", "--gpu-mem", "1B"], "--gpu-mem 1B: less than any GPU has (at least 1 GiB)"),
    (["--model", "gpt2", "--gpu-mem", "80PB"], "--gpu-mem 80PB: more than any GPU has (at most 2 TiB)"),
    (["--model", "gpt2", "--cpu-mem", "1B"], "--cpu-mem 1B: less than any node has (at least 1 GiB)"),
    (["--model", "gpt2", "--nvme-free", "1B"], "--nvme-free 1B: less than any node's disks hold (at least 1 GiB)"),
    (["--model", "gpt2", "--nodes", "2", "--inter-node-gbps", "0.000000000001"],
     "--inter-node-gbps 0.000000000001: slower than any network (at least 0.01 GB/s"),
    (["--model", "gpt2", "--nodes", "2", "--inter-node-gbps", "1e-9"],
     "--inter-node-gbps 1e-9: slower than any network (at least 0.01 GB/s"),
    (["--model", "gpt2", "--calibrate", "--calibrate-seconds", "1e30"], "--calibrate-seconds 1e30: longer than any"),
    (["--model", "gpt2", "--batch-size", DIGITS], "--batch-size 999999999999999999999999... (4301 characters)"),
    (["--model", "gpt2", "--gpu-mem", DIGITS + "GB"], "--gpu-mem 999999999999999999999999... (4303 characters)"),
    (["--params", DIGITS, "--hidden-size", "64", "--layers", "2"], "--params 999999999999999999999999... (4301"),
])
def test_numbers_no_machine_has_are_refused_by_their_owner(args, text):
    rest = [x for i in range(0, len(GPUS), 2) if GPUS[i] not in args for x in GPUS[i:i + 2]]
    one_line(run("plan", *args, *rest), text)


@pytest.mark.parametrize("args,text", [
    (["bench-nvlink", "--timeout", "1e30"], "--timeout 1e30: longer than any run is waited on (at most 604800 s"),
    (["inspect", "--fleet", "--timeout", "1e30"], "--timeout 1e30: longer than"),
    (["inspect", "--example", "dgx-a100", "--gpu-ids", DIGITS], "--gpu-ids 999999999999999999999999... (4301"),
    (["inspect", "--example", "dgx-a100", "--gpu-ids", "0,99999"], "below 1024"),
    (["deepspeed-config", "--stage", DIGITS], "--stage 999999999999999999999999... (4301 characters)"),
    (["deepspeed-config", "--stage", "2", "--master-port", DIGITS], "--master-port 999999999999999999999999..."),
    (["deepspeed-config", "--stage", "2", "--launcher", "slurm", "--cpus-per-task", DIGITS], "--cpus-per-task"),
])
def test_every_command_bounds_its_numbers(args, text):
    """--timeout 1e30 was an OverflowError (exit 70); 4301 digits were int()'s ValueError or a 4300-digit line."""
    one_line(run(*args), text)


def test_one_number_grammar_for_every_kind():
    """1e-9 was "a bad format" for --inter-node-gbps while 0.000000000001 was taken: one grammar (units.NUMBER)
    for sizes, bandwidths, seconds and --params, each value then held to its own bounds."""
    from gputopo.options import BANDWIDTH, TIMEOUT
    from gputopo.units import parse_size
    assert BANDWIDTH.parse("1e1") == BANDWIDTH.parse("10") == 10
    assert parse_size("1.5e1GB") == 15 * 2 ** 30 and models.parse_count("1.5e9") == 1_500_000_000
    assert TIMEOUT.parse("1e2") == 100
    for bad in ("nan", "inf", "1_000"):
        with pytest.raises(ValueError, match="expected seconds"):
            TIMEOUT.parse(bad)


@pytest.mark.parametrize("option,texts", [("--gpu-mem", ["80GB", "80GiB", "80G"]), ("--gpus", ["4", "04"]),
                                          ("--inter-node-gbps", ["25", "25GB/s", "200Gb/s"])])
def test_equal_values_are_one_value(option, texts):
    """docs/options.md says 80GB = 80GiB, 25 = 25GB/s = 200Gb/s: their owner (the option's type) says they are one
    value, so commands.common's "given twice" check can ask it."""
    param = next(p for p in cli.commands["plan"].params if option in p.opts)
    assert one_value(param, texts) and not one_value(param, [texts[0], "81GB" if option == "--gpu-mem" else "5"])


@pytest.mark.parametrize("args", [["--gpu-mem", "80GB", "--gpu-mem", "80GiB"], ["--gpus", "4", "--gpus", "04"],
                                  ["--nodes", "2", "--inter-node-gbps", "25", "--inter-node-gbps", "25GB/s"]])
def test_equal_values_given_twice_pass(args):
    base = {"--gpu-mem": "80GB", "--gpus": "4"}
    extra = [x for k, v in base.items() if k not in args for x in (k, v)]
    r = run("plan", "--model", "gpt2", *args, *extra, "--cpu-mem", "64GB", "--cpu-cores", "8")
    assert r.exit_code == 0 and "given twice" not in r.output, r.output


# --- 4. untrue or contradictory -----------------------------------------------------------------------------------

NV12 = FIXTURES / "topo" / "gpu2_nv12_8nic_blank_affinity_vllm.txt"


def test_a_gpu_without_nvlink_is_refused_over_a_pasted_nvlink_as_over_link():
    """plan refused --gpu-model "RTX 4090" --link NV12; inspect planned the same over a pasted NV12 at 300 GB/s."""
    one_line(run("plan", "--model", "gpt2", "--gpus", "2", "--gpu-model", "RTX 4090", "--link", "NV12"),
             "--link NV12: RTX 4090 has no NVLink")
    one_line(run("inspect", "-f", NV12, "--gpu-model", "RTX 4090", "--model", "gpt2"),
             "--gpu-model RTX 4090: RTX 4090 has no NVLink, but the topology shows NV12 between GPU0 and GPU1")
    ok = run("inspect", "-f", NV12, "--gpu-model", "A100-80GB", "--model", "gpt2", "--json")
    assert ok.exit_code == 0 and json.loads(ok.stdout)["plan"]["layout"]["link_type"] == "NV12", ok.output


def test_a_suggested_global_batch_is_one_the_option_takes():
    """--global-batch 2147483647 suggested 2147483648, which --global-batch then refused."""
    r = run("plan", "--model", "gpt2", "--gpus", "8", "--gpu-mem", "80GB", "--global-batch", "2147483647")
    one_line(r, "--global-batch 2147483647 is not a multiple of the 8 GPUs: try 2147483640")
    assert "2147483648" not in r.stderr
    taken = run("plan", "--model", "gpt2", "--gpus", "8", "--gpu-mem", "80GB", "--global-batch", "2147483640",
                "--cpu-mem", "64GB", "--cpu-cores", "8")
    assert taken.exit_code in (0, 1) and "--global-batch" not in taken.stderr, taken.output


def test_bench_nvlinks_model_folder_is_read_as_plans(tmp_path):
    """bench-nvlink's --model folder goes through the same reader before any worker starts: a FIFO config.json
    is refused unread (it hung the worker until its timeout), an auto_map is refused, not prompted for."""
    from gputopo import bench
    from gputopo.errors import BadInput
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "config.json")
    with pytest.raises(BadInput, match="config.json"):
        bench.check_model(str(fifo))
    code = tmp_path / "code"
    code.mkdir()
    (code / "config.json").write_text(json.dumps({"model_type": "gpt2", "auto_map": {"AutoModel": "m.M"}}))
    with pytest.raises(BadInput, match="auto_map"):
        bench.check_model(str(code))


# --- issue 42's review: config.json's values named as what they are ------------------------------------------------

@pytest.mark.parametrize("value,said", [
    ("12", 'config.json n_layer is the text "12", not a number: write it without quotes'),
    (None, "config.json n_layer is null, not a number (a whole number from 1 to 2048"),
    ([12], "config.json n_layer is a list ([12]), not a number"),
    (True, "config.json n_layer is true, not a number"),
    ({"a": 1}, 'config.json n_layer is an object ({"a": 1}), not a number'),
])
def test_a_config_count_that_is_no_number_is_named_before_transformers(tmp_path, value, said):
    """"12" was "n_layer 12: must be a whole number"; null and [12] were transformers' error cut at a colon after 2 s
    and 266 MB: each is refused naming the key and what it holds, before transformers is imported."""
    make_model_dir(tmp_path / "m", n_layer=value)
    code = ("import sys\nfrom gputopo import models\nfrom gputopo.errors import BadInput\n"
            f"try:\n    models.from_path({str(tmp_path / 'm')!r})\nexcept BadInput as e:\n    print(e)\n"
            "print('transformers' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert said in p.stdout and p.stdout.endswith("False\n"), p.stdout + p.stderr
    one_line(run("plan", "--model", tmp_path / "m", *GPUS), said)


def test_null_lists_and_objects_where_transformers_holds_them_are_read():
    """GPT-2's own config.json says "n_inner": null; Swin's heads and Gemma 3n's intermediate size are lists, LXMERT's
    layers an object: each entry is a count, held to its bound."""
    models.check_counts({"n_inner": None, "num_heads": [3, 6, 12], "intermediate_size": [8, 16],
                         "num_hidden_layers": {"vision": 5, "language": 9}}, "m")
    with pytest.raises(BadInput, match=r"config.json num_heads\[1\] is the text \"6\", not a number"):
        models.check_counts({"num_heads": [3, "6"]}, "m")
    with pytest.raises(BadInput, match="config.json num_hidden_layers.language 5000: must be a whole number"):
        models.check_counts({"num_hidden_layers": {"language": 5000}}, "m")
    with pytest.raises(BadInput, match="config.json text_config.n_head is null, not a number"):
        models.check_counts({"text_config": {"n_head": None}}, "m")


def test_a_config_number_of_5000_digits_is_one_gputopo_line(tmp_path):
    """Python's "use sys.set_int_max_str_digits() to increase the limit" was the line; now the key is named."""
    config_folder(tmp_path, '{"model_type": "gpt2", "n_layer": ' + "9" * 5000 + "}")
    p = bounded(["plan", "--model", "m", *GPUS], cwd=tmp_path)
    bounded_line(p, "--model m: config.json n_layer is a 5,000-digit number: no config holds one longer than 20")
    assert "set_int_max_str_digits" not in p.stderr
    config_folder(tmp_path, json.dumps({**TINY_GPT2, "x": [1, {"seed": 10 ** 30}]}), name="n")
    one_line(run("plan", "--model", tmp_path / "n", *GPUS), "config.json x[1].seed is a 31-digit number")


def test_auto_map_at_any_depth_is_refused_in_one_line(tmp_path):
    """text_config.auto_map gave AttributeError: 'dict' object has no attribute 'to_dict'."""
    make_model_dir(tmp_path / "m", text_config={"model_type": "gpt2", "auto_map": {"AutoModel": "x.XModel"}})
    r = run("plan", "--model", tmp_path / "m", *GPUS)
    one_line(r, "config.json has auto_map (at text_config.auto_map): the model is code in the folder")
    assert "AttributeError" not in r.stderr


@pytest.mark.parametrize("name,key", [("Meta-Llama-3-8B", "llama-3-8b"), ("meta-llama-3-70b-instruct", "llama-3-70b"),
                                      ("Llama-2-7b-chat-hf", "llama-2-7b"), ("Qwen2.5-0.5B", "qwen2.5-0.5b"),
                                      ("Mistral-7B-v0.1", "mistral-7b"), ("gpt2-xl", "gpt2-xl")])
def test_a_catalog_hub_id_is_known_without_its_owner(name, key):
    """`--model Meta-Llama-3-8B` was unknown while meta-llama/Meta-Llama-3-8B was known."""
    assert models.named(name).name == key
    assert len({models.catalog_key(hub.rpartition("/")[2]) for hub in models.ALIASES}) > 1   # owners left out differ
    r = run("plan", "--model", name, "--gpus", "8", "--gpu-model", "H100", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["model"]["name"] == key, r.output


# --- issue 42's review: a whole number is ASCII digits; a list has no empty entry ---------------------------------

@pytest.mark.parametrize("args,text", [
    (["plan", "--model", "gpt2", "--gpu-model", "H100", "--gpus", "٢"], "--gpus '٢': expected a whole number in ASCII"),
    (["plan", "--model", "gpt2", "--gpu-model", "H100", "--gpus", "2", "--steps", "1_000"], "--steps '1_000'"),
    (["plan", "--model", "gpt2", "--gpu-model", "H100", "--gpus", "2", "--steps", "１０００"], "--steps '１０００'"),
    (["plan", "--model", "gpt2", "--gpu-model", "H100", "--gpus", "2", "--cpu-cores", "٨"], "--cpu-cores '٨'"),
    (["plan", "--model", "gpt2", "--gpu-model", "H100", "--gpus", "2", "--link", "NV٣"], "--link NV٣: not a link"),
    (["plan", "--model", "gpt2", "--gpu-model", "H100", "--gpus", "2", "--link", "ſys"], "--link ſys: not a link"),
    (["deepspeed-config", "--stage", "2", "--gpus", "2", "-o", "-", "--master-port", "٨٠"], "--master-port '٨٠'"),
    (["bench-nvlink", "--master-port", "٨٠"], "--master-port '٨٠': expected a whole number in ASCII"),
    (["bench-nvlink", "--rdzv-endpoint", "a:٨٠"], "--rdzv-endpoint a:٨٠: HOST:PORT"),
    (["inspect", "--example", "dgx-a100", "--gpu-ids", "0,٣"], "--gpu-ids 0,٣: GPU indices like 0,1,3"),
    (["inspect", "--example", "dgx-a100", "--gpu-ids", "0,+1"], "not '+1'"),
])
def test_whole_numbers_are_ascii_digits_for_every_option(args, text):
    """int() reads "٢", "１０００" and "1_000": --gpus '٢' was taken and echoed so in the Next line, --link NV٣ was a
    machine "(NV٣)"; sizes refused them already. One owner (units.whole) for counts, GPU ids, ports and NV#."""
    one_line(run(*args), text)


def test_one_whole_number_rule():
    from gputopo.topology import link_type
    from gputopo.units import whole
    assert whole("8") == whole(" 08 ") == 8 and whole("-3") == -3
    for bad in ("٢", "１０００", "1_000", "1e3", "", "8.0", "0x10"):
        with pytest.raises(ValueError, match="expected a whole number in ASCII digits"):
            whole(bad)
    assert link_type("nv12") == "NV12"
    with pytest.raises(ValueError, match="not a link type"):
        link_type("NV١٢")


@pytest.mark.parametrize("args,text", [
    (["inspect", "--example", "dgx-a100", "--gpu-ids", "0,,1"], "--gpu-ids '0,,1' has an empty entry: expected GPU"),
    (["inspect", "--example", "dgx-a100", "--gpu-ids", "0,1,"], "--gpu-ids '0,1,' has an empty entry"),
    (["bench-nvlink", "--allreduce-sizes", "1MB,,2MB"], "--allreduce-sizes '1MB,,2MB' has an empty entry: expected"),
    (["bench-nvlink", "--allreduce-sizes", "1MB,"], "--allreduce-sizes '1MB,' has an empty entry"),
    (["inspect", "--example", "dgx-a100", "--gpu-ids", "0,0"], "--gpu-ids 0,0: GPU 0 is named twice"),
    (["bench-nvlink", "--gpu-ids", "1,0,1"], "--gpu-ids 1,0,1: GPU 1 is named twice"),
])
def test_one_list_rule_for_gpu_ids_and_sizes(args, text):
    """'1MB,,2MB' was taken while '0,,1' was refused; --gpu-ids 0,0 silently became one GPU."""
    one_line(run(*args), text)


# --- issue 42's review: bench-nvlink and plan --calibrate refuse what they cannot do, before they start -------------

def test_allreduce_sizes_past_what_memory_holds_are_refused_before_any_process(tmp_path, monkeypatch):
    """2TiB on CPU ran 2 minutes (calibration, both training arms), then exit 5 with a child's traceback."""
    from gputopo import bench
    from gputopo.bench import Options, check_sizes
    from gputopo.topology import Gpu
    started = []
    monkeypatch.setattr(bench, "run_child", lambda *a, **k: started.append(a) or {})
    monkeypatch.setattr(bench, "calibration", lambda *a, **k: started.append(a) or (None, None, None, "no"))
    monkeypatch.setattr(bench, "new_log_dir", lambda: str(tmp_path / "logs"))
    monkeypatch.setattr(bench, "available_memory", lambda: 16 * 2 ** 30)
    monkeypatch.setattr("gputopo.probe.topology", lambda: (_ for _ in ()).throw(NvmlUnavailable("no driver")))
    r = run("bench-nvlink", "--allreduce-sizes", "1MB,2TiB")
    one_line(r, "--allreduce-sizes 2.0 TiB: 2 processes holding it each (and about 256.0 MiB of torch each) need"
                " more than this machine's 16.0 GiB of available memory (MemAvailable); at most 7.8 GiB a buffer")
    assert started == []
    one_line(run("bench-nvlink", "--gpus", "4", "--allreduce-sizes", "4GiB"), "--allreduce-sizes 4.0 GiB: 4 processes")
    check_sizes([7 * 2 ** 30], Options(nproc=2))   # 2 x (7 GiB + 256 MiB) fit in 16 GiB
    gpus = [Gpu("GPU0", 0, memory_total_bytes=80 * 2 ** 30, memory_used_bytes=2 ** 30), Gpu("GPU1", 1)]
    check_sizes([64 * 2 ** 30], Options(device="cuda"), gpus)
    with pytest.raises(BadInput, match=r"--allreduce-sizes 80.0 GiB: more than GPU0's 79.0 GiB free \(of 80.0 GiB\)"):
        check_sizes([80 * 2 ** 30], Options(device="cuda"), gpus)


def test_a_calibration_budget_below_what_one_takes_is_refused(monkeypatch):
    """--calibrate-seconds 1 said "within 1 s" and took 33 s (53 s on a busy machine): what always runs (torch in each
    process, the kernels, the optimizer, the sweep) is the floor, named in the refusal and in docs/options.md."""
    from gputopo import calibrate
    monkeypatch.setattr("gputopo.probe.topology", lambda: (_ for _ in ()).throw(NvmlUnavailable("no driver")))
    monkeypatch.setattr(calibrate, "run", lambda *a, **k: pytest.fail("a calibration started"))
    r = run("plan", "--model", "gpt2", "--gpus", "2", "--gpu-mem", "24GB", "--calibrate", "--calibrate-seconds", "1")
    one_line(r, "--calibrate-seconds 1: less than a calibration takes on this machine's CPU (at least 40 s: starting"
                " torch in each process")
    assert calibrate.FLOOR == {"cpu": 40.0, "cuda": 20.0}
    assert "at least 40 s on a CPU, 20 s on GPUs" in (Path(__file__).parent.parent / "docs/options.md").read_text()
