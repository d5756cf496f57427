"""The DeepSpeed config generator: DeepSpeed's own classes accept it, bad combinations get one line,
ds_configs/ equals today's output, launch commands and files."""
import json
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from gputopo import dsconfig, launch, validate
from gputopo.cli import cli
from gputopo.errors import BadInput

ROOT = Path(__file__).resolve().parent.parent
HAS_DS = validate.available()
needs_ds = pytest.mark.skipif(not HAS_DS, reason="deepspeed not installed")


def run(*args):
    return CliRunner().invoke(cli, list(args))


def readme_commands():
    text = (ROOT / "ds_configs" / "README.md").read_text()
    return re.findall(r"`(gputopo deepspeed-config [^`]*-o (ds_configs/\S+\.json))`", text)


def test_ds_configs_equal_generator_output(tmp_path, monkeypatch):
    cmds = readme_commands()
    assert len(cmds) == 14 and {Path(p).name for _, p in cmds} == {p.name for p in (ROOT / "ds_configs").glob("*.json")}
    monkeypatch.chdir(ROOT)
    for cmd, path in cmds:
        argv = shlex.split(cmd)[1:]
        out = tmp_path / Path(path).name
        argv[argv.index("-o") + 1] = str(out)
        r = CliRunner().invoke(cli, argv)
        assert r.exit_code == 0, (cmd, r.output)
        assert out.read_text() == (ROOT / path).read_text(), f"{path} differs from `{cmd}`: regenerate it"


@needs_ds
@pytest.mark.parametrize("stage,offload",
                         [(s, "none") for s in range(4)] + [(1, "cpu"), (2, "cpu"), (3, "cpu"), (3, "nvme")])
@pytest.mark.parametrize("hf", [True, False])
def test_deepspeed_accepts_every_combination(stage, offload, hf, tmp_path):
    cfg = dsconfig.build(stage, offload, hf=hf, nvme_path=str(tmp_path) if offload == "nvme" else None,
                         precision=None if hf else "bf16", hidden_size=768, largest_layer=38597376, batch_size=4,
                         gpus=2)
    assert validate.with_deepspeed(cfg, gpus=2, micro=4) is not None
    # DeepSpeed's strict pydantic model of zero_optimization, called directly as well.
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    z = DeepSpeedZeroConfig(**validate.fill_auto(cfg)["zero_optimization"])
    assert int(z.stage) == stage


def test_hf_sizes_follow_the_trainer_rule():
    z = dsconfig.build(3, hidden_size=768)["zero_optimization"]
    assert (z["reduce_bucket_size"], z["stage3_prefetch_bucket_size"], z["stage3_param_persistence_threshold"]) == \
        (589824, 530841, 7680)
    assert all(isinstance(v, int) for v in (z["reduce_bucket_size"], z["stage3_prefetch_bucket_size"]))
    auto = dsconfig.build(3)["zero_optimization"]
    assert auto["stage3_prefetch_bucket_size"] == "auto"


def test_nvme_layout_and_buffers(tmp_path):
    cfg = dsconfig.build(3, "nvme", nvme_path=str(tmp_path), largest_layer=262_144_000)
    assert "aio" in cfg and "aio" not in cfg["zero_optimization"]
    assert cfg["aio"]["intra_op_parallelism"] == 1 and "thread_count" not in cfg["aio"]
    assert cfg["zero_optimization"]["offload_param"]["buffer_size"] == 262_144_000
    assert cfg["zero_optimization"]["offload_optimizer"]["nvme_path"] == str(tmp_path)


@needs_ds
def test_aio_keys_come_from_installed_deepspeed():
    keys = validate.aio_keys()
    assert set(dsconfig.AIO) <= keys and "thread_count" not in keys


@pytest.mark.parametrize("mutate,msg", [
    (lambda c: c["zero_optimization"].update(aio=c.pop("aio")), "top level"),
    (lambda c: c["aio"].update(thread_count=2), "thread_count"),
    (lambda c: c["zero_optimization"].update(stage="2"), "integer"),
    (lambda c: c.update(overlap_comm=True), "unknown top-level"),
    (lambda c: c["optimizer"].update(type="AdamX"), "AdamX"),
    (lambda c: c["zero_optimization"].update(stage3_prefetch_bucket_size=4.5e7), "must be an integer"),
    (lambda c: c["zero_optimization"].update(overlap_com=True), "rejects.*overlap_com"),
    (lambda c: c["zero_optimization"]["offload_optimizer"].pop("nvme_path"), "without nvme_path"),
    (lambda c: (c["fp16"].update(enabled=True), c["bf16"].update(enabled=True)), "both enabled"),
])
def test_validation_catches_what_users_hit(tmp_path, mutate, msg):
    if not HAS_DS and msg in ("thread_count", "rejects.*overlap_com"):
        pytest.skip("needs deepspeed's own classes")
    cfg = dsconfig.build(3, "nvme", hf=False, nvme_path=str(tmp_path), precision="bf16", batch_size=2)
    mutate(cfg)
    with pytest.raises(BadInput, match=msg):
        validate.with_deepspeed(cfg, gpus=2, micro=2)


@needs_ds
def test_batch_arithmetic_checked_for_n_gpus():
    cfg = dsconfig.build(2, hf=False, precision="bf16", batch_size=4, grad_accum=2, gpus=2)
    assert cfg["train_batch_size"] == 16
    validate.with_deepspeed(cfg, gpus=2, micro=4, accum=2)
    with pytest.raises(BadInput, match="rejects"):
        validate.with_deepspeed(cfg, gpus=3, micro=4, accum=2)


@pytest.mark.parametrize("args,msg", [
    (["--stage", "4"], "--stage 4: ZeRO has stages 0, 1, 2 and 3"),
    (["--stage", "2", "--offload", "cpu", "--offload-params"], "--offload-params needs stage 3"),
    (["--stage", "1", "--offload-params"], "--offload-params needs --offload cpu or nvme"),
    # issue 11: no --nvme-path picks one
    (["--stage", "2", "--offload", "nvme", "--nvme-path", "."], "NVMe offload needs stage 3"),
    (["--stage", "2", "--offload", "nvme", "--nvme-path", "/tmp"], "NVMe offload needs stage 3"),
    (["--stage", "0", "--offload", "cpu"], "offload needs ZeRO stage 1, 2 or 3"),
    (["--stage", "3", "--offload", "nvme", "--nvme-path", "/nonexistent"], "not an existing directory"),
    (["--offload", "cpu"], "give --stage"),
    (["--auto"], "--auto needs --model"),
])
def test_refused_with_one_line(args, msg):
    r = run("deepspeed-config", *args)
    assert r.exit_code == 2 and msg in r.output and r.output.count("\n") == 1, r.output


def test_nvme_space_is_checked(tmp_path):
    r = run("deepspeed-config", "--stage", "3", "--offload", "nvme", "--nvme-path", str(tmp_path),
            "--model", "llama-2-70b")
    assert r.exit_code == 2 and "GiB missing" in r.output


def test_output_file_and_force(tmp_path):
    out = tmp_path / "ds.json"
    out.write_text("keep me")
    r = run("deepspeed-config", "--stage", "2", "-o", str(out))
    assert r.exit_code == 2 and "exists; pass --force" in r.output and out.read_text() == "keep me"
    r = run("deepspeed-config", "--stage", "2", "-o", str(out), "--force")
    assert r.exit_code == 0 and json.loads(out.read_text())["zero_optimization"]["stage"] == 2


def test_json_schema_and_launch(tmp_path):
    r = run("deepspeed-config", "--stage", "3", "--offload", "cpu", "--json", "--launcher", "slurm", "--nodes", "4",
            "--gpus", "8")
    data = json.loads(r.output)
    assert set(data) == {"schema_version", "config", "path", "launch", "warnings", "plan",
                         "training_arguments"} and data["path"] is None
    assert data["config"]["zero_optimization"]["offload_param"]["device"] == "cpu"
    sbatch = data["launch"]["files"]["train.sbatch"]
    assert "#SBATCH --nodes=4" in sbatch and "srun torchrun" in sbatch and "--nproc_per_node 8" in sbatch
    assert "--rdzv_backend c10d" in sbatch


def test_auto_takes_the_plan():
    r = run("deepspeed-config", "--auto", "--model", "llama-2-7b", "--gpus", "8", "--gpu-mem", "80GiB",
            "--link", "NV12", "--batch-size", "1", "--json")
    data = json.loads(r.output)
    assert data["config"]["zero_optimization"]["stage"] in (1, 2, 3)
    assert any(w.startswith("--auto: gputopo plan recommends zero") for w in data["warnings"])
    assert data["config"]["zero_optimization"]["reduce_bucket_size"] == 4096 ** 2


@pytest.mark.parametrize("launcher,expect", [
    ("torchrun", '--rdzv_backend c10d --rdzv_endpoint "$MASTER_ADDR:29500"'),
    ("deepspeed", "deepspeed --hostfile hostfile --num_nodes 2 --num_gpus 4"),
    ("accelerate", 'accelerate launch --config_file accelerate_config.yaml --main_process_ip "$MASTER_ADDR"'
                   " --machine_rank 0 train.py"),
])
def test_multi_node_launch_commands(launcher, expect):
    info = launch.command(launcher, "ds.json", gpus=4, nodes=2)
    assert expect in info["command"]
    if launcher == "deepspeed":
        assert info["files"]["hostfile"] == "node1 slots=4\nnode2 slots=4\n"


def test_accelerate_yaml_is_read_by_accelerate(tmp_path):
    pytest.importorskip("accelerate")
    from accelerate.commands.config.config_args import load_config_from_file
    info = launch.command("accelerate", str(tmp_path / "ds.json"), gpus=2, nodes=1, stage=3)
    (tmp_path / "accelerate_config.yaml").write_text(info["files"]["accelerate_config.yaml"])
    cfg = load_config_from_file(str(tmp_path / "accelerate_config.yaml"))
    assert str(cfg.distributed_type).endswith("DEEPSPEED") and cfg.num_processes == 2
    assert cfg.deepspeed_config["deepspeed_config_file"] == str(tmp_path / "ds.json")


def test_launchers_scripts_open_with_their_command():
    scripts = [p for p in (ROOT / "launchers").iterdir() if p.suffix in (".sh", ".sbatch", ".py")]
    assert scripts
    for p in scripts:
        head = p.read_text().splitlines()[:4]
        assert any(re.search(r"^# .*(bash|sbatch|python|torchrun)\b.*launchers/" + re.escape(p.name), l)
                   for l in head), p.name


@needs_ds
def test_repeat_nvme_config_answers_from_the_cache(tmp_path):
    """An NVMe config validated once (with DeepSpeed's libaio probe) is answered again without importing
    deepspeed or torch; a change to what the probe reads (CFLAGS) asks DeepSpeed again."""
    import os
    import subprocess
    import sys
    (tmp_path / "nvme").mkdir()
    code = ("import sys; from click.testing import CliRunner; from gputopo.cli import cli; "
            "r = CliRunner().invoke(cli, ['deepspeed-config', '--stage', '3', '--offload', 'nvme', '--nvme-path', "
            f"{str(tmp_path / 'nvme')!r}]); "
            "assert r.exit_code == 0, r.output; print(sorted(m for m in ('deepspeed', 'torch') if m in sys.modules))")

    def imported(**env):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), **env})
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout.strip().splitlines()[-1]
    assert imported() == "['deepspeed', 'torch']"
    assert imported() == "[]"
    assert imported(CFLAGS="-I/nonexistent") == "['deepspeed', 'torch']"
