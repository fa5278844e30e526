"""The step's timeline: what happened to each task and when, as events read off two status snapshots.

Why from snapshots: the hub already builds one (plan.step_status.snapshot) each time it writes
`status.json`; the difference between the last one written and the next is every task that
started, restarted, hung, was lost, exited or was ended in between, at the cost of one pass over
the rows the hub just built.  A restart between two writes is not missed (the rows count
restarts); its time is the write's, within a second.  Each hub of a job appends its events to the
job folder's `timeline.jsonl`, so the file spans a job's runs (requeues, relaunches) and
`tf-slurm report` draws it.  Pure: dicts in, dicts and lines out.
"""

from __future__ import annotations

import json
import math
from typing import Any, Dict, List, Mapping, Optional

from tf_for_slurm.plan.step_status import COLUMNS

EVENTS = ("step_start", "start", "restart", "hang", "lost", "exit", "end", "step_end")
FIELDS = ("at", "event", "job", "step", "rank", "role", "index", "node", "status", "detail")
MAX_LINE = 2048  # bytes of one line; a longer detail is cut
MAX_DETAIL = 600  # characters of a detail
MAX_HANGS = 100  # hangs a snapshot carries (the last ones)


def _event(snap: Mapping[str, Any], event: str, at: Any, row: Optional[Mapping[str, Any]] = None,
           status: Any = None, detail: Optional[str] = None) -> Dict[str, Any]:
    row = row or {}
    return {"at": at if isinstance(at, (int, float)) else snap.get("updated_at"), "event": event,
            "job": snap.get("job"), "step": snap.get("step"), "rank": row.get("rank"), "role": row.get("role"),
            "index": row.get("index"), "node": row.get("node"), "status": status,
            "detail": None if detail is None else str(detail)[:MAX_DETAIL]}


def _rows(snap: Optional[Mapping[str, Any]]) -> Dict[Any, List[Any]]:
    """A snapshot's task rows by rank, each as the list the file holds (cheap: no dict per row)."""
    if snap is None:
        return {}
    cols = list(snap.get("columns") or COLUMNS)
    at = cols.index("rank")
    return {row[at]: row for row in snap.get("tasks") or [] if isinstance(row, list) and len(row) == len(cols)}


def changes(before: Optional[Mapping[str, Any]], after: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """The events between snapshot `before` (None: the hub's first) and `after`, oldest first.
    At thousands of tasks only the rows whose state or restarts changed are looked at closely."""
    out: List[Dict[str, Any]] = []
    if before is None:
        out.append(_event(after, "step_start", after.get("started_at"), detail=after.get("strategy")))
    cols = list(after.get("columns") or COLUMNS)
    state_at, restarts_at = cols.index("state"), cols.index("restarts")
    old_cols = list((before or {}).get("columns") or COLUMNS)
    old = {rank: (row[old_cols.index("state")], row[old_cols.index("restarts")]) for rank, row in _rows(before).items()}
    lost_at = {x.get("rank"): x for x in after.get("lost") or [] if isinstance(x, dict)}
    first: Mapping[str, Any] = after.get("first_exit") or {}
    again_now, again_before = after.get("running_again") or {}, (before or {}).get("running_again") or {}
    now_rows = _rows(after)
    for rank, raw in now_rows.items():
        again = again_now.get(str(rank))
        new_again = isinstance(again, (int, float)) and again != again_before.get(str(rank))  # ran again since
        was_state, was_restarts = old.get(rank, (None, 0))
        if not new_again and (raw[state_at], raw[restarts_at]) == (was_state, was_restarts):
            continue
        row = dict(zip(cols, raw))
        state = row["state"]
        if int(row.get("restarts") or 0) > int(was_restarts or 0):
            at = min(again, after.get("updated_at") or again) if new_again else None  # type: ignore[type-var]
            if was_state in (None, "starting"):  # it ran (and failed) between two snapshots
                out.append(_event(after, "start", at, row))
            out.append(_event(after, "restart", at, row, detail=f"restart {row.get('restarts')}"))
        if new_again:
            out.append(_event(after, "start", again, row, detail=f"run {int(row.get('restarts') or 0) + 1}"))
        elif state == "running" and was_state != "running":
            out.append(_event(after, "start", None, row))
        if state == was_state:
            continue
        if state == "exited":
            at = first.get("at") if first.get("rank") == rank else None
            out.append(_event(after, "exit", at, row, status=row.get("status")))
        elif state == "ended":
            out.append(_event(after, "end", None, row, status=row.get("status")))
        elif state == "lost":
            why = lost_at.get(rank) or {}
            out.append(_event(after, "lost", why.get("at"), row, detail=why.get("reason")))
    for hang in _new_hangs(before, after.get("hangs") or []):
        hung = now_rows.get(hang.get("rank"))
        out.append(_event(after, "hang", hang.get("at"), None if hung is None else dict(zip(cols, hung)),
                          detail=hang.get("detail")))
    if after.get("state") == "ended" and (before is None or before.get("state") != "ended"):
        out.append(_event(after, "step_end", after.get("updated_at"), status=after.get("status")))
    return sorted(out, key=lambda e: e["at"] if isinstance(e["at"], (int, float)) else float("inf"))


def _new_hangs(before: Optional[Mapping[str, Any]], hangs: List[Any]) -> List[Any]:
    """The hangs later than the last one `before` had (the hub keeps the last MAX_HANGS: a rolling list)."""
    last = [h for h in (before or {}).get("hangs") or [] if isinstance(h, dict)]
    after_t = last[-1].get("at", 0) if last else float("-inf")
    return [h for h in hangs if isinstance(h, dict) and (h.get("at") or 0) > after_t]


def event_line(event: Mapping[str, Any]) -> str:
    """One line of `timeline.jsonl` (with its newline), under MAX_LINE bytes."""
    data = {k: event.get(k) for k in FIELDS}
    line = json.dumps(data, separators=(",", ":"))
    if len(line.encode()) >= MAX_LINE:
        data["detail"] = None
        line = json.dumps(data, separators=(",", ":"))[:MAX_LINE - 1]
    return line + "\n"


def parse_line(line: str) -> Optional[Dict[str, Any]]:
    """An event back from one line, or None for anything that is not one (a cut or foreign line)."""
    if len(line) > MAX_LINE:
        return None
    try:
        data = json.loads(line)
    except ValueError:
        return None
    at = data.get("at") if isinstance(data, dict) and data.get("event") in EVENTS else None
    if not isinstance(at, (int, float)) or isinstance(at, bool) or not math.isfinite(at) or at <= 0:
        return None
    out = {k: data.get(k) for k in FIELDS}
    for key, kind in (("rank", int), ("index", int), ("status", int)):
        if not isinstance(out[key], kind) or isinstance(out[key], bool):
            out[key] = None
    for key in ("job", "step", "role", "node", "detail"):
        out[key] = out[key][:MAX_DETAIL] if isinstance(out[key], str) else None
    return out


__all__ = ["EVENTS", "FIELDS", "MAX_LINE", "changes", "event_line", "parse_line"]
