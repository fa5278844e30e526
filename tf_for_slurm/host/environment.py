"""The process environment into a ClusterPlan: which setting or argument wins, and which value
each pure planning function gets.  Also this process's remembered plan (GetServerDictionary's,
for hooks built later with the original arguments) and where a hook finds this task's place.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Mapping, Optional, Sequence, Tuple

from tf_for_slurm.errors import PlanError, UsageError, bad_value
from tf_for_slurm.host import settings, slurm
from tf_for_slurm.host.network import check_resolvable, interface_names, resolves
from tf_for_slurm.host.slurm import check_env, step_from_env
from tf_for_slurm.plan import roles as roles_mod
from tf_for_slurm.plan.addresses import DEFAULT_IB_TEMPLATE, decide_auto, parse_address_file, parse_policy
from tf_for_slurm.plan.cluster import ClusterPlan, build_plan
from tf_for_slurm.plan.step import SlurmStep
from tf_for_slurm.plan.task_info import TaskInfo, info_from_plan, info_from_tf_config

if TYPE_CHECKING:
    from tf_for_slurm.plan.addresses import AddressPolicy, AutoChoice

_lock = threading.Lock()
_remembered: Optional[ClusterPlan] = None  # the ClusterPlan of this process's last GetServerDictionary


def remember_plan(plan: ClusterPlan) -> None:
    """Record the plan GetServerDictionary built, for hooks created later without an index."""
    global _remembered  # noqa: PLW0603
    with _lock:
        _remembered = plan


def remembered_plan() -> Optional[ClusterPlan]:
    with _lock:
        return _remembered


def roles_for(step: SlurmStep, tasks=None, ps: Optional[int] = None, placement: str = "first",
              chief: bool = False, *, names: Optional[Mapping[str, str]] = None,
              component_roles: Optional[Sequence[str]] = None) -> tuple:
    """Roles from an explicit ListOfTFTasks, else one role per heterogeneous-job component
    (`component_roles`), else a placement helper ('first' N ps, 'per-node').

    names: what the user called each input ('tasks' -> 'TF_SLURM_TASKS', ...), for error messages.
    """
    names = {"tasks": "ListOfTFTasks", "ps": "ps", "placement": "placement",
             "component_roles": "component_roles", **(names or {})}
    if tasks is not None:
        if ps is not None:
            raise UsageError("tasks and ps were both given: expected one of them (a ListOfTFTasks or a ps count)")
        roles = roles_mod.roles_from_list(tasks, step.ntasks, names["tasks"])
        return roles_mod.with_chief(roles) if chief else roles
    if component_roles is not None:
        if ps is not None:
            raise UsageError(f"{names['component_roles']} and {names['ps']} were both given: expected one of them "
                             "(roles by component or a ps count)")
        if not step.components:
            raise UsageError(bad_value(names["component_roles"], ",".join(component_roles),
                                       "a heterogeneous step (srun --het-group=0,1 in a job of components) to "
                                       "give roles by component; this step has no components"))
        roles = roles_mod.roles_by_component(step.task_components, component_roles, names["component_roles"])
        return roles_mod.with_chief(roles) if chief else roles
    if placement == "first":
        return roles_mod.first_ps(step.ntasks, 1 if ps is None else ps, chief=chief, name=names["ps"])
    if placement == "per-node":
        return roles_mod.ps_per_node(step.tasks_per_node, chief=chief, name=names["placement"])
    raise UsageError(bad_value(names["placement"], placement, "'first' or 'per-node'"))


# where build_plan's inputs come from, and what `plan.me` says without a slot (plan/ knows no names)
PLAN_NAMES = {"port_scope": settings.PORT_SCOPE, "base_port": settings.BASE_PORT, "reserved": slurm.STEP_RESV_PORTS}
ME_HINT = (f"expected {slurm.LOCALID} and {slurm.NODEID} (or {slurm.NODENAME}) in the environment, as srun "
           "sets them (an offline plan has no task)")


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
    here = interface_names()
    has = f"this host has {iface!r}" if iface in here else f"this host has no {iface!r}"
    return PlanError(bad_value(name, spec, (
        f"per-node addresses of interface {iface!r} gathered first ({has}; its interfaces: "
        f"{', '.join(here) or 'none found'}): use tf_for_slurm.mpi.plan_from_mpi under mpirun, or run "
        f"`srun --ntasks-per-node=1 tf-slurm node-address --iface {iface} --append FILE` and set "
        f"{settings.ADDRESS}=file:FILE")))


def whole_allocation_wanted(step: SlurmStep, component_roles: Optional[Sequence[str]],
                            het_size: Optional[int]) -> bool:
    """Whether this step of one component plans the whole heterogeneous allocation: roles by component
    name every component of the job (one step per component, started together), not just this one."""
    return (component_roles is not None and bool(step.components) and het_size is not None
            and len(set(step.components)) == 1 < het_size == len(component_roles))


def _component_roles_argument(component_roles: object) -> Optional[Sequence[str]]:
    """plan_from_env's `component_roles`, checked: None, a list of roles or 'ps,worker'."""
    if component_roles is not None and (isinstance(component_roles, (bytes, Mapping))
                                        or not isinstance(component_roles, (str, Sequence))):
        raise UsageError(bad_value("component_roles", component_roles, "a list of roles like ['ps', 'worker'] "
                                   "or 'ps,worker'"))
    return component_roles.split(",") if isinstance(component_roles, str) else component_roles


def _fewer_workers(env: Mapping[str, str], tasks: Optional[Sequence[str]],
                   names: Mapping[str, str]) -> Optional[Sequence[str]]:
    """The role list of a step batch-step started again with fewer workers (plan.relaunch): its last
    TF_SLURM_FEWER_WORKERS workers left out; a placement helper needs nothing (the task count is smaller)."""
    fewer = settings.integer(env, settings.FEWER_WORKERS, minimum=0)
    if not fewer or tasks is None:
        return tasks
    return roles_mod.without_workers(tasks, fewer, names.get("tasks", "ListOfTFTasks"))


def _fitted(env: Mapping[str, str], tasks: Optional[Sequence[str]], step: SlurmStep,
            names: Mapping[str, str]) -> Tuple[Optional[Sequence[str]], int]:
    """The role list fitted to a step with fewer tasks than it names (plan.roles.fitted_to_step, when
    TF_SLURM_MIN_WORKERS allows fewer workers), and how many workers that left out."""
    if tasks is None or step.components:
        return tasks, 0
    return roles_mod.fitted_to_step(tasks, step.ntasks, settings.integer(
        env, settings.MIN_WORKERS, minimum=1), names.get("tasks", "ListOfTFTasks"), settings.MIN_WORKERS)


def _fitted_note(plan: ClusterPlan, left_out: int, names: Mapping[str, str]) -> ClusterPlan:
    """The plan with a note (the hub logs it) and a detail (its status.json keeps it) on the workers
    the role list names that the smaller allocation had no task for."""
    return replace(plan, notes=plan.notes + (
        f"{names.get('tasks', 'ListOfTFTasks')} names {plan.size + left_out} roles for the step's {plan.size} "
        f"tasks (an allocation smaller than asked): its last {left_out} worker(s) left out "
        f"({settings.MIN_WORKERS} allows it)",), details=plan.details + (("workers_left_out", left_out),))


def plan_from_env(env: Optional[Mapping[str, str]] = None, *, tasks: Optional[Sequence[str]] = None,
                  ps: Optional[int] = None, placement: Optional[str] = None, chief: bool = False,
                  address: Optional[str] = None, node_addresses: Optional[Mapping[str, str]] = None,
                  check: bool = True, component_roles: Optional[Sequence[str]] = None) -> ClusterPlan:
    """Plan the current step.

    tasks: the ListOfTFTasks (default: TF_SLURM_TASKS, comma-separated); ps: number of ps for the
    default placement (default: TF_SLURM_PS, else 1); placement: 'first' or 'per-node'
    (TF_SLURM_PLACEMENT); address: policy (default TF_SLURM_ADDRESS, else host names);
    component_roles: one role per heterogeneous-job component of the step (TF_SLURM_COMPONENT_ROLES;
    `tasks` wins over it, `ps` with it is an error).
    check: resolve this task's host and check its port is free before anyone relies on it.
    Errors name the argument, or the variable when the value came from the environment.
    """
    env = check_env(os.environ if env is None else env)
    _check_arguments(tasks, ps, placement, chief, address, node_addresses, check)
    component_roles = _component_roles_argument(component_roles)
    step = step_from_env(env)
    names = {}
    env_tasks = settings.text(env, settings.TASKS)
    env_component_roles = settings.text(env, settings.COMPONENT_ROLES)
    explicit = tasks is not None or ps is not None or component_roles is not None
    if not explicit and env_tasks:
        tasks, names["tasks"] = env_tasks.split(","), settings.TASKS
    elif not explicit and env_component_roles:
        component_roles, names["component_roles"] = env_component_roles.split(","), settings.COMPONENT_ROLES
    if tasks is None and ps is None and component_roles is None:
        ps, names["ps"] = settings.integer(env, settings.PS), settings.PS
    tasks = _fewer_workers(env, tasks, names)
    tasks, left_out = _fitted(env, tasks, step, names)
    if placement is None and settings.text(env, settings.PLACEMENT):
        placement, names["placement"] = settings.text(env, settings.PLACEMENT), settings.PLACEMENT
    chief = chief or settings.flag(env, settings.CHIEF)
    if whole_allocation_wanted(step, component_roles, slurm.het_size(env)):
        step = slurm.whole_het_allocation(env, step)
    roles = roles_for(step, tasks, ps, placement or "first", chief, names=names, component_roles=component_roles)
    address_name = "address" if address is not None else settings.ADDRESS
    spec = address if address is not None else settings.text(env, settings.ADDRESS)
    policy = parse_policy(spec, address_name)
    if policy.kind == "auto":  # IB=auto: InfiniBand names if every node's resolves, else host names
        policy = decide_address(policy, step.nodes, env).policy
    if policy.kind == "file" and node_addresses is None:
        try:
            with open(policy.arg, encoding="utf-8") as fh:
                node_addresses = parse_address_file(fh.read(), policy.arg)
        except OSError as exc:
            raise PlanError(bad_value(address_name, f"file:{policy.arg}",
                                      f"a readable address file ({exc.strerror})")) from None
    if policy.kind == "iface" and node_addresses is None:
        raise _iface_not_gathered(spec or "", address_name, policy.arg)
    plan = build_plan(step, roles, address=policy, port_scope=settings.text(env, settings.PORT_SCOPE) or "auto",
                      base_port=settings.integer(env, settings.BASE_PORT), node_addresses=node_addresses,
                      names=PLAN_NAMES, me_hint=ME_HINT)
    if left_out:
        plan = _fitted_note(plan, left_out, names)
    if check and plan.my_rank is not None:
        me = plan.me
        check_resolvable(me.host, f"{me.role}:{me.index} (rank {me.rank}, node {me.node})")
    return plan


def compat_arguments(list_of_tasks: object, no_ib: object) -> tuple:
    """Check GetServerDictionary's arguments: (roles list, NoIB as a bool), or one UsageError.

    A string is a comma-separated ListOfTFTasks (never split into characters); NoIB must be a
    bool (or 0/1), so NoIB="no" is not silently true.
    """
    if isinstance(list_of_tasks, str):
        roles = [r for r in list_of_tasks.split(",") if r.strip()]
    elif isinstance(list_of_tasks, Sequence) and not isinstance(list_of_tasks, bytes):
        roles = list(list_of_tasks)
    else:
        raise UsageError(bad_value("ListOfTFTasks", list_of_tasks,
                                   "a list of roles like ['ps', 'worker', 'worker'] or 'ps,worker,worker'"))
    if isinstance(no_ib, bool) or (isinstance(no_ib, int) and no_ib in (0, 1)):
        return roles, bool(no_ib)
    raise UsageError(bad_value("NoIB", no_ib, "True or False"))


def noib_address(no_ib: Optional[bool], env: Optional[Mapping[str, str]] = None) -> str:
    """The address policy for the seeds' NoIB switch: host names (True), InfiniBand names from
    TF_SLURM_IB_TEMPLATE, default '{host}-ib' (False), or 'auto' (None: InfiniBand names when
    they resolve for every node of the step, else host names).

    An explicit TF_SLURM_ADDRESS (a site's choice, or the local launcher's loopback address) wins
    over all three: it says how this cluster's nodes must be reached.
    """
    env = os.environ if env is None else env
    explicit = settings.text(env, settings.ADDRESS)
    if explicit:
        return explicit
    if no_ib is None:
        return "auto"
    return "hostname" if no_ib else "template:" + (settings.text(env, settings.IB_TEMPLATE) or DEFAULT_IB_TEMPLATE)


def decide_address(policy: AddressPolicy, nodes: Sequence[str],
                   env: Optional[Mapping[str, str]] = None) -> AutoChoice:
    """Decide an 'auto' address policy for these nodes with the real resolver; log the choice once.

    The template is the policy's own ('auto:{host}-ib'), else TF_SLURM_IB_TEMPLATE, else '{host}-ib'.
    Returns an `addresses.AutoChoice` (`.policy`, `.reason`).
    """
    env = os.environ if env is None else env
    template = policy.arg
    if not template:
        template = settings.text(env, settings.IB_TEMPLATE) or DEFAULT_IB_TEMPLATE
        parse_policy("template:" + template, settings.IB_TEMPLATE)  # one-line error for a bad template
    choice = decide_auto(nodes, template, resolves)
    logging.getLogger(__name__).info("%s", choice.reason)
    return choice


def this_task(ps: Optional[int] = None, env: Optional[Mapping[str, str]] = None,
              who: str = "this hook") -> TaskInfo:
    """This task's place for hooks built with the original arguments (no worker index).

    From the plan GetServerDictionary made in this process, else TF_CONFIG, else the Slurm step
    (roles: `ps` first tasks, else TF_SLURM_TASKS / TF_SLURM_PS, else 1 ps).  Returns a
    `compat.TaskInfo`; one-line UsageError naming what to pass when none of them is there.
    """
    plan = remembered_plan()
    if plan is not None:
        return info_from_plan(plan, "GetServerDictionary")
    env = os.environ if env is None else env
    if env.get("TF_CONFIG"):
        try:
            config = json.loads(env["TF_CONFIG"])
        except ValueError:
            raise UsageError(bad_value("TF_CONFIG", env["TF_CONFIG"][:80], "JSON")) from None
        return info_from_tf_config(config)
    if env.get(slurm.PROCID) is not None or env.get(slurm.STEP_ID) is not None:
        return info_from_plan(plan_from_env(env, ps=ps, address="hostname", check=False), "the Slurm step")
    raise UsageError(f"{who}: this task's place in the cluster is unknown (no GetServerDictionary call, no "
                     "TF_CONFIG, no Slurm step): expected worker_index= and the counts, or a run under "
                     "srun / tf-slurm local / tf-slurm exec")
