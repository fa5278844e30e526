"""Who a step that never started training waits for: the rule over every task's start-up phase.  Pure.

Why: MultiWorkerMirroredStrategy's start barrier has no timeout, a TF1 non-chief waits for the
chief's session forever, a PSS coordinator waits for a worker that never serves: every process is
alive, no step is made, until the time limit, on every node.  The hang rule (plan.train_progress)
judges only tasks that made progress, so this case needs its own.

The rule: a task that reached a phase in which it waits for its peers (plan.start_phase.WAITS) is a
waiter; the meeting point is the furthest phase any task reached; the tasks not yet there (and not
serving: a ps or PSS worker in `Server.join()` waits for no one) are the laggards, wherever they are,
before their own `import tensorflow` too.  Once the first waiter has waited `name_after` seconds
the laggards are named (one line: their phase, node and the line of the user's code they are at);
past `fault_after` it is a fault, handled as a hang (plan.restart_policy).  Any training step ends
the rule for the run: from then on the hang rule judges.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence, Tuple

from tf_for_slurm.plan.start_phase import ORDER, WAITS, WORDS, Phase

MAX_NAMED = 4  # tasks a line names before "and N more"
MAX_LINE = 400


@dataclass(frozen=True)
class TaskStart:
    """One running task as the rule sees it."""

    rank: int
    name: str  # e.g. "worker 1 (rank 2, node2)"
    phase: Optional[Phase]  # its shim's last word in this run; None: nothing yet (starting)
    started: float  # wall time its command (re)started (the hub drops a task's phase when it restarts)


@dataclass(frozen=True)
class StartWait:
    """Tasks waiting for their peers, no step made: since when, who waits, who is waited for."""

    since: float  # when the first waiter began to wait (wall)
    waited: float  # seconds, now - since
    point: str  # the meeting point: the furthest phase reached
    detail: str  # what the waiters wait in (the first waiter's detail)
    waiters: Tuple[int, ...]
    laggards: Tuple[int, ...]  # empty: every task is at the meeting point (look at the network)

    def line(self, tasks: Sequence[TaskStart]) -> str:
        """One line: who waits since when, in what, and for whom (their phase and user-code line)."""
        by_rank = {t.rank: t for t in tasks}
        waiters = _names([by_rank[r].name for r in self.waiters if r in by_rank])
        what = f" in {self.detail}" if self.detail else ""
        head = f"no training step: {waiters} {'has' if len(self.waiters) == 1 else 'have'} waited " \
               f"{_duration(self.waited)} for {'its' if len(self.waiters) == 1 else 'their'} peers{what}"
        if not self.laggards:
            return (f"{head}; every task reached that point (look at the network: the check before the "
                    "command starts, the tasks' logs)")[:MAX_LINE]
        parts = [_laggard(by_rank[r]) for r in self.laggards[:MAX_NAMED] if r in by_rank]
        more = len(self.laggards) - MAX_NAMED
        tail = "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
        return f"{head}; waiting for {tail}"[:MAX_LINE]


def _names(names: List[str]) -> str:
    shown = ", ".join(names[:MAX_NAMED])
    return shown + (f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else "")


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def _laggard(task: TaskStart) -> str:
    phase = task.phase
    words = WORDS["starting"] if phase is None else WORDS[phase.phase]
    where = f", at {phase.where}" if phase is not None and phase.where else ""
    return f"{task.name}: {words}{where}"


def phase_of(task: TaskStart) -> str:
    """The task's phase name in this run (`starting` before its shim said anything)."""
    return "starting" if task.phase is None else task.phase.phase


def start_wait(tasks: Iterable[TaskStart], now: float, floor: float = 0.0) -> Optional[StartWait]:
    """Whether tasks wait for their peers (None: nobody waits).  `floor`: waits are counted from no
    earlier than this wall time (the last start-up fault, whose restart began a new wait)."""
    tasks = list(tasks)
    phases = {t.rank: phase_of(t) for t in tasks}
    waiters = [t for t in tasks if phases[t.rank] in WAITS and t.phase is not None]
    if not waiters:
        return None
    since = max(min(t.phase.since for t in waiters if t.phase is not None), floor)
    point = max((phases[t.rank] for t in tasks if phases[t.rank] != "serving"), key=ORDER.__getitem__)
    first = min(waiters, key=lambda t: t.phase.since if t.phase is not None else now)
    laggards = tuple(t.rank for t in tasks if phases[t.rank] != "serving" and ORDER[phases[t.rank]] < ORDER[point])
    return StartWait(since=since, waited=max(0.0, now - since), point=point,
                     detail=first.phase.detail if first.phase is not None else "",
                     waiters=tuple(t.rank for t in waiters if t.rank not in laggards), laggards=laggards)


def verdict(wait: Optional[StartWait], name_after: float, fault_after: float) -> str:
    """'' (nothing to do), 'name' (past name_after: say who is waited for) or 'fault' (past fault_after)."""
    if wait is None:
        return ""
    if fault_after > 0 and wait.waited >= fault_after:
        return "fault"
    if name_after > 0 and wait.waited >= name_after:
        return "name"
    return ""

