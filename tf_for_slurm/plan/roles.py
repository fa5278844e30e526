"""Roles: label the step's task slots from a user-ordered ListOfTFTasks or a placement helper."""

from __future__ import annotations

from typing import Sequence

from tf_for_slurm.errors import PlanError, bad_value

ROLES = ("ps", "worker", "chief", "evaluator")
ALIASES = {"master": "chief"}  # TF1 called the chief 'master'


def normalise_role(role: object, name: str = "role") -> str:
    """Lower-case, map TF1 names, and reject anything that is not a TensorFlow job name."""
    if not isinstance(role, str):
        raise PlanError(bad_value(name, role, "one of 'ps', 'worker', 'chief' ('master'), 'evaluator'"))
    r = role.strip().lower()
    r = ALIASES.get(r, r)
    if r not in ROLES:
        raise PlanError(bad_value(name, role, "one of 'ps', 'worker', 'chief' ('master'), 'evaluator'"))
    return r


def roles_from_list(list_of_tasks: Sequence[object], ntasks: int, name: str = "ListOfTFTasks") -> tuple:
    """Validate a user-ordered ListOfTFTasks: one role per task, node by node (the seeds' order)."""
    if isinstance(list_of_tasks, str):
        list_of_tasks = [r for r in list_of_tasks.split(",") if r.strip()]
    roles = tuple(normalise_role(r, f"{name}[{i}]") for i, r in enumerate(list_of_tasks))
    if len(roles) != ntasks:
        raise PlanError(
            f"{name} has {len(roles)} roles: expected one per task of the step ({ntasks} tasks)"
        )
    validate_roles(roles, name)
    return roles


def validate_roles(roles: Sequence[str], name: str = "ListOfTFTasks") -> None:
    """At least one worker (or chief to train), at most one chief, at most one evaluator."""
    if "worker" not in roles and "chief" not in roles:
        raise PlanError(f"{name}={_brief(roles)}: expected at least one 'worker'")
    for single in ("chief", "evaluator"):
        if roles.count(single) > 1:
            raise PlanError(f"{name}={_brief(roles)}: expected at most one {single!r}, got {roles.count(single)}")


def first_ps(ntasks: int, n_ps: int = 1, chief: bool = False, name: str = "ps") -> tuple:
    """The seeds' default: the first n_ps tasks are ps, then (optionally) one chief, the rest workers."""
    if isinstance(n_ps, bool) or not isinstance(n_ps, int) or n_ps < 0:
        raise PlanError(bad_value(name, n_ps, "a number of parameter servers >= 0"))
    need = n_ps + (1 if chief else 0) + 1
    if ntasks < need:
        raise PlanError(
            bad_value(name, n_ps, f"at most {ntasks - need + n_ps} so that {ntasks} tasks leave a worker")
        )
    roles = ["ps"] * n_ps + (["chief"] if chief else [])
    roles += ["worker"] * (ntasks - len(roles))
    return tuple(roles)


def ps_per_node(tasks_per_node: Sequence[int], chief: bool = False, name: str = "placement") -> tuple:
    """One ps per node (the node's first task), so parameter traffic spreads over every node's NIC."""
    roles: list = []
    for count in tasks_per_node:
        roles += ["ps"] + ["worker"] * (count - 1)
    if chief:
        roles[roles.index("worker") if "worker" in roles else len(roles)] = "chief"
    validate_roles(roles, f"{name}='per-node' gives roles")
    return tuple(roles)


def with_chief(roles: Sequence[str]) -> tuple:
    """Make the first worker the explicit chief (TF2 ParameterServerStrategy's coordinator)."""
    out = list(roles)
    if "chief" in out:
        return tuple(out)
    if "worker" not in out:
        raise PlanError(f"roles={_brief(out)}: expected a 'worker' to turn into the chief")
    out[out.index("worker")] = "chief"
    return tuple(out)


def _brief(roles: Sequence[str]) -> str:
    roles = list(roles)
    return repr(roles) if len(roles) <= 8 else repr(roles[:8])[:-1] + f", ... ({len(roles)} roles)]"
