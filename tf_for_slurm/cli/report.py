"""`tf-slurm report JOB`: one self-contained HTML page of a job's timeline, written into its folder.

Reads the job folder as `status` does (host/job_folder.py: `status.json`, `batch.json`) and the
timeline every run's hub appends to (`timeline.jsonl`, one event a line; its last MAX_BYTES only,
a line that is not an event skipped); plan/job_report.py makes the model, plan/goodput.py the
account its goodput bar draws, cli/report_page.py the page.  Slurm is asked once (`scontrol show
job`, when the job has an id), so the summary says what the job was where Slurm's word is wrong
(plan/job_state.py).  Why a file and not a server: the page is for reading a job later, anywhere, offline.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import IO, Any, Callable, Dict, List, Mapping, Optional, Tuple

from tf_for_slurm.cli.report_page import page
from tf_for_slurm.cli.status import FOLDER_HELP, TIMELINE_BYTES, job_account, locate, timeline_tail
from tf_for_slurm.errors import UsageError
from tf_for_slurm.host import job_folder
from tf_for_slurm.host.scontrol import JobAnswer, ask_job
from tf_for_slurm.plan.job_report import MAX_EVENTS, Report, Timeline, build

REPORT = "report.html"
MAX_BYTES = TIMELINE_BYTES  # of the timeline read (its end: the newest events)
Files = Tuple[Optional[Dict[str, Any]], Optional[Dict[str, Any]], Optional[Timeline], List[str]]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `tf-slurm report`."""
    parser.add_argument("job", metavar="JOB", help="a job id (its folder under --folder) or a job folder")
    parser.add_argument("--folder", default=None, metavar="DIR", help=FOLDER_HELP)
    parser.add_argument("--output", default=None, metavar="PATH",
                        help=f"where to write the page (default: {REPORT} in the job folder)")


def read_timeline(folder: str) -> Tuple[Optional[Timeline], List[str]]:
    """(Timeline or None when the folder has none, notes on what was left out)."""
    path = os.path.join(folder, job_folder.TIMELINE)
    timeline = timeline_tail(folder)
    if timeline is None:
        return None, []
    notes: List[str] = []
    try:
        size = os.stat(path).st_size
    except OSError:
        size = 0
    if size > MAX_BYTES:
        notes.append(f"{job_folder.TIMELINE} is {size / 2**20:.1f} MiB: only its last {MAX_BYTES // 2**20} MiB "
                     "are read (the earliest events are not shown)")
    if timeline.dropped:
        notes.append(f"only the newest {MAX_EVENTS} of its events are shown ({timeline.dropped} earlier ones are not)")
    if timeline.skipped:
        notes.append(f"{timeline.skipped} line(s) of {job_folder.TIMELINE} were not events and were skipped")
    return timeline, notes


def read_folder(folder: str, what: str = "report") -> Files:
    """(status.json, batch.json, the timeline, notes on what was left out of it); UsageError ('nothing to
    `what` in ...') when the folder holds none of the three files."""
    status = job_folder.read_json(os.path.join(folder, job_folder.STATUS))
    batch = job_folder.read_json(os.path.join(folder, job_folder.BATCH))
    timeline, notes = read_timeline(folder)
    if status is None and batch is None and timeline is None:
        raise UsageError(f"nothing to {what} in {folder}: no {job_folder.STATUS}, {job_folder.BATCH} or "
                         f"{job_folder.TIMELINE} (the job's step has not started yet?)")
    return status, batch, timeline, notes


def job_name(folder: str, job_id: Optional[str], status: Optional[Mapping[str, Any]],
             batch: Optional[Mapping[str, Any]]) -> str:
    """The job's id: as given, else as its files say, else its folder's name."""
    return job_id or str((status or batch or {}).get("job") or os.path.basename(os.path.normpath(folder)))


def report_of(folder: str, job_id: Optional[str], slurm: Optional[Mapping[str, str]] = None) -> Report:
    """The model of the job in `folder` (UsageError when the folder holds none of the three files);
    `slurm`: Slurm's view of the job (`scontrol show job`'s fields), None when not asked or unknown."""
    status, batch, timeline, notes = read_folder(folder)
    return build(job_name(folder, job_id, status, batch), status, batch, timeline, notes, slurm=slurm)


def page_of(folder: str, job_id: Optional[str], slurm: Optional[Mapping[str, str]] = None) -> str:
    """The page of the job in `folder`: its model and its goodput account, from one read of its files."""
    status, batch, timeline, notes = read_folder(folder)
    job = job_name(folder, job_id, status, batch)
    return page(build(job, status, batch, timeline, notes, slurm=slurm),
                goodput=job_account(job, status, batch, timeline))


def main(args: argparse.Namespace, out: Optional[IO[str]] = None,
         lookup: Callable[[str], JobAnswer] = ask_job) -> int:
    """`tf-slurm report`: write the page, print its path.  Slurm is asked once at most (the answer that
    found the folder is the one the summary uses)."""
    out = out or sys.stdout
    asked: Dict[str, JobAnswer] = {}

    def ask(job: str) -> JobAnswer:
        if job not in asked:
            asked[job] = lookup(job)
        return asked[job]

    folder, job_id = locate(args.job, args.folder, lambda job: ask(job).info)
    path = args.output or os.path.join(folder, REPORT)
    html = page_of(folder, job_id, ask(job_id).info if job_id else None)
    try:
        job_folder.write_text(path, html)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    out.write(path + "\n")
    return 0
