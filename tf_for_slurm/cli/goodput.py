"""`tf-slurm goodput JOB...`: where each job's time went, as a table (or JSON, or CSV) of plan.goodput's accounts.

Reads each job folder as `status` and `report` do (host/job_folder.py: `status.json`, `batch.json`,
and the last 4 MiB of `timeline.jsonl` through cli/report.py's read_timeline); the account ends now for
a job that runs or waits requeued, at its last known end for one that ended (plan.goodput's
account_end: from the files, no Slurm call).  Why a table of several jobs: jobs compare (a longer
time limit, a shorter checkpoint interval), and `--csv` feeds a spreadsheet across many.

The table's parts are shares of each job's wall time (its first submit, else start, to its end or
now): the queue has wall time and no node-seconds, so the wall time is the one base every part has;
the goodput column is the node-seconds' (training node-seconds over all of them), as status says it.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from typing import IO, Callable, Dict, List, Optional, Sequence, Tuple

from tf_for_slurm.cli.report import job_name, read_folder
from tf_for_slurm.cli.status import FOLDER_HELP, job_account, locate
from tf_for_slurm.cli.table import render_table
from tf_for_slurm.host.scontrol import JobAnswer, ask_job
from tf_for_slurm.plan.goodput import CSV_FIELDS, PARTS, Account, csv_row
from tf_for_slurm.plan.goodput_words import wall

HEADS = {"start_up": "start-up", "end_wait": "end wait"}  # a part's column head where it is not its name
COLUMNS = ["job", "total", "node-hours", "goodput"] + [HEADS.get(k, k) for k in PARTS]
FOOT = ("# parts: % of each job's wall time (its first submit, else start, to its end or now); "
        "goodput: training's share of its node-seconds")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `tf-slurm goodput`."""
    parser.add_argument("jobs", nargs="+", metavar="JOB", help="job ids (each one's folder under --folder) or "
                        "job folders")
    parser.add_argument("--folder", default=None, metavar="DIR", help=FOLDER_HELP)
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="JSON: one job's account, a list of several")
    form.add_argument("--csv", action="store_true", help="CSV: a header line, then one row per job")
    parser.add_argument("-v", "--verbose", action="store_true", help="also how each figure was measured (notes)")


def share(part: float, total: float) -> str:
    """A part's share of the wall time: '81%', '<1%' for a few seconds, '-' for none."""
    if part <= 0 or total <= 0:
        return "-"
    return "<1%" if part / total < 0.005 else f"{part / total:.0%}"


def row(acc: Account) -> Dict[str, str]:
    """The account's table row."""
    return {"job": acc.job, "total": wall(acc.total_s), "node-hours": f"{acc.node_s / 3600:.2f}",
            "goodput": "-" if acc.goodput is None else f"{acc.goodput:.0%}",
            **{HEADS.get(k, k): share(v, acc.total_s) for k, v in acc.parts.items()}}


def lines(accounts: Sequence[Tuple[Account, List[str]]], verbose: bool) -> List[str]:
    """The table, its foot, then each job's advice and (verbose) its notes, one line each."""
    out = [render_table([row(acc) for acc, _ in accounts], COLUMNS), FOOT]
    for acc, read in accounts:
        out += [f"{acc.job}: {a}" for a in acc.advice]
        out += [f"{acc.job}: note: {n}" for n in [*acc.notes, *read]] if verbose else []
    return out


def accounts_of(jobs: Sequence[str], root: Optional[str],
                lookup: Callable[[str], JobAnswer]) -> List[Tuple[Account, List[str]]]:
    """Each job's account and the notes on its timeline's reading; every job is found before any is
    read, so a mistyped one is one line (UsageError) and nothing printed."""
    folders = [locate(job, root, lambda j: lookup(j).info) for job in jobs]
    out = []
    for folder, job_id in folders:
        status, batch, timeline, notes = read_folder(folder, "account")
        out.append((job_account(job_name(folder, job_id, status, batch), status, batch, timeline), notes))
    return out


def main(args: argparse.Namespace, out: Optional[IO[str]] = None,
         lookup: Callable[[str], JobAnswer] = ask_job) -> int:
    """`tf-slurm goodput`: the accounts as a table (the default), JSON or CSV on stdout."""
    out = out or sys.stdout
    accounts = accounts_of(args.jobs, args.folder, lookup)
    if args.json:
        found = [acc.to_json() for acc, _ in accounts]
        out.write(json.dumps(found[0] if len(found) == 1 else found) + "\n")
    elif args.csv:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(CSV_FIELDS)
        writer.writerows(csv_row(acc) for acc, _ in accounts)
    else:
        out.write("\n".join(lines(accounts, args.verbose)) + "\n")
    return 0
