"""The one integer grammar and the one seconds rule (plan/numbers.py), as tables."""

import math

import pytest

from tf_for_slurm.errors import UsageError
from tf_for_slurm.plan.numbers import parse_int, parse_seconds


@pytest.mark.parametrize("value,kwargs,number", [
    ("42", {}, 42),
    (" 42 ", {}, 42),
    ("-3", {}, -3),  # no minimum: a sign is taken (the settings that allow it say why later)
    ("0", {"minimum": 0}, 0),
    ("255", {"minimum": 0, "maximum": 255}, 255),
    ("4+", {"minimum": 1, "plus_ok": True}, 4),  # sinfo's "at least 4"
    (" 12 + ", {"minimum": 1, "plus_ok": True}, 12),
    ("999999999999999999", {}, 10 ** 18 - 1),  # 18 digits
])
def test_parse_int_accepts(value, kwargs, number):
    assert parse_int(value, "X", **kwargs) == number


@pytest.mark.parametrize("value,kwargs,message", [
    ("x", {}, "X='x': expected an integer"),
    ("", {}, "X='': expected an integer"),
    ("+5", {}, "X='+5': expected an integer"),  # int() took these
    ("5_0", {}, "X='5_0': expected an integer"),
    ("\u0665", {}, "X='\u0665': expected an integer"),  # ARABIC-INDIC FIVE
    ("\u00b2", {"minimum": 0, "noun": "a whole number"}, "expected a whole number >= 0"),  # isdigit() took it
    ("1.5", {"minimum": 0}, "X='1.5': expected an integer >= 0"),
    ("1e3", {"minimum": 1}, "X='1e3': expected an integer >= 1"),
    ("-1", {"minimum": 0}, "X='-1': expected an integer >= 0"),
    ("-0", {"minimum": 0}, "X='-0': expected an integer >= 0"),  # a sign only where a negative could pass
    ("0", {"minimum": 1, "maximum": 9}, "X='0': expected an integer in 1-9"),
    ("10", {"minimum": 1, "maximum": 9}, "X='10': expected an integer in 1-9"),
    ("7", {"maximum": 5}, "X='7': expected an integer <= 5"),
    ("9999999999999999999", {"minimum": 0}, "expected an integer >= 0"),  # 19 digits
    ("4+", {"minimum": 1}, "X='4+': expected an integer >= 1"),  # '+' only with plus_ok
    ("0+", {"minimum": 1, "plus_ok": True}, "X='0+': expected an integer >= 1 (a trailing '+' is allowed)"),
    ("4++", {"plus_ok": True}, "expected an integer (a trailing '+' is allowed)"),
    (5, {}, "X=5: expected an integer"),  # text only, as in os.environ and argv
    (None, {"minimum": 0}, "X=None: expected an integer >= 0"),
])
def test_parse_int_refuses_in_one_line(value, kwargs, message):
    with pytest.raises(UsageError) as info:
        parse_int(value, "X", **kwargs)
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("value,kwargs,number", [
    ("2", {}, 2.0),
    (" 0.25 ", {}, 0.25),
    ("0", {}, 0.0),
    ("1e3", {}, 1000.0),
    (3, {"lo_open": True}, 3.0),  # an option's value, already a number
    ("inf", {}, math.inf),
    ("3599.9", {"hi": 3600.0, "lo_open": True}, 3599.9),
])
def test_parse_seconds_accepts(value, kwargs, number):
    assert parse_seconds(value, "S", **kwargs) == number


@pytest.mark.parametrize("value,kwargs,message", [
    ("x", {}, "S='x': expected seconds, a number >= 0"),
    ("-1", {}, "S='-1': expected seconds, a number >= 0"),
    ("nan", {}, "expected seconds, a number >= 0"),
    ("0", {"lo_open": True}, "S='0': expected seconds, a number > 0"),
    ("3600", {"hi": 3600.0, "lo_open": True}, "S='3600': expected seconds, a number > 0 and < 3600"),
    (True, {}, "S=True: expected seconds, a number >= 0"),
    (None, {}, "S=None: expected seconds, a number >= 0"),
    ("x", {"unit": "a factor", "lo_open": True}, "S='x': expected a factor, a number > 0"),
])
def test_parse_seconds_refuses_in_one_line(value, kwargs, message):
    with pytest.raises(UsageError) as info:
        parse_seconds(value, "S", **kwargs)
    assert message in str(info.value) and "\n" not in str(info.value)

