"""benchmarks/gpu_truth.py (issue 41 (1)): its CPU twin writes the record the GPU run writes, every op's time lands in
a part `gputopo plan` prices (or in other / unclassified, said), and --compare reads a saved record without a GPU.
The shape -> projection mapping is checked on its own, without torch."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_truth.py"
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_truth  # noqa: E402

from gputopo import models, speed  # noqa: E402
from gputopo.plan import Layout, Training  # noqa: E402

TWIN = ["gpt2-bf16-8x1024", "llama-3.2-1b-bf16-4x2048"]   # the two families: Conv1D + LayerNorm, Linear + RMSNorm
EXPECTED = {"gpt2-bf16-8x1024": {"matmul: Q, K, V projection", "matmul: attention output projection",
                                 "matmul: MLP up projection", "matmul: MLP down projection", "matmul: LM head",
                                 "attention forward", "attention backward", "elementwise: layernorm",
                                 "elementwise: tanh GeLU", "elementwise: dropout", "elementwise: log-softmax",
                                 "elementwise: logits.float()", "elementwise: autocast cast", "framework copies",
                                 "optimizer"},
            "llama-3.2-1b-bf16-4x2048": {"matmul: Q projection", "matmul: K, V projections",
                                         "matmul: attention output projection", "matmul: MLP gate and up projections",
                                         "matmul: MLP down projection", "matmul: LM head", "attention forward",
                                         "attention backward", "elementwise: rmsnorm", "elementwise: rotary",
                                         "elementwise: activation(gate)", "elementwise: gate x up", "optimizer"}}


def run(*args, timeout=300):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=ROOT)


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    """The CPU twin of two cases (about 10 s on 2 cores)."""
    out = tmp_path_factory.mktemp("gpu-truth") / "twin.json"
    proc = run("--device", "cpu", "--only", *TWIN, "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out, json.loads(out.read_text())


def plan_names(config: dict, case: dict, tmp_path: Path) -> set:
    """Every part name speed.parts gives this model, on a GPU and on a CPU."""
    folder = tmp_path / case["name"]
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    m = models.from_path(str(folder))
    t = Training(precision=case["precision"], batch_size=case["batch_size"], seq_len=case["seq_len"],
                 grad_checkpointing=case["grad_checkpointing"])
    lay = Layout(gpus_per_node=1, gpu_mem_bytes=80 * 2 ** 30, gpu_model="H100", cpu_cores=16)
    rates = speed.gpu_rates(lay, t)
    return {n for d in ("cuda", "cpu") for n in speed.parts(case["strategy"], m, lay, t, rates, device=d)}


def test_twin_records_every_case_with_machine_and_versions(twin):
    _, record = twin
    assert record["schema_version"] == 1 and record["finished"] and record["running"] is None
    mach = record["machine"]
    assert mach["device"] == "cpu" and mach["torch"] and mach["transformers"] and mach["python"]
    assert mach["cpu_cores_logical"] >= 1 and "hostname" not in json.dumps(mach)
    assert [c["name"] for c in record["cases"]] == TWIN and record["skipped"] == []
    for case in record["cases"]:
        assert "error" not in case, case.get("traceback")
        step = case["step_s"]
        assert 0 < step["p10"] <= step["median"] <= step["p90"] and len(case["step_times_s"]) == gpu_truth.TIMED
        assert case["peak_bytes"] > case["params"] * 4   # at least the fp32 weights
        assert case["loss"]["finite"] and case["precision"] == "bf16"
        assert case["batch_size"] <= 2 and case["seq_len"] <= 64 and case["config"]["model_type"]


def test_twin_parts_are_plans_parts_and_add_up(twin, tmp_path):
    """Parts named as speed.parts names them (or other/unclassified), summing to the step's device time, with the
    projections, attention, norms, loss and optimizer each found."""
    _, record = twin
    for case in record["cases"]:
        profile = case["profile"]
        parts = profile["parts"]
        allowed = plan_names(case["config"], case, tmp_path) | {"elementwise: other", "unclassified"}
        assert set(parts) <= allowed, set(parts) - allowed
        assert EXPECTED[case["name"]] <= {p for p, s in parts.items() if s > 0}, EXPECTED[case["name"]] - set(parts)
        assert abs(sum(parts.values()) - profile["device_s"]) <= 0.1 * profile["device_s"]
        assert parts.get("unclassified", 0) <= 0.05 * profile["device_s"], profile["top"].get("unclassified")
        assert profile["idle_s"] == 0 and profile["wall_s"] > 0
        for part in parts:
            assert profile["part_kernels"][part] > 0 and profile["top"][part]


def test_compare_load_prints_plan_beside_measured(twin):
    out, record = twin
    proc = run("--compare", "--load", str(out), "--gpu-model", "H100")
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout
    assert "plan ms" in text and "measured ms" in text and "on H100's datasheet" in text
    for name in TWIN:
        assert name in text
    # a row with a number on both sides and an error, and the step and peak rows
    assert re.search(r"matmul: LM head\s+\d+\.\d+\s+\d+\.\d+\s+[+-]\d", text)
    assert re.search(r"step \(median of 10\)\s+\d+\.\d+\s+\d+\.\d+\s+[+-]\d", text)
    assert re.search(r"peak GiB.*\s+\d+\.\d+\s+\d+\.\d+\s+[+-]\d", text)
    assert re.search(r"^step: median [+-]\d.*over 2 cases", text, re.M)
    bare = run("--compare", "--load", str(out))   # a CPU record, no GPU named: the measured column alone
    assert bare.returncode == 0 and "plan n/a" in bare.stdout and "measured ms" in bare.stdout


def test_existing_out_refused_before_any_work(tmp_path):
    out = tmp_path / "kept.json"
    out.write_text("{}")
    proc = run("--device", "cpu", "--only", "gpt2-bf16-2x512", "--out", str(out), timeout=60)
    assert proc.returncode == 1 and "exists; pass --force" in proc.stderr and out.read_text() == "{}"
    bad = run("--only", "gpt2-tiny", timeout=60)
    assert bad.returncode == 2 and "no case gpt2-tiny" in bad.stderr


def test_gpt2_shapes_name_their_projection():
    """GPT-2's blocks are Conv1D (weights [in, out]): a weight's gradient is speed's (K, N, M); its LM head is
    nn.Linear ([V, h]): (N, K, M). MLP down's forward has the shape of MLP up's input gradient: the direction
    tells them apart."""
    m, t = models.named("gpt2"), Training(precision="bf16", batch_size=8, seq_len=1024)
    table = gpu_truth.matmul_table(m, t, conv1d=True)
    T, h, V = 8192, 768, 50257

    def part(shape, direction):
        return gpu_truth.matmul_parts(table, shape, direction)
    assert part((T, 3 * h, h), "forward") == {"matmul: Q, K, V projection": 1.0}
    assert part((T, h, 3 * h), "backward") == part((h, 3 * h, T), "backward") == {"matmul: Q, K, V projection": 1.0}
    assert part((T, h, h), "forward") == {"matmul: attention output projection": 1.0}
    assert part((T, h, 4 * h), "forward") == {"matmul: MLP down projection": 1.0}
    assert part((T, h, 4 * h), "backward") == {"matmul: MLP up projection": 1.0}
    assert part((4 * h, h, T), "backward") == {"matmul: MLP down projection": 1.0}
    assert part((T, V, h), "forward") == part((V, h, T), "backward") == {"matmul: LM head": 1.0}
    assert part((T, 5, 7), "forward") == {} and part((T, 3 * h, h), "backward") == {}


def test_llama_shapes_name_their_projection():
    """Llama's nn.Linear weights are [out, in] (a weight's gradient is (N, K, M)); Q and the output projection share
    h x h and split what that shape takes, as the plan prices them alike."""
    m, t = models.named("llama-3-8b"), Training(precision="bf16", batch_size=1, seq_len=1024)
    table = gpu_truth.matmul_table(m, t)
    T, h, kv, inter, V = 1024, 4096, 1024, 14336, 128256

    def part(shape, direction):
        return gpu_truth.matmul_parts(table, shape, direction)
    assert part((T, h, h), "forward") == {"matmul: Q projection": 0.5, "matmul: attention output projection": 0.5}
    assert part((T, kv, h), "forward") == part((kv, h, T), "backward") == {"matmul: K, V projections": 1.0}
    assert part((T, inter, h), "forward") == part((inter, h, T), "backward") == \
        {"matmul: MLP gate and up projections": 1.0}
    assert part((T, h, inter), "backward") == {"matmul: MLP gate and up projections": 1.0}
    assert part((T, h, inter), "forward") == part((h, inter, T), "backward") == {"matmul: MLP down projection": 1.0}
    assert part((T, V, h), "forward") == part((V, h, T), "backward") == {"matmul: LM head": 1.0}


def test_matmul_shapes_read_from_recorded_inputs():
    def op(name, *shapes):
        return SimpleNamespace(name=name, input_shapes=[list(s) for s in shapes])
    assert gpu_truth.mnk(op("aten::linear", (2, 48, 64), (32, 64), (32,))) == (96, 32, 64)
    assert gpu_truth.mnk(op("aten::addmm", (192,), (96, 64), (64, 192), (), ())) == (96, 192, 64)
    assert gpu_truth.mnk(op("aten::mm", (96, 1000), (1000, 64))) == (96, 64, 1000)
    assert gpu_truth.mnk(op("aten::bmm", (8, 48, 16), (8, 16, 48))) == (48, 48, 16)
    assert gpu_truth.mnk(op("aten::matmul", (2, 48, 64), (64, 32))) == (96, 32, 64)
    assert gpu_truth.mnk(op("aten::add", (2, 3), (2, 3))) is None
    # autocast casts a weight inside linear: its shape is the weight slot's, never the activation's
    assert gpu_truth.weight_args(op("aten::linear", (2, 48, 64), (32, 64), (32,))) == [[32, 64], [32]]
    assert gpu_truth.weight_args(op("aten::addmm", (64,), (64, 64), (64, 64))) == [[64]]


class Span:
    def __init__(self, start, end):
        self.start, self.end = start, end

    def elapsed_us(self):
        return self.end - self.start


def event(name, parent=None, start=0.0, end=1.0, kernels=(), shapes=(), cuda=False, thread=1, seq=-1, fwd=0,
          annotation=False):
    """A stand-in for torch.profiler's FunctionEvent: what gpu_truth reads of one."""
    from torch.autograd import DeviceType
    return SimpleNamespace(name=name, cpu_parent=parent, time_range=Span(start, end), input_shapes=[list(s) for s in
                           shapes], kernels=[SimpleNamespace(name=k, device=0, duration=d) for k, d in kernels],
                           device_type=DeviceType.CUDA if cuda else DeviceType.CPU, thread=thread, sequence_nr=seq,
                           fwd_thread=fwd, is_user_annotation=annotation, self_cpu_time_total=0.0,
                           concrete_inputs=[])


def test_gpu_profile_gives_each_kernel_its_part():
    """The CUDA path on a hand-built profile (no GPU here): kernels by the op that launched them, a range's
    annotation left out, a backward matmul found through its node, what no op launched unclassified, and the GPU's
    idle time from the union of its intervals."""
    m, t = models.named("gpt2"), Training(precision="bf16", batch_size=8, seq_len=1024)
    T, h, V = 8192, 768, 50257
    facts = gpu_truth.Facts(top="GPT2LMHeadModel", base="GPT2Model", vocab=V, hidden=h, rotary=False, gated=False,
                            python_gelu=True, table=gpu_truth.matmul_table(m, t, conv1d=True),
                            known=frozenset(speed.parts("single", m, Layout(1, 80 * 2 ** 30, gpu_model="H100"), t,
                                                        speed.gpu_rates(Layout(1, 80 * 2 ** 30, gpu_model="H100"), t)))
                            | {"elementwise: other", "unclassified"}, engine="plain", offload=False)
    top = event("module: GPT2LMHeadModel")
    head = event("module: Linear", top)
    linear = event("aten::linear", head, shapes=[(8, 1024, h), (V, h)])
    mm = event("aten::mm", linear, seq=7, shapes=[(T, h), (h, V)], kernels=[("sm90_gemm_fwd", 300.0)])
    cast = event("aten::_to_copy", event("aten::to", linear), shapes=[(V, h)])
    copy = event("aten::copy_", cast, kernels=[("elementwise_kernel_cast", 40.0)])
    node = event("autograd::engine::evaluate_function: MmBackward0", thread=2, seq=7, fwd=1)
    dgrad = event("aten::mm", node, thread=2, shapes=[(T, V), (V, h)], kernels=[("sm90_gemm_dgrad", 280.0)])
    opt = event("Optimizer.step#AdamW.step", kernels=[("Optimizer.step#AdamW.step", 900.0)])
    foreach = event("aten::_foreach_lerp_", opt, kernels=[("multi_tensor_apply_kernel", 100.0)])
    device = [event(name, start=a, end=b, cuda=True, annotation=name.startswith("Optimizer"))
              for name, a, b in [("sm90_gemm_fwd", 0, 300), ("elementwise_kernel_cast", 300, 340),
                                 ("sm90_gemm_dgrad", 400, 680), ("multi_tensor_apply_kernel", 650, 750),
                                 ("Optimizer.step#AdamW.step", 690, 1590), ("unlinked_kernel", 750, 760)]]
    step = event(gpu_truth.STEP_RANGE, start=0, end=1000)
    events = [top, head, linear, mm, cast, copy, node, dgrad, opt, foreach, step, *device]
    profile = gpu_truth.profile_summary(SimpleNamespace(events=lambda: events), facts, True, median=0.001)
    parts = profile["parts"]
    assert parts["matmul: LM head"] == pytest.approx(580e-6)   # forward and the data gradient
    assert parts["framework copies"] == pytest.approx(40e-6)   # autocast's copy of the tied weight
    assert parts["optimizer"] == pytest.approx(100e-6) and parts["unclassified"] == pytest.approx(10e-6)
    assert profile["device_s"] == pytest.approx(730e-6) and profile["busy_s"] == pytest.approx(700e-6)  # overlap
    assert profile["idle_s"] == pytest.approx(300e-6) and profile["wall_s"] == pytest.approx(1e-3)
