"""Whether batch-step starts a step that lost a node again at once, inside the same allocation, and
on what.  Pure: the hub's status file, srun's error lines, the allocation's nodes and the job's
earlier relaunches in; a decision out.

Why: a lost ps, chief/coordinator or MWMS worker ends the step with LOST_STATUS (TensorFlow cannot
go on without it, plan.lost_task).  A requeue puts the run at the back of the queue (hours on a busy
cluster), yet the allocation's other nodes are still the job's (`sbatch --no-kill`).  So the step
starts again on them without the lost nodes, a spare node taking their place, and the run resumes
from its checkpoint.  The new srun must say `--overlap --mem=0 --exclude=...`: the dead step keeps
its CPUs and memory until Slurm marks the node down (docs/SLURM_NODE_LOSS.md).  A node lost once is
never used again by this run; a budget bounds the relaunches.

With too few healthy nodes left for the same plan, the step starts again with fewer workers when the
user allowed it (`--min-workers`, issue 43): every healthy node, the lost nodes' tasks left out (a
spare takes a lost node's tasks first), the ps, chief and evaluator kept, so only workers go. The
variables do not depend on the number of workers, so the run resumes from its checkpoint or backup
and the dataset is sharded again. By default the minimum is the planned count (nothing shrinks): a
smaller group changes the global batch and the steps per epoch, which the user must accept. Below
the minimum, the usual requeue decision (plan.requeue) follows.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

from tf_for_slurm.plan.batch_settings import srun_ended_ranks
from tf_for_slurm.plan.requeue import LOST_STATUS
from tf_for_slurm.plan.step_status import task_rows


@dataclass(frozen=True)
class Relaunch:
    """Start the step again on `nodes` (the step's healthy nodes, then spares in the allocation's order)."""

    nodes: Tuple[str, ...]
    lost: Tuple[str, ...]  # the nodes the step that just ended lost
    spares: Tuple[str, ...]  # the nodes taking their places
    number: int  # 1 for the run's first relaunch
    ntasks: int = 0  # with fewer workers: the new step's task count (0: the same plan as before)
    workers: int = 0  # with fewer workers: how many the new step has (0: as before)


@dataclass(frozen=True)
class NoRelaunch:
    """Go on to the requeue decision; `reason` (empty when no node was lost) is said in the job's log."""

    reason: str
    lost: Tuple[str, ...] = ()


def lost_nodes(status: Optional[Mapping[str, Any]], srun_errors: Sequence[str]) -> Tuple[str, ...]:
    """The nodes the step lost, in the order found: those of tasks the hub counted as lost (their
    supervisor vanished or went silent); and when the hub never decided the step's end (its file
    still says running), its own node, unless srun saw its task end (then the hub failed, not its
    node).  A hub that decided was alive: ended while ending its own command, it is not taken for lost."""
    if not status:
        return ()
    by_rank = {row.get("rank"): row for row in task_rows(status)}
    found: List[object] = [row.get("node") for row in by_rank.values() if row.get("state") == "lost"]
    failure = status.get("first_failure")
    if isinstance(failure, Mapping) and failure.get("status") == LOST_STATUS:
        if by_rank.get(failure.get("rank"), {}).get("state") not in ("exited", None):
            found.append(failure.get("node"))  # lost through silence: told to end, so not marked lost
    if status.get("state") == "running" and status.get("chief") not in srun_ended_ranks(srun_errors):
        found.append(by_rank.get(status.get("chief"), {}).get("node"))
    return tuple(dict.fromkeys(str(node) for node in found if isinstance(node, str) and node not in ("", "?")))


def step_nodes(status: Optional[Mapping[str, Any]]) -> Tuple[str, ...]:
    """The nodes the step ran on, in rank order (() without a status file)."""
    return tuple(dict.fromkeys(str(row.get("node")) for row in task_rows(status))) if status else ()


def step_tasks(status: Optional[Mapping[str, Any]]) -> Tuple[Tuple[str, str], ...]:
    """(role, node) of each of the step's tasks, in rank order (() without a status file)."""
    return tuple((str(row.get("role")), str(row.get("node"))) for row in task_rows(status)) if status else ()


def worker_count(tasks: Sequence[Tuple[str, str]]) -> int:
    """The workers among (role, node) tasks: what --min-workers counts (the ps, chief, evaluator are kept)."""
    return sum(1 for role, _ in tasks if role == "worker")


def left_out(status: Optional[Mapping[str, Any]]) -> int:
    """The workers the user's role list names that the step had no task for (an allocation smaller
    than asked: plan.roles.fitted_to_step), from the hub's status; 0 when none or unknown."""
    value = (status or {}).get("workers_left_out")
    return value if type(value) is int and value > 0 else 0


def decide(step_status: Optional[int], stopped: bool, lost: Sequence[str], ran_on: Sequence[str],
           allocation: Sequence[str], lost_before: Sequence[str], used: int, budget: int,
           limit_name: str = "--max-relaunches", *, tasks: Sequence[Tuple[str, str]] = (),
           min_workers: Optional[int] = None, min_name: str = "--min-workers") -> Union[Relaunch, NoRelaunch]:
    """Relaunch when the step ended with LOST_STATUS and named its lost nodes, nobody asked it to stop
    (a time-limit warning, scancel: the requeue decision is theirs), the budget allows, and enough
    nodes of the allocation were never lost: the step's own first, then spares.  Short of nodes, with
    fewer workers when `tasks` ((role, node) per rank) leaves at least `min_workers` workers (None:
    never fewer)."""
    lost = tuple(lost)
    if step_status != LOST_STATUS or not lost:
        return NoRelaunch("", lost)
    if stopped:
        return NoRelaunch("a stop was asked for (the time-limit warning or scancel)", lost)
    if used >= budget:
        return NoRelaunch(f"the relaunch budget is spent ({used} of {budget}, {limit_name})", lost)
    if not ran_on:
        return NoRelaunch("the step's nodes are unknown (no status file)", lost)
    gone = set(lost_before) | set(lost)
    kept = [node for node in ran_on if node not in gone]
    spares = [node for node in allocation if node not in gone and node not in ran_on]
    healthy = len(kept) + len(spares)
    if healthy < len(ran_on):
        short = f"{healthy} healthy node(s) left of the allocation's {len(allocation)}, the step needs {len(ran_on)}"
        return _fewer(tasks, kept, spares, gone, min_workers, min_name, short, lost, used + 1)
    taken = tuple(spares[:len(ran_on) - len(kept)])
    return Relaunch(nodes=tuple(kept) + taken, lost=lost, spares=taken, number=used + 1)


def _fewer(tasks: Sequence[Tuple[str, str]], kept: Sequence[str], spares: Sequence[str], gone: set,
           min_workers: Optional[int], min_name: str, short: str, lost: Tuple[str, ...],
           number: int) -> Union[Relaunch, NoRelaunch]:
    """Every healthy node, the lost nodes' tasks left out but for those a spare takes (one lost node's
    tasks per spare, in order), when the workers left are at least `min_workers`."""
    if min_workers is None:
        return NoRelaunch(f"{short} (fewer workers: not allowed, {min_name})", lost)
    if not tasks:
        return NoRelaunch(f"{short} (fewer workers: the step's tasks are unknown)", lost)
    per_node = Counter(node for _, node in tasks)
    out = [per_node[node] for node in dict.fromkeys(node for _, node in tasks) if node in gone]
    dropped = sum(out[len(spares):])
    workers = worker_count(tasks)
    left = workers - dropped
    if left < max(min_workers, 1):
        return NoRelaunch(f"{short}; with fewer workers {max(left, 0)} of {workers} would be left, below "
                          f"{min_name} {min_workers}", lost)
    return Relaunch(nodes=tuple(kept) + tuple(spares), lost=lost, spares=tuple(spares[:len(out)]), number=number,
                    ntasks=len(tasks) - dropped, workers=left)


__all__ = ["NoRelaunch", "Relaunch", "decide", "left_out", "lost_nodes", "step_nodes", "step_tasks", "worker_count"]
