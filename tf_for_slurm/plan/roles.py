"""Roles: label the step's task slots from a user-ordered ListOfTFTasks or a placement helper."""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

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
    # a role already in TensorFlow's spelling is kept as it is (16k tasks: no message built per task)
    roles = tuple(r if type(r) is str and r in ROLES else normalise_role(r, f"{name}[{i}]")
                  for i, r in enumerate(list_of_tasks))
    if len(roles) != ntasks:
        raise PlanError(
            f"{name} has {len(roles)} roles: expected one per task of the step ({ntasks} tasks)"
        )
    validate_roles(roles, name)
    return roles


def _is_worker(role: object) -> bool:
    return isinstance(role, str) and role.strip().lower() == "worker"


def count_workers(list_of_tasks: Sequence[object]) -> int:
    """The workers a role list names (what --min-workers counts: the ps, chief, evaluator are kept)."""
    return sum(1 for r in list_of_tasks if _is_worker(r))


def without_workers(list_of_tasks: Sequence[object], count: int, name: str = "ListOfTFTasks") -> list:
    """The user's list with its last `count` workers left out: a step started again with fewer workers
    (plan.relaunch) keeps every other role, in the user's order."""
    if isinstance(list_of_tasks, str):
        list_of_tasks = [r for r in list_of_tasks.split(",") if r.strip()]
    out = list(list_of_tasks)
    at = [i for i, r in enumerate(out) if _is_worker(r)]
    if count < 0 or count >= len(at):
        raise PlanError(bad_value(name, ",".join(map(str, out)), f"at least {count + 1} worker(s) to leave {count} "
                                  "out (a step started again with fewer workers)"))
    for i in reversed(at[len(at) - count:]):
        del out[i]
    return out


def fitted_to_step(list_of_tasks: Sequence[object], ntasks: int, min_workers: Optional[int],
                   name: str = "ListOfTFTasks", min_name: str = "min_workers") -> Tuple[list, int]:
    """(the role list, workers left out) for a step with fewer tasks than the list names: an allocation
    smaller than asked (Slurm's --nodes=MIN-MAX started it on fewer nodes) trains with fewer workers, its
    last ones left out, when at least `min_workers` stay.  None (the default: the user did not allow
    fewer) and a list that fits are returned as they are (roles_from_list says what is wrong)."""
    if isinstance(list_of_tasks, str):
        list_of_tasks = [r for r in list_of_tasks.split(",") if r.strip()]
    out = list(list_of_tasks)
    excess = len(out) - ntasks
    if min_workers is None or excess <= 0:
        return out, 0
    workers = count_workers(out)
    if workers - excess < max(min_workers, 1):
        raise PlanError(f"{name} has {len(out)} roles for the step's {ntasks} tasks: leaving {excess} of its "
                        f"{workers} workers out would leave {max(workers - excess, 0)}, below {min_name} "
                        f"{min_workers}")
    return without_workers(out, excess, name), excess


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


def roles_by_component(task_components: Sequence[int], component_roles: Sequence[object],
                       name: str = "roles by component") -> tuple:
    """One role per slot from one role per heterogeneous-job component of the step.

    task_components: each slot's component (SlurmStep.task_components); component_roles: one role
    for each component of the step, in component order (a comma-separated string is split). Every
    task of a component gets its role; a 'chief' component must have exactly one task. Indices
    within a role then go in rank order across components (build_plan counts them).
    """
    if isinstance(component_roles, str):
        component_roles = [r for r in component_roles.split(",") if r.strip()]
    roles = [normalise_role(r, f"{name}[{i}]") for i, r in enumerate(component_roles)]
    present = sorted(set(task_components))
    if len(roles) != len(present):
        listed = ", ".join(str(c) for c in present)
        plural = "s" if len(present) != 1 else ""
        raise PlanError(f"{name}={','.join(roles)!r} has {len(roles)} role{'s' if len(roles) != 1 else ''}: expected "
                        f"one per component of the heterogeneous step ({len(present)}: component{plural} {listed})")
    role_of = dict(zip(present, roles))
    for c, role in role_of.items():
        size = sum(1 for x in task_components if x == c)
        if role == "chief" and size != 1:
            raise PlanError(f"{name}={','.join(roles)!r}: component {c} is 'chief' but has {size} tasks: expected "
                            "exactly one task in a chief component")
    out = tuple(role_of[c] for c in task_components)
    validate_roles(out, f"{name}={','.join(roles)!r} gives roles")
    return out


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
