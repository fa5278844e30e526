"""Whether the step goes on without a task that was lost (its supervisor and command vanished
together: its node failed).  Pure: the strategy and the task's role in, a reason or None out.

Why: at scale nodes die, and TensorFlow itself tolerates some tasks going away.  Ending the step
for them throws away an allocation and a place in the queue for nothing:
- ``pss``: a worker (not the coordinator): ParameterServerStrategy's coordinator re-sends the lost
  worker's functions to the others and trains on (it needs one worker left).
- ``tf1``: a non-chief worker: asynchronous between-graph training goes on with the chief and the
  other workers (the supervisor's device filters keep every session off the lost task).
- an evaluator, under any strategy: it only reads checkpoints.
Nothing else: a ps holds variables, the chief coordinates or writes the checkpoints, and every
MultiWorkerMirroredStrategy worker takes part in every step.

The user can ask for the old rule, every worker required (`--require-all-workers`), e.g. for TF1
synchronous training (SyncReplicasOptimizer waits for every replica's gradients).
"""

from __future__ import annotations

from typing import Optional


def go_on_without(strategy: str, role: str, is_chief: bool, others: int) -> Optional[str]:
    """Why the step may go on without this lost task (a few words for the log), or None: it may not.
    others: tasks of the same role still there (a PSS coordinator needs one worker to send to)."""
    if is_chief:
        return None
    if role == "evaluator":
        return "an evaluator only reads checkpoints"
    if role == "worker" and strategy == "pss":
        return "the coordinator sends its functions to the other workers" if others else None
    if role == "worker" and strategy == "tf1":
        return "the chief and the other workers train on asynchronously"
    return None


def going_on(why: str, left: int, total: int, role: str) -> str:
    """The log's words after the lost task's name and what happened to it."""
    return f"going on without it ({why}; {left} of {total} {role}s left; --require-all-workers to end the step instead)"
