"""Where a task is on its way to its first training step, as data: its start-up phase.  Pure.

Why: a run that never starts training (MultiWorkerMirroredStrategy's start barrier has no timeout,
a TF1 worker waits for the chief's session forever) shows every process alive and no step.  The
shim (`_shim/tf_slurm_start_phase.py`) writes each task's phase to the file its supervisor watches
(TF_SLURM_PHASE_FILE), so the hub can tell who waits for whom (plan.start_watch).

The phases, in the order a task passes them (PHASES):
- `starting`: the command runs, TensorFlow is not imported yet;
- `imported`: TensorFlow imported;
- `server`: its TensorFlow server started (TF1 / PSS `Server`, MWMS's collective context);
- `waiting`: waiting for its peers (MWMS's start barrier, a TF1 non-chief waiting for the chief's
  session, a TF1 chief creating its session, a PSS coordinator connecting to its ps and workers);
- `ready`: past that wait (the strategy built, the session made);
- `stepping`: in its first training step (MWMS: the first all-reduce waits for every worker);
- `serving`: a ps or PSS worker serving (`Server.join()`): its normal state, it waits for no one;
- `training`: it made progress (its first progress report; the supervisor's, not the shim's).

The file holds one JSON line, e.g. {"v":1,"phase":"waiting","t":1795806241.25,"since":1795806230.0,
"where":"train.py:41 in load_data","detail":"MultiWorkerMirroredStrategy's start barrier"}: `t` when
written, `since` when the phase began, `where` the innermost frame of the user's code in the main
thread (empty when none), `detail` what it waits in.  The file is written by the user's process, so
every field is checked and bounded (parse_phase).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Dict, Optional

MAX_PHASE_BYTES = 512
MAX_WHERE = 120  # characters of `where`
MAX_DETAIL = 60  # characters of `detail`
MAX_LINE = 240  # bytes of phase_line: it travels on the supervisors' wire (supervise/wire.py: 256 a line)
PHASES = ("starting", "imported", "server", "waiting", "ready", "stepping", "serving", "training")
ORDER: Dict[str, int] = {name: i for i, name in enumerate(PHASES)}
WRITTEN = frozenset(PHASES) - {"training"}  # the shim's; `training` is the supervisor's own word
WAITS = frozenset({"waiting", "stepping"})  # phases in which a task waits for its peers
WORDS = {  # a phase in `tf-slurm status`'s words
    "starting": "starting (TensorFlow not imported)",
    "imported": "TensorFlow imported",
    "server": "server started",
    "waiting": "waiting for peers",
    "ready": "ready",
    "stepping": "in its first step",
    "serving": "serving",
    "training": "training",
}
_FIELDS = {"v", "phase", "t", "since", "where", "detail"}


@dataclass(frozen=True)
class Phase:
    """One task's start-up phase, as its shim last wrote it."""

    phase: str
    t: float  # when written (the task's clock, unix seconds)
    since: float  # when this phase began
    where: str = ""  # the innermost frame of the user's code, e.g. "train.py:41 in load_data"
    detail: str = ""  # what it waits in, e.g. "MultiWorkerMirroredStrategy's start barrier"


def _no_constant(name: str) -> Any:
    raise ValueError(name)  # NaN, Infinity: json.loads accepts them, JSON does not


def _printable(x: Any, limit: int) -> bool:
    return isinstance(x, str) and len(x) <= limit and x.isprintable()


def _time(x: Any) -> bool:
    return (type(x) is int or type(x) is float) and math.isfinite(x) and 0 <= x < 2 ** 40


def parse_phase(text: str) -> Optional[Phase]:
    """The phase in a task's phase file, or None when it is not a valid one (never raises): at most
    MAX_PHASE_BYTES, one JSON object on one line, v 1, only the known fields, each of its type and range."""
    try:
        if not isinstance(text, str) or len(text.encode()) > MAX_PHASE_BYTES:
            return None
        line = text.strip()
        if "\n" in line or "\r" in line:
            return None
        d = json.loads(line, parse_constant=_no_constant)
    except (ValueError, UnicodeError, RecursionError):
        return None
    if not isinstance(d, dict) or not set(d) <= _FIELDS or type(d.get("v")) is not int or d["v"] != 1:
        return None
    phase: Any = d.get("phase")
    t: Any = d.get("t")
    since: Any = d.get("since", t)
    where, detail = d.get("where", ""), d.get("detail", "")
    if phase not in WRITTEN or not (_time(t) and _time(since)):
        return None
    if not (_printable(where, MAX_WHERE) and _printable(detail, MAX_DETAIL)):
        return None
    return Phase(phase=phase, t=float(t), since=float(since), where=where, detail=detail)


def phase_line(phase: Phase) -> str:
    """The phase as one compact JSON line (how a spoke passes it to the hub, which reads it with parse_phase)."""
    d: Dict[str, Any] = {"v": 1, "phase": phase.phase, "t": round(phase.t, 3), "since": round(phase.since, 3)}
    if phase.detail:
        d["detail"] = phase.detail
    line = json.dumps(d, separators=(",", ":"))
    where = phase.where
    while where:  # the longest `where` that fits (non-ASCII is escaped, 6 bytes a character)
        longer = json.dumps({**d, "where": where}, separators=(",", ":"))
        if len(longer) <= MAX_LINE:
            return longer
        where = where[:len(where) - max(1, (len(longer) - MAX_LINE) // 6)]
    return line
