"""What batch-step asks Slurm about its own job: its submit, start and end times (squeue), a requeue (scontrol).

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


class JobTimes(NamedTuple):
    """Slurm's times of the job's run, epoch seconds, each None when Slurm does not say.  `submit`: its
    SubmitTime, which Slurm (22.05, measured) sets again at a requeue: a later run's is when the
    requeue put it back in the queue; `start`: this run's StartTime; `end`: its EndTime (the time limit)."""

    submit: Optional[float]
    start: Optional[float]
    end: Optional[float]


def run_times(job_id: str, patience: float, say: Optional[Say] = None, run: Run = subprocess.run) -> JobTimes:
    """The job's SubmitTime, StartTime and EndTime from one squeue (its last line: a heterogeneous
    job's last component), each None when Slurm does not say ('N/A', 'Unknown', a column missing)
    or when its controller stayed away for `patience` s."""
    res = call(["squeue", "-h", "-j", job_id, "-O", "SubmitTime,StartTime,EndTime"], what=f"squeue -j {job_id}",
               patience=patience, say=say, timeout=30, run=run)
    lines = [line for line in res.stdout.splitlines() if line.strip()] if res.ok else []
    fields = lines[-1].split()[-3:] if lines else []
    times: List[Optional[float]] = [None] * (3 - len(fields))  # fewer columns: the last ones (EndTime alone: no start)
    for text in fields:
        try:
            times.append(time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S")))
        except (ValueError, OverflowError):
            times.append(None)
    return JobTimes(*times)


def job_times(job_id: str, patience: float, say: Optional[Say] = None,
              run: Run = subprocess.run) -> Tuple[Optional[float], Optional[float]]:
    """The job's (StartTime, EndTime) in epoch seconds (run_times)."""
    times = run_times(job_id, patience, say, run)
    return times.start, times.end


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


__all__ = ["JobTimes", "RequeueFailed", "job_times", "requeue_job", "run_times"]
