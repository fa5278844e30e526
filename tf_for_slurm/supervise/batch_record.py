"""batch.json in the job folder: batch-step's run, its checkpoint and the requeue decision, for
`tf-slurm status`.

Why best effort: the record is for people reading the job later; a folder that cannot be written
costs one line in the job's log, never the job.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, Optional, Sequence

from tf_for_slurm.host.job_folder import batch_path, write_json


class BatchRecord:
    """Written as the run starts ('running') and once more as it ends ('requeued' or 'ended')."""

    def __init__(self, job: str, restarts: int, max_requeues: int, target: Optional[int],
                 checkpoint_dir: Optional[str], start_step: Optional[int], say: Callable[[str], None]):
        self.path = batch_path()
        self._say = say
        self.data: Dict[str, Any] = {
            "job": job, "run": restarts + 1, "max_requeues": max_requeues, "target": target,
            "checkpoint_dir": os.path.abspath(checkpoint_dir) if checkpoint_dir else None,
            "checkpoint_at_start": start_step, "started_at": round(time.time(), 3), "state": "running"}
        self._write()

    def _write(self) -> None:
        if self.path is None:
            return
        try:
            write_json(self.path, self.data)
        except OSError as exc:
            self._say(f"cannot write {self.path}: {exc.strerror or exc}")
            self.path = None

    def relaunched(self, lost: Sequence[str], nodes: Sequence[str], spares: Sequence[str],
                   checkpoint: Optional[int]) -> None:
        """The step lost `lost` and was started again on `nodes` (`spares` taking the lost ones' places)."""
        self.data.setdefault("relaunches", []).append(
            {"at": round(time.time(), 3), "lost": list(lost), "nodes": list(nodes), "spares": list(spares),
             "checkpoint": checkpoint})
        self._write()

    def end(self, status: Optional[int], checkpoint: Optional[int], reason: str, requeued: bool) -> None:
        """The run was decided: its step ended with `status`, or still ran (None: decided at the
        deadline); `reason`: the decision's."""
        self.data.update(state="requeued" if requeued else "ended", status=status, checkpoint=checkpoint,
                         decision=reason, ended_at=round(time.time(), 3))
        self._write()


__all__ = ["BatchRecord"]
