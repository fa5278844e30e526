"""batch.json in the job folder: batch-step's run, its checkpoint, its relaunches and the requeue
decision, the training's progress at the run's end (each task's step, rate, loss, last step time,
from the step's status.json, its step history left there), and the job's earlier runs (`history`,
carried from the file the last run left, each with the furthest step it reached), for `tf-slurm
status` and `tf-slurm report`.

Why best effort: the record is for people reading the job later; a folder that cannot be written
costs one line in the job's log, never the job.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from tf_for_slurm.host.job_folder import batch_path, read_json, status_path, write_json
from tf_for_slurm.plan.requeue import checkpoint_step

MAX_HISTORY = 100  # earlier runs kept (a job requeued more often keeps its last ones)
UNSAID = "its batch script ended without a word (its node lost, or the script killed)"  # an earlier run left 'running'
_CARRIED = ("run", "started_at", "ended_at", "state", "status", "decision", "relaunches", "step", "checkpoint",
            "checkpoint_at_start", "slurm_submit", "slurm_start", "workers_planned", "workers",
            "workers_at_start")


def read_checkpoint_step(directory: Optional[str]) -> Optional[int]:
    """The step of the last checkpoint in `directory` (its TensorFlow 'checkpoint' file), if any."""
    if not directory:
        return None
    try:
        with open(os.path.join(directory, "checkpoint"), encoding="utf-8", errors="replace") as fh:
            return checkpoint_step(fh.read())
    except OSError:
        return None


class BatchRecord:
    """Written as the run starts ('running') and once more as it ends ('requeued' or 'ended')."""

    def __init__(self, job: str, restarts: int, max_requeues: int, target: Optional[int],
                 checkpoint_dir: Optional[str], start_step: Optional[int], say: Callable[[str], None]):
        self.path = batch_path()
        self._say = say
        self._lock = threading.Lock()  # slurm_times comes from batch-step's backstop thread
        self.data: Dict[str, Any] = {
            "job": job, "run": restarts + 1, "max_requeues": max_requeues, "target": target,
            "checkpoint_dir": os.path.abspath(checkpoint_dir) if checkpoint_dir else None,
            "checkpoint_at_start": start_step, "started_at": round(time.time(), 3), "state": "running",
            "slurm_submit": None, "slurm_start": None,  # Slurm's SubmitTime and StartTime of this run (slurm_times)
            "history": self._history(job, restarts + 1)}
        self._write()

    def _history(self, job: str, run: int) -> List[Dict[str, Any]]:
        """The earlier runs of this job, from the file the last one left (another job's, or this run's own
        from before a restart of the batch script, is not carried)."""
        last = read_json(self.path) if self.path else None
        if not last or str(last.get("job")) != job or not isinstance(last.get("run"), int) or last["run"] >= run:
            return []
        history = [h for h in last.get("history") or [] if isinstance(h, dict)]
        entry = {k: last.get(k) for k in _CARRIED if k in last}
        if entry.get("state") == "running":  # its batch-step never wrote its end, and no task did for it
            entry.update(state="ended", decision=UNSAID)
        history.append(entry)
        return history[-MAX_HISTORY:]

    def _write(self, **changes: Any) -> None:
        """Apply `changes` and write the record, one writer at a time (the last write holds every change)."""
        with self._lock:
            self.data.update(changes)
            if self.path is None:
                return
            try:
                write_json(self.path, self.data)
            except OSError as exc:
                self._say(f"cannot write {self.path}: {exc.strerror or exc}")
                self.path = None

    def slurm_times(self, submit: Optional[float], start: Optional[float]) -> None:
        """Slurm's SubmitTime and StartTime of this run, epoch seconds (None: Slurm did not say)."""
        self._write(slurm_submit=submit, slurm_start=start)

    def relaunched(self, lost: Sequence[str], nodes: Sequence[str], spares: Sequence[str],
                   checkpoint: Optional[int], workers: Optional[int] = None) -> None:
        """The step lost `lost` and was started again on `nodes` (`spares` taking the lost ones' places;
        `workers`: with that many workers, fewer than before)."""
        entry: Dict[str, Any] = {"at": round(time.time(), 3), "lost": list(lost), "nodes": list(nodes),
                                 "spares": list(spares), "checkpoint": checkpoint}
        if workers is not None:
            entry["workers"] = workers
        self._write(relaunches=[*self.data.get("relaunches", []), entry])

    def workers(self, planned: int, now: int, first: bool = False) -> None:
        """The step's workers: as planned, and in the step that runs now (fewer after a relaunch short of
        nodes; `first`: the run's first step, fewer when the allocation was smaller than the role list)."""
        self._write(workers_planned=planned, workers=now, **({"workers_at_start": now} if first else {}))

    def fewer_workers(self) -> str:
        """'with 2 of 3 workers from global step 1200' when this run ended with fewer workers than planned
        (the last relaunch short of nodes, plan.relaunch), else ''."""
        now, planned = self.data.get("workers"), self.data.get("workers_planned")
        if not isinstance(now, int) or not isinstance(planned, int) or now >= planned:
            return ""
        last = [r for r in self.data.get("relaunches", []) if isinstance(r.get("workers"), int)][-1:]
        since = last[0].get("checkpoint") if last else None
        return f"with {now} of {planned} workers" + (f" from global step {since}" if since is not None else "")

    def end(self, status: Optional[int], checkpoint: Optional[int], reason: str, requeued: bool) -> None:
        """The run was decided: its step ended with `status`, or still ran (None: decided at the
        deadline); `reason`: the decision's.  The progress is the job folder's status.json's: its
        last step's, or an earlier one's when the last wrote none (a hub carries its tracks on)."""
        where = status_path()
        last = read_json(where) if where else None
        progress = _progress(last if last and str(last.get("job", self.data["job"])) == self.data["job"] else None)
        steps = [t["step"] for t in progress.values() if isinstance(t.get("step"), int)]
        self._write(state="requeued" if requeued else "ended", status=status, checkpoint=checkpoint,
                    decision=reason, ended_at=round(time.time(), 3), progress=progress,
                    step=max(steps) if steps else None)


def close_lost_run(path: Optional[str], job: str, run: int, requeued: bool, decision: str) -> bool:
    """Mark run `run` of `job` in batch.json at `path`, which its batch-step left 'running' (it died with
    the batch host), requeued or ended with `decision`: what the task that acted did
    (supervise.batch_host), for `tf-slurm status` and the report.  False when the file is another
    job's or another run's, says the run ended, or cannot be written (best effort: the job's batch
    log has the line all the same)."""
    last = read_json(path) if path else None
    if not path or not last or str(last.get("job")) != job or last.get("run") != run or last.get("state") != "running":
        return False
    try:
        write_json(path, {**last, "state": "requeued" if requeued else "ended", "decision": decision,
                          "ended_at": round(time.time(), 3)})
    except OSError:
        return False
    return True


def _progress(step_status: Optional[Mapping[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """Each task's progress from status.json, without its step history (status.json keeps that)."""
    tasks = (step_status or {}).get("progress")
    if not isinstance(tasks, dict):
        return {}
    return {str(rank): {k: v for k, v in t.items() if k != "history"}
            for rank, t in tasks.items() if isinstance(t, dict)}


__all__ = ["UNSAID", "BatchRecord", "close_lost_run", "read_checkpoint_step"]
