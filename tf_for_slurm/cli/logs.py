"""`tf-slurm logs JOB [--task N | --role R]`: a job's log files from its folder, tail or follow.

The files are `tf-slurm submit`'s (host/job_folder.py names them): the batch log, and one per
task (srun --output task-%t.out).  Which ranks a role has comes from the step's status.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import IO, Callable, Dict, List, Optional

from tf_for_slurm.cli.status import FOLDER_HELP, ended, locate
from tf_for_slurm.cli.status import slurm_view as _slurm_view
from tf_for_slurm.errors import UsageError, bad_value
from tf_for_slurm.host import job_folder
from tf_for_slurm.host.scontrol import JobAnswer, ask_job
from tf_for_slurm.plan.step_status import task_rows

FOLLOW_POLL = 0.5  # seconds between looks at the files while following
JOB_POLL = 5.0  # seconds between asking Slurm whether the job has ended


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `tf-slurm logs`."""
    parser.add_argument("job", metavar="JOB", help="a job id (its folder under --folder) or a job folder")
    parser.add_argument("--folder", default=None, metavar="DIR",
                        help=FOLDER_HELP)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--task", type=int, default=None, metavar="RANK", help="this task's log (its rank)")
    which.add_argument("--role", default=None, help="the logs of every task of this role (ps, worker, chief...)")
    parser.add_argument("--index", type=int, default=None, help="with --role: only this index")
    parser.add_argument("-n", "--lines", type=int, default=20, help="last lines of each file (0: all; default 20)")
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing what is added until the job ends")


def pick(folder: str, task: Optional[int], role: Optional[str], index: Optional[int]) -> List[str]:
    """The log files asked for: a task's, a role's (from status.json), else the batch log."""
    if index is not None and role is None:
        raise UsageError("--index given without --role: expected e.g. --role worker --index 1")
    if task is not None:
        if task < 0:
            raise UsageError(bad_value("--task", task, "a rank >= 0"))
        return [os.path.join(folder, job_folder.TASK_LOG.format(rank=task))]
    if role is None:
        return [os.path.join(folder, job_folder.BATCH_LOG)]
    status = job_folder.read_json(os.path.join(folder, job_folder.STATUS))
    if status is None:
        raise UsageError(f"--role {role}: no {job_folder.STATUS} in {folder} yet to tell which tasks are {role} "
                         "(use --task RANK)")
    tasks = task_rows(status)
    ranks = [t["rank"] for t in tasks if t.get("role") == role and (index is None or t.get("index") == index)]
    if not ranks:
        roles = sorted({str(t.get("role")) for t in tasks})
        raise UsageError(bad_value("--role", role if index is None else f"{role} --index {index}",
                                   "a role of this step: " + ", ".join(map(str, roles))))
    return [os.path.join(folder, job_folder.TASK_LOG.format(rank=r)) for r in ranks]


def tail(path: str, lines: int) -> bytes:
    """The last `lines` lines of the file (all when 0), read from its end."""
    with open(path, "rb") as fh:
        if lines <= 0:
            return fh.read()
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        block, data = 65536, b""
        while size > 0 and data.count(b"\n") <= lines:
            step = min(block, size)
            size -= step
            fh.seek(size)
            data = fh.read(step) + data
    return b"\n".join(data.split(b"\n")[-lines - 1:]) if data.count(b"\n") > lines else data


def main(args: argparse.Namespace, out: Optional[IO[bytes]] = None,
         lookup: Callable[[str], JobAnswer] = ask_job) -> int:
    """`tf-slurm logs`: print the files' ends; with --follow, what is added until the job ends."""
    out = out or sys.stdout.buffer
    if args.lines < 0:
        raise UsageError(bad_value("--lines", args.lines, "a number of lines >= 0"))
    folder, job_id = locate(args.job, args.folder, lambda job: lookup(job).info)
    paths = pick(folder, args.task, args.role, args.index)
    missing = [p for p in paths if not os.path.exists(p)]
    if missing and not args.follow:
        raise UsageError(f"no log file {missing[0]} (yet): expected a job submitted with `tf-slurm submit`")
    offsets: Dict[str, int] = {}
    for path in paths:
        if len(paths) > 1:
            out.write(f"==> {path} <==\n".encode())
        if os.path.exists(path):
            out.write(tail(path, args.lines))
            offsets[path] = os.path.getsize(path)
    out.flush()
    if args.follow:
        _follow(folder, paths, offsets, out, job_id, lookup)
    return 0


def _follow(folder: str, paths: List[str], offsets: Dict[str, int], out: IO[bytes], job_id: Optional[str],
            lookup: Callable[[str], JobAnswer]) -> None:
    """Print what is appended to the files until Slurm says the job has ended (then once more); an
    outage of Slurm's controller is not an end."""
    next_check, last, final = 0.0, None, False
    while True:
        for path in paths:
            try:
                with open(path, "rb") as fh:
                    fh.seek(offsets.get(path, 0))
                    data = fh.read()
            except OSError:
                continue
            if data:
                if len(paths) > 1 and last != path:
                    out.write(f"==> {path} <==\n".encode())
                last = path
                out.write(data)
                offsets[path] = offsets.get(path, 0) + len(data)
        out.flush()
        if final:
            return
        now = time.monotonic()
        if now >= next_check:
            next_check = now + JOB_POLL
            final = _ended(folder, job_id, lookup)  # one more pass for what was written meanwhile
        if not final:
            time.sleep(FOLLOW_POLL)


def _ended(folder: str, job_id: Optional[str], lookup: Callable[[str], JobAnswer]) -> bool:
    answer = lookup(job_id) if job_id else JobAnswer()
    step = job_folder.read_json(os.path.join(folder, job_folder.STATUS))
    return ended({"slurm": _slurm_view(answer.info), "slurm_away": answer.away, "step": step})
