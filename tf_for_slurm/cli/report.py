"""`tf-slurm report JOB`: one self-contained HTML page of a job's timeline, written into its folder.

Reads the job folder as `status` does (host/job_folder.py: `status.json`, `batch.json`) and the
timeline every run's hub appends to (`timeline.jsonl`, one event a line; its last MAX_BYTES only,
a line that is not an event skipped); plan/job_report.py makes the model, cli/report_page.py the
page.  Why a file and not a server: the page is for reading a job later, anywhere, offline.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import IO, Callable, List, Optional, Tuple

from tf_for_slurm.cli.report_page import page
from tf_for_slurm.cli.status import FOLDER_HELP, locate
from tf_for_slurm.errors import UsageError
from tf_for_slurm.host import job_folder
from tf_for_slurm.host.scontrol import JobAnswer, ask_job
from tf_for_slurm.plan.job_report import MAX_EVENTS, Report, Timeline, build, parse_timeline

REPORT = "report.html"
MAX_BYTES = 4 * 1024 * 1024  # of the timeline read (its end: the newest events)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `tf-slurm report`."""
    parser.add_argument("job", metavar="JOB", help="a job id (its folder under --folder) or a job folder")
    parser.add_argument("--folder", default=None, metavar="DIR", help=FOLDER_HELP)
    parser.add_argument("--output", default=None, metavar="PATH",
                        help=f"where to write the page (default: {REPORT} in the job folder)")


def read_timeline(folder: str) -> Tuple[Optional[Timeline], List[str]]:
    """(Timeline or None when the folder has none, notes on what was left out)."""
    path = os.path.join(folder, job_folder.TIMELINE)
    text = job_folder.read_tail(path, MAX_BYTES)
    if text is None:
        return None, []
    timeline = parse_timeline(text, MAX_EVENTS)
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


def report_of(folder: str, job_id: Optional[str]) -> Report:
    """The model of the job in `folder` (UsageError when the folder holds none of the three files)."""
    status = job_folder.read_json(os.path.join(folder, job_folder.STATUS))
    batch = job_folder.read_json(os.path.join(folder, job_folder.BATCH))
    timeline, notes = read_timeline(folder)
    if status is None and batch is None and timeline is None:
        raise UsageError(f"nothing to report in {folder}: no {job_folder.STATUS}, {job_folder.BATCH} or "
                         f"{job_folder.TIMELINE} (the job's step has not started yet?)")
    job = job_id or str((status or batch or {}).get("job") or os.path.basename(os.path.normpath(folder)))
    return build(job, status, batch, timeline, notes)


def main(args: argparse.Namespace, out: Optional[IO[str]] = None,
         lookup: Callable[[str], JobAnswer] = ask_job) -> int:
    """`tf-slurm report`: write the page, print its path."""
    out = out or sys.stdout
    folder, job_id = locate(args.job, args.folder, lambda job: lookup(job).info)
    path = args.output or os.path.join(folder, REPORT)
    try:
        job_folder.write_text(path, page(report_of(folder, job_id)))
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    out.write(path + "\n")
    return 0
