"""What batch-step asks Slurm about its own job: its start and end times (squeue), a requeue (scontrol).

Why a module of its own: both are commands run as children, each with its own failure rule (squeue
unanswered means "times unknown"; a refused requeue is the job's failure), kept out of the wiring.
Both wait through an outage of Slurm's controller (`host.slurm_call`): a requeue refused because
slurmctld was restarting ended a healthy job FAILED.
"""

from __future__ import annotations

import subprocess
import time
from typing import Any, Callable, List, NamedTuple, Optional, Tuple

from tf_for_slurm.host.slurm_call import Say, call

Run = Callable[..., Any]  # subprocess.run, or a stand-in in tests


def job_times(job_id: str, patience: float, say: Optional[Say] = None,
              run: Run = subprocess.run) -> Tuple[Optional[float], Optional[float]]:
    """The job's (StartTime, EndTime) in epoch seconds from squeue, each None when Slurm does not say
    (also when its controller stayed away for `patience` s)."""
    res = call(["squeue", "-h", "-j", job_id, "-O", "StartTime,EndTime"], what=f"squeue -j {job_id}",
               patience=patience, say=say, timeout=30, run=run)
    fields = res.stdout.split() if res.ok else []
    times: List[Optional[float]] = []
    for text in fields[-2:]:
        try:
            times.append(time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S")))
        except ValueError:
            times.append(None)
    while len(times) < 2:  # EndTime alone (one column): no start
        times.insert(0, None)
    return times[0], times[1]


#: scontrol with SIGTERM ignored: a requeue ends the run's processes with SIGTERM, scontrol among them, and
#: one killed before it read Slurm's answer made a requeue that happened look failed (measured: status -15)
_REQUEUE = 'trap "" TERM; exec scontrol requeue "$1"'


class RequeueFailed(NamedTuple):
    """Why a requeue did not happen: Slurm's own line, and whether its controller never answered."""

    why: str
    away: bool


def requeue_job(job_id: str, patience: float, say: Optional[Say] = None,
                run: Run = subprocess.run) -> Optional[RequeueFailed]:
    """`scontrol requeue job_id`, through an outage of up to `patience` s: None when Slurm took it."""
    res = call(["sh", "-c", _REQUEUE, "sh", job_id], what=f"scontrol requeue {job_id}", patience=patience,
               say=say, timeout=60, run=run)
    if res.ok:
        return None
    if res.away:
        return RequeueFailed(res.line, True)
    why = (res.stderr or res.stdout).strip().splitlines()
    if why:
        return RequeueFailed(why[-1], False)
    return RequeueFailed(f"killed by signal {-res.returncode}" if res.returncode < 0 else str(res.returncode), False)


__all__ = ["RequeueFailed", "job_times", "requeue_job"]
