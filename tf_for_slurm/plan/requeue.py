"""After a training step ended in a batch job: requeue the job, end it, or fail it.

Why a pure rule: the batch script knows only a few facts (which signal it got, the step's exit
status, Slurm's restart count, how far the last checkpoint got) and the decision must be the
same on every cluster and testable with plain values.  `tf-slurm batch-step`
(supervise/batch_step.py) gathers those facts and runs `scontrol requeue`; nothing here touches the
environment.  When batch-step passes a signal on to the step is plan.stop_relay's.

Rules, in order:
1. a step that ended with a status that says "checkpointed, run me again" (42: TensorFlow's
   PreemptionCheckpointHandler on non-GCP machines) is requeued after this run's checkpoint
   advanced, within `max_requeues`; so is a step that failed in a way worth another run (a task
   lost with its node, LOST_STATUS; a task killed by a signal, status 128-255, e.g. the OOM
   killer, after exec's restarts, if any, were spent), unless the batch script itself was told to
   stop (scancel, preemption: rule 4); any other failed step is not requeued (its status is the job's);
2. no warning signal: training ended on its own;
3. a checkpoint already at the target: done, whatever the signal; a warning the step ended
   before it was passed on (training finished on its own while the warning was held until the
   margin): not requeued either;
4. SIGTERM is not a time-limit warning: a user's `scancel` or a preemption (Slurm requeues
   preempted jobs itself when PreemptMode=REQUEUE); the checkpoint stays, no requeue;
5. a run that saved no step beyond the one it started from is not requeued (it would loop);
6. a warning (SIGUSR1 from `--signal=B:URG@N`, or `scancel --batch --signal=USR2`) requeues,
   at most `max_requeues` times.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

DEFAULT_MAX_REQUEUES = 10
#: exit status when the requeue limit is reached before the target (EX_TEMPFAIL: run it again)
EXIT_REQUEUE_LIMIT = 75
#: signals the templates treat as "time is nearly up: checkpoint and come back"
WARNING_SIGNALS = ("USR1", "USR2")
#: the signal a user sends for "checkpoint and requeue now" (scancel --batch --signal=USR2): passed on at
#: once, while USR1, which Slurm's --signal warning also sends up to 60 s early, waits for the margin
NOW_SIGNAL = "USR2"
#: a step's status that means "checkpointed, requeue me": PreemptionCheckpointHandler's default exit code
CHECKPOINTED_STATUSES = (42,)
#: SIGTERM: scancel (without --signal) or preemption; 128 + 15 like a shell reports it
EXIT_TERMINATED = 143
#: a step's status when one of its tasks was lost (its supervisor vanished, went silent or never
#: connected: its node failed or hung) and no task said why (EX_UNAVAILABLE): worth another run
LOST_STATUS = 69


def retryable_failure(status: int) -> bool:
    """A failed step's status worth another run from the checkpoint: a lost task, or a task killed by
    a signal (128-255: SIGKILL and the OOM killer, SIGSEGV, SIGBUS ...).  1-127 are the program's own
    verdict: the same run would fail the same way."""
    return status == LOST_STATUS or 128 <= status <= 255


@dataclass(frozen=True)
class Decision:
    """What the batch script does next: requeue (then nothing else matters) or exit with a status."""

    requeue: bool
    exit_status: int
    reason: str


def signal_name(value: Optional[str]) -> str:
    """'SIGUSR1', 'usr1', '10' -> 'USR1'; '' / None -> '' (no signal). Unknown names are kept upper-case."""
    text = (value or "").strip().upper()
    if text.startswith("SIG"):
        text = text[3:]
    numbers = {"10": "USR1", "12": "USR2", "15": "TERM", "1": "HUP", "2": "INT"}
    return numbers.get(text, text)


def decide(signal: Optional[str], step_status: int, restart_count: int, max_requeues: int,
           checkpoint_step: Optional[int] = None, target: Optional[int] = None,
           start_step: Optional[int] = None, limit_name: str = "max_requeues", delivered: bool = True,
           late_start: float = 0.0) -> Decision:
    """The next action of a batch job whose training step just ended (see the module rules).

    `delivered`: whether the warning was passed on to the step before it ended (False: the step
    ended on its own while the warning was held until --warn-margin before the limit).

    `start_step`: the checkpoint's step when this run began; a run that saved nothing beyond it is
    not requeued (the next run would stop in the same place: start-up longer than the time left).
    `limit_name`: where `max_requeues` came from, for the reason (the host passes its setting's name).
    `late_start`: seconds between Slurm starting this run and batch-step's start; more than LATE_START
    (Slurm's controller away as the run began) and the run's lost time is Slurm's, not the start-up's:
    a run that saved nothing is requeued all the same, within `max_requeues`.
    """
    sig = signal_name(signal)
    where = f"global step {checkpoint_step}" if checkpoint_step is not None else "no checkpoint yet"
    if step_status in CHECKPOINTED_STATUSES or (retryable_failure(step_status)
                                                and (not sig or sig in WARNING_SIGNALS)):
        return _checkpointed(step_status, restart_count, max_requeues, checkpoint_step, target, start_step,
                             limit_name)
    if step_status != 0:
        return Decision(False, step_status, f"the training step failed (status {step_status}): not requeued")
    if not sig:
        return Decision(False, 0, f"training ended without a time-limit warning ({where})")
    if target is not None and checkpoint_step is not None and checkpoint_step >= target:
        return Decision(False, 0, f"SIG{sig}, but the checkpoint is at the target ({where} >= {target}): done")
    if not delivered and sig in WARNING_SIGNALS:
        return Decision(False, 0, f"training ended on its own ({where}) before SIG{sig} was passed on to it: "
                                  "not requeued")
    if sig not in WARNING_SIGNALS:
        return Decision(False, EXIT_TERMINATED if sig == "TERM" else 1,
                        f"SIG{sig} is not a time-limit warning (scancel or preemption): checkpoint kept "
                        f"({where}), not requeued")
    if checkpoint_step is not None and start_step is not None and checkpoint_step <= start_step \
            and late_start <= LATE_START:
        return Decision(False, EXIT_REQUEUE_LIMIT,
                        f"SIG{sig}, but this run saved nothing past global step {start_step}: not requeued "
                        f"(start-up took the time left; raise --time or lower WARN_MARGIN)")
    if restart_count >= max_requeues:
        return Decision(False, EXIT_REQUEUE_LIMIT,
                        f"SIG{sig} after {restart_count} requeues, the limit ({limit_name}="
                        f"{max_requeues}): not requeued again; the checkpoint ({where}) stays for a resubmission")
    late = f" (this run began {late_start:.0f} s after Slurm started it: Slurm's time, not the start-up's)" \
        if late_start > LATE_START else ""
    return Decision(True, 0, f"SIG{sig}: requeue {restart_count + 1} of at most {max_requeues}, to resume from "
                             f"{where}" + (f" towards {target}" if target is not None else "") + late)


def _checkpointed(status: int, restart_count: int, max_requeues: int, checkpoint_step: Optional[int],
                  target: Optional[int], start_step: Optional[int], limit_name: str) -> Decision:
    """A step that ended with a "checkpointed, requeue me" status, or failed in a way worth another
    run (rule 1)."""
    if status in CHECKPOINTED_STATUSES:
        why = f"the step ended with status {status} (checkpointed, e.g. PreemptionCheckpointHandler)"
    elif status == LOST_STATUS:
        why = f"the step failed with status {status} (a task was lost: its node failed or hung)"
    else:
        why = f"the step failed with status {status} (a task killed by signal {status - 128})"
    if checkpoint_step is None:
        return Decision(False, status, f"{why} but no checkpoint step is known (--checkpoint-dir): not requeued")
    if target is not None and checkpoint_step >= target:
        return Decision(False, 0, f"{why}; the checkpoint is at the target (global step {checkpoint_step} >= "
                                  f"{target}): done")
    if start_step is not None and checkpoint_step <= start_step:
        return Decision(False, status, f"{why} but this run saved nothing past global step {start_step}: "
                                       "not requeued")
    if restart_count >= max_requeues:
        return Decision(False, EXIT_REQUEUE_LIMIT, f"{why} after {restart_count} requeues, the limit "
                                                   f"({limit_name}={max_requeues}): not requeued again")
    return Decision(True, 0, f"{why}: requeue {restart_count + 1} of at most {max_requeues}, to resume from "
                             f"global step {checkpoint_step}")


#: seconds from Slurm's start of a run to batch-step's beyond which the run lost time to Slurm (its
#: controller away as the run began: 12 s measured), not to its own start-up (the template's lines: ~1 s)
LATE_START = 10.0

#: the margin is at most this share of the job's time limit: a fixed 60 s on a 1-minute job would
#: mean "stop at once", before training began
MARGIN_FRACTION = 0.25
#: seconds after the step started before its tasks are told to stop: their supervisors and Python's
#: start-up cannot take a signal yet, and one that came then would kill them (status 138)
START_GRACE = 10.0
#: the stop is never told later than this many seconds before the end (time to checkpoint)
LAST_CHANCE = 5.0
#: a step told to stop that is still running this many seconds before the end is decided without
#: waiting for it: a requeue then still comes before Slurm's kill, which ends the job TIMEOUT, never requeued
DECIDE_BEFORE_END = 3.0


def effective_margin(margin: float, start_time: Optional[float], end_time: Optional[float]) -> float:
    """`margin`, at most MARGIN_FRACTION of the job's time limit (end - start) when both are known."""
    if start_time is None or end_time is None or end_time <= start_time:
        return margin
    return min(margin, (end_time - start_time) * MARGIN_FRACTION)


def stop_delay(now: float, end_time: Optional[float], margin: float, *, start_time: Optional[float] = None,
               step_started: Optional[float] = None, grace: float = START_GRACE) -> float:
    """Seconds to wait after a warning before telling the tasks to stop: until the (effective) margin
    before the job's `end_time` (Slurm may warn up to 60 s early), and not within `grace` s of
    the step's start (`step_started`), but never later than LAST_CHANCE s before the end; 0 when
    nothing is known or the moment has passed."""
    delay = 0.0
    if end_time is not None:
        delay = end_time - effective_margin(margin, start_time, end_time) - now
    if step_started is not None:
        delay = max(delay, step_started + grace - now)
        if end_time is not None:
            delay = min(delay, end_time - LAST_CHANCE - now)
    return max(0.0, delay)


_CKPT_PATH = re.compile(r'^model_checkpoint_path:\s*"(.*)"\s*$', re.M)
_STEP_SUFFIX = re.compile(r"-(\d+)$")


def checkpoint_step(state_text: str) -> Optional[int]:
    """The step of the latest checkpoint named in a TensorFlow `checkpoint` state file's text.

    TF1 savers and `tf.train.CheckpointManager(checkpoint_number=step)` name checkpoints
    `<prefix>-<step>`; None when the file names none or the name carries no number.
    """
    m = _CKPT_PATH.search(state_text)
    return step_in_name(m.group(1)) if m else None


def step_in_name(path: str) -> Optional[int]:
    """The step a checkpoint's name carries: 'dir/model.ckpt-800' -> 800; None without one."""
    s = _STEP_SUFFIX.search(path)
    return int(s.group(1)) if s else None
