"""A clean exit for ParameterServerStrategy servers: the done queues, `serve_until_done`, `shutdown_cluster`.

Why: a PSS ps/worker server that only ``join()``s never returns, so a Slurm step would never end
after training. Here every ps/worker process blocks on a dequeue from its own FIFOQueue
(``shared_name`` per task, on its own device) through a ``tf.compat.v1.Session`` on its own
server; the coordinator, when training ends, enqueues an exit status into every such queue
through a ``Session`` aimed at that task's gRPC address with a graph pinned to that task's device
(an eager remote enqueue does not reach the server's queue in TF 2.21). If the coordinator dies
instead, the dequeue times out every ``poll`` seconds and a TCP probe of the coordinator's port
decides: once it has refused connections for ``liveness_timeout`` seconds the server logs an
ERROR naming the coordinator and returns the lost status (69, as a TF1 ps that loses a worker).

Users import these names from `tf_for_slurm.runtime.tf2`. TensorFlow is imported only inside
the functions that need it.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
from typing import Any, Optional

from tf_for_slurm.errors import UsageError, bad_value
from tf_for_slurm.host.network import port_accepts
from tf_for_slurm.host.stop_request import shared_stop_request
from tf_for_slurm.plan.cluster import ClusterPlan, Task
from tf_for_slurm.plan.liveness import LOST, NEVER, NO_ANSWER, UP, Peer, Rule
from tf_for_slurm.plan.requeue import LOST_STATUS
from tf_for_slurm.runtime.server import configure_gpus
from tf_for_slurm.runtime.tf2_plan import plan_or_env, pss_cluster_dict, pss_coordinator, pss_servers

# the logger of the module users import these from: their logging settings for it keep applying
log = logging.getLogger("tf_for_slurm.runtime.tf2")

#: exit status a ps/worker returns when the coordinator vanished without saying 'done': the one lost
#: status (plan.requeue.LOST_STATUS, 69; it was 3), so batch-step requeues it once the checkpoint advanced
EXIT_COORDINATOR_LOST = LOST_STATUS
#: the timeout status: a ps/worker returns it when the coordinator never came up within ``startup_timeout``.
#: Not the lost status: nothing trained, so nothing was checkpointed to resume, and the coordinator's own
#: exit (or srun) says why it never started; 4, in 1-127, is never requeued by plan.requeue
EXIT_COORDINATOR_NEVER_SEEN = 4
#: exit status the coordinator sends when its training function raised
EXIT_TRAINING_FAILED = 1

_QUEUE_CAPACITY = 4  # room for the hello, the status and a repeated shutdown
#: queue value meaning "the coordinator is up" (statuses are 0..255): a server that got it knows
#: the coordinator existed even if it dies before a TCP probe ever saw its port open
_HELLO = -1
_QUEUE_PREFIX = "tf_slurm_tf2_done"


def _queue_name(task: Task) -> str:
    return f"{_QUEUE_PREFIX}_{task.role}_{task.index}"


def _device(task: Task) -> str:
    return f"/job:{task.role}/replica:0/task:{task.index}/device:CPU:0"


def _session_config(task: Task, timeout_ms: float) -> Any:
    import tensorflow as tf

    # device_filters: this session only talks to `task`, never waits for the rest of the cluster.
    return tf.compat.v1.ConfigProto(device_filters=[f"/job:{task.role}/task:{task.index}"],
                                    operation_timeout_in_ms=int(timeout_ms))


def _done_queue(tf: Any, task: Task) -> Any:
    with tf.compat.v1.device(_device(task)):
        return tf.queue.FIFOQueue(_QUEUE_CAPACITY, tf.int32, shapes=[[]], shared_name=_queue_name(task),
                                  name="tf_slurm_done_queue")


def _positive(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise UsageError(bad_value(name, value, "a number of seconds > 0"))
    return float(value)


def serve_until_done(plan: Optional[ClusterPlan] = None, liveness_timeout: float = 3.0, poll: float = 1.0,
                     startup_timeout: float = 600.0, linger: float = 2.0, server_config: Any = None) -> int:
    """On a ps/worker task: run this task's server until the coordinator says done; return a status.

    Returns the status the coordinator enqueued (0 after a normal end). Returns
    EXIT_COORDINATOR_LOST when the coordinator, once known to be up (its hello, enqueued by
    `parameter_server_strategy`, or its port seen open), refuses TCP for `liveness_timeout` s;
    and EXIT_COORDINATOR_NEVER_SEEN when it shows no sign of life within `startup_timeout` s
    (it imports TensorFlow and waits for every server first, so this grace is long).
    A lost coordinator is detected within about poll + liveness_timeout + poll seconds.

    After 'done' the server stays up until the coordinator's port closes, at most `linger` s:
    leaving at once can drop the reply to the coordinator's enqueue (or its session close), and
    TensorFlow's client then retries for its whole timeout, delaying the coordinator's exit.
    """
    liveness_timeout = _positive("liveness_timeout", liveness_timeout)
    linger = _positive("linger", linger)
    poll = _positive("poll", poll)
    startup_timeout = _positive("startup_timeout", startup_timeout)
    plan = plan_or_env(plan, "pss")
    coordinator = pss_coordinator(plan)
    me = plan.me
    if me.role not in ("ps", "worker"):
        raise UsageError(bad_value("task", f"{me.role}:{me.index}",
                                   "a 'ps' or 'worker' task (the chief coordinates: use parameter_server_strategy())"))
    configure_gpus(plan)  # the same GPU split as runtime.launch and `tf-slurm exec`
    # SIGUSR1/SIGTERM: keep serving; the coordinator stops, checkpoints through us, then says done
    shared_stop_request(what="this server keeps serving until the coordinator says done")
    import tensorflow as tf

    server = tf.distribute.Server(tf.train.ClusterSpec(pss_cluster_dict(plan)), job_name=me.role,
                                  task_index=me.index, protocol="grpc", config=server_config, start=True)
    log.info("%s:%d serving at %s (target %s); coordinator chief:0 at %s", me.role, me.index, me.address,
             server.target, coordinator.address)
    graph = tf.Graph()
    with graph.as_default():
        dequeue = _done_queue(tf, me).dequeue()
    watch = _CoordinatorWatch(me, coordinator, Rule(lost_after=liveness_timeout, never_after=startup_timeout),
                              poll, linger)
    with tf.compat.v1.Session(server.target, graph=graph,
                              config=_session_config(me, poll * 1000)) as sess:
        while True:
            try:
                said = int(sess.run(dequeue))
            except tf.errors.DeadlineExceededError:
                status = watch.probe()
            else:
                status = watch.said(said)
            if status is not None:
                return status


class _CoordinatorWatch:
    """A ps/worker's view of its coordinator: what it said, and whether its port still answers
    (plan.liveness: lost after `liveness_timeout` s refused once seen, never seen in `startup_timeout`)."""

    def __init__(self, me: Task, coordinator: Task, rule: Rule, poll: float, linger: float):
        self.me, self.coordinator, self.poll, self.linger = me, coordinator, poll, linger
        self.peer = Peer(rule, time.monotonic())

    def said(self, status: int) -> Optional[int]:
        """A value from the done queue: the hello (None: keep serving) or the status to exit with."""
        me, address = self.me, self.coordinator.address
        if status == _HELLO:
            log.info("%s:%d: coordinator %s is up (it said hello)", me.role, me.index, address)
            self.peer.observe(UP, time.monotonic())
            return None
        log.info("%s:%d: coordinator %s said done (status %d)", me.role, me.index, address, status)
        _linger(self.coordinator, self.linger)
        return status

    def probe(self) -> Optional[int]:
        """No word within `poll`: look at the coordinator's port; the status once it is lost or never came."""
        me, coordinator, peer = self.me, self.coordinator, self.peer
        now = time.monotonic()
        if port_accepts(coordinator.host, coordinator.port, timeout=min(0.5, self.poll)):
            if not peer.seen:
                log.info("%s:%d: coordinator %s is up", me.role, me.index, coordinator.address)
            peer.observe(UP, now)
            return None
        was_down = peer.down_since is not None
        verdict = peer.observe(NO_ANSWER, now)
        if verdict == NEVER:
            log.error("%s:%d: coordinator chief:0 at %s never accepted connections in %.0f s: exiting "
                      "with status %d", me.role, me.index, coordinator.address, peer.rule.never_after,
                      EXIT_COORDINATOR_NEVER_SEEN)
            return EXIT_COORDINATOR_NEVER_SEEN
        if peer.seen and not was_down:
            log.warning("%s:%d: coordinator %s refuses connections", me.role, me.index, coordinator.address)
        if verdict == LOST:
            assert peer.down_since is not None
            log.error("%s:%d: coordinator chief:0 at %s stopped accepting connections %.1f s ago without "
                      "saying done: exiting with status %d", me.role, me.index, coordinator.address,
                      now - peer.down_since, EXIT_COORDINATOR_LOST)
            return EXIT_COORDINATOR_LOST
        return None


def _linger(coordinator: Task, linger: float) -> None:
    """Wait until the coordinator's port closes, or `linger` s (see serve_until_done)."""
    deadline = time.monotonic() + linger
    while time.monotonic() < deadline and port_accepts(coordinator.host, coordinator.port, timeout=0.2):
        time.sleep(0.05)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def _enqueue_one(task: Task, value: int, timeout: float, results: dict) -> None:
    try:
        if not port_accepts(task.host, task.port, timeout=min(1.0, timeout)):
            results[task.rank] = "not listening"
            return
        import tensorflow as tf

        graph = tf.Graph()
        with graph.as_default():
            enqueue = _done_queue(tf, task).enqueue(tf.constant(value, tf.int32))
        sess = tf.compat.v1.Session(f"grpc://{task.address}", graph=graph,
                                    config=_session_config(task, timeout * 1000))
        try:
            sess.run(enqueue)
        finally:
            try:
                sess.close()
            except Exception as exc:  # told already; only the close failed
                log.debug("closing the session to %s:%d failed: %s", task.role, task.index, _one_line(exc))
        results[task.rank] = "ok"
    except Exception as exc:  # one unreachable task must not stop the others being told
        results[task.rank] = _one_line(exc)


def _exit_without_teardown_if_stuck(threads: list, status: int, wait: float) -> None:
    """At the interpreter's exit, if an enqueue thread is still inside TensorFlow (a task that took
    the connection and never answered, beyond the session's own timeout), end the process with
    `status` without TensorFlow's teardown, which would abort it (SIGABRT, "FATAL: exception not
    rethrown") after a training that succeeded. The wait for them first is bounded by `wait` s."""

    def at_exit() -> None:
        deadline = time.monotonic() + wait
        for th in threads:
            th.join(max(0.0, deadline - time.monotonic()))
        if any(th.is_alive() for th in threads):
            log.warning("enqueue threads still inside TensorFlow at exit: ending with status %d without "
                        "TensorFlow's teardown (it would abort the process)", status)
            exit_now(status)

    atexit.register(at_exit)


def _enqueue_all(plan: ClusterPlan, value: int, timeout: float, exit_status: Optional[int] = None) -> dict:
    """Enqueue `value` into every ps/worker task's queue, in parallel, within about `timeout` s.

    Threads, not a loop, so one unresponsive task costs `timeout` once, not once per task. We
    wait for every thread to finish (each is bounded by the session's operation timeout): a thread
    still inside TensorFlow when the interpreter shuts down aborts the whole process
    ("FATAL: exception not rethrown"). Daemon threads all the same, so a wedged one cannot keep
    the coordinator alive forever.
    """
    targets = pss_servers(plan)
    results: dict = {}
    threads = [threading.Thread(target=_enqueue_one, args=(t, value, timeout, results), daemon=True,
                                name=f"tf-slurm-enqueue-{t.role}{t.index}") for t in targets]
    for th in threads:
        th.start()
    deadline = time.monotonic() + 2 * timeout + 1.0  # TF may apply the timeout twice across a retry
    for th in threads:
        th.join(max(0.0, deadline - time.monotonic()))
    stuck = [th.name for th in threads if th.is_alive()]
    if stuck:
        log.warning("enqueue threads still blocked in TensorFlow after %.0f s: %s", 2 * timeout + 1.0, stuck)
        if exit_status is not None:  # the coordinator's end: its process must still exit with it
            _exit_without_teardown_if_stuck([th for th in threads if th.is_alive()], exit_status, timeout)
    return {f"{t.role}:{t.index}": results.get(t.rank, f"no answer within {timeout} s") for t in targets}


def say_hello(plan: ClusterPlan, timeout: float = 10.0) -> None:
    """On the coordinator, once its strategy exists: tell every server it is up, so that from
    then on its death counts as a failure (see `serve_until_done`)."""
    for name, outcome in _enqueue_all(plan, _HELLO, timeout=timeout).items():
        if outcome != "ok":
            log.warning("could not tell %s that the coordinator is up (%s)", name, outcome)


def shutdown_cluster(plan: Optional[ClusterPlan] = None, status: int = 0, timeout: float = 10.0) -> dict:
    """On the coordinator: tell every ps/worker server to exit with `status`; bounded in time.

    All tasks are told in parallel. A task that is already gone (port closed) is skipped at once;
    one that does not answer is given up after `timeout` s (at worst about 2 * timeout + 1 s, as
    TensorFlow may restart its RPC deadline on a retry), so the coordinator never hangs at its end.
    Returns {"ps:0": "ok" | reason, ...}.
    """
    timeout = _positive("timeout", timeout)
    if isinstance(status, bool) or not isinstance(status, int) or not 0 <= status <= 255:
        raise UsageError(bad_value("status", status, "an exit status int in [0, 255]"))
    plan = plan_or_env(plan, "pss")
    pss_coordinator(plan)
    report = _enqueue_all(plan, status, timeout, exit_status=status)
    for name, outcome in report.items():
        if outcome == "ok":
            log.info("shutdown: %s told to exit with status %d", name, status)
        else:
            log.warning("shutdown: %s not told (%s)", name, outcome)
    return report


def exit_now(status: int) -> None:
    """Flush logs and standard streams, then end the process at once with `status`.

    Why: after `serve_until_done` returns, the interpreter's normal teardown with TensorFlow and
    a live gRPC server loaded takes seconds (measured 1.5 s on a loaded 2-core node) and the
    Slurm step ends only when every process has. A ps/worker has nothing left to save, so it
    can skip that teardown. Do not use it where files are still open for writing (checkpoints).
    """
    if isinstance(status, bool) or not isinstance(status, int) or not 0 <= status <= 255:
        raise UsageError(bad_value("status", status, "an exit status int in [0, 255]"))
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed or replaced stream: nothing to flush
            pass
    os._exit(status)
