"""What the hub's state machine (plan.step_watch) tells the hub to do, and the step's first failure
in words: plain values, so the machine's tests compare them as data."""

from __future__ import annotations

from typing import NamedTuple, Tuple, Union


class End(NamedTuple):
    """Tell these ranks to end their command and exit with `status`."""

    ranks: Tuple[int, ...]
    status: int


class Restart(NamedTuple):
    """Start this rank's command again, in place, after `delay` seconds (its `attempt`-th restart)."""

    rank: int
    attempt: int
    delay: float
    reason: str


class Regroup(NamedTuple):
    """End these ranks' commands (they are not failing) and start them again `delay` seconds later."""

    ranks: Tuple[int, ...]
    delay: float
    reason: str


Action = Union[End, Restart, Regroup]


class Failure(NamedTuple):
    """The step's first failure, in plain words: `reason` says what happened to the task, without
    naming it ('failed (exit 1)', 'was lost (...)'); `note`, when there is one, why it was not restarted."""

    rank: int
    status: int
    reason: str
    note: str = ""
