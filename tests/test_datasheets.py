"""Every datasheet figure gputopo prices a step with, held against its source's own words (issue 32).

tests/fixtures/datasheets/quotes.json keeps, per GPU, verbatim text from its datasheet (or a verbatim copy of the
datasheet's table, "read_via" says which) with the figures it states. A figure in gputopo.datasheets must agree with
its quote (within rounding), and the quote must print it: as written, as the sparse figure (twice the dense one, the
way datasheets print tensor rates) or in TB/s or PFLOPS. A figure no stored copy of its source states is listed in
UNVERIFIED, so a new unsourced figure fails here, and one that gets a quote must leave the list.
"""
import json
import re
from pathlib import Path

import pytest

from gputopo.datasheets import PEAKS, VARIANTS

QUOTES = json.loads((Path(__file__).parent / "fixtures" / "datasheets" / "quotes.json").read_text())
FIELDS = ("fp32", "b16", "mem_gbps")
# No stored copy of the source states these (their sources are named in gputopo/datasheets.py's notes).
UNVERIFIED = {
    "RTX 5090": {"fp32", "mem_gbps"}, "H800": {"fp32"}, "H20": {"b16"}, "A800": {"mem_gbps"}, "A30": {"b16"},
    "A10G": {"fp32"}, "L40": {"fp32", "b16", "mem_gbps"}, "L4": {"mem_gbps"}, "RTX 6000 Ada": {"b16"},
    "RTX 4080": {"fp32", "b16", "mem_gbps"}, "RTX 3090": {"b16"}, "RTX 3080": {"fp32", "b16", "mem_gbps"},
    "TITAN V": {"fp32", "mem_gbps"}, "TITAN RTX": {"fp32", "mem_gbps"},
    "Quadro RTX 8000": {"fp32", "b16", "mem_gbps"}, "Quadro RTX 6000": {"b16"}, "RTX 2080 Ti": {"b16"},
    "T4": {"b16"}, "P100": {"b16"}, "P40": {"fp32", "mem_gbps"},
}
# gputopo's variant -> the quote's
VARIANT_QUOTES = {("A100", "A100 PCIe 40GB"): "A100 40GB PCIe", ("A100", "A100 PCIe 80GB"): "A100 80GB PCIe",
                  ("A100", "A100 SXM4 40GB"): "A100 40GB SXM4", ("H100", "H100 PCIe 80GB"): "H100 PCIe (80GB HBM2e)",
                  ("V100", "V100 PCIe"): "V100 PCIe"}
# The stored copy of V100's datasheet garbles the PCIe card's tensor figure to "12 TFLOPS".
VARIANT_UNVERIFIED = {"V100 PCIe": {"b16"}}


def printed(value: float, quote: str) -> bool:
    """The quote prints this figure: as is, as the sparse figure, or in TB/s / PFLOPS, within rounding."""
    numbers = [float(n.replace(",", "")) for n in re.findall(r"\d[\d,]*\.?\d*", quote)]
    forms = (value, 2 * value, value / 1000, 2 * value / 1000)
    return any(abs(n - f) <= 0.015 * f for n in numbers for f in forms)


def check(figures: dict, quote: str, source: dict, label: str, unverified: set) -> list[str]:
    """What disagrees between gputopo's figures and the quote's."""
    out = []
    for f in FIELDS:
        ours = figures.get(f)
        if ours is None:
            continue
        theirs = source.get(f)
        if theirs is None:
            if f not in unverified:
                out.append(f"{label} {f}={ours}: no quote states it, and it is not listed in UNVERIFIED")
            continue
        if f in unverified:
            out.append(f"{label} {f}: its quote states {theirs}; take it out of UNVERIFIED")
        if abs(ours - theirs) > 0.015 * theirs:
            out.append(f"{label} {f}={ours}, its source says {theirs}")
        if not printed(theirs, quote):
            out.append(f"{label} {f}={theirs} is not printed in its quote")
    return out


@pytest.mark.parametrize("key", sorted(PEAKS))
def test_datasheet_figures_agree_with_their_quotes(key):
    q = QUOTES.get(key, {"figures": {}, "quote": ""})
    assert check(PEAKS[key], q["quote"], q["figures"], key, UNVERIFIED.get(key, set())) == []


@pytest.mark.parametrize("key,variant", [(k, v["variant"]) for k, vs in VARIANTS.items() for v in vs])
def test_variant_figures_agree_with_their_quotes(key, variant):
    """A100 40GB at 1555 GB/s, the PCIe forms: each variant's own figures against its column of the table."""
    ours = next(v for v in VARIANTS[key] if v["variant"] == variant)
    name = VARIANT_QUOTES.get((key, variant))
    q = QUOTES[key]["variants"][name] if name else {"figures": {}, "quote": ""}
    unverified = set(FIELDS) if name is None else VARIANT_UNVERIFIED.get(variant, set())
    assert check(ours, q["quote"], q["figures"], variant, unverified) == []


def test_every_quote_names_where_it_was_read():
    for key, q in QUOTES.items():
        assert q["source"] and q["quote"].strip(), key
        for name, v in q["variants"].items():
            assert v["source"] and v["quote"].strip(), (key, name)
