"""Numbers from text: the one integer grammar and the one seconds rule every reader shares.

Why one home: the settings, batch-step's counts, the templates' arithmetic and the memory parser
each parsed integers their own way (`int()` took '+5', '5_0' and '٥'; `str.isdigit()` took '²'
and then crashed in `int()`), and each said "expected ..." in its own words.  Every reader now
calls `parse_int` or `parse_seconds`; they differ only in bounds and in the noun they print.
"""

from __future__ import annotations

import re
from typing import Optional

from tf_for_slurm.errors import UsageError, bad_value

__all__ = ["int_expected", "parse_int", "parse_seconds", "seconds_expected"]

# ASCII digits only, at most 18 (beyond any count, port or MB we take); a minus only where a
# negative number could pass the minimum
_UNSIGNED = re.compile(r"[0-9]{1,18}")
_SIGNED = re.compile(r"-?[0-9]{1,18}")
_PLUS_NOTE = " (a trailing '+' is allowed)"


def int_expected(minimum: Optional[int] = None, maximum: Optional[int] = None, noun: str = "an integer") -> str:
    """What a message says is expected: 'an integer', 'an integer >= 1', 'an integer in 0-255'."""
    if minimum is not None and maximum is not None:
        return f"{noun} in {minimum}-{maximum}"
    if minimum is not None:
        return f"{noun} >= {minimum}"
    if maximum is not None:
        return f"{noun} <= {maximum}"
    return noun


def parse_int(value: object, name: str, minimum: Optional[int] = None, maximum: Optional[int] = None, *,
              noun: str = "an integer", plus_ok: bool = False) -> int:
    """A decimal integer given as text (surrounding blanks ignored) in [minimum, maximum], else one
    UsageError naming `name` and the value.

    plus_ok: accept a trailing '+' (sinfo's "at least" on mixed partitions) and read the number before it.
    """
    text = value.strip() if isinstance(value, str) else None
    if text is not None and plus_ok and text.endswith("+"):
        text = text[:-1].rstrip()
    expected = int_expected(minimum, maximum, noun) + (_PLUS_NOTE if plus_ok else "")
    grammar = _SIGNED if minimum is None or minimum < 0 else _UNSIGNED
    if text is None or not grammar.fullmatch(text):
        raise UsageError(bad_value(name, value, expected))
    number = int(text)
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        raise UsageError(bad_value(name, value, expected))
    return number


def seconds_expected(lo: float = 0.0, hi: Optional[float] = None, lo_open: bool = False, unit: str = "seconds") -> str:
    """'seconds, a number >= 0', '... > 0', '... > 0 and < 3600' (the settings' words since they began);
    `unit`: what the number is (a factor: 'a factor, a number > 0')."""
    bounds = f"{'>' if lo_open else '>='} {lo:g}" + (f" and < {hi:g}" if hi is not None else "")
    return f"{unit}, a number {bounds}"


def parse_seconds(value: object, name: str, lo: float = 0.0, hi: Optional[float] = None,
                  lo_open: bool = False, unit: str = "seconds") -> float:
    """A number of seconds (text as `float()` reads it, or a number; not a bool) in [lo, hi), or
    (lo, hi) with lo_open, else one UsageError naming `name` and the value."""
    try:
        number = float("nan") if isinstance(value, bool) else float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = float("nan")  # fails every comparison below
    if not ((number > lo if lo_open else number >= lo) and (hi is None or number < hi)):
        raise UsageError(bad_value(name, value, seconds_expected(lo, hi, lo_open, unit)))
    return number
