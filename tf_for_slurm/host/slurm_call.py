"""Run one Slurm client command (scontrol, squeue, sbatch, ...) through a controller outage:
`plan.slurm_outage` decides (try again, give up, refused); this module runs, sleeps and says.

Why here: every command a job relies on needs the same patience, and the same one line per outage,
not one per try.
"""

from __future__ import annotations

import logging
import subprocess
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from tf_for_slurm.plan.slurm_outage import NO_ANSWER, GiveUp, Outage, Refused, away_reason

log = logging.getLogger(__name__)

Say = Callable[[str], None]


@dataclass(frozen=True)
class Answer:
    """What the command came to.  `away`: the controller did not answer for the whole patience
    (`line` says so); `returncode` 127 with `stderr` when the command could not run at all."""

    returncode: int
    stdout: str
    stderr: str
    away: bool = False
    line: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def call(argv: Sequence[str], *, what: str, patience: float, say: Optional[Say] = None, timeout: float = 30.0,
         stdin: Optional[str] = None, not_sent_only: bool = False,
         run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
         sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> Answer:
    """`argv` until Slurm answers (yes or no) or `patience` s of outage passed.  `not_sent_only`: retry
    only failures that never reached the controller (a command that must not run twice: sbatch)."""
    tell = say or log.warning
    outage = Outage(what, patience)
    while True:
        try:
            res = run(list(argv), input=stdin, capture_output=True, text=True, timeout=timeout)
            out, err, rc = res.stdout or "", res.stderr or "", res.returncode
            reason = away_reason(err + "\n" + out, not_sent_only) if rc != 0 else None
        except subprocess.TimeoutExpired:
            out, err, rc = "", f"{argv[0]}: {NO_ANSWER} ({timeout:g} s)", 124
            reason = None if not_sent_only else err
        except OSError as exc:
            return Answer(127, "", f"{argv[0]}: {exc.strerror or exc}")
        if rc == 0:
            done = outage.answered(clock())
            if done:
                tell(done)
            return Answer(0, out, err)
        step = outage.failed(reason, clock())
        if isinstance(step, Refused):
            if outage.first is not None:
                tell(outage.answered(clock()) or "")
            return Answer(rc, out, err)
        if isinstance(step, GiveUp):
            tell(step.line)
            return Answer(rc, out, err, away=True, line=step.line)
        if step.line:
            tell(step.line)
        sleep(step.delay)


__all__ = ["Answer", "call"]
