"""Is a Slurm command's failure the controller being away (try again) or a refusal (stop now)? And
when to try again, when to give up, and the one line each outage gets.

Why one pure rule: slurmctld restarts (upgrades, failover, overload) are routine, and every client of
Slurm here (batch-step's requeue, times and srun, submit's sbatch, `tf-slurm status`) used to take
"Unable to contact slurm controller" for a refusal: a healthy job ended FAILED with a wrong hint.
Values in, values out; `host.slurm_call` runs the commands and sleeps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence, Tuple, Union

#: what Slurm's clients print when the controller did not answer (lower case; measured on 22.05 and
#: read from its sources): the command may work a moment later
AWAY_MARKS: Tuple[str, ...] = (
    "unable to contact slurm controller",
    "socket timed out on send/recv",
    "unexpected message received",
    "zero bytes were transmitted or received",
    "communication connection failure",
    "connection refused",
    "connection timed out",
    "backup controller in standby mode",
    "slurmctld not responding",
    "step creation temporarily disabled",
)
#: of those, the ones that say the request never reached the controller: safe to send again even when
#: sending it twice would do it twice (sbatch)
NOT_SENT_MARKS: Tuple[str, ...] = ("unable to contact slurm controller", "connection refused")
#: seconds between tries: quick at first (a restart takes seconds), then every 15 s
BACKOFF: Tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 15.0)
#: what a command that did not answer within its own timeout counts as
NO_ANSWER = "no answer within the command's timeout"


def away_reason(text: str, not_sent_only: bool = False) -> Optional[str]:
    """The line of `text` (a command's stderr) that says the controller is away, else None.
    `not_sent_only`: only a failure that says the request never left (safe to send again)."""
    marks = NOT_SENT_MARKS if not_sent_only else AWAY_MARKS
    for line in text.splitlines():
        low = line.lower()
        if any(mark in low for mark in marks):
            return line.strip()[:200]
    return None


@dataclass(frozen=True)
class TryAgain:
    """Wait `delay` s, then run the command again; `line`: say it (the outage's first failure only)."""

    delay: float
    line: Optional[str]


@dataclass(frozen=True)
class GiveUp:
    """The controller stayed away for the whole patience: the command failed; `line` says so."""

    line: str


@dataclass(frozen=True)
class Refused:
    """Slurm answered no: not an outage, no retry."""


Step = Union[TryAgain, GiveUp, Refused]


@dataclass
class Outage:
    """One command's tries against a controller that may be away.  `what`: the command in words
    ('scontrol requeue 12'); `patience`: seconds from the first failure before giving up."""

    what: str
    patience: float
    first: Optional[float] = None  # when the first failure came
    tries: int = 0  # failures so far
    last: str = field(default="")

    def failed(self, reason: Optional[str], now: float) -> Step:
        """The command failed; `reason`: `away_reason` of its output (None: Slurm refused)."""
        if reason is None:
            return Refused()
        self.tries += 1
        self.last = reason
        if self.first is None:
            self.first = now
        waited = now - self.first
        if waited >= self.patience:
            return GiveUp(f"{self.what}: Slurm's controller did not answer for {waited:.0f} s ({self.tries} "
                          f"tries; last: {reason})")
        delay = min(BACKOFF[min(self.tries - 1, len(BACKOFF) - 1)], self.patience - waited)
        line = None
        if self.tries == 1:
            line = (f"{self.what}: Slurm's controller does not answer ({reason}): trying again for up to "
                    f"{self.patience:.0f} s")
        return TryAgain(delay, line)

    def answered(self, now: float) -> Optional[str]:
        """The command got its answer: the line that ends an outage, None when there was none."""
        if self.first is None:
            return None
        return f"{self.what}: Slurm's controller answered again after {now - self.first:.0f} s ({self.tries} " \
               f"failed tries)"


#: srun's words when it could not create its step (then no task ran: starting srun again is safe)
STEP_NOT_CREATED = "unable to create step"
#: srun's own wait for busy nodes, and its end
STEP_DELAYED, STEP_CREATED = "step creation temporarily disabled", "step created for job"


def step_not_created(errors: Sequence[str]) -> Optional[str]:
    """srun's error line when it could not create its step because the controller was away, else None."""
    for line in errors:
        if STEP_NOT_CREATED in line.lower() and away_reason(line) is not None:
            return line.strip()[:200]
    return None


__all__ = ["AWAY_MARKS", "BACKOFF", "NOT_SENT_MARKS", "NO_ANSWER", "STEP_CREATED", "STEP_DELAYED", "STEP_NOT_CREATED",
           "GiveUp", "Outage", "Refused", "Step", "TryAgain", "away_reason", "step_not_created"]
