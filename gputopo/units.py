"""Byte sizes: read as users write them, written as people read memory.

One rule for every size gputopo reads: binary units, as GPUs are sold and as nvidia-smi and `free -g` print
them. "80GB" is 80 GiB (an "80GB" A100 has 81920 MiB), "512M" is 512 MiB. A number without a unit is
refused: it is too easy to mean MB and get GB.
"""
from __future__ import annotations

import re

from .errors import BadInput

SCALE = {"": None, "B": 1, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40, "P": 2 ** 50}
UNIT_RULE = "sizes are binary, as GPUs are sold and nvidia-smi prints them: 80GB = 80 GiB"


MOST_BYTES = 2 ** 60   # 1 EiB: beyond any GPU, host or disk a plan is for


def parse_size(text: str) -> int:
    """'24GiB', '80GB', '80G', '16000MiB', '1.5TB' -> bytes (binary units). Raises ValueError."""
    m = re.fullmatch(r"\s*([+-]?[0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*(?:([KMGTP])(?:i?B)?|(B))?\s*", str(text), re.I)
    if not m:
        raise ValueError(f"{text}: expected a positive size like 24GB, 80GiB or 16000MiB ({UNIT_RULE})")
    if re.search(r"[0-9A-Za-z]b\s*$", str(text)):  # 200Gb/s is bits everywhere in gputopo; a size is bytes
        raise ValueError(f"{text}: a lowercase b is bits; sizes are bytes: {m.group(1)}{(m.group(2) or '').upper()}B")
    value = float(m.group(1))
    unit = (m.group(2) or m.group(3) or "").upper()
    if value > MOST_BYTES:   # no machine has this much of anything (also: 1e400 is inf, and int(inf) fails)
        raise ValueError(f"{text}: more than any machine has (at most {MOST_BYTES // 2 ** 60} EiB)")
    if value <= 0:
        raise ValueError(f"{text}: expected a positive size like 24GB, 80GiB or 16000MiB")
    if not unit:
        raise ValueError(f"{text}: give a unit, e.g. {m.group(1)}GB ({UNIT_RULE})")
    n = int(value * SCALE[unit])
    if n > MOST_BYTES:
        raise ValueError(f"{text}: more than any machine has (at most 1 EiB)")
    if n < 1:
        raise ValueError(f"{text}: less than one byte")
    return n


def parse_bytes(text: str, what: str) -> int:
    """parse_size for callers outside click: `what` names the option in the one-line error."""
    try:
        return parse_size(text)
    except ValueError as e:
        raise BadInput(f"{what} {e}") from None


def size(n: float | None) -> str:
    """Bytes in binary units: 24.0 GiB; N/A for unknown."""
    if n is None:
        return "N/A"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def gib(n: float) -> str:
    """Always in GiB, for sentences that compare sizes: 146.2 GiB."""
    return f"{n / 2 ** 30:.1f} GiB"
