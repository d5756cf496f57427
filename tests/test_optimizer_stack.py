"""Issue 44: what the optimizer keeps and costs as the HF Trainer runs it: Adafactor's factored second moment,
torch's three AdamW implementations, and zero_grad that zeroes rather than frees."""
import json

import pytest
from click.testing import CliRunner

from gputopo import memory, models, ops, plan, speed
from gputopo.cli import cli
from gputopo.plan import Layout, Training

BERT = ["--model", "benchmarks/seed_table_models/bert-large-uncased-seqcls", "--gpus", "1", "--gpu-model",
        "V100-SXM2-16GB", "--seq-len", "512", "--attention", "eager", "--no-grad-checkpointing", "--precision",
        "fp32", "--batch-size", "4"]


def planned(*args) -> dict:
    r = CliRunner().invoke(cli, ["plan", *args, "--json"])
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


def row(data: dict, name: str = "single") -> dict:
    return next(s for s in data["strategies"] if s["name"] == name)


def test_adafactor_keeps_a_row_and_a_column_per_matrix():
    """gpt2's tensors counted by hand: transformers' Adafactor (beta1=None, as the Trainer runs it) keeps
    exp_avg_sq_row and exp_avg_sq_col of a matrix, a vector's exp_avg_sq whole."""
    m = models.named("gpt2")
    h, I, L, V = 768, 3072, 12, 50257
    mats = [(h, 3 * h), (h, h), (h, I), (I, h)]                 # c_attn, c_proj, c_fc, mlp c_proj
    block = sum(i + o for i, o in mats) + sum(o for _, o in mats) + 2 * 2 * h   # rows + cols, biases, two norms
    assert models.factored_elements(m) == L * block + (V + h) + (1024 + h) + 2 * h
    lay = Layout(gpus_per_node=2, gpu_mem_bytes=80 * 2 ** 30, gpu_model="H100")
    t = Training(precision="bf16", optimizer="adafactor")
    by = {s.name: s.per_gpu_bytes["optimizer"] for s in plan.strategies(m, lay, t)}
    assert by["ddp"] == 4 * models.factored_elements(m) < 0.01 * 4 * m.params
    # ZeRO hands it flat 1-D partitions: nothing to factor, 4 B per parameter (plus ZeRO's fp32 master)
    assert by["zero2"] == (4 + 4) * m.params // 2


def test_the_guides_adafactor_run_saves_what_adam_keeps():
    """The guide's runs 1 and 6 differ by 2654 MB: AdamW's 8 B per parameter of BERT-large (2557 MiB) and its
    temporaries. Adafactor was counted at 4 B (1278 MiB more than it keeps)."""
    adam, ada = planned(*BERT), planned(*BERT, "--optimizer", "adafactor")
    saved = (row(adam)["per_gpu_bytes"]["optimizer"] - row(ada)["per_gpu_bytes"]["optimizer"]) / 2 ** 20
    assert 2540 < saved < 2557


def test_the_optimizer_implementation_moves_the_step_and_its_temporaries():
    m, lay = models.named("gpt2-large"), Layout(gpus_per_node=1, gpu_mem_bytes=80 * 2 ** 30, gpu_model="H100")
    temps = {impl: memory.optimizer_temporaries(m, Training(optimizer_impl=impl), "cuda")
             for impl in ("foreach", "for-loop", "fused")}
    assert temps["foreach"] == 4 * m.params and temps["for-loop"] == 2 * 4 * m.largest_layer_params
    assert temps["fused"] == 0 and memory.optimizer_temporaries(m, Training(), "cuda") == temps["foreach"]
    assert memory.optimizer_temporaries(m, Training(), "cpu") == temps["for-loop"]   # torch's CPU default
    # tensor by tensor, the host dispatches each of a tensor's 8 kernels: a floor the bytes never reach here
    rates = speed.gpu_rates(lay, Training(precision="bf16"))
    loop = speed.optimizer_seconds("single", m, lay, Training(optimizer_impl="for-loop"), rates)
    each = speed.optimizer_seconds("single", m, lay, Training(), rates)
    assert loop == speed.param_tensors(m) * 8 * speed.HOST_OP_S["fp32"] > each
    assert speed.param_tensors(m) == 36 * 12 + 2 + 2   # 36 layers: 2 norms x 2, 4 matrices + 4 biases; wte, wpe, ln_f


def test_zero_grad_that_zeroes_keeps_the_gradients_through_the_next_forward():
    """torch 1.x's zero_grad(set_to_none=False): the gradients of the last step are there at the loss."""
    none, zeros = planned(*BERT), planned(*BERT, "--zero-grad", "zeros")
    phases = {p["phase"]: p["bytes"] for p in row(none)["peak"]["phases"]}
    kept = {p["phase"]: p["bytes"] for p in row(zeros)["peak"]["phases"]}
    grads = row(none)["per_gpu_bytes"]["gradients"]
    assert kept["forward, at the loss"] - phases["forward, at the loss"] == grads
    assert kept["optimizer step"] == phases["optimizer step"]   # all gradients exist at the step either way
    assert zeros["training"]["zero_grad"] == "zeros" and none["training"]["zero_grad"] == "none"


def test_options_that_do_not_apply_are_refused():
    r = CliRunner().invoke(cli, ["plan", "--model", "gpt2", "--gpus", "1", "--gpu-model", "H100", "--optimizer",
                                 "adafactor", "--optimizer-impl", "fused"])
    assert r.exit_code == 2 and "has one implementation" in r.stderr and r.stderr.count("\n") == 1, r.output
    # a DeepSpeed config runs DeepSpeed's optimizer loop: refused with --auto too, and plan's Next line leaves them out
    for extra in (["--stage", "2"], ["--auto"]):
        r = CliRunner().invoke(cli, ["deepspeed-config", *extra, "--zero-grad", "zeros", "--model",
                                     "gpt2", "--gpus", "2", "--gpu-model", "H100", "-o", "-"])
        assert r.exit_code == 2 and "--zero-grad describes torch's own optimizer loop" in r.stderr, r.output
    r = CliRunner().invoke(cli, ["plan", "--model", "gpt2", "--gpus", "2", "--gpu-model", "H100", "--zero-grad",
                                 "zeros", "--optimizer-impl", "fused"])
    nxt = r.stdout[r.stdout.index("Next:"):r.stdout.index("ds_config.json")]
    assert "--zero-grad" not in nxt and "--optimizer-impl" not in nxt and "--auto" in nxt


def test_fused_steps_read_each_state_once():
    """torch's fused AdamW reads p, g, m, v and writes p, m, v once (28 B/param), foreach's passes about 80; fused SGD
    (torch 2.3+) is accepted."""
    m, lay = models.named("llama-2-7b"), Layout(gpus_per_node=1, gpu_mem_bytes=141 * 2 ** 30, gpu_model="H200")
    rates = speed.gpu_rates(lay, Training(precision="bf16"))
    fused = speed.optimizer_seconds("single", m, lay, Training(optimizer_impl="fused"), rates)
    each = speed.optimizer_seconds("single", m, lay, Training(), rates)
    assert fused == pytest.approx(each * 28 / 80, rel=0.01)
    data = planned("--model", "gpt2", "--gpus", "1", "--gpu-model", "H100", "--optimizer", "sgd", "--optimizer-impl",
                   "fused")
    assert data["training"]["optimizer_impl"] == "fused"


def test_8bit_states_stay_8bit_with_16bit_weights():
    plain = planned("--model", "gpt2", "--gpus", "1", "--gpu-model", "H100", "--optimizer", "adamw-8bit")
    half = planned("--model", "gpt2", "--gpus", "1", "--gpu-model", "H100", "--optimizer", "adamw-8bit",
                   "--pure-16bit")
    assert row(plain)["per_gpu_bytes"]["optimizer"] == row(half)["per_gpu_bytes"]["optimizer"] == 2 * models.named(
        "gpt2").params


def test_an_encoder_builds_no_kv_cache(tmp_path):
    """transformers' decoders make a DynamicCache in training whenever use_cache is on, whatever their head; an
    encoder (a masked-LM architecture: BERT, RoBERTa) does not, and its copies are not priced."""
    small = {"num_hidden_layers": 2, "n_layer": 2, "hidden_size": 64, "n_embd": 64, "num_attention_heads": 2,
             "n_head": 2, "intermediate_size": 128, "vocab_size": 1000}
    built = {}
    for model_type, arch in (("roberta", "RobertaForSequenceClassification"), ("gpt2", "GPT2LMHeadModel"),
                             ("llama", "LlamaForSequenceClassification")):
        (tmp_path / model_type).mkdir()
        (tmp_path / model_type / "config.json").write_text(json.dumps({**small, "model_type": model_type,
                                                                       "architectures": [arch]}))
        built[model_type] = models.from_path(str(tmp_path / model_type))
    assert {k: m.kv_cache for k, m in built.items()} == {"roberta": False, "gpt2": True, "llama": True}
    assert not models.named("bert-large-uncased").kv_cache and models.named("gpt2").kv_cache
    t = Training(precision="bf16", batch_size=2, seq_len=128)
    whats = {k: [op.what for op in ops.elementwise_ops(m, t, "sdpa", "cuda")[0]] for k, m in built.items()}
    assert "KV cache copy" not in whats["roberta"] and "KV cache copy" in whats["llama"]
