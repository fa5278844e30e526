"""batch-step's signal policy as a state machine: signals and times in, "pass it on now / in T s /
ignore it" and the lines to say out.

Why a state machine: which signal reaches the step, and when, depends on what came before (a
duplicate, a SIGTERM after a warning, a warning before srun started, a warning Slurm never sent),
and every rule must be testable with plain values.  Pure (no processes, no clock, no environment):
`supervise.batch_step` feeds it what it sees, with the time, and carries out the actions.

Rules:
- the first signal counts; a later one is only said ("again"), except a SIGTERM after a warning;
- SIGTERM (scancel, preemption): passed on at once;
- SIGUSR2 (a stop asked for now): passed on at once, but not within `grace` s of the step's start
  (its tasks cannot take a signal yet);
- SIGUSR1 (Slurm's warning, up to 60 s early): the job's start and end times are asked for, then it
  is passed on `margin` s before the end (`plan.requeue.stop_delay`: at most a quarter of the limit,
  never in the start grace, never later than LAST_CHANCE s before the end);
- a signal due before srun started waits for the start, then `grace` s;
- no warning by `margin` s before the end (the backstop): stop as if warned, unless the limit was
  raised meanwhile (then wait for the new end's margin);
- a signal due after srun ended is dropped; one passed on is `told_time`;
- a warning passed on whose step is still running DECIDE_BEFORE_END s before the end (a checkpoint
  too slow, a task that never stops): decide now, from the last checkpoint; waiting longer would let
  Slurm end the job TIMEOUT, which is never requeued.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import List, Optional, Union

from tf_for_slurm.plan.requeue import (
    DECIDE_BEFORE_END,
    LAST_CHANCE,
    NOW_SIGNAL,
    START_GRACE,
    WARNING_SIGNALS,
    effective_margin,
    stop_delay,
)

#: the signals batch-step passes on to the step (and the only ones a line of its warning file may name)
PASSED_ON = ("USR1", NOW_SIGNAL, "TERM")


@dataclass(frozen=True)
class Say:
    """One line in the job's log."""

    text: str


@dataclass(frozen=True)
class Tell:
    """Pass `signal` on in `delay` s (0: now): then feed `due(signal, ...)`."""

    signal: str
    delay: float


@dataclass(frozen=True)
class Send:
    """Send `signal` to srun now."""

    signal: str


@dataclass(frozen=True)
class AskTimes:
    """Ask Slurm for the job's start and end, then feed `warning_times(this, start, end, now)`."""

    signal: str
    at: float


@dataclass(frozen=True)
class Backstop:
    """In `delay` s feed `backstop_fired(end, ...)`: the warning should have come by then."""

    delay: float
    end: float


@dataclass(frozen=True)
class CheckLimit:
    """Ask Slurm for the job's end again, then feed `limit_checked(end, that end, now)`."""

    end: float


@dataclass(frozen=True)
class Rearm:
    """The limit was raised: ask for the job's times again and feed `backstop_times`."""


@dataclass(frozen=True)
class StopAsWarned:
    """Feed `signal("USR1", now)`: no warning came by the margin."""


@dataclass(frozen=True)
class Deadline:
    """In `delay` s feed `deadline_came(now, ended)`: the step, told to stop, should have ended by then."""

    delay: float


@dataclass(frozen=True)
class DecideNow:
    """Stop waiting for the step: decide (requeue or not) from the checkpoint it left so far."""


Action = Union[Say, Tell, Send, AskTimes, Backstop, CheckLimit, Rearm, StopAsWarned, Deadline, DecideNow]


def clock_text(when: float) -> str:
    """HH:MM:SS of `when` (epoch seconds) in local time: the job's log reads its delays from these."""
    return time.strftime("%H:%M:%S", time.localtime(when))


class StopRelay:
    """What batch-step knows about the stop (the signal, when it came, when the step was told)."""

    def __init__(self, margin: float, grace: float = START_GRACE):
        self.margin, self.grace = margin, grace
        self.signal = ""  # the signal being handled ('' before any)
        self.signal_time: Optional[float] = None  # when it was sent (epoch seconds)
        self.told_time: Optional[float] = None  # when it was passed on to the step
        self.started_at: Optional[float] = None  # when srun started
        self.pid: Optional[int] = None  # srun's
        self.end_time: Optional[float] = None  # the job's EndTime, once a warning or the backstop asked for it
        self.early: Optional[str] = None  # a signal due before srun started

    def signal_came(self, name: str, now: float, sent_at: Optional[float] = None) -> List[Action]:
        """A signal reached us (`sent_at`: when the batch shell's trap wrote it down)."""
        if self.signal and (name != "TERM" or self.signal == "TERM"):  # a TERM after a warning still counts
            return [Say(f"SIG{name} again: already handling SIG{self.signal}")]
        self.signal, self.signal_time = name, now if sent_at is None else sent_at
        said: List[Action] = []
        if sent_at is not None:
            said.append(Say(f"SIG{name} reached the batch shell at {clock_text(sent_at)}"))
        if name == "TERM":
            return said + [Say("SIGTERM (scancel or preemption): passing it on to the step now; no requeue will "
                               "follow"), Tell(name, 0.0)]
        if name == NOW_SIGNAL:
            delay = stop_delay(self.signal_time, None, 0.0, step_started=self.started_at, grace=self.grace)
            return said + [Say(f"SIG{name} (a stop asked for now, e.g. scancel --batch --signal={name}): passing it "
                               "on to the step" + (f" in {delay:.0f} s, once its tasks have started"
                                                   if delay > 0 else "")), Tell(name, delay)]
        return said + [AskTimes(name, self.signal_time)]  # a warning: its moment depends on the job's end

    def warning_times(self, asked: AskTimes, start: Optional[float], end: Optional[float],
                      now: Optional[float] = None) -> List[Action]:
        """The job's (StartTime, EndTime), each None when Slurm does not say, for the warning `asked`, as
        they came at `now` (default: when the warning came): the delay counts from then, not from the
        warning (reading the warning file and asking Slurm took time)."""
        self.end_time = end
        at, margin = asked.at, effective_margin(self.margin, start, end)
        delay = stop_delay(at if now is None else now, end, self.margin, start_time=start,
                           step_started=self.started_at, grace=self.grace)
        left = f"{end - at:.0f} s before the time limit" if end else "time limit unknown"
        short = start is not None and end is not None and margin < self.margin
        shortened = f", a quarter of the job's {end - start:.0f} s limit" if short and start and end else ""
        return [Say(f"SIG{asked.signal} ({left}): telling the step's tasks to stop at their next step in "
                    f"{delay:.0f} s ({margin:g} s before the limit: WARN_MARGIN={self.margin:g}{shortened})"),
                Tell(asked.signal, delay)]

    def started(self, now: float, pid: int) -> List[Action]:
        """srun started: a signal due before now is passed on once its tasks can take it."""
        self.started_at, self.pid = now, pid
        if self.early is None:
            return []
        # once its tasks can take it (the start grace), and never after the last chance before the end
        delay = stop_delay(now, None, 0.0, step_started=now, grace=self.grace)
        if self.end_time is not None:
            delay = max(0.0, min(delay, self.end_time - LAST_CHANCE - now))
        return [Say(f"the step just started: telling its tasks to stop in {delay:.0f} s, once they can take it"),
                Tell(self.early, delay)]

    def due(self, name: str, now: float, ended: bool) -> List[Action]:
        """A `Tell`'s moment came; `ended`: srun has ended (nothing to tell)."""
        if self.started_at is None:
            self.early = name
            return []
        if ended:
            return []
        self.told_time = now
        told: List[Action] = [Say(f"passed SIG{name} on to the step (srun pid {self.pid})"), Send(name)]
        if name in WARNING_SIGNALS and self.end_time is not None:
            told.append(Deadline(max(0.0, self.end_time - DECIDE_BEFORE_END - now)))
        return told

    def deadline_came(self, now: float, ended: bool) -> List[Action]:
        """The `Deadline` of a warning passed on came; `ended`: srun has ended (nothing to do)."""
        if ended or self.signal not in WARNING_SIGNALS or self.told_time is None or self.end_time is None:
            return []
        return [Say(f"the step has not ended {now - self.told_time:.0f} s after its tasks were told to stop, "
                    f"{self.end_time - now:.0f} s before the time limit: deciding now, from the last checkpoint "
                    "(at the limit Slurm ends the job TIMEOUT, never requeued)"), DecideNow()]

    def backstop_times(self, start: Optional[float], end: Optional[float], now: float) -> List[Action]:
        """The job's times as srun runs: when to stop the step if Slurm's warning never comes (it is lost
        when sent before the batch shell runs; a step nobody stops times out, and is never requeued)."""
        if end is None or self.started_at is None:
            return []
        self.end_time = end
        return [Backstop(stop_delay(now, end, self.margin, start_time=start, step_started=self.started_at,
                                    grace=self.grace), end)]

    def backstop_fired(self, end: float, ended: bool) -> List[Action]:
        """The backstop's moment for EndTime `end` came; `ended`: srun has ended."""
        return [] if self.signal or ended else [CheckLimit(end)]

    def limit_checked(self, end: float, now_end: Optional[float], now: float) -> List[Action]:
        """Slurm's EndTime now (`now_end`, None when it does not say) against the one the backstop waited for."""
        if now_end is not None and now_end > end + 1:  # the limit was raised (scontrol update TimeLimit)
            return [Rearm()]
        return [Say(f"no time-limit warning came by {max(0.0, end - now):.0f} s before the limit (Slurm's is lost "
                    "when sent before the batch shell runs): stopping the step as the warning would"),
                StopAsWarned()]


__all__ = ["PASSED_ON", "Action", "AskTimes", "Backstop", "CheckLimit", "Deadline", "DecideNow", "Rearm", "Say",
           "Send", "StopAsWarned", "StopRelay", "Tell", "clock_text"]
