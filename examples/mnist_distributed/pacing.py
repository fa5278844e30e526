"""`--min_step_seconds S`: training makes at most one step per S seconds, counted from the start.

For tests and demos: it bounds how far one run (one Slurm allocation) can get, whatever the
machine's speed, so a job with a short time limit surely needs a requeue before its target.
Default 0: no pacing, nothing changes.

The pacer is called at the start of every step: step k (0, 1, 2, ...) of this process starts no
earlier than k * S seconds after the start (when this module was first imported: the scripts
import it first thing), so t seconds after the start at most floor(t / S) + 1 steps have started.
A machine of any speed obeys that bound (a slow one only makes its steps later); a trainer whose
start-up took long may catch up on the steps it was owed, at full speed, so a loaded machine
loses less of a short allocation to its start-up.  The process starts inside the allocation, so
in an allocation of t seconds: at most floor(t / S) + 1 steps per pacer.  What that means for
the global step count:
  - TF1 async workers (DeepMNIST_DistributedTRAIN): each worker paces its own steps, so at most
    n_workers * (floor(t / S) + 1) global steps (sync: a round of all workers is one global step,
    at most floor(t / S) + 1);
  - MultiWorkerMirroredStrategy (tf2_mwms): the steps are synchronous, at most floor(t / S) + 1;
  - ParameterServerStrategy (tf2_parameter_server): the coordinator paces its scheduling loop, so
    at most floor(t / S) + 1 steps are even scheduled, whatever the workers do.
No TensorFlow here, and no import at all that could come before the scripts' own set-up.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Optional

#: when the count starts: the first import (the example scripts import this module first thing)
START = time.monotonic()

HELP = ("at most one training step per S seconds, counted from the process's start: step k starts no "
        "earlier than k*S s after it (a slow start-up may be caught up on); default 0: no pacing. For "
        "tests and demos: bounds how far one allocation can get, whatever the machine's speed")


def check_min_step_seconds(value: object, name: str = "--min_step_seconds") -> float:
    """`value` as seconds >= 0 (finite); one-line UsageError otherwise."""
    from tf_for_slurm.errors import UsageError, bad_value  # here: the scripts set sys.path up first

    if isinstance(value, bool):
        raise UsageError(bad_value(name, value, "seconds, a number >= 0"))
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        seconds = -1.0
    if not (seconds >= 0 and math.isfinite(seconds)):
        raise UsageError(bad_value(name, value, "seconds, a number >= 0"))
    return seconds


class StepPacer:
    """`pacer.step()` at the start of every step: step k starts no earlier than `start + k * min_seconds`.

    `start`: the time.monotonic() the count starts from (default: START, this module's first
    import, which is inside the allocation); `clock` and `sleep` are for tests.
    """

    def __init__(self, min_seconds: float = 0.0, start: Optional[float] = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        self.min_seconds = check_min_step_seconds(min_seconds, "min_step_seconds")
        self.start = START if start is None else start
        self._clock, self._sleep = clock, sleep
        self.steps = 0  # steps started so far

    def step(self) -> None:
        """Wait until this step is due, then count it."""
        if self.min_seconds > 0:
            due = self.start + self.steps * self.min_seconds
            while True:  # a loop, not one sleep: never start early, whatever sleep() does
                remaining = due - self._clock()
                if remaining <= 0:
                    break
                self._sleep(remaining)
        self.steps += 1
