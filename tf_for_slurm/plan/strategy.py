"""Which task's end ends the step, and which tasks only serve.  Pure: plan roles in, decisions out.

Why: scripts written the way TensorFlow's tutorials and the seeds write them never end some of
their tasks (a ps or a ParameterServerStrategy worker `join()`s forever).  The supervisor under
`tf-slurm exec` must know, without reading the script, whose exit means "training is over" and
who is only serving.  The strategy is inferred from the plan's roles (TensorFlow's own
conventions), or named by the user:

- ``tf1``  ps and workers, no chief: TF1 graph training (the seeds).  Every worker trains and
  exits by itself; worker 0 is the chief.  The ps serve.
- ``pss``  ps and a chief: TF2 ParameterServerStrategy.  The chief is the coordinator and the
  only task that trains; ps and workers serve (tutorial style: `server.join()`).
- ``mwms`` no ps: MultiWorkerMirroredStrategy.  Every worker (and the chief) trains; worker 0
  (or the chief) writes the final checkpoint.
Evaluators always serve: they evaluate checkpoints until told to stop.
"""

from __future__ import annotations

from typing import Any, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from tf_for_slurm.errors import UsageError, bad_value

STRATEGIES = ("tf1", "pss", "mwms")
STRATEGY_CHOICES = ("auto",) + STRATEGIES


class StepRoles(NamedTuple):
    """The supervisor's view of the step: who leads, who trains, who serves."""

    strategy: str  # 'tf1' | 'pss' | 'mwms'
    rule: str  # one line saying why (logged)
    chief_rank: int  # the task whose exit 0 means training is over
    trainers: Tuple[int, ...]  # ranks that finish by themselves (given a drain period)
    servers: Tuple[int, ...]  # ranks ended (exit 0) once the chief is done


def infer_strategy(roles: Sequence[str], requested: Optional[str] = None,
                   source: str = "--strategy") -> Tuple[str, str]:
    """(strategy, rule) from the roles of every task, or the user's choice ('auto' = infer).

    source: where `requested` came from (the option, or the setting's name), for the log and errors.
    """
    if requested is not None and requested != "auto":
        if requested not in STRATEGIES:
            raise UsageError(bad_value(source, requested, "one of " + ", ".join(STRATEGY_CHOICES)))
        return requested, f"strategy {requested} (given by {source})"
    present = set(roles)
    if "ps" in present and "chief" in present:
        return "pss", ("strategy pss (the plan has ps and a chief: TF2 ParameterServerStrategy, workers "
                       "serve; --strategy tf1 if your workers train)")
    if "ps" in present:
        return "tf1", "strategy tf1 (the plan has ps and no chief: TF1 ps/worker, every worker trains)"
    return "mwms", "strategy mwms (the plan has no ps: MultiWorkerMirroredStrategy, every worker trains)"


def step_roles(tasks: Iterable, requested: Optional[str] = None, source: str = "--strategy") -> StepRoles:
    """Classify every task of the plan (`tasks`: anything with rank, role, index)."""
    tasks = list(tasks)
    strategy, rule = infer_strategy([t.role for t in tasks], requested, source)
    chief = require_chief(tasks)
    trainers: List[int] = []
    servers: List[int] = []
    for t in tasks:
        if t.rank == chief.rank:
            continue
        if t.role in ("ps", "evaluator") or (t.role == "worker" and strategy == "pss"):
            servers.append(t.rank)
        else:
            trainers.append(t.rank)
    return StepRoles(strategy, rule, chief.rank, tuple(trainers), tuple(servers))


REPORTING_ROLES = ("chief", "worker")  # the tasks a TF1 ps waits for (evaluators do not report)


def find_chief(tasks: Iterable[Any]) -> Optional[Any]:
    """The task that initialises variables and writes checkpoints: the 'chief' if there is one,
    else worker 0 (TensorFlow's implicit chief); None without either."""
    worker0 = None
    for t in tasks:
        if t.role == "chief":
            return t
        if t.role == "worker" and t.index == 0:
            worker0 = t
    return worker0


def require_chief(tasks: Iterable[Any]) -> Any:
    """find_chief, or one UsageError when the tasks have two chiefs or neither a chief nor worker 0."""
    tasks = list(tasks)
    chiefs = sum(1 for t in tasks if t.role == "chief")
    if chiefs > 1:
        raise UsageError(bad_value("number of chief tasks", chiefs, "at most 1"))
    chief = find_chief(tasks)
    if chief is None:
        raise UsageError(bad_value("roles", [t.role for t in tasks], "at least one 'worker' or 'chief'"))
    return chief


def reporter_tasks(plan: Any) -> list:
    """Tasks a TF1 ps waits for, in reporter-index order (chief first, then workers by index)."""
    out: list = []
    for role in REPORTING_ROLES:
        out.extend(sorted(plan.tasks_with_role(role), key=lambda t: t.index))
    return out


def device_filters(role: str, index: int, has_ps: bool = True) -> List[str]:
    """The devices a TF1 task's sessions may see.

    A TF1 session otherwise contacts every task of the cluster: one opened (or re-opened after an
    error) once another task has exited waits forever.  With '/job:ps' and itself only, a worker
    (chief, evaluator) depends on the ps alone (TensorFlow's own advice for between-graph
    replication); a ps's own session (the done-queue wait) needs only itself.
    """
    own = f"/job:{role}/task:{index}"
    if role == "ps" or not has_ps:
        return [own]
    return ["/job:ps", own]


def exec_device_filters(strategy: str, role: str, index: int) -> Optional[List[str]]:
    """The filters `tf-slurm exec` (and GetServerDictionary) install for an unmodified script, or None.

    Only TF1 ps/worker/chief sessions get them: TF2 strategies manage their own, and an evaluator
    under exec serves (its script decides what it reads).
    """
    if strategy != "tf1" or role not in ("worker", "chief", "ps"):
        return None
    return device_filters(role, index)
