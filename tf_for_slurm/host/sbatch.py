"""Submit a batch script into its own job folder: sbatch (held), the folder, scontrol release.

Why held: Slurm opens the job's --output (`<jobs root>/<job id>/job.out`) when the job starts, and
the job id is known only once sbatch answers.  `sbatch --hold` gives the id of a job that cannot
start; the folder and `job.sh` are then written and the job released.  If anything fails between
the two, the job is cancelled, so no job runs without its folder (no race, whatever the queue).
Every command is a list (no shell) under a timeout; sbatch's own error is passed on as one line.
Through an outage of Slurm's controller (`host.slurm_call`) each waits up to SUBMIT_WAIT s, with one
line: sbatch only when its request never left (a timed-out sbatch may have submitted the job).
"""

from __future__ import annotations

import logging
import os
import subprocess
from typing import List, Sequence

from tf_for_slurm.errors import UsageError
from tf_for_slurm.host import job_folder
from tf_for_slurm.host.slurm_call import Answer, call
from tf_for_slurm.plan.slurm_outage import away_reason

log = logging.getLogger(__name__)

TIMEOUT = 60.0  # seconds: a slurmctld that does not answer must not hang `tf-slurm submit`
SUBMIT_WAIT = 60.0  # seconds submit waits through an outage of the controller: a person is waiting


def one_line(text: str) -> str:
    """A command's messages on one line: its non-empty lines joined with ' | '."""
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())


def _run(argv: List[str], stdin: str = "", once: bool = False) -> Answer:
    """`argv` through an outage (`once`: only a request that never left is sent again)."""
    res = call(argv, what=argv[0], patience=SUBMIT_WAIT, say=log.warning, timeout=TIMEOUT, stdin=stdin,
               not_sent_only=once)
    if res.returncode == 127 and not res.stdout:
        if "No such file" in res.stderr:
            raise UsageError(f"{argv[0]} not found on PATH: expected to submit from a Slurm login node "
                             "(or --dry-run)")
        raise UsageError(f"{argv[0]} could not be run: {res.stderr}")
    return res


def parse_job_id(stdout: str) -> str:
    """The job id `sbatch --parsable` printed ('123' or '123;cluster'), else one UsageError."""
    first = stdout.strip().splitlines()[0] if stdout.strip() else ""
    job = first.split(";")[0].strip()
    if not job.isdigit():
        raise UsageError(f"sbatch printed {stdout.strip()!r}: expected a job id")
    return job


def submit_held(options: Sequence[str], script: str) -> str:
    """`sbatch --parsable --hold OPTIONS` with the script on stdin -> the job id (the job cannot start yet)."""
    res = _run(["sbatch", "--parsable", "--hold", *options], stdin=script, once=True)
    if res.returncode != 0:
        why = res.line or one_line(res.stderr or res.stdout) or f"sbatch failed with exit status {res.returncode}"
        if not res.away and (res.returncode == 124 or away_reason(res.stderr)):
            why += " (Slurm's controller did not answer in time: a held job may have been submitted: see squeue --me)"
        raise UsageError(why)
    return parse_job_id(res.stdout)


def release(job_id: str) -> None:
    """`scontrol release JOB`, or one UsageError with scontrol's message."""
    res = _run(["scontrol", "release", job_id])
    if res.returncode != 0:
        raise UsageError(f"scontrol release {job_id}: {one_line(res.stderr or res.stdout) or res.returncode}")


def cancel(job_id: str) -> None:
    """`scancel JOB`, best effort (called on the way out of a failure that is reported instead)."""
    try:
        res = subprocess.run(["scancel", job_id], capture_output=True, text=True, timeout=TIMEOUT)
        if res.returncode != 0:
            log.warning("scancel %s: %s", job_id, one_line(res.stderr) or res.returncode)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("scancel %s: %s", job_id, exc)


def submit(options: Sequence[str], script: str, jobs_root: str) -> str:
    """Submit `script` held, write it to `<jobs_root>/<job id>/job.sh`, release the job -> its folder.

    The folder must be new (a reused job id would mix two jobs' logs); on any failure after sbatch
    the job is cancelled and one UsageError says why."""
    try:
        os.makedirs(jobs_root, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--folder={jobs_root!r}: cannot create it ({exc.strerror})") from None
    job_id = submit_held(options, script)
    folder = os.path.join(jobs_root, job_id)
    try:
        try:
            os.mkdir(folder, job_folder.FOLDER_MODE)  # private: see host/job_folder.py
        except FileExistsError:
            raise UsageError(f"job {job_id}: its folder {folder} exists already (a job id used before?): "
                             "expected a new folder; move the old one or use --folder") from None
        except OSError as exc:
            raise UsageError(f"job {job_id}: cannot create its folder {folder} ({exc.strerror})") from None
        try:
            fd = os.open(os.path.join(folder, job_folder.SCRIPT), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(script)
        except OSError as exc:
            raise UsageError(f"job {job_id}: cannot write {job_folder.SCRIPT} in {folder} ({exc.strerror})") from None
        release(job_id)
    except UsageError as exc:
        cancel(job_id)
        raise UsageError(f"{exc} (job {job_id} cancelled)") from None
    except BaseException:
        cancel(job_id)
        raise
    return folder
