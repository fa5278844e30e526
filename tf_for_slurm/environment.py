"""The one face that reads os.environ: turn the process environment into a ClusterPlan.

Everything it calls is pure; this module only decides which values to pass.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional, Sequence

from . import roles as roles_mod
from .addresses import check_resolvable, parse_address_file, parse_policy
from .errors import PlanError, UsageError, bad_value
from .plan import ClusterPlan, build_plan
from .slurm import SlurmStep, step_from_env


def roles_for(step: SlurmStep, tasks=None, ps: Optional[int] = None, placement: str = "first",
              chief: bool = False) -> tuple:
    """Roles from an explicit ListOfTFTasks, else a placement helper ('first' N ps, 'per-node')."""
    if tasks is not None:
        if ps is not None:
            raise UsageError("tasks and ps were both given: expected one of them (a ListOfTFTasks or a ps count)")
        roles = roles_mod.roles_from_list(tasks, step.ntasks)
        return roles_mod.with_chief(roles) if chief else roles
    if placement == "first":
        return roles_mod.first_ps(step.ntasks, 1 if ps is None else ps, chief=chief)
    if placement == "per-node":
        return roles_mod.ps_per_node(step.tasks_per_node, chief=chief)
    raise UsageError(bad_value("placement", placement, "'first' or 'per-node'"))


def _env_int(env: Mapping[str, str], name: str) -> Optional[int]:
    value = env.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise UsageError(bad_value(name, value, "an integer")) from None


def plan_from_env(env: Optional[Mapping[str, str]] = None, *, tasks: Optional[Sequence[str]] = None,
                  ps: Optional[int] = None, placement: Optional[str] = None, chief: bool = False,
                  address: Optional[str] = None, node_addresses: Optional[Mapping[str, str]] = None,
                  check: bool = True) -> ClusterPlan:
    """Plan the current step.

    tasks: the ListOfTFTasks (default: TF_SLURM_TASKS, comma-separated); ps: number of ps for the
    default placement (default: TF_SLURM_PS, else 1); placement: 'first' or 'per-node'
    (TF_SLURM_PLACEMENT); address: policy (default TF_SLURM_ADDRESS, else host names).
    check: resolve this task's host and check its port is free before anyone relies on it.
    """
    env = os.environ if env is None else env
    step = step_from_env(env)
    if tasks is None and ps is None and env.get("TF_SLURM_TASKS"):
        tasks = env["TF_SLURM_TASKS"].split(",")
    if tasks is None and ps is None:
        ps = _env_int(env, "TF_SLURM_PS")
    placement = placement or env.get("TF_SLURM_PLACEMENT") or "first"
    chief = chief or env.get("TF_SLURM_CHIEF", "") in ("1", "true", "yes")
    roles = roles_for(step, tasks, ps, placement, chief)
    policy = parse_policy(address if address is not None else env.get("TF_SLURM_ADDRESS"))
    if policy.kind == "file" and node_addresses is None:
        try:
            with open(policy.arg, encoding="utf-8") as fh:
                node_addresses = parse_address_file(fh.read(), policy.arg)
        except OSError as exc:
            raise PlanError(bad_value("TF_SLURM_ADDRESS", f"file:{policy.arg}",
                                      f"a readable address file ({exc.strerror})")) from None
    plan = build_plan(step, roles, address=policy, port_scope=env.get("TF_SLURM_PORT_SCOPE") or "auto",
                      base_port=_env_int(env, "TF_SLURM_BASE_PORT"), node_addresses=node_addresses)
    if check and plan.my_rank is not None:
        me = plan.me
        check_resolvable(me.host, f"{me.role}:{me.index} (rank {me.rank}, node {me.node})")
    return plan


def noib_address(no_ib: bool, env: Optional[Mapping[str, str]] = None) -> str:
    """The address policy for the seeds' NoIB switch: host names, or InfiniBand names from
    TF_SLURM_IB_TEMPLATE (default '{host}-ib').

    An explicit TF_SLURM_ADDRESS (a site's choice, or the local launcher's loopback address) wins
    over both: it says how this cluster's nodes must be reached.
    """
    from .addresses import DEFAULT_IB_TEMPLATE

    env = os.environ if env is None else env
    if env.get("TF_SLURM_ADDRESS"):
        return env["TF_SLURM_ADDRESS"]
    return "hostname" if no_ib else "template:" + (env.get("TF_SLURM_IB_TEMPLATE") or DEFAULT_IB_TEMPLATE)
