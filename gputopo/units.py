"""Byte sizes: read as users write them, written as people read memory."""
from __future__ import annotations

import re

from .errors import BadInput

SCALE = {"B": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "KI": 2 ** 10, "MI": 2 ** 20, "GI": 2 ** 30, "TI": 2 ** 40}


def parse_bytes(text: str, what: str) -> int:
    """'24GiB', '80GB', '16000MiB', '24' (GiB) -> bytes; `what` names the option in the error."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMGT]i?B?|B)?\s*", str(text), re.I)
    if not m or float(m.group(1)) <= 0:
        raise BadInput(f"{what} {text}: expected a positive size like 24GiB, 80GB or 16000MiB")
    unit = (m.group(2) or "GiB").upper().rstrip("B") or "B"
    return int(float(m.group(1)) * SCALE[unit])


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
