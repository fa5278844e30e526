"""What a job was, from its folder, where Slurm's word for it is wrong; Slurm's word kept beside it.

Why: a job whose step had ended (batch-step decided 'ended' with the step's status) while Slurm's
controller was away is recorded by Slurm as TIMEOUT (issue 44): slurmd could not tell slurmctld that
the batch script had ended, and the controller, back after the time limit, ended the job at its
limit.  The job folder knows better: batch.json's run ended, with its step's status, before the time
limit.  `tf-slurm status` and `tf-slurm report` then say e.g. "COMPLETED (Slurm: TIMEOUT; the step
had ended 0 at 12:03:04, before the time limit; Slurm's controller was away when the job ended)".

Pure: Slurm's fields (`scontrol show job`, as host.scontrol parses them) and the folder's batch.json
and status.json in, a value out; the rule never claims more than both say (the same job and run, a
status the step ended with, an end before the limit Slurm's own StartTime and TimeLimit give).
"""

from __future__ import annotations

import math
import re
import time
from typing import Any, Mapping, NamedTuple, Optional

from tf_for_slurm.plan.step_status import clock

SLURM_TIME = "%Y-%m-%dT%H:%M:%S"  # scontrol's times, on the local clock
WRONG = ("TIMEOUT",)  # Slurm's words the rule may correct (a job that ended while its controller was away)
_LIMIT = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


class Ended(NamedTuple):
    """The job as its folder says it ended, and Slurm's word for it."""

    state: str  # "COMPLETED" (the step's status 0) or "FAILED"
    slurm: str  # Slurm's JobState ("TIMEOUT")
    status: int  # the step's status, as batch-step recorded it
    at: float  # when the step ended (epoch seconds)
    limit: float  # the time limit's moment (StartTime + TimeLimit, else EndTime)


def slurm_time(text: Any) -> Optional[float]:
    """An scontrol time ('2024-05-01T10:00:00', local) in epoch seconds; None for 'Unknown', 'None', ..."""
    try:
        return time.mktime(time.strptime(text, SLURM_TIME)) if isinstance(text, str) else None
    except (ValueError, OverflowError):
        return None


def limit_seconds(text: Any) -> Optional[int]:
    """scontrol's TimeLimit ('1-02:03:04', '02:03:04', '03:04', or minutes) in seconds; None for
    'UNLIMITED', 'Partition_Limit' or anything else."""
    m = _LIMIT.match(text.strip()) if isinstance(text, str) else None
    if m is None:
        return None
    parts = [int(p) for p in m.group(2, 3, 4) if p is not None]
    if m.group(1) is not None:  # D-HH, D-HH:MM, D-HH:MM:SS
        hours, minutes, seconds = parts + [0] * (3 - len(parts))
    else:  # minutes, MM:SS, HH:MM:SS
        hours, minutes, seconds = {1: [0, parts[0], 0], 2: [0, *parts], 3: parts}[len(parts)]
    return int(m.group(1) or 0) * 86400 + hours * 3600 + minutes * 60 + seconds


def limit_at(slurm: Mapping[str, Any]) -> Optional[float]:
    """When the job's time limit came: its StartTime plus its TimeLimit, else its EndTime."""
    start, seconds = slurm_time(slurm.get("StartTime")), limit_seconds(slurm.get("TimeLimit"))
    return start + seconds if start is not None and seconds is not None else slurm_time(slurm.get("EndTime"))


def _number(x: Any) -> Optional[float]:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def ended_before_limit(slurm: Optional[Mapping[str, Any]], batch: Optional[Mapping[str, Any]],
                       step: Optional[Mapping[str, Any]]) -> Optional[Ended]:
    """The job's end as its folder records it, where Slurm says TIMEOUT but the step had ended before
    the time limit; None where Slurm's word stands (or the folder does not say enough)."""
    word = str((slurm or {}).get("JobState", ""))
    if slurm is None or word not in WRONG or not isinstance(batch, Mapping) or batch.get("state") != "ended":
        return None
    status, ended = batch.get("status"), _number(batch.get("ended_at"))
    if not isinstance(status, int) or isinstance(status, bool) or ended is None:  # None: decided while it ran
        return None
    job, restarts = str(slurm.get("JobId", "")), str(slurm.get("Restarts", ""))
    if (job and str(batch.get("job")) != job) or (restarts.isdigit() and batch.get("run") != int(restarts) + 1):
        return None  # another job's folder, or an earlier run's record
    at = ended
    if isinstance(step, Mapping) and str(step.get("job")) == str(batch.get("job")):
        decided = _number(step.get("decided_at"))
        if step.get("state") != "ended":  # the step's own status says it did not end: no claim
            return None
        at = decided if decided is not None and decided <= ended else ended
    start, limit = slurm_time(slurm.get("StartTime")), limit_at(slurm)
    if limit is None or ended >= limit or (start is not None and at < start):
        return None
    return Ended("COMPLETED" if status == 0 else "FAILED", word, status, at, limit)


def state_text(slurm: Mapping[str, Any], batch: Optional[Mapping[str, Any]],
               step: Optional[Mapping[str, Any]]) -> str:
    """The job's state in words: Slurm's JobState, or what the folder says it was with Slurm's word beside it."""
    found = ended_before_limit(slurm, batch, step)
    if found is None:
        return str(slurm.get("JobState", "?"))
    return (f"{found.state} (Slurm: {found.slurm}; the step had ended {found.status} at {clock(found.at)}, before "
            "the time limit; Slurm's controller was away when the job ended)")
