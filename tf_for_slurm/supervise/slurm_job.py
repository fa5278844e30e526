"""What batch-step asks Slurm about its own job: its start and end times (squeue), a requeue (scontrol).

Why a module of its own: both are commands run as children, each with its own failure rule (squeue
unanswered means "times unknown"; a refused requeue is the job's failure), kept out of the wiring.
"""

from __future__ import annotations

import subprocess
import time
from typing import Any, Callable, List, Optional, Tuple

Run = Callable[..., Any]  # subprocess.run, or a stand-in in tests


def job_times(job_id: str, run: Run = subprocess.run) -> Tuple[Optional[float], Optional[float]]:
    """The job's (StartTime, EndTime) in epoch seconds from squeue, each None when Slurm does not say."""
    try:
        res = run(["squeue", "-h", "-j", job_id, "-O", "StartTime,EndTime"], capture_output=True, text=True,
                  timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None, None
    fields = res.stdout.split() if res.returncode == 0 else []
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


def requeue_job(job_id: str, run: Run = subprocess.run) -> Optional[str]:
    """`scontrol requeue job_id`: None when Slurm took it, else why not (its last line, or its status)."""
    res = run(["sh", "-c", _REQUEUE, "sh", job_id], capture_output=True, text=True, timeout=60)
    if res.returncode == 0:
        return None
    why = (res.stderr or res.stdout).strip().splitlines()
    if why:
        return why[-1]
    return f"killed by signal {-res.returncode}" if res.returncode < 0 else str(res.returncode)


__all__ = ["job_times", "requeue_job"]
