"""The job folder: where `tf-slurm submit` puts a job's script and logs, and the step its status.

One folder per job, `<jobs root>/<job id>/` (submitit's layout): `job.sh`, the batch log, one log
per task, `status.json` (exec's hub, the step's state) and `batch.json` (batch-step, the run and
its checkpoint).  Every file name lives here, so the writers and `tf-slurm status`/`logs` agree.
The end of a task's log is read here too (`failure_detail`: what the first failing task said).

Permissions: the folder is made 0700 and its files 0600 (as submitit does): it holds the job's
script, logs and state, private to the job's owner; a user who wants to share it can chmod it.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from typing import Any, Callable, Dict, Mapping, Optional

from tf_for_slurm.errors import UsageError
from tf_for_slurm.host import settings
from tf_for_slurm.plan.failure_words import why_from_log

STATUS = "status.json"
BATCH = "batch.json"
TIMELINE = "timeline.jsonl"  # each run's hub appends its step's events (supervise.timeline_file)
SCRIPT = "job.sh"
BATCH_LOG = "job.out"
TASK_LOG = "task-{rank}.out"  # srun --output pattern: task-%t.out
TASK_LOG_PATTERN = "task-%t.out"
TAIL_BYTES = 64 * 1024  # of a task's log read for why it failed: its last lines, never a whole log


def jobs_root(env: Optional[Mapping[str, str]] = None, given: Optional[str] = None) -> str:
    """The folder holding one folder per job: `given` (--folder), else TF_SLURM_JOBS_ROOT, else the default."""
    env = settings.environ() if env is None else env
    return given or settings.text(env, settings.JOBS_ROOT) or settings.default_text(settings.JOBS_ROOT)


def status_path(env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """Where exec's hub writes the step's status: TF_SLURM_STATUS_FILE, else the job folder's, else None."""
    env = settings.environ() if env is None else env
    path = settings.text(env, settings.STATUS_FILE)
    if path:
        return path
    folder = settings.text(env, settings.JOB_DIR)
    return os.path.join(folder, STATUS) if folder else None


def batch_path(env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """Where batch-step writes `batch.json`: the job folder's, else None."""
    env = settings.environ() if env is None else env
    folder = settings.text(env, settings.JOB_DIR)
    return os.path.join(folder, BATCH) if folder else None


def find(job: str, root: str, workdir: Callable[[str], Optional[str]]) -> str:
    """The folder of `job`: a folder path as given, else `<root>/<job>` from here, else from the
    job's working directory as Slurm knows it (`workdir(job)`); one UsageError naming what was tried."""
    if os.path.isdir(job):
        return job
    tried = [os.path.join(root, job)]
    if not job.replace("_", "").isdigit():
        raise UsageError(f"JOB={job!r}: expected a job id or a job folder (no folder {job!r})")
    if os.path.isdir(tried[0]):
        return tried[0]
    where = workdir(job)
    if where:
        candidate = os.path.join(where, root, job) if not os.path.isabs(root) else tried[0]
        if os.path.isdir(candidate):
            return candidate
        tried.append(candidate)
    raise UsageError(f"JOB={job}: no job folder ({' or '.join(tried)}): expected a job submitted with "
                     f"`tf-slurm submit`, or {settings.JOB_DIR} set for its steps")


FOLDER_MODE = 0o700  # the job folder: its owner's alone (files in it: 0600, mkstemp's mode)


def write_json(path: str, data: Mapping[str, Any]) -> None:
    """Write `data` as one line of JSON (write_text)."""
    write_text(path, json.dumps(data, separators=(",", ":")) + "\n")  # dumps: C encoder (dump is pure Python)


def write_text(path: str, text: str) -> None:
    """Write `text` so that a reader sees the old file or the new one, never half of one (mode 0600,
    the folder made 0700 if missing).  The temporary file has a random name made with O_EXCL
    (mkstemp): a name another user could guess and plant a symlink at would let them overwrite any
    file of ours."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, mode=FOLDER_MODE, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_json(path: str) -> Optional[Dict[str, Any]]:
    """The JSON object in `path`, or None when there is none (not yet written, or not readable)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def task_log(folder: str, rank: int) -> str:
    """The log of the task of `rank` in the job folder (srun's --output=task-%t.out)."""
    return os.path.join(folder, TASK_LOG.format(rank=int(rank)))


def read_tail(path: str, limit: int = TAIL_BYTES) -> Optional[str]:
    """The last `limit` bytes of `path` as text, from its first whole line; None when it is not a
    regular file that opens without following a symlink (O_NONBLOCK: a FIFO put there cannot block)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        start = max(0, st.st_size - limit)
        data = os.pread(fd, limit, start)
    except OSError:
        return None
    finally:
        os.close(fd)
    if start > 0:  # the first line is cut: drop it
        data = data[data.find(b"\n") + 1:]
    return data.decode("utf-8", "replace")


def failure_detail(folder: str, rank: int) -> Optional[str]:
    """What the task of `rank` said about its failure, from the end of its log in the job folder
    (plan.failure_words.why_from_log: its fix line, else its error); None when it said nothing we
    recognise or has no log there."""
    text = read_tail(task_log(folder, rank))
    return None if text is None else why_from_log(text)
