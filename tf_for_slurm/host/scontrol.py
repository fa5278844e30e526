"""Slurm's own view of a job (`scontrol show job`), for `tf-slurm status` and `logs`.

`scontrol` rather than `sacct`: it needs no accounting database (many small clusters, and the
local test cluster, have none); Slurm forgets a job MinJobAge (300 s by default) after its end.
"""

from __future__ import annotations

import re
import subprocess
from typing import Dict, Optional

TIMEOUT = 30.0  # seconds: a slurmctld that does not answer must not hang a status view

_KEY = re.compile(r"(?:(?<=\s)|^)([A-Za-z][A-Za-z0-9_:/]*)=")


def parse_job(text: str) -> Dict[str, str]:
    """`scontrol show job` text -> {Key: value} for the first job; values are tokens, never evaluated
    (a value may hold spaces: it runs to the next Key=)."""
    out: Dict[str, str] = {}
    keys = list(_KEY.finditer(text))
    for i, m in enumerate(keys):
        if m.group(1) == "JobId" and out:
            break
        end = keys[i + 1].start() if i + 1 < len(keys) else len(text)
        out[m.group(1)] = text[m.end():end].strip()
    return out


def show_job(job_id: str) -> Optional[Dict[str, str]]:
    """The job as `scontrol show job` tells it; None when Slurm does not know it (or cannot be asked)."""
    try:
        res = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, timeout=TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if res.returncode != 0:
        return None
    info = parse_job(res.stdout)
    return info or None
