"""The hub's view of the training: each task's progress reports, bounded, as the status file shows them.

Why a module of its own: the reports come from the spokes' `progress <json>` lines and from the
hub's own command; the rules over them are pure (plan.train_progress); this keeps the tracks, holds
back what a task sends faster than its spoke may (one line in 2 s, spoke.REPORT_EVERY: a flood from a
task that proved the step's key still costs the hub at most a parse a half-second; the newest line
held back is read as its exit or bye comes, or at the status file's next write: a spoke sends its
command's last report at once, before the exit, so that report is never lost), and gives the status
file its `progress` part.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from tf_for_slurm.host.job_folder import read_json
from tf_for_slurm.plan.start_phase import MAX_PHASE_BYTES, Phase, parse_phase
from tf_for_slurm.plan.train_progress import MAX_REPORT_BYTES, Report, Track, parse_report, slow

MIN_GAP = 0.5  # seconds between two reports of one task that the hub reads (its spoke sends one a second)
HISTORY_UP_TO = 256  # tasks: a larger step's status file keeps no step history (its size)


class ProgressBoard:
    """Per task (rank), its progress Track.  Progress alone does not make the hub rewrite its status
    file: the file's refresh (every 5 s) shows it; at 128 tasks a rewrite a second of every task's
    step history cost more than the 2% of a core the hub may spend (bench/bench_status_progress.py)."""

    def __init__(self, asynchronous: bool = False) -> None:
        self.asynchronous = asynchronous  # TF1, PSS: each worker steps on its own, a slow one can be named
        self.tracks: Dict[int, Track] = {}
        self._read_at: Dict[int, float] = {}
        self._held: Dict[int, str] = {}  # rank -> its newest line that came too soon, unread
        self.phases: Dict[int, Phase] = {}  # rank -> its start-up phase (plan.start_phase), the newest
        self._phase_at: Dict[int, float] = {}
        self._phase_held: Dict[int, str] = {}

    def add(self, rank: int, report: Optional[Report], now: float) -> None:
        """A report of task `rank` (now: the hub's wall clock); None: none came."""
        if report is None:
            return
        self.tracks.setdefault(rank, Track()).add(report, now)

    def hear(self, rank: int, text: str, now: float) -> bool:
        """A `progress` line's JSON from task `rank`; False when it is not a report (a protocol error)."""
        if now - self._read_at.get(rank, -MIN_GAP) < MIN_GAP:
            if len(text) <= MAX_REPORT_BYTES:  # longer: not a report, whenever it is read
                self._held[rank] = text  # too soon: held back unread, the newest only
            return True
        self._held.pop(rank, None)  # older than this one
        report = parse_report(text)
        if report is None:
            return False
        self._read_at[rank] = now
        self.add(rank, report, now)
        return True

    def hear_line(self, rank: int, parts: List[str], now: float) -> bool:
        """A line of task `rank` (split): True when it was a `progress` report (see hear); its `exit` or `bye`
        first reads the report held back (its last, sent just before), then is the caller's (False)."""
        if len(parts) == 2 and parts[0] == "progress":
            return self.hear(rank, parts[1], now)
        if len(parts) >= 2 and parts[0] == "phase":  # its `where` may hold spaces
            return self.hear_phase(rank, " ".join(parts[1:]), now)
        if parts[0] in ("exit", "bye"):
            self._take_held(rank, now)
        return False

    def hear_phase(self, rank: int, text: str, now: float) -> bool:
        """A `phase` line's JSON from task `rank` (the same bounds as a report's); False when it is not one."""
        if len(text) > MAX_PHASE_BYTES:
            return False
        if now - self._phase_at.get(rank, -MIN_GAP) < MIN_GAP:
            self._phase_held[rank] = text
            return True
        self._phase_held.pop(rank, None)
        phase = parse_phase(text)
        if phase is None:
            return False
        self._phase_at[rank] = now
        self.phases[rank] = phase
        return True

    def add_phase(self, rank: int, phase: Optional[Phase]) -> None:
        """The hub's own command's phase (None: none new)."""
        if phase is not None:
            self.phases[rank] = phase

    def current_phases(self) -> Dict[int, Phase]:
        """Every task's newest phase, the lines held back read."""
        for rank, text in list(self._phase_held.items()):
            del self._phase_held[rank]
            phase = parse_phase(text)
            if phase is not None:
                self.phases[rank] = phase
        return self.phases

    def _take_held(self, rank: int, now: float) -> None:
        """The line held back from task `rank`, read now (a line that is not a report is dropped)."""
        text = self._held.pop(rank, None)
        if text is not None:
            self.add(rank, parse_report(text), now)

    def to_json(self, now: float) -> Dict[str, Any]:
        """{rank as text: the task's progress} for the status file (`progress`), the lines held back read."""
        for rank in list(self._held):
            self._take_held(rank, now)
        with_history = len(self.tracks) <= HISTORY_UP_TO
        out = {str(rank): track.to_json(now, with_history=with_history) for rank, track in sorted(self.tracks.items())}
        for rank in slow(self.tracks, now) if self.asynchronous else ():  # 1.5x below the median for a minute
            out[str(rank)]["slow"] = True
        return out

    @classmethod
    def from_file(cls, path: Optional[str], strategy: str = "") -> "ProgressBoard":
        """A board that goes on from the status file an earlier run of the job left there (a requeued or
        relaunched step keeps drawing the same lines), else an empty one."""
        board = cls(asynchronous=strategy in ("tf1", "pss"))
        if path:
            board.restore((read_json(path) or {}).get("progress"))
        return board

    def restore(self, saved: Optional[Mapping[str, Any]]) -> None:
        """Tracks from an earlier status file's `progress` (a relaunched or requeued step goes on
        drawing the same lines); anything malformed is skipped."""
        if not isinstance(saved, Mapping):
            return
        for key, value in list(saved.items())[:100_000]:
            if isinstance(key, str) and key.isdigit() and len(key) < 10:
                self.tracks[int(key)] = Track.from_json(value)
