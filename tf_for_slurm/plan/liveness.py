"""When a peer counts as lost: one rule for every task that watches another one's port.

Why one home: a TF1 ps watching its workers (runtime.ps_wait), a PSS server watching its
coordinator (runtime.pss_exit) and a TF1 worker watching its ps (runtime.launch's watchdog) each
decided "gone" with their own copy of the same arithmetic.  Pure: the callers probe and read the
clock; this module only turns what they saw into a verdict.

A peer never seen up is judged by `never_after` (seconds since the watch started: it may still be
importing TensorFlow).  A peer once seen up is lost when it has not answered for `lost_after`
seconds in a row, or at once after `refused_limit` refusals in a row (its host said nothing
listens) when a limit is set.  A single answer clears both counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

__all__ = ["DOWN", "LOST", "NEVER", "NO_ANSWER", "REFUSED", "UNSEEN", "UP", "Peer", "Rule"]

# what a probe saw (host.network.port_state's words; a bool probe's False is NO_ANSWER)
UP, REFUSED, NO_ANSWER = "up", "refused", "no answer"
# verdicts besides UP
DOWN = "down"  # seen up, not answering now, not lost yet
UNSEEN = "unseen"  # never seen up, still within never_after
LOST = "lost"  # seen up, then silent for lost_after (or refused refused_limit times in a row)
NEVER = "never"  # never seen up within never_after


@dataclass(frozen=True)
class Rule:
    """The thresholds of one watcher, in seconds (refused_limit: refusals in a row, None: off)."""

    lost_after: float
    never_after: float = math.inf
    refused_limit: Optional[int] = None

    def verdict(self, *, now: float, started: float, seen: bool, down_since: Optional[float],
                refused: int = 0) -> str:
        """UP, DOWN, LOST, UNSEEN or NEVER for a peer in this state at `now`."""
        if not seen:
            return NEVER if now - started >= self.never_after else UNSEEN
        if down_since is None:
            return UP
        if self.refused_limit is not None and refused >= self.refused_limit:
            return LOST
        return LOST if now - down_since >= self.lost_after else DOWN


class Peer:
    """One watched peer: what the probes saw so far, and the rule's verdict after each probe."""

    def __init__(self, rule: Rule, started: float, seen: bool = False):
        self.rule = rule
        self.started = started
        self.seen = seen
        self.down_since: Optional[float] = None  # set only once seen: a peer not yet up is not "down"
        self.refused = 0  # refusals in a row

    def observe(self, state: str, now: float) -> str:
        """Record a probe's result (UP, REFUSED or NO_ANSWER) at `now`; return the verdict."""
        if state == UP:
            self.seen, self.down_since, self.refused = True, None, 0
            return UP
        self.refused = self.refused + 1 if state == REFUSED else 0
        if self.seen and self.down_since is None:
            self.down_since = now
        return self.verdict(now)

    def verdict(self, now: float) -> str:
        """The rule's verdict for what was seen so far, at `now`."""
        return self.rule.verdict(now=now, started=self.started, seen=self.seen, down_since=self.down_since,
                                 refused=self.refused)
