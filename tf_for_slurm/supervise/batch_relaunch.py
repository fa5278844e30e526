"""batch-step's relaunches: while a step ends because it lost a node and plan.relaunch allows, start
it again at once on the allocation's healthy nodes (a spare in a lost node's place, or fewer
workers when the user allowed it), with one line each, recorded in batch.json.

Why a module of its own: batch_step wires srun, signals and timers; this is the loop over steps,
given a way to start the next one (`again`), so it reads as the decision it carries out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple

from tf_for_slurm.host import settings
from tf_for_slurm.plan import relaunch
from tf_for_slurm.plan.srun_command import with_nodes
from tf_for_slurm.supervise.batch_record import BatchRecord, read_checkpoint_step


class Step(Protocol):
    """What the loop reads of a step batch-step ran (batch_step._Step)."""

    ended_at: Optional[float]

    def hub_status(self) -> Optional[Dict[str, Any]]: ...

    def lost_words(self) -> Tuple[bool, List[str]]: ...

    def retire(self) -> None: ...


@dataclass(frozen=True)
class Budget:
    """The user's bounds: relaunches allowed, the fewest workers to go on with (None: never fewer),
    and where the checkpoint the run resumes from is (for the line)."""

    relaunches: int
    min_workers: Optional[int] = None
    checkpoint_dir: Optional[str] = None


def relaunch_while_lost(step: Step, status: Optional[int], command: List[str], allocation: Sequence[str],
                        record: BatchRecord, budget: Budget,
                        again: Callable[[Dict[str, str], List[str]], Tuple[Any, Optional[int]]],
                        say: Callable[[str], None]) -> Tuple[Any, Optional[int]]:
    """The last step and its status.  `again(extra_env, srun)` starts the next step and waits for it."""
    lost_before: List[str] = []
    planned: Optional[int] = None  # the workers the first step was planned with
    while True:
        hub = step.hub_status()
        tasks = relaunch.step_tasks(hub)
        if planned is None and tasks:  # the role list's workers, those the allocation had no room for too
            planned = relaunch.worker_count(tasks) + relaunch.left_out(hub)
            record.workers(planned, relaunch.worker_count(tasks), first=True)
        stopped, errors = step.lost_words()
        choice = relaunch.decide(status, stopped, relaunch.lost_nodes(hub, errors), relaunch.step_nodes(hub),
                                 allocation, lost_before, len(record.data.get("relaunches", [])), budget.relaunches,
                                 limit_name=settings.MAX_RELAUNCHES, tasks=tasks, min_workers=budget.min_workers,
                                 min_name=settings.MIN_WORKERS)
        if isinstance(choice, relaunch.NoRelaunch):
            if choice.reason:
                say(f"lost {','.join(choice.lost)}; not relaunched in the allocation: {choice.reason}")
            return step, status
        lost_before.extend(choice.lost)
        ended = (hub or {}).get("decided_at") or step.ended_at or time.time()
        ckpt = read_checkpoint_step(budget.checkpoint_dir)
        at = f"the checkpoint at global step {ckpt}" if ckpt is not None else \
            "its own checkpoint or backup, if any (none in --checkpoint-dir)"
        instead = f"{','.join(choice.spares)} in place of " if choice.spares else "without "
        what = (f"going on with {choice.workers} of {planned} workers on {','.join(choice.nodes)}" if choice.workers
                else f"starting the step again at once on {','.join(choice.nodes)} ({instead}{','.join(choice.lost)})")
        say(f"relaunch {choice.number} of {budget.relaunches}: lost {','.join(choice.lost)}; {what}, "
            f"{time.time() - ended:.1f} s after the step ended; it resumes from {at}")
        record.relaunched(choice.lost, choice.nodes, choice.spares, ckpt, choice.workers or None)
        extra: Dict[str, str] = {}
        if choice.workers and planned is not None:
            record.workers(planned, choice.workers)
            extra[settings.FEWER_WORKERS] = str(planned - choice.workers)
        step.retire()
        step, status = again(extra, with_nodes(command, len(choice.nodes), nodelist=choice.nodes,
                                               exclude=lost_before, overlap=True, ntasks=choice.ntasks or None))


__all__ = ["Budget", "Step", "relaunch_while_lost"]
