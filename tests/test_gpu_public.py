"""The published GPU runs plan is held against (benchmarks/gpu_public.json, issue 32): what the corpus spans, that
every case says where its numbers come from, and that the accuracy plan prints under its table is the corpus's own.
"""
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import gpu_public  # noqa: E402

from gputopo import speed  # noqa: E402

CASES = __import__("json").loads(gpu_public.DATA.read_text())


def test_the_corpus_spans_what_plan_is_used_for():
    """At least 30 runs; V100, A100 40 and 80 GB, H100 and a consumer card; DDP, ZeRO/FSDP and CPU offload; 3 or
    more multi-node runs; models from about 100M to 70B parameters; no source above a third of the cases."""
    assert len(CASES) >= 30
    generations = {c["plan"]["gpu_generation"] for c in CASES}
    assert {"V100", "A100-40GB", "A100-80GB", "H100"} <= generations
    assert any(g.startswith("consumer") for g in generations)
    strategies = Counter(c["plan"]["strategy"] for c in CASES)
    assert strategies["ddp"] and strategies["fsdp"] and strategies["zero3"] and (strategies["zero1"] or
                                                                                   strategies["zero2"])
    assert sum(n for s, n in strategies.items() if "offload" in s) >= 3
    assert sum(c["hardware"]["nodes"] > 1 for c in CASES) >= 3
    params = [c["model"]["params"] for c in CASES]
    assert min(params) <= 1.3e8 and max(params) >= 6.5e10
    assert Counter(c["source"]["group"] for c in CASES).most_common(1)[0][1] <= len(CASES) / 3


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_every_case_cites_quotes_and_shows_its_arithmetic(case):
    src = case["source"]
    assert src["url"].startswith("http") or (src.get("repo") and src.get("path"))
    assert src["quote"].strip() and case["published"]["as_quoted"]
    assert case["step_time"]["seconds"] > 0 and case["step_time"]["arithmetic"].strip()
    assert isinstance(case["assumed"], list) and isinstance(case["plan"]["assumed"], list)
    assert case["plan"]["args"] and case["plan"]["strategy"]


def test_the_accuracy_plan_prints_is_the_corpus_own():
    """speed.GPU_TRUTH, printed under every datasheet-based table, equals what the corpus computes today: a
    change to the model that moves it must move the sentence too (and docs/sources.md#gpu-truth with it)."""
    results = [gpu_public.predict(c) for c in CASES]
    errors = [r["error"] for r in results]
    assert None not in errors
    assert speed.GPU_TRUTH["runs"] == len(results)
    assert speed.GPU_TRUTH["median"] == pytest.approx(statistics.median(errors), abs=0.005)
    assert speed.GPU_TRUTH["within_25"] == sum(abs(e) <= 0.25 for e in errors)
    table = (Path(__file__).resolve().parent.parent / "docs" / "sources.md").read_text()
    assert f"median {speed.GPU_TRUTH['median']:+.1%}" in table


def test_the_gpu_record_plan_prints_is_its_own():
    """speed.GPU_RECORD, printed beside GPU_TRUTH, is what gputopo's own GPU steps (benchmarks/gpu_record.json, the
    H200 record) compute today; each has its source and the plan arguments that express it."""
    cases = json.loads((Path(gpu_public.__file__).with_name("gpu_record.json")).read_text())
    results = [gpu_public.predict(c) for c in cases]
    errors = [r["error"] for r in results]
    assert None not in errors and all(r["fits"] for r in results)
    assert speed.GPU_RECORD["runs"] == len(results)
    assert speed.GPU_RECORD["median"] == pytest.approx(statistics.median(errors), abs=0.005)
    record = (Path(__file__).resolve().parent.parent / "docs" / "measurements" / "h200-2026-11-27.md").read_text()
    for case in cases:
        assert case["source"]["url"] == "docs/measurements/h200-2026-11-27.md"
        assert case["published"]["as_quoted"] in record
