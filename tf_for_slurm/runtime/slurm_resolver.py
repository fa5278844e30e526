"""SlurmClusterResolver scripts, unmodified: TensorFlow's class answers with the step's plan.

Two faces of one rule (plan.slurm_resolver):

- under `tf-slurm exec`, the shim calls `patch_tf_class` once the script imports TensorFlow's
  resolver module: `SlurmClusterResolver` and its subclasses then answer from the step's TF_CONFIG
  (the plan's addresses and ports, so exec's port window and checks hold), with the GPUs exec gave
  the task (no nvidia-smi), and a script whose jobs= or tasks_per_node= contradict the plan ends
  its task with one fix line;
- `tf_for_slurm.SlurmClusterResolver` is a drop-in with TensorFlow's constructor and methods,
  planned by our planner (slots from node and local id, collision-free ports, CPU nodes); it is a
  plain class registered as a TensorFlow ClusterResolver, so importing it imports no TensorFlow.

A subclass's `_resolve_hostlist` (host renaming) renames the plan's node names in both.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import sys
import time
from typing import Any, Callable, Mapping, Optional

from tf_for_slurm.errors import PlanError, TfSlurmError
from tf_for_slurm.host import settings, slurm
from tf_for_slurm.host.environment import plan_from_env
from tf_for_slurm.plan import slurm_resolver as rules
from tf_for_slurm.plan.gpus import devices_for_task, parse_gpu_list, visible_devices_for

log = logging.getLogger(__name__)

TF_MODULE = "tensorflow.python.distribute.cluster_resolver.slurm_cluster_resolver"
_BASE_MODULE = "tensorflow.python.distribute.cluster_resolver.cluster_resolver"
CHIEF_FIRST = 5.0  # s a non-chief task that found the same misfit waits for the chief to end the step
_METHODS = ("cluster_spec", "get_task_info", "master", "num_accelerators", "_resolve_hostlist")


class MisfitError(PlanError):
    """The script's resolver arguments contradict the step's plan (the message is the fix line's text)."""


def _arguments(args: tuple, kwargs: Mapping[str, Any]) -> dict:
    """TensorFlow's constructor arguments by name, defaults filled (a TypeError as TensorFlow's)."""
    if len(args) > len(rules.ARGUMENTS):
        raise TypeError(f"{rules.CLASS}() takes at most {len(rules.ARGUMENTS)} arguments ({len(args)} given)")
    given = dict(zip(rules.ARGUMENTS, args))
    for name, value in kwargs.items():
        if name not in rules.DEFAULTS:
            raise TypeError(f"{rules.CLASS}() got an unexpected keyword argument {name!r}")
        if name in given:
            raise TypeError(f"{rules.CLASS}() got multiple values for argument {name!r}")
        given[name] = value
    return {**rules.DEFAULTS, **given}


def _renaming(resolver: object, own: Optional[Callable]) -> Optional[list]:
    """A subclass's own `_resolve_hostlist` answer (its host renaming), else None."""
    mine = getattr(type(resolver), "_resolve_hostlist", None)
    if own is None or mine is None or mine is own:
        return None
    return list(resolver._resolve_hostlist())  # type: ignore[attr-defined]


def answer(env: Mapping[str, str], arguments: Mapping[str, Any], new_names: Optional[list] = None) -> tuple:
    """(rules.Answer, {host: tasks}, CUDA_VISIBLE_DEVICES to set or None) for this task.

    Under exec: the step's TF_CONFIG and the GPUs exec gave the task.  Elsewhere: our planner with the
    script's jobs= as the roles.  Raises MisfitError (a contradiction) or a one-line TfSlurmError.
    """
    rules.check_gpu_arguments(arguments["gpus_per_node"], arguments["gpus_per_task"])
    step = slurm.step_from_env(env)
    table = rules.node_table(step.nodes, step.tasks_per_node)
    line = rules.tasks_per_node_misfit(arguments["tasks_per_node"], step.nodes, step.tasks_per_node)
    exec_config = env.get("TF_CONFIG") if slurm.under_exec(env) else None
    visible: Optional[str] = None
    if exec_config:
        cluster, task_type, task_id = rules.cluster_from_tf_config(json.loads(exec_config))
        line = rules.jobs_misfit(arguments["jobs"], rules.role_counts(cluster), settings.PS, settings.CHIEF) or line
        if line:
            raise MisfitError(line)
        share = parse_gpu_list(env.get(slurm.CUDA_VISIBLE_DEVICES), slurm.CUDA_VISIBLE_DEVICES)
        gpus = len(rules.gpu_share(share, arguments["gpus_per_task"]))
    else:
        if line:
            raise MisfitError(line)
        roles = list(rules.roles_from_jobs(arguments["jobs"], step.ntasks))
        mine = {k: v for k, v in env.items() if k != settings.CHIEF}  # the script's jobs= are the roles
        plan = plan_from_env(mine, tasks=roles, check=False)
        me = plan.me
        cluster, task_type, task_id = plan.cluster_spec(), me.role, me.index
        devices = devices_for_task(plan.tasks, me.rank, env.get(slurm.CUDA_VISIBLE_DEVICES),
                                   env.get(slurm.GPU_NAMES[1]), slurm.GPU_NAMES)
        if devices is None and rules.node_pool(arguments["gpus_per_node"]):
            devices = visible_devices_for(plan.tasks, me.rank, rules.node_pool(arguments["gpus_per_node"]))
        if devices is not None:
            devices = ",".join(rules.gpu_share(parse_gpu_list(devices), arguments["gpus_per_task"]))
        visible, gpus = devices, len(parse_gpu_list(devices))
    if new_names is not None:
        named = rules.renamed(cluster, step.nodes, new_names)
        if named is None:
            log.warning("%s._resolve_hostlist() gave %d names for the step's %d nodes: the plan's host names are "
                        "kept", rules.CLASS, len(new_names), len(step.nodes))
        else:
            cluster = named
    found = rules.Answer(cluster, task_type, task_id, rules.rank_in(cluster, task_type, task_id), gpus)
    return found, table, visible


def _stop(line: str, chief: bool) -> None:
    """Under exec: the fix line on stderr and this task's end, so the step ends at once (the chief
    first: the others wait CHIEF_FIRST s, so the user reads the line once)."""
    if not chief:
        time.sleep(CHIEF_FIRST)
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    sys.stderr.write(f"tf-slurm: {line}\n")
    sys.stderr.flush()
    os._exit(1)


def fill(resolver: Any, arguments: Mapping[str, Any], own_hostlist: Optional[Callable] = None) -> None:
    """Set the attributes TensorFlow's constructor sets, from the plan (subclasses read them)."""
    env = settings.environ()
    try:
        found, table, visible = answer(env, arguments, _renaming(resolver, own_hostlist))
    except MisfitError as exc:
        if slurm.under_exec(env):
            _stop(str(exc), settings.text(env, settings.IS_CHIEF) == "1")
        raise
    resolver._rank = found.rank
    resolver._jobs = rules.role_counts(found.cluster)
    resolver._port_base = arguments["port_base"]
    resolver._task_configuration = table
    resolver._gpus_per_task = found.gpus
    resolver._gpus_per_node = found.gpus * max(table.values(), default=1)
    resolver._auto_set_gpu = arguments["auto_set_gpu"]
    resolver.rpc_layer = arguments["rpc_layer"]
    resolver.task_type, resolver.task_id = found.task_type, found.task_id
    resolver._gpu_allocation = []
    resolver._cluster_allocation = found.cluster
    resolver._tf_slurm_task = (found.task_type, found.task_id)
    resolver._tf_slurm_visible = visible


def cluster_spec(resolver: Any) -> Any:
    """The plan's cluster as TensorFlow's ClusterSpec; this task's GPUs set when auto_set_gpu asks."""
    from tensorflow.python.training.server_lib import ClusterSpec

    resolver.task_type, resolver.task_id = resolver._tf_slurm_task
    visible = getattr(resolver, "_tf_slurm_visible", None)
    if resolver._auto_set_gpu and visible is not None:
        settings.set_in_environment(slurm.CUDA_VISIBLE_DEVICES, visible)
    return ClusterSpec({role: list(addrs) for role, addrs in resolver._cluster_allocation.items()})


def num_accelerators(resolver: Any, task_type: Optional[str] = None, task_id: Optional[int] = None,
                     config_proto: Any = None) -> dict:
    del task_type, task_id, config_proto  # as TensorFlow's: the task's own count, set at construction
    return {"GPU": resolver._gpus_per_task}


def unknown_shape(cls: type) -> Optional[str]:
    """None when TensorFlow's class is the shape this module answers for; else what differs."""
    try:
        params = tuple(inspect.signature(vars(cls).get("__init__", object.__init__)).parameters)[1:]
    except (TypeError, ValueError):
        return "its constructor cannot be read"
    if params != rules.ARGUMENTS:
        return f"its constructor takes ({', '.join(params)})"
    missing = [name for name in _METHODS if not callable(getattr(cls, name, None))]
    return f"it has no {', '.join(missing)}" if missing else None


def patch_tf_class(module: Any) -> bool:
    """Make TensorFlow's SlurmClusterResolver (and its subclasses) answer from the step's plan.

    Returns False, with one warning, when the class is not the shape this module knows (it is left
    as it was).  A subclass that overrides cluster_spec() keeps its own answers (one warning).
    """
    cls = getattr(module, rules.CLASS, None)
    if cls is None or vars(cls).get("_tf_slurm_plan"):
        return cls is not None
    why = unknown_shape(cls)
    if why:
        sys.stderr.write(f"tf_for_slurm: warning: TensorFlow's {rules.CLASS} is left as it is ({why}; tf_for_slurm "
                         "knows TensorFlow 2.15 to 2.21's): its addresses are not the step's plan\n")
        return False
    own_hostlist = cls._resolve_hostlist
    patched_cluster_spec = cluster_spec

    def __init__(self, *args, **kwargs):  # noqa: N807 (TensorFlow's constructor, replaced)
        arguments = _arguments(args, kwargs)
        fill(self, arguments, own_hostlist)
        mine = getattr(type(self), "cluster_spec", None)
        if mine is not patched_cluster_spec:
            sys.stderr.write(f"tf_for_slurm: warning: {type(self).__name__}.cluster_spec() is the script's own: "
                             "its addresses are not the step's plan\n")

    __init__.__doc__ = cls.__init__.__doc__
    cls.__init__ = __init__
    cls.cluster_spec = patched_cluster_spec
    cls.num_accelerators = num_accelerators
    cls._tf_slurm_plan = True
    return True


def _register(cls: type) -> None:
    """Make cls a TensorFlow ClusterResolver for isinstance(), once TensorFlow is imported."""
    base = sys.modules.get(_BASE_MODULE)
    if base is not None and not issubclass(cls, base.ClusterResolver):
        base.ClusterResolver.register(cls)


class SlurmClusterResolver:
    """TensorFlow's `tf.distribute.cluster_resolver.SlurmClusterResolver`, planned by tf_for_slurm.

    Same constructor and methods; what differs: ranks come from each task's node and local id
    (right for cyclic layouts), ports from tf_for_slurm's window (port_base is accepted and unused:
    two jobs on a node never collide), GPUs from Slurm's variables (no nvidia-smi; CPU nodes and
    more tasks than GPUs work), and under `tf-slurm exec` the answers are the step's plan.
    """

    task_type: Optional[str]
    task_id: Optional[int]
    rpc_layer: str

    def __init__(self, jobs: Optional[Mapping[str, int]] = None, port_base: int = 8888,
                 gpus_per_node: Optional[int] = None, gpus_per_task: Optional[int] = None,
                 tasks_per_node: Any = None, auto_set_gpu: bool = True, rpc_layer: str = "grpc") -> None:
        _register(SlurmClusterResolver)
        try:
            fill(self, {"jobs": jobs, "port_base": port_base, "gpus_per_node": gpus_per_node,
                        "gpus_per_task": gpus_per_task, "tasks_per_node": tasks_per_node,
                        "auto_set_gpu": auto_set_gpu, "rpc_layer": rpc_layer},
                 SlurmClusterResolver._resolve_hostlist)
        except TfSlurmError as exc:
            if str(exc).startswith(rules.CLASS):
                raise
            raise type(exc)(f"{rules.CLASS}: {exc}") from None

    def _resolve_hostlist(self) -> list:
        """The step's node names in Slurm's order (a subclass may rename them)."""
        return list(slurm.step_from_env(settings.environ()).nodes)

    def cluster_spec(self) -> Any:
        _register(SlurmClusterResolver)
        return cluster_spec(self)

    def get_task_info(self) -> tuple:
        return self.task_type, self.task_id

    def master(self, task_type: Optional[str] = None, task_id: Optional[int] = None,
               rpc_layer: Optional[str] = None) -> str:
        from tensorflow.python.distribute.cluster_resolver.cluster_resolver import format_master_url

        task_type = task_type if task_type is not None else self.task_type
        task_id = task_id if task_id is not None else self.task_id
        if task_type is None or task_id is None:
            return ""
        return format_master_url(self.cluster_spec().task_address(task_type, task_id), rpc_layer or self.rpc_layer)

    def num_accelerators(self, task_type: Optional[str] = None, task_id: Optional[int] = None,
                         config_proto: Any = None) -> dict:
        return num_accelerators(self, task_type, task_id, config_proto)

    @property
    def environment(self) -> str:
        return ""
