"""JSON from a user's file, bounded before and while it is read: how deep it nests (counted without parsing, so
Python's reader never recurses past its stack), whole numbers of at most MOST_DIGITS digits (int() of 4,301
refuses, and a float() of 400 overflows), finite numbers only (1e400 is infinity, NaN no number a config means).
Each refusal is one line naming the file and the key. config.json (gputopo.models) and DeepSpeed configs
(gputopo.doctor) are read through it."""
from __future__ import annotations

import json
import math

from .errors import BadInput

MOST_DIGITS = 20   # a 64-bit integer's 20 digits


class Long(int):
    """A whole number longer than MOST_DIGITS, kept as its digit count (never converted), so the refusal names its
    key rather than Python's sys.set_int_max_str_digits() advice."""
    digits: int

    def __new__(cls, digits: int):
        self = super().__new__(cls, 0)
        self.digits = digits
        return self


def _whole(text: str) -> int:
    """json's reader of a whole number, within MOST_DIGITS."""
    digits = len(text.lstrip("-"))
    return Long(digits) if digits > MOST_DIGITS else int(text)


def _constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON has")


def walk(node, at: str = ""):
    """(dotted key, value) of every entry of a JSON value, at any depth, parents first: text_config.n_layer,
    layers[2].n_head."""
    stack = [(at, node)] if isinstance(node, (dict, list)) else []
    while stack:
        at, node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in items:
            here = f"{at}[{key}]" if isinstance(node, list) else f"{at}.{key}" if at else str(key)
            yield here, value
            if isinstance(value, (dict, list)):
                stack.append((here, value))


def depth(text: str) -> int:
    """How deep a JSON text's arrays and objects nest (counted outside strings), without parsing it."""
    deepest = level = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (ch == "\\", ch != '"')
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            level += 1
            deepest = max(deepest, level)
        elif ch in "]}":
            level -= 1
    return deepest


def loads(text: str, where: str, most_depth: int, what: str = "no config holds", bad: str = "unreadable") -> object:
    """`text` read as JSON within the bounds above, or one BadInput line naming `where` and the key (`bad`: what
    a text that is not JSON is called)."""
    try:
        if depth(text) > most_depth:
            raise ValueError(f"JSON nested more than {most_depth} deep")
        raw = json.loads(text, parse_int=_whole, parse_constant=_constant)
    except ValueError as e:   # json's errors are ValueErrors
        raise BadInput(f"{where} {bad} ({e})") from None
    for key, value in walk(raw):
        if isinstance(value, Long):
            raise BadInput(f"{where} {key} is a {value.digits:,}-digit number: {what} one longer than"
                           f" {MOST_DIGITS} digits (a 64-bit integer)")
        if isinstance(value, float) and not math.isfinite(value):
            raise BadInput(f"{where} {key} is {value}: beyond what a float holds, no number a config means")
    return raw
