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
from .slurm import SlurmStep, check_env, step_from_env


def roles_for(step: SlurmStep, tasks=None, ps: Optional[int] = None, placement: str = "first",
              chief: bool = False, *, names: Optional[Mapping[str, str]] = None) -> tuple:
    """Roles from an explicit ListOfTFTasks, else a placement helper ('first' N ps, 'per-node').

    names: what the user called each input ('tasks' -> 'TF_SLURM_TASKS', ...), for error messages.
    """
    names = {"tasks": "ListOfTFTasks", "ps": "ps", "placement": "placement", **(names or {})}
    if tasks is not None:
        if ps is not None:
            raise UsageError("tasks and ps were both given: expected one of them (a ListOfTFTasks or a ps count)")
        roles = roles_mod.roles_from_list(tasks, step.ntasks, names["tasks"])
        return roles_mod.with_chief(roles) if chief else roles
    if placement == "first":
        return roles_mod.first_ps(step.ntasks, 1 if ps is None else ps, chief=chief, name=names["ps"])
    if placement == "per-node":
        return roles_mod.ps_per_node(step.tasks_per_node, chief=chief, name=names["placement"])
    raise UsageError(bad_value(names["placement"], placement, "'first' or 'per-node'"))


def _env_int(env: Mapping[str, str], name: str) -> Optional[int]:
    value = env.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise UsageError(bad_value(name, value, "an integer")) from None


_TRUE, _FALSE = ("1", "true", "yes"), ("", "0", "false", "no")


def _check_arguments(tasks: object, ps: object, placement: object, chief: object, address: object,
                     node_addresses: object, check: object) -> None:
    """Types at the public boundary: one UsageError naming the argument, never a TypeError inside."""
    if tasks is not None and (isinstance(tasks, (bytes, Mapping)) or not isinstance(tasks, (str, Sequence))):
        raise UsageError(bad_value("tasks", tasks, "a list of roles like ['ps', 'worker'] or 'ps,worker'"))
    if ps is not None and (isinstance(ps, bool) or not isinstance(ps, int)):
        raise UsageError(bad_value("ps", ps, "a number of parameter servers (int) >= 0"))
    if placement is not None and placement not in ("first", "per-node"):
        raise UsageError(bad_value("placement", placement, "'first' or 'per-node'"))
    for name, value in (("chief", chief), ("check", check)):
        if not isinstance(value, bool):
            raise UsageError(bad_value(name, value, "True or False"))
    if address is not None and not isinstance(address, str):
        raise UsageError(bad_value("address", address, "an address policy string like 'hostname' or "
                                   "'template:{host}-ib'"))
    if node_addresses is not None and not isinstance(node_addresses, Mapping):
        raise UsageError(bad_value("node_addresses", node_addresses, "a mapping node name -> address"))


def _iface_not_gathered(spec: str, name: str, iface: str) -> PlanError:
    """`iface:NAME` needs every node's address of that interface: say which exist here and how."""
    import socket

    try:
        here = [n for _, n in socket.if_nameindex()]
    except OSError:
        here = []
    has = f"this host has {iface!r}" if iface in here else f"this host has no {iface!r}"
    return PlanError(bad_value(name, spec, (
        f"per-node addresses of interface {iface!r} gathered first ({has}; its interfaces: "
        f"{', '.join(here) or 'none found'}): use tf_for_slurm.mpi.plan_from_mpi under mpirun, or run "
        f"`srun --ntasks-per-node=1 tf-slurm node-address --iface {iface} --append FILE` and set "
        "TF_SLURM_ADDRESS=file:FILE")))


def plan_from_env(env: Optional[Mapping[str, str]] = None, *, tasks: Optional[Sequence[str]] = None,
                  ps: Optional[int] = None, placement: Optional[str] = None, chief: bool = False,
                  address: Optional[str] = None, node_addresses: Optional[Mapping[str, str]] = None,
                  check: bool = True) -> ClusterPlan:
    """Plan the current step.

    tasks: the ListOfTFTasks (default: TF_SLURM_TASKS, comma-separated); ps: number of ps for the
    default placement (default: TF_SLURM_PS, else 1); placement: 'first' or 'per-node'
    (TF_SLURM_PLACEMENT); address: policy (default TF_SLURM_ADDRESS, else host names).
    check: resolve this task's host and check its port is free before anyone relies on it.
    Errors name the argument, or the variable when the value came from the environment.
    """
    env = check_env(os.environ if env is None else env)
    _check_arguments(tasks, ps, placement, chief, address, node_addresses, check)
    step = step_from_env(env)
    names = {}
    if tasks is None and ps is None and env.get("TF_SLURM_TASKS"):
        tasks, names["tasks"] = env["TF_SLURM_TASKS"].split(","), "TF_SLURM_TASKS"
    if tasks is None and ps is None:
        ps, names["ps"] = _env_int(env, "TF_SLURM_PS"), "TF_SLURM_PS"
    if placement is None and env.get("TF_SLURM_PLACEMENT"):
        placement, names["placement"] = env["TF_SLURM_PLACEMENT"], "TF_SLURM_PLACEMENT"
    chief_env = env.get("TF_SLURM_CHIEF", "").strip().lower()
    if chief_env not in _TRUE + _FALSE:
        raise UsageError(bad_value("TF_SLURM_CHIEF", env["TF_SLURM_CHIEF"], "1 or 0 (true/false, yes/no)"))
    chief = chief or chief_env in _TRUE
    roles = roles_for(step, tasks, ps, placement or "first", chief, names=names)
    address_name = "address" if address is not None else "TF_SLURM_ADDRESS"
    spec = address if address is not None else env.get("TF_SLURM_ADDRESS")
    policy = parse_policy(spec, address_name)
    if policy.kind == "file" and node_addresses is None:
        try:
            with open(policy.arg, encoding="utf-8") as fh:
                node_addresses = parse_address_file(fh.read(), policy.arg)
        except OSError as exc:
            raise PlanError(bad_value(address_name, f"file:{policy.arg}",
                                      f"a readable address file ({exc.strerror})")) from None
    if policy.kind == "iface" and node_addresses is None:
        raise _iface_not_gathered(spec or "", address_name, policy.arg)
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
