"""One line saying what the step will be: its tasks' roles, the chief, and the strategy exec infers.

Why: a plan that does not fit the script (one ps by default, an MWMS script; no chief, a
ParameterServerStrategy script) fails far from its cause.  `tf-slurm local` and `submit` show the
plan first, so the user sees "ps 0, worker 0 (chief)" before TensorFlow's own error.  Pure.
"""

from __future__ import annotations

from typing import Any, Iterable, List, Optional

from tf_for_slurm.plan.strategy import step_roles

# why each strategy is inferred from the roles (plan.strategy.infer_strategy's rules, in short)
INFERRED_FROM = {"pss": "ps and a chief", "tf1": "ps and no chief", "mwms": "no ps"}


def task_names(tasks: Iterable[Any], chief_rank: Optional[int] = None) -> str:
    """'ps 0, worker 0 (chief), worker 1-7': tasks in rank order, runs of one role's indices joined.

    The task at chief_rank stands alone, marked '(chief)' unless its role already says so.
    """
    parts: List[str] = []
    run: List[Any] = []  # consecutive tasks of one role with consecutive indices, none the chief

    def flush() -> None:
        if run:
            first, last = run[0], run[-1]
            parts.append(f"{first.role} {first.index}" if first is last else f"{first.role} {first.index}-{last.index}")
            run.clear()

    for t in tasks:
        if t.rank == chief_rank:
            flush()
            parts.append(f"{t.role} {t.index}" + ("" if t.role == "chief" else " (chief)"))
            continue
        if run and not (t.role == run[-1].role and t.index == run[-1].index + 1):
            flush()
        run.append(t)
    flush()
    return ", ".join(parts)


def roles_line(tasks: Iterable[Any], strategy: Optional[str] = None, source: str = "--strategy") -> str:
    """'3 tasks: ps 0, worker 0 (chief), worker 1; step ends as tf1 (inferred: ps and no chief)'.

    tasks: anything with rank, role, index (the plan's tasks); strategy: the user's choice
    ('auto' or None: inferred) and `source`, where it came from.  UsageError as step_roles.
    """
    tasks = list(tasks)
    roles = step_roles(tasks, strategy, source)
    if strategy is None or strategy == "auto":
        why = f"inferred: {INFERRED_FROM[roles.strategy]}"
    else:
        why = f"given by {source}"
    count = f"{len(tasks)} task{'s' if len(tasks) != 1 else ''}"
    return f"{count}: {task_names(tasks, roles.chief_rank)}; step ends as {roles.strategy} ({why})"
