"""The step's state as plain data: what `status.json` holds and the summary the hub logs at the end.

Pure: the hub's `StepWatch`, the plan's tasks and two clocks in, a JSON-ready dict out; the
summary lines are made from that dict, so the file and the log never disagree.  Times in the
dict are wall-clock seconds (epoch): a reader in another process compares them with its own clock.
"""

from __future__ import annotations

import time
from typing import Any, Dict, Iterable, List, Mapping, Optional

from tf_for_slurm.plan.step_watch import StepWatch
from tf_for_slurm.plan.strategy import StepRoles

FORMAT = 1  # bumped when a reader could misread the dict
COLUMNS = ("rank", "role", "index", "node", "state", "status", "restarts", "last_heard")  # of a task row
STATES = ("starting", "running", "restarting", "exited", "ending", "ended", "lost")  # a task's, in the file


def task_state(watch: StepWatch, rank: int) -> str:
    """One word for a task: starting (not connected), running, restarting (its command failed and
    is being started again in place), exited (its command ended by itself), ending/ended (told to
    end by the supervisor), lost (its supervisor vanished)."""
    if rank in watch.told:
        return "ended" if rank in watch.settled else "ending"
    if rank in watch.exited:
        return "exited"
    if rank in watch.lost:
        return "lost"
    if rank in watch.settled:
        failure = watch.failure
        return "lost" if failure is not None and failure.rank == rank else "ended"
    if rank in watch.restarting:
        return "restarting"
    return "running" if rank in watch.joined else "starting"


def _status_of(watch: StepWatch, rank: int) -> Optional[int]:
    if rank in watch.exited:
        return watch.exited[rank]
    if rank in watch.told:
        return watch.told[rank]
    failure = watch.failure
    return failure.status if failure is not None and failure.rank == rank else None


def snapshot(tasks: Iterable[Any], watch: StepWatch, roles: StepRoles, *, job: str, step: str,
             mono: float, wall: float, over: bool = False, detail: Optional[str] = None,
             progress: Optional[Mapping[str, Any]] = None,
             hangs: Iterable[Mapping[str, Any]] = (), start: Optional[Mapping[str, Any]] = None,
             left_out: int = 0) -> Dict[str, Any]:
    """The step as a JSON-ready dict (`tasks`: anything with rank, role, index, node).

    mono/wall: the same instant on the hub's monotonic clock and on the wall clock; over: the hub
    is exiting (every task's state is final); detail: the first failing task's own words, from its
    log (plan.failure_words.why_from_log), when known; progress: each reporting task's training
    progress by rank (as text), from its reports (plan.train_progress.Track.to_json); hangs: the
    tasks the hub found hung (rank, at, detail: supervise.hang_watch), the last ones; start: while no
    step was made, each running task's start-up phase and the wait the hub named (supervise.start_wait);
    left_out: the workers the user's role list names that the step has no task for (an allocation
    smaller than asked, plan.roles.fitted_to_step)."""
    def at(t: Optional[float]) -> Optional[float]:
        return None if t is None else round(wall - (mono - t), 3)

    by_rank = {t.rank: t for t in tasks}

    def who(rank: int) -> Dict[str, Any]:
        t = by_rank.get(rank)
        return {"rank": rank, "role": getattr(t, "role", "?"), "index": getattr(t, "index", -1),
                "node": getattr(t, "node", "?")}

    rows: List[List[Any]] = []  # lists, not dicts: a quarter of the cost at thousands of tasks
    counts: Dict[str, int] = {}
    offset = wall - mono
    heard, local, restarts = watch.heard, watch.local_rank, watch.restarts
    for rank in sorted(by_rank):
        t = by_rank[rank]
        state = task_state(watch, rank)
        counts[state] = counts.get(state, 0) + 1
        last = heard.get(rank)
        when = round(wall, 1) if rank == local else (None if last is None else round(offset + last, 1))
        rows.append([rank, t.role, t.index, t.node, state, _status_of(watch, rank), restarts.get(rank, 0), when])
    failure = watch.failure
    first = watch.first_exit
    return {
        "format": FORMAT, "job": job, "step": step, "strategy": roles.strategy, "rule": roles.rule,
        "state": "ended" if over else ("ending" if watch.decided else "running"),
        "status": watch.status if watch.decided else None,
        "started_at": at(watch.start), "updated_at": round(wall, 3), "decided_at": at(watch.decided_at),
        "chief": roles.chief_rank,
        "first_failure": None if failure is None else {
            **who(failure.rank), "status": failure.status, "reason": f"{place(who(failure.rank))} {failure.reason}",
            "note": failure.note or None, "detail": detail},
        "first_exit": None if first is None else {**who(first[0]), "status": first[1], "at": at(first[2])},
        "lost": [{**who(rank), "reason": f"{place(who(rank))} {why}", "at": at(when)}
                 for rank, (why, when) in sorted(watch.lost.items(), key=lambda item: item[1][1])],
        "counts": counts, "columns": list(COLUMNS), "tasks": rows, "progress": dict(progress or {}),
        "hangs": [dict(h) for h in hangs],
        **({"start": dict(start)} if start else {}),
        **({"workers_left_out": left_out} if left_out else {}),
        "running_again": {str(r): at(t) for r, t in watch.running_again.items()},  # a restarted task's new start
    }


def task_rows(status: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """The file's task rows as dicts (column name -> value)."""
    columns = status.get("columns", COLUMNS)
    return [row if isinstance(row, dict) else dict(zip(columns, row)) for row in status.get("tasks", [])]


def name(task: Mapping[str, Any]) -> str:
    """'worker 1 (rank 2, node3)' for a task row of the dict."""
    return f"{task['role']} {task['index']} (rank {task['rank']}, {task['node']})"


def place(task: Mapping[str, Any]) -> str:
    """'worker 1 on node3': a task as a user names it (its role, index and node; the rank is the table's)."""
    node = task.get("node")
    return f"{task['role']} {task['index']}" + (f" on {node}" if node not in (None, "", "?") else "")


def failure_text(failure: Mapping[str, Any]) -> str:
    """The first failure in one line: what happened, the task's own words (its fix line or error,
    'detail'), why it was not restarted ('note'): 'worker 0 on node2 failed (exit 1): <its fix line>'."""
    text = str(failure["reason"])
    if failure.get("detail"):
        text += f": {failure['detail']}"
    if failure.get("note"):
        text += f"; {failure['note']}"
    return text


def went_on_without(status: Mapping[str, Any]) -> str:
    """'finished with 3 of 4 workers (worker 2 on node3 lost at 12:03:10)': the tasks the step went
    on without (status['lost']), in the order they were lost, with the count left of each role."""
    rows = task_rows(status)
    lost = status.get("lost") or []
    counts = []
    for role in dict.fromkeys(t["role"] for t in lost):
        total = sum(1 for t in rows if t["role"] == role)
        gone = sum(1 for t in lost if t["role"] == role)
        counts.append(f"{total - gone} of {total} {role}s")
    when = ", ".join(f"{place(t)} lost" + (f" at {clock(t['at'])}" if t.get("at") else "") for t in lost)
    verb = "finished" if status.get("status") == 0 else "went on"
    return f"{verb} with {' and '.join(counts)} ({when})"


def clock(epoch: float) -> str:
    """'12:03:10': an epoch time of day on this machine's clock (the job's log is read next to it)."""
    return time.strftime("%H:%M:%S", time.localtime(epoch))


def summary_lines(status: Mapping[str, Any]) -> List[str]:
    """The step's end in a few lines for the job's log: what happened, who was first, who was ended."""
    started = status.get("started_at") or status["updated_at"]
    took = status["updated_at"] - started
    failure = status.get("first_failure")
    code = status.get("status")
    why = failure_text(failure) if failure else "training is over"
    if status.get("lost"):
        why += "; " + went_on_without(status)
    lines = [f"step {status['job']}.{status['step']} ({status['strategy']}, {len(status['tasks'])} tasks) "
             f"ended with status {code if code is not None else '?'} after {took:.1f} s: {why}"]
    first = status.get("first_exit")
    if first is not None and (failure is None or first["rank"] != failure["rank"]):  # the failure is said once
        lines.append(f"first to end: {name(first)}, status {first['status']}, {first['at'] - started:.1f} s "
                     "after the start")
    rows = task_rows(status)
    ended = [t for t in rows if t["state"] in ("ended", "ending")]
    exited = [t for t in rows if t["state"] == "exited"]
    failed = [t for t in exited if t["status"] not in (0, None)]
    lost = [t for t in rows if t["state"] == "lost"]
    unknown = [t for t in rows if t["state"] in ("starting", "running", "restarting")]
    text = f"tasks: {len(exited)} exited by themselves ({len(failed)} non-zero), {len(ended)} ended by the supervisor"
    for label, group in (("", ended), ("lost", lost), ("unaccounted for", unknown)):
        if group:
            text += f"; {len(group)} {label}" if label else ""
            more = f" and {len(group) - 4} more" if len(group) > 4 else ""
            text += ": " + ", ".join(name(t) for t in group[:4]) + more
    restarts = sum(t.get("restarts", 0) for t in rows)
    lines.append(text + f"; restarts: {restarts}")
    return lines
