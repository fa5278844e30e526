"""Whether a task's command is hung: no sign of progress within the progress deadline.  Pure.

Why: a hung task neither exits nor goes silent (its supervisor still beats), so the step would wait
for it as long as it stays hung: a worker stopped with SIGSTOP was waited for 61-81 s, for as
long as it stayed stopped.  With a deadline (opt-in: TF_SLURM_PROGRESS_DEADLINE, exec's
--progress-deadline) a hung command is killed, and the restart policy decides what follows.

Two signs, either enough:
- the command is stopped (SIGSTOP; its process state 'T') for the deadline;
- a command that reported progress once (touched its progress file: `tf_for_slurm.report_progress()`
  or `touch "$TF_SLURM_PROGRESS_FILE"`) has not reported again for the deadline.  A command that
  never reports is judged by the first sign alone: an unmodified script is never killed for silence.
"""

from __future__ import annotations

from typing import Optional


def hung(now: float, deadline: float, *, started: float, reported: Optional[float],
         stopped_since: Optional[float]) -> Optional[str]:
    """One line saying why the command is hung, else None (always None with deadline 0).

    started: when the command (re)started; reported: its last progress report, None before its
    first; stopped_since: since when it is seen stopped, None while it runs."""
    if deadline <= 0:
        return None
    if stopped_since is not None and now - stopped_since >= deadline:
        return (f"the command has been stopped (SIGSTOP) for {now - stopped_since:.1f} s, the progress "
                f"deadline is {deadline:g} s")
    if reported is not None and now - max(reported, started) >= deadline:
        return (f"the command reported no progress for {now - max(reported, started):.1f} s, the progress "
                f"deadline is {deadline:g} s")
    return None
