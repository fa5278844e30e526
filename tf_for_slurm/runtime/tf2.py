"""TensorFlow 2 distribution strategies over a `ClusterPlan`, with a clean exit for PS servers.

Two strategies are covered:

* ``MultiWorkerMirroredStrategy`` (MWMS): every task trains; TF_CONFIG lists workers (and a chief
  when the plan has one; otherwise TensorFlow treats worker 0 as the chief). There is no ps.
* ``ParameterServerStrategy`` (PSS): the *chief* task is the coordinator and runs the training
  program; ps and worker tasks only run a ``tf.distribute.Server``.

The clean exit of the PSS servers (why a ``join()`` is not enough, and how the coordinator tells
each server to end) lives in `runtime.pss_exit`; its public names are importable from here.

Keras: in TF 2.21 Keras 3 ``model.fit`` fails under both strategies (keras-team/keras#20585);
write a custom training loop (``strategy.run`` for MWMS, ``ClusterCoordinator.schedule`` for PSS),
or install tf_keras (``pip install --no-deps tf-keras==2.21.0``) and set ``TF_USE_LEGACY_KERAS=1``
before TensorFlow is imported to use ``model.fit``.

TensorFlow is imported only inside the functions that need it.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Callable, Optional

from tf_for_slurm.errors import PlanError, UsageError, bad_value
from tf_for_slurm.host import settings
from tf_for_slurm.host.network import port_accepts
from tf_for_slurm.plan import strategy as rules
from tf_for_slurm.plan.cluster import ClusterPlan
from tf_for_slurm.runtime.pss_exit import (
    EXIT_COORDINATOR_LOST,
    EXIT_COORDINATOR_NEVER_SEEN,
    EXIT_TRAINING_FAILED,
    exit_now,
    say_hello,
    serve_until_done,
    shutdown_cluster,
)
from tf_for_slurm.runtime.server import configure_gpus
from tf_for_slurm.runtime.tf2_plan import (
    cluster_dict,
    plan_or_env,
    pss_cluster_dict,
    pss_coordinator,
    pss_servers,
    task_of,
)

__all__ = [
    "EXIT_COORDINATOR_LOST", "EXIT_COORDINATOR_NEVER_SEEN", "EXIT_TRAINING_FAILED", "exit_now",
    "multi_worker_mirrored_strategy", "mwms_is_chief", "mwms_tf_config", "parameter_server_strategy",
    "run_parameter_server_strategy", "serve_until_done", "shutdown_cluster",
]

log = logging.getLogger(__name__)


# -- MultiWorkerMirroredStrategy ---------------------------------------------------------------

def mwms_tf_config(plan: ClusterPlan, rank: Optional[int] = None) -> dict:
    """TF_CONFIG for MultiWorkerMirroredStrategy task `rank` (default: this task).

    MWMS is all-reduce between workers: a 'ps' task has no place in it, so a plan with ps is
    rejected rather than silently dropping those tasks (they would sit idle and the step would
    never end). Without a 'chief' role TensorFlow makes worker 0 the chief, which is what the seed
    tutorials expect; the dictionary therefore lists only the roles the plan has.
    """
    if not isinstance(plan, ClusterPlan):
        raise UsageError(bad_value("plan", type(plan).__name__, "a tf_for_slurm ClusterPlan"))
    n_ps = plan.count("ps")
    if n_ps:
        raise PlanError(bad_value(
            "plan roles", [t.role for t in plan.tasks],
            f"workers (and at most one chief) only: MultiWorkerMirroredStrategy takes no 'ps', "
            f"the plan has {n_ps} (use {settings.PS}=0 or a ListOfTFTasks without 'ps')"))
    n_chief = plan.count("chief")
    if n_chief > 1:
        raise PlanError(bad_value("plan chief count", n_chief, "0 or 1 chief for MultiWorkerMirroredStrategy"))
    if plan.count("worker") + n_chief == 0:
        raise PlanError(bad_value("plan roles", [t.role for t in plan.tasks],
                                  "at least one 'worker' for MultiWorkerMirroredStrategy"))
    task = task_of(plan, rank)
    return {"cluster": cluster_dict(plan), "task": {"type": task.role, "index": task.index}}


def mwms_is_chief(plan: ClusterPlan, rank: Optional[int] = None) -> bool:
    """True for the task that should write checkpoints/summaries under MWMS (chief, else worker 0)."""
    task = task_of(plan, rank)
    chief = rules.find_chief(plan.tasks)
    return chief is not None and task.rank == chief.rank


def multi_worker_mirrored_strategy(plan: Optional[ClusterPlan] = None, **strategy_kwargs: Any):
    """Set TF_CONFIG for this task and return a `tf.distribute.MultiWorkerMirroredStrategy`.

    TF_CONFIG must be in the environment before the strategy is built (it starts this task's
    collective server from it), hence the side effect. Without `plan`, the plan comes from the
    Slurm environment with no ps unless TF_SLURM_TASKS/TF_SLURM_PS say otherwise.
    """
    plan = plan_or_env(plan, "mwms")
    config = mwms_tf_config(plan)
    configure_gpus(plan)  # the same GPU split as runtime.launch and `tf-slurm exec`
    settings.set_in_environment("TF_CONFIG", json.dumps(config))
    log.info("MultiWorkerMirroredStrategy: %s:%d of %s", config["task"]["type"], config["task"]["index"],
             config["cluster"])
    import tensorflow as tf

    return tf.distribute.MultiWorkerMirroredStrategy(**strategy_kwargs)


# -- ParameterServerStrategy -------------------------------------------------------------------

def _wait_for_ports(tasks: list, timeout: float) -> None:
    """Block until every task's port accepts TCP, or raise naming those that never did."""
    deadline = time.monotonic() + timeout
    pending = list(tasks)
    while pending:
        pending = [t for t in pending if not port_accepts(t.host, t.port, timeout=0.5)]
        if not pending:
            return
        if time.monotonic() >= deadline:
            raise PlanError(bad_value("servers", [f"{t.role}:{t.index}@{t.address}" for t in pending],
                                      f"accepting TCP within wait_timeout={timeout} s"))
        time.sleep(0.1)


def parameter_server_strategy(plan: Optional[ClusterPlan] = None, variable_partitioner: Any = None,
                              wait_timeout: float = 300.0):
    """On the chief (coordinator): build a `ParameterServerStrategy` over the plan's cluster.

    Waits (up to `wait_timeout` s) until every ps/worker port accepts TCP first, so a coordinator
    that starts before its servers fails with a list of the missing ones instead of a gRPC error.
    """
    plan = plan_or_env(plan, "pss")
    chief = pss_coordinator(plan)
    me = plan.me
    if me.rank != chief.rank:
        raise UsageError(bad_value("task", f"{me.role}:{me.index}",
                                   "the chief (coordinator); ps/worker tasks call serve_until_done()"))
    configure_gpus(plan)
    import tensorflow as tf

    spec = tf.train.ClusterSpec(pss_cluster_dict(plan))
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        spec, task_type="chief", task_id=0, rpc_layer="grpc")
    _wait_for_ports(pss_servers(plan), wait_timeout)
    log.info("ParameterServerStrategy: coordinator %s over %s", chief.address, spec.as_dict())
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver,
                                                                   variable_partitioner=variable_partitioner)
    # Tell every server the coordinator is up, so that from now on its death counts as a failure.
    say_hello(plan, timeout=10.0)
    return strategy


def run_parameter_server_strategy(train_fn: Callable[[Any, ClusterPlan], Any],
                                  plan: Optional[ClusterPlan] = None, **serve_kwargs: Any) -> int:
    """One entry point for every task of a ParameterServerStrategy job; returns the exit status.

    The chief builds the strategy, calls ``train_fn(strategy, plan)`` and, whatever happens, tells
    the servers to exit (status 0, or EXIT_TRAINING_FAILED when train_fn raised; the exception is
    re-raised). ps and worker tasks serve until done (see `serve_until_done`, which takes
    `serve_kwargs`). Use it as ``sys.exit(run_parameter_server_strategy(train))``, or end with
    `exit_now(status)` to skip TensorFlow's slow interpreter teardown (see there).
    """
    if not callable(train_fn):
        raise UsageError(bad_value("train_fn", train_fn, "a callable train_fn(strategy, plan)"))
    plan = plan_or_env(plan, "pss")
    pss_coordinator(plan)
    me = plan.me
    if me.role in ("ps", "worker"):
        return serve_until_done(plan, **serve_kwargs)
    if me.role != "chief":
        raise UsageError(bad_value("task", f"{me.role}:{me.index}",
                                   "'chief', 'ps' or 'worker' under ParameterServerStrategy"))
    status = EXIT_TRAINING_FAILED
    try:
        strategy = parameter_server_strategy(plan)
        train_fn(strategy, plan)
        status = 0
    finally:
        shutdown_cluster(plan, status=status)
    return status
