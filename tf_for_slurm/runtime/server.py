"""Start this task's TensorFlow server from a ClusterPlan.

Three things must be right before `tf.distribute.Server` exists, or they cannot be fixed later:
GPU visibility (CUDA reads CUDA_VISIBLE_DEVICES once, when TensorFlow first touches devices),
device filters (without them a worker's session waits for every other worker), and the port
(a taken port otherwise surfaces as TensorFlow's opaque "Could not start gRPC server").
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Mapping, MutableMapping, Optional

from tf_for_slurm.errors import PlanError, UsageError, bad_value
from tf_for_slurm.host import settings, slurm
from tf_for_slurm.host.network import ensure_bindable
from tf_for_slurm.plan import strategy
from tf_for_slurm.plan.cluster import ClusterPlan, Task
from tf_for_slurm.plan.gpus import devices_for_task

log = logging.getLogger(__name__)


def device_filters(plan: ClusterPlan, task: Optional[Task] = None) -> list:
    """Devices a task's sessions may see.

    A worker/chief/evaluator sees the ps job and itself, so it never waits for (or dies with)
    another worker.  A ps sees only itself: its one session is the done-queue wait, which must
    keep working while workers come and go.
    """
    t = plan.me if task is None else task
    return strategy.device_filters(t.role, t.index, has_ps=plan.count("ps") > 0)


def _check_fraction(gpu_memory_fraction: Optional[float]) -> None:
    if gpu_memory_fraction is None:
        return
    if (isinstance(gpu_memory_fraction, bool) or not isinstance(gpu_memory_fraction, (int, float))
            or not 0.0 < float(gpu_memory_fraction) <= 1.0):
        raise UsageError(bad_value("gpu_memory_fraction", gpu_memory_fraction, "a number in (0, 1]"))


def session_config(plan: ClusterPlan, *, task: Optional[Task] = None,
                   gpu_memory_fraction: Optional[float] = None,
                   operation_timeout_ms: Optional[int] = None) -> Any:
    """The `tf.compat.v1.ConfigProto` this task's server and sessions should use."""
    _check_fraction(gpu_memory_fraction)
    import tensorflow as tf

    t = plan.me if task is None else task
    config = tf.compat.v1.ConfigProto(device_filters=device_filters(plan, t))
    if t.role == "ps":
        config.device_count["GPU"] = 0
    elif gpu_memory_fraction is not None:
        config.gpu_options.per_process_gpu_memory_fraction = float(gpu_memory_fraction)
    if operation_timeout_ms is not None:
        config.operation_timeout_in_ms = int(operation_timeout_ms)
    return config


def configure_gpus(plan: ClusterPlan, environ: Optional[MutableMapping[str, str]] = None) -> str:
    """Set CUDA_VISIBLE_DEVICES for this task (ps: none; others: their share of the node's GPUs).

    Must run before TensorFlow initialises its devices; returns the value set.
    """
    process_env = settings.environ()
    env: Mapping[str, str] = process_env if environ is None else environ
    me = plan.me
    visible, step_gpus = slurm.gpu_sources(env)
    value = devices_for_task(plan.tasks, me.rank, visible, step_gpus, slurm.GPU_NAMES)
    if value is None:  # no GPU anywhere on this node
        value = ""
    if "tensorflow" in sys.modules and visible != value and env is process_env:
        log.warning("TensorFlow was imported before start_server: %s=%r may come "
                    "too late if GPUs were already initialised", slurm.CUDA_VISIBLE_DEVICES, value)
    if environ is None or environ is process_env:
        settings.set_in_environment(slurm.CUDA_VISIBLE_DEVICES, value)
    else:
        environ[slurm.CUDA_VISIBLE_DEVICES] = value
    log.info("%s:%d sees GPUs %s=%r", me.role, me.index, slurm.CUDA_VISIBLE_DEVICES, value)
    return value


def _port_error(task: Task, why: str) -> PlanError:
    return PlanError(bad_value(f"port of task {task.role}:{task.index} (rank {task.rank}, {task.address})",
                               task.port, f"a free TCP port on this host ({why})"))


def check_port_free(task: Task) -> None:
    """Raise PlanError naming the port and the task when the port is already listened on."""
    ensure_bindable(task.port, f"task {task.role}:{task.index} (rank {task.rank}, {task.address})")


def start_server(plan: ClusterPlan, gpu_memory_fraction: Optional[float] = None) -> Any:
    """Start and return this task's `tf.distribute.Server` (GPU env, filters, port checked)."""
    _check_fraction(gpu_memory_fraction)
    me = plan.me
    if not 0 < me.port < 65536:
        raise PlanError(bad_value(f"port of task {me.role}:{me.index}", me.port, "1..65535"))
    configure_gpus(plan)
    check_port_free(me)
    import tensorflow as tf

    config = session_config(plan, gpu_memory_fraction=gpu_memory_fraction)
    cluster = tf.train.ClusterSpec(plan.server_dictionary())
    try:
        server = tf.distribute.Server(cluster, job_name=me.role, task_index=me.index, config=config,
                                      start=True)
    except tf.errors.UnknownError as exc:
        if "Could not start gRPC server" in str(exc):
            raise _port_error(me, "TensorFlow could not start its gRPC server there") from None
        raise
    log.info("started %s:%d at %s (target %s)", me.role, me.index, me.address, server.target)
    return server
