"""`tf-slurm status JOB`: one table of every task (role, node, state, exit status) plus Slurm's view.

Reads the job folder (host/job_folder.py): `status.json`, written by exec's hub while the step
runs and once more at its end, `batch.json`, written by batch-step, and the end of the first failing
task's log (what it said: its fix line or error); asks Slurm (`scontrol show job`) for the job's
own state, and says why a pending job waits (plan/slurm_reasons.py).  Works during the job and after it.

Slurm's controller away is not "Slurm does not know the job": status says the controller did not
answer (host.scontrol.ask_job, one try) and shows what the job folder knows; `--watch` goes on.  With
no status.json, the tasks' logs may say why every task failed before the hub wrote one (an address
that does not resolve): their own error lines are shown.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import Any, Callable, Dict, List, Mapping, Optional

from tf_for_slurm.cli import start_view, training_view
from tf_for_slurm.cli.table import render_table
from tf_for_slurm.errors import UsageError, bad_value
from tf_for_slurm.host import job_folder, settings
from tf_for_slurm.host.scontrol import JobAnswer, ask_job
from tf_for_slurm.plan import job_state
from tf_for_slurm.plan.failure_words import log_explains, why_from_log
from tf_for_slurm.plan.goodput import Account, account, status_line
from tf_for_slurm.plan.job_report import MAX_EVENTS, Timeline, parse_timeline, started_short
from tf_for_slurm.plan.slurm_reasons import reason_text
from tf_for_slurm.plan.step_status import failure_text, task_rows, went_on_without
from tf_for_slurm.supervise.batch_step import read_checkpoint_step

ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
         "DEADLINE")  # Slurm's final job states
FOLDER_HELP = (f"the folder of job folders (default: {settings.JOBS_ROOT}, else "
               f"{settings.default_text(settings.JOBS_ROOT)})")
STALE = 30.0  # seconds without a status write after which a step's hub is taken for gone (it writes every 5 s)
COLUMNS = ["rank", "role", "index", "node", "state", "status", "restarts", "heard"]
EARLY_LOGS = 32  # task logs read, at most, for why the tasks failed before the step's status was written
EARLY_SHOWN = 3  # of those, the lines shown
TIMELINE_BYTES = 4 * 1024 * 1024  # of timeline.jsonl read (its end: the newest events), here and by report
_TASK_LOG = re.compile(r"^task-(\d+)\.out$")  # job_folder.TASK_LOG's names
_LABEL = re.compile(r"^\s*(\d+): ?(.*)$")  # srun -l's rank label (a heterogeneous job's task lines in job.out)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `tf-slurm status`."""
    parser.add_argument("job", metavar="JOB", help="a job id (its folder under --folder) or a job folder")
    parser.add_argument("--folder", default=None, metavar="DIR",
                        help=FOLDER_HELP)
    parser.add_argument("--json", action="store_true", help="one JSON object: slurm, step, batch")
    parser.add_argument("--watch", nargs="?", type=float, const=2.0, default=None, metavar="SECONDS",
                        help="print again every SECONDS (default 2) until the job has ended")


def slurm_view(info: Optional[Mapping[str, str]]) -> Optional[Dict[str, str]]:
    """The parts of `scontrol show job` that status shows."""
    if info is None:
        return None
    keys = ("JobState", "Reason", "NodeList", "RunTime", "TimeLimit", "StartTime", "EndTime", "Restarts", "WorkDir")
    return {k: info[k] for k in keys if k in info}


def early_failures(folder: str) -> List[Dict[str, Any]]:
    """Why the tasks failed before the step's status was written, from their logs in the job folder:
    one task-RANK.out each (submit, `local --output`), else srun -l's labelled lines in the batch log
    (a heterogeneous job), else the batch log's own error.  [{rank (None: the batch log), detail, log}]."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    ranks = sorted(int(m.group(1)) for m in map(_TASK_LOG.match, names) if m)
    found: List[Dict[str, Any]] = []
    for rank in ranks[:EARLY_LOGS]:
        detail = why_from_log(job_folder.read_tail(job_folder.task_log(folder, rank)) or "")
        if detail:
            found.append({"rank": rank, "detail": detail, "log": job_folder.task_log(folder, rank)})
    if found:
        return found
    batch_log = os.path.join(folder, job_folder.BATCH_LOG)
    text = job_folder.read_tail(batch_log) or ""
    by_rank: Dict[int, List[str]] = {}
    own: List[str] = []
    for line in text.splitlines():
        m = _LABEL.match(line)
        if m:
            by_rank.setdefault(int(m.group(1)), []).append(m.group(2))
        else:
            own.append(line)
    for rank in sorted(by_rank)[:EARLY_LOGS]:
        detail = why_from_log("\n".join(by_rank[rank]))
        if detail:
            found.append({"rank": rank, "detail": detail, "log": batch_log})
    detail = None if found else why_from_log("\n".join(own))
    return found + ([{"rank": None, "detail": detail, "log": batch_log}] if detail else [])


def gather(folder: str, job_id: Optional[str], lookup: Callable[[str], JobAnswer],
           checkpoint: Callable[[Optional[str]], Optional[int]] = read_checkpoint_step) -> Dict[str, Any]:
    """Everything `status` shows, as one JSON-ready dict: `slurm` (None: Slurm does not know the job,
    or did not answer: then `slurm_away` is the line that said so), `step`, `batch`, once training
    started `goodput` (plan.goodput's account) and `goodput_line`, and, without a step status,
    `early_failures` (what the tasks' logs say)."""
    step = job_folder.read_json(os.path.join(folder, job_folder.STATUS))
    batch = job_folder.read_json(os.path.join(folder, job_folder.BATCH))
    job = job_id or (str(step["job"]) if step else None) or (str(batch["job"]) if batch else None)
    # the account reads the files as written (compact rows), before the rows become dicts below
    acc = job_account(job or "?", step, batch, timeline_tail(folder)) if training_started(step) else None
    if step is not None:  # rows as dicts for people and scripts (the file keeps them compact)
        step["tasks"] = task_rows(step)
        step.pop("columns", None)
        failure = step.get("first_failure")
        if failure and log_explains(failure["status"]):
            log = job_folder.task_log(folder, failure["rank"])
            failure["log"] = log if os.path.isfile(log) else None
            if failure.get("detail") is None:  # the hub read nothing, or did not live to (srun killed it)
                failure["detail"] = job_folder.failure_detail(folder, failure["rank"])
    if batch is not None and batch.get("checkpoint_dir"):
        batch["checkpoint_now"] = checkpoint(batch["checkpoint_dir"])
    answer = lookup(job) if job else JobAnswer()
    return {"job": job, "folder": folder, "slurm": slurm_view(answer.info), "slurm_away": answer.away,
            "step": step, "batch": batch, "goodput": acc.to_json() if acc else None,
            "goodput_line": status_line(acc) if acc else None,
            "early_failures": None if step else early_failures(folder)}


def training_started(step: Optional[Mapping[str, Any]]) -> bool:
    """A task reported a training step (status.json's progress): before that, no account is worth a line."""
    progress = step.get("progress") if isinstance(step, Mapping) else None
    return isinstance(progress, Mapping) and any(isinstance(t, Mapping) and type(t.get("step")) is int
                                                 for t in progress.values())


def timeline_tail(folder: str) -> Optional[Timeline]:
    """The folder's timeline.jsonl, its last TIMELINE_BYTES only (a long job's file stays a bounded read),
    or None where there is none; cli/report.py's read_timeline adds its notes."""
    text = job_folder.read_tail(os.path.join(folder, job_folder.TIMELINE), TIMELINE_BYTES)
    return None if text is None else parse_timeline(text, MAX_EVENTS)


def job_account(job: str, step: Optional[Mapping[str, Any]], batch: Optional[Mapping[str, Any]],
                timeline: Optional[Timeline], clock: Optional[float] = None) -> Account:
    """plan.goodput's account of the job's files (as read, any may be None), now (where a running job's ends)."""
    return account(job, step, batch, timeline, time.time() if clock is None else clock)


def _ago(now: float, when: Optional[float]) -> str:
    return "-" if when is None else f"{max(0.0, now - when):.0f}s"


def _clock(when: object) -> str:
    return time.strftime("%H:%M:%S", time.localtime(when)) if isinstance(when, (int, float)) else "--:--:--"


def run_history(batch: Mapping[str, Any]) -> List[str]:
    """The job's lost nodes, relaunches and requeues in order, one line each with its time."""
    lines: List[str] = []
    for run in [*(batch.get("history") or []), batch]:
        if not isinstance(run, Mapping):
            continue
        short = started_short(run)
        if short:
            lines.append(f"{_clock(run.get('started_at'))} run {run.get('run', '?')}: started with {short[0]} of "
                         f"{short[1]} workers (an allocation smaller than the role list)")
        for r in run.get("relaunches") or []:
            spares = f", {','.join(r.get('spares') or [])} in place" if r.get("spares") else ""
            fewer = (f", {r['workers']} of {run.get('workers_planned', '?')} workers"
                     if isinstance(r.get("workers"), int) else "")
            lines.append(f"{_clock(r.get('at'))} run {run.get('run', '?')}: lost {','.join(r.get('lost') or [])}; "
                         f"relaunched on {','.join(r.get('nodes') or [])}{spares}{fewer}")
        if run is not batch and run.get("state") in ("requeued", "ended"):
            lines.append(f"{_clock(run.get('ended_at'))} run {run.get('run', '?')}: {run['state']}: "
                         f"{run.get('decision') or '?'}")
    return lines


def render(view: Mapping[str, Any], now: float) -> str:
    """The view for people: a few header lines and one row per task."""
    lines: List[str] = []
    slurm, step, batch = view.get("slurm"), view.get("step"), view.get("batch")
    job = view.get("job") or "?"
    if slurm:  # Slurm's state, or what the job folder says it was with Slurm's word beside it (plan.job_state)
        lines.append(job_line(str(job), slurm, job_state.state_text(slurm, batch, step)))
    elif view.get("slurm_away"):
        lines.append(f"job {job}: Slurm's controller does not answer ({view['slurm_away']}); "
                     "what the job folder knows follows")
    else:
        lines.append(f"job {job}: Slurm does not know it (ended a while ago, or not a Slurm job)")
    if batch:
        text = f"run {batch.get('run', '?')}"
        ckpt = batch.get("checkpoint_now", batch.get("checkpoint"))
        target = batch.get("target")
        text += f"; checkpoint at step {ckpt if ckpt is not None else 'none'}"
        text += f" of target {target}" if target is not None else " (no target)"
        if batch.get("decision"):
            text += f"; batch-step: {batch['decision']}"
        lines.append(text)
        lines += [f"  {line}" for line in run_history(batch)]
    if not step:
        return "\n".join(lines + no_step_lines(view))
    head = f"step {step['job']}.{step['step']}: {step['strategy']}, {step['state']}"
    if step.get("status") is not None:
        head += f" with status {step['status']}"
    counts = step.get("counts") or {}
    head += " (" + ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) + ")"
    if step["state"] != "ended" and now - step["updated_at"] > STALE:
        head += f"; not updated for {now - step['updated_at']:.0f} s (the chief's supervisor is gone?)"
    lines.append(head)
    failure = step.get("first_failure")
    if failure:
        text = failure_text(failure)
        if not failure.get("detail") and failure.get("log"):  # it said nothing we know: where to look
            text += f" (its log: tf-slurm logs {job} --task {failure['rank']})"
        lines.append(f"first failure: {text}")
    if step.get("lost"):
        lines.append(f"lost nodes: {went_on_without(step)}")
    names = {t["rank"]: f"{t['role']} {t['index']} ({t['node']})" for t in step["tasks"]}
    for line in (start_view.start_line(step), training_view.training_line(step, slurm, batch, now),
                 view.get("goodput_line"), training_view.slow_line(step, names)):
        if line:
            lines.append(line)
    rows = []
    for t in step["tasks"]:
        status = t.get("status")
        heard = _ago(now, t.get("last_heard")) if t["state"] in ("running", "starting", "restarting") else "-"
        rows.append({**t, "status": "-" if status is None else status, "heard": heard,
                     "chief": t["rank"] == step.get("chief")})
    extra = training_view.table_rows(step, rows, now) + start_view.table_rows(step, rows, now)
    lines.append(render_table(rows, COLUMNS + extra, mark="chief"))
    lines.append("# * the chief")
    return "\n".join(lines)


def no_step_lines(view: Mapping[str, Any]) -> List[str]:
    """Without a step status: what the tasks' logs say about why they failed, else that none is there yet."""
    folder, early = view.get("folder"), view.get("early_failures")
    if not early:
        return [f"no step status yet in {folder} (the step has not started, or exec wrote none)"]
    tasks = early[0]["rank"] is not None
    lines = [f"no step status in {folder}: the tasks failed before it was written; their logs say:" if tasks
             else f"no step status in {folder}: the batch log says:"]
    lines += [f"  {'task ' + str(e['rank']) if tasks else 'batch log'}: {e['detail']}" for e in early[:EARLY_SHOWN]]
    more = "" if len(early) <= EARLY_SHOWN else f"{len(early) - EARLY_SHOWN} more; "
    where = f" --task {early[0]['rank']}" if tasks else ""
    lines.append(f"  ({more}the whole log: tf-slurm logs {view.get('job') or '?'}{where})")
    return lines


def job_line(job: str, slurm: Mapping[str, str], state: Optional[str] = None) -> str:
    """Slurm's view in one line: the state (`state`: in words, plan.job_state's), the nodes (when it has
    some), the times, and why it waits or ended, in words with Slurm's code ('job 7: PENDING: waiting for
    its turn: ... (Priority); ...')."""
    state, nodes = state or slurm.get("JobState", "?"), slurm.get("NodeList", "")
    why = reason_text(slurm.get("Reason"), job)
    requeued = f"requeued {slurm.get('Restarts', '0')} time(s)"
    if state == "PENDING":  # no nodes, no run time yet: why it waits comes first
        return f"job {job}: PENDING" + (f": {why}" if why else "") + \
            f"; time limit {slurm.get('TimeLimit', '?')}, {requeued}"
    where = f" on {nodes}" if nodes and nodes not in ("(null)", "None assigned") else ""
    said = "Slurm's reason: " if why and state != slurm.get("JobState", "?") else ""  # not what the job was
    return (f"job {job}: {state}{where}, run time {slurm.get('RunTime', '?')} of {slurm.get('TimeLimit', '?')}, "
            f"{requeued}" + (f"; {said}{why}" if why else ""))


def locate(job: str, root: Optional[str], lookup: Callable[[str], Optional[Dict[str, str]]]) -> tuple:
    """(folder, job id or None) for a job id or a folder given on the command line."""
    def workdir(job_id: str) -> Optional[str]:
        info = lookup(job_id)
        return info.get("WorkDir") if info else None

    folder = job_folder.find(job, job_folder.jobs_root(given=root), workdir)
    if not os.path.isdir(job):
        return folder, job
    base = os.path.basename(os.path.normpath(folder))
    return folder, base if base.isdigit() else None


def main(args: argparse.Namespace, out=None, lookup: Callable[[str], JobAnswer] = ask_job) -> int:
    """`tf-slurm status`: print the view once, or every --watch seconds until the job has ended (an
    outage of Slurm's controller is not an end: the view is drawn again until Slurm answers)."""
    out = out or sys.stdout
    if args.watch is not None and not 0.2 <= args.watch <= 3600:
        raise UsageError(bad_value("--watch", args.watch, "seconds between 0.2 and 3600"))
    asked: Dict[str, JobAnswer] = {}

    def info(job_id: str) -> Optional[Dict[str, str]]:
        asked[job_id] = lookup(job_id)
        return asked[job_id].info

    try:
        folder, job_id = locate(args.job, args.folder, info)
    except UsageError as exc:  # the folder may be under the job's working directory, which Slurm did not say
        away = next((a.away for a in asked.values() if a.away), None)
        if away is None:
            raise
        raise UsageError(f"{exc}; Slurm's controller does not answer ({away}), so the job's working "
                         "directory is unknown: try again later, or give the job folder") from None
    while True:
        view = gather(folder, job_id, lookup)
        if args.json:
            out.write(json.dumps(view) + "\n")
        else:
            if args.watch is not None and out.isatty():
                out.write("\x1b[H\x1b[2J")
            out.write(render(view, time.time()) + "\n")
        out.flush()
        if args.watch is None or ended(view):
            return 0
        time.sleep(args.watch)


def ended(view: Mapping[str, Any], now: Optional[float] = None) -> bool:
    """The job has ended: Slurm says so; or Slurm does not know it and the step's last word was its
    end, or no word for STALE seconds (its hub is gone: nothing will change any more).  Never while
    Slurm's controller does not answer (`slurm_away`): the job may be running, or requeued."""
    slurm = view.get("slurm")
    if slurm is not None:
        return slurm.get("JobState", "") in ENDED
    if view.get("slurm_away"):
        return False
    step = view.get("step")
    if step is None or step.get("state") == "ended":
        return True
    now = time.time() if now is None else now
    return now - float(step.get("updated_at", 0.0)) > STALE
