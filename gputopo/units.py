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
# One grammar for every number an option takes (sizes, bandwidths, --params): 12, 1.5, .5, 1e9, 1e-9, 1.5E+3
NUMBER = r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
MOST_CHARS = 32        # the longest number typed: "16000MiB", "3.2Tb/s", "1.5e9" are short; 4301 digits is not a number
MOST_COUNT = 2 ** 31 - 1   # a count (batch, tokens, steps): beyond the largest 32-bit int is a typo
# A whole number as typed: ASCII digits, an optional sign, blanks around. int() alone also reads "1_000", "٢" and
# "１０００", which no other number gputopo reads takes (sizes, bandwidths), and which would be echoed as typed.
WHOLE = re.compile(r"[ \t]*([+-]?[0-9]+)[ \t]*")


def shown(text) -> str:
    """A value as a refusal quotes it: whole when short, else its start and its length (one readable line)."""
    text = str(text)
    return text if len(text) <= 40 else f"{text[:24]}... ({len(text)} characters)"


def escaped(text: str) -> str:
    """`text` on one line, as it is: every control or invisible character (a newline, ESC, a bidi override) written
    as Python writes it in a string (\\n, \\x1b, \\u202e), the rest untouched. Node names, report values and paths
    come from files and other machines: raw, a newline splits a table row, a drain line or an `Error:` line, and ESC
    is a terminal's command (click drops its sequences when piped, so the name shown would not be the file's)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def whole(text: str) -> int:
    """A whole number as typed ('8', ' 8 ', '08', '-3'): ASCII digits only, for every count, GPU index and NV#;
    ValueError naming what it got. Its length is the caller's to bound (a count's 32 characters)."""
    m = WHOLE.fullmatch(str(text))
    if not m:
        raise ValueError(f"{shown(text)!r}: expected a whole number in ASCII digits (like 8 or 1000; not 1_000)")
    return int(m.group(1))


def foreign(text: str) -> str:
    """'U+212A KELVIN SIGN is not ASCII; expected' for the first character outside ASCII in `text` (it may look like
    K, and a refusal that quoted it alone would read as refusing 80KB), else ''."""
    import unicodedata
    c = next((c for c in text if not c.isascii()), None)
    return "" if c is None else f"U+{ord(c):04X} {unicodedata.name(c, 'a character')} is not ASCII; expected"


def exact(n: int) -> str:
    """A bound in the largest binary unit that divides it: 1 GiB, 2 TiB, 16 PiB."""
    for unit, scale in (("EiB", 2 ** 60), ("PiB", 2 ** 50), ("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20),
                        ("KiB", 2 ** 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def parse_size(text: str, least: int = 1, most: int = MOST_BYTES, has: str = "any machine has") -> int:
    """'24GiB', '80GB', '80G', '16000MiB', '1.5TB' -> bytes (binary units), from `least` to `most` (what `has`
    names: "any GPU has"). Raises ValueError."""
    text = str(text)
    if len(text) > MOST_CHARS:
        raise ValueError(f"{shown(text)}: longer than any size (at most {MOST_CHARS} characters)")
    # ASCII letters only: under re.I alone the Kelvin sign (U+212A) matches K and the Turkish I's (U+0130, U+0131)
    # match i, so SCALE had no entry for what matched
    m = re.fullmatch(rf"\s*({NUMBER})\s*(?:([KMGTP])(?:i?B)?|(B))?\s*", text, re.I | re.ASCII)
    if not m:
        raise ValueError(f"{text}: {foreign(text) or 'expected'} a positive size like 24GB, 80GiB or 16000MiB"
                         f" ({UNIT_RULE})")
    if re.search(r"[0-9A-Za-z]b\s*$", text):  # 200Gb/s is bits everywhere in gputopo; a size is bytes
        raise ValueError(f"{text}: a lowercase b is bits; sizes are bytes: {m.group(1)}{(m.group(2) or '').upper()}B")
    value = float(m.group(1))
    unit = (m.group(2) or m.group(3) or "").upper()
    if value <= 0:
        raise ValueError(f"{text}: expected a positive size like 24GB, 80GiB or 16000MiB")
    if not unit:
        raise ValueError(f"{text}: give a unit, e.g. {m.group(1)}GB ({UNIT_RULE})")
    n = value * SCALE[unit]   # a float: 1e400 is inf, compared before int() would fail on it
    if n > most:
        raise ValueError(f"{text}: more than {has} (at most {exact(most)})")
    if n < least:
        raise ValueError(f"{text}: less than {has} (at least {exact(least)})" if least > 1 else
                         f"{text}: less than one byte")
    return int(n)


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
