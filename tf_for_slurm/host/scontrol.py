"""Slurm's own view of a job (`scontrol show job`), for `tf-slurm status` and `logs`.

`scontrol` rather than `sacct`: it needs no accounting database (many small clusters, and the
local test cluster, have none); Slurm forgets a job MinJobAge (300 s by default) after its end.

Two failures look alike and mean opposite things: "Invalid job id specified" (Slurm answered: it
does not know the job, it ended a while ago) and "Unable to contact slurm controller" (Slurm did not
answer: the job may be running).  `ask_job` tells them apart (plan.slurm_outage's rule, run through
host.slurm_call).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

from tf_for_slurm.host import slurm_call
from tf_for_slurm.plan.scontrol_text import parse_job
from tf_for_slurm.plan.slurm_outage import away_reason

TIMEOUT = 30.0  # seconds: a slurmctld that does not answer must not hang a status view
#: seconds of outage `ask_job` waits through by default: none, one try (a person is waiting; `status
#: --watch`'s next redraw is the next try)
PATIENCE = 0.0

@dataclass(frozen=True)
class JobAnswer:
    """What asking Slurm about a job came to.  `info`: the job's fields, None when Slurm does not know
    it (or scontrol could not run); `away`: when Slurm's controller did not answer, the line that said
    so (what scontrol printed), and then nothing is known of the job."""

    info: Optional[Dict[str, str]] = None
    away: Optional[str] = None


def ask_job(job_id: str, patience: float = PATIENCE, say: Optional[slurm_call.Say] = None,
            timeout: float = TIMEOUT) -> JobAnswer:
    """`scontrol show job JOB`, through up to `patience` s of controller outage (`say`: its lines;
    default: none, the answer's `away` carries the one line)."""
    answer = slurm_call.call(["scontrol", "show", "job", job_id], what=f"scontrol show job {job_id}",
                             patience=patience, say=say or (lambda line: None), timeout=timeout)
    if answer.away:
        return JobAnswer(away=away_reason(answer.stderr + "\n" + answer.stdout) or answer.stderr.strip()[:200]
                         or answer.line)
    if not answer.ok:
        return JobAnswer()
    return JobAnswer(parse_job(answer.stdout) or None)
