"""The dtypes gputopo.ops prices over eager attention's scores under autocast, and autocast's weight casts, against
what the CPU twin runs (benchmarks/autocast_dtypes.py records a tiny model's aten ops under CPU bf16 autocast)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
import autocast_dtypes  # noqa: E402

SIZE = {"bfloat16": 2, "float32": 4}


def ran(scores: list) -> dict:
    """The first layer's forward over the scores, as score_dtypes names them: the scaling's output, the mask add's,
    softmax's, the dropout's (its last op: the multiply by the mask) and the dtype the second batched matmul reads."""
    fwd = [(name, ins, out) for name, phase, ins, out in scores if phase == "forward"]
    names = [name for name, _, _ in fwd]
    first = names.index("bmm")
    second = names.index("bmm", first + 1)
    layer = fwd[first:second + 1]
    add = next(i for i, (name, _, _) in enumerate(layer) if name == "add")
    soft = next(i for i, (name, _, _) in enumerate(layer) if name == "_softmax")
    drop = next(i for i, (name, _, _) in enumerate(layer) if name == "bernoulli_")
    mul = next(i for i, (name, _, _) in enumerate(layer) if name == "mul" and i > drop)
    return {"scaled scores": SIZE[layer[add - 1][2]], "mask add": SIZE[layer[add][2]],
            "softmax": SIZE[layer[soft][2]], "dropout": SIZE[layer[mul][2]],
            "probabilities @ V": SIZE[layer[-1][1][0]]}


@pytest.mark.parametrize("family,checkpointing", [("bert", False), ("gpt2", True)])
def test_planned_dtypes_are_what_the_twin_runs(family, checkpointing):
    got = autocast_dtypes.record(family, checkpointing)
    plan = autocast_dtypes.planned(got["spec"], checkpointing)
    assert ran(got["scores"]) == plan["dtypes"]
    # the fp32 mask promotes the 16-bit scores: softmax runs on fp32 in both families; BERT drops out the fp32
    # probabilities before autocast casts them, GPT-2 casts them back first
    assert plan["dtypes"]["mask add"] == plan["dtypes"]["softmax"] == 4
    assert plan["dtypes"]["dropout"] == (4 if family == "bert" else 2)
    # every Linear's weight and bias cast once a forward, again in checkpointing's recomputation
    assert got["casts"] == plan["casts"]
    assert got["casts"]["backward"] == (got["casts"]["forward"] - 1 if checkpointing else 0)   # the tied head: once
