"""The done queue: how TF1 parameter servers learn that training is over.

`server.join()` never returns, so each ps instead blocks on a FIFOQueue placed on its own device
(shared_name 'done_queue<i>', the name the original tf_for_slurm used) and every reporting task
enqueues into every ps's queue when it is finished.

Unlike the original (which enqueued the constant 1), a task enqueues its own *reporter index*,
so the ps counts distinct tasks and a duplicate report can never end it early; a task whose
training raised enqueues `-(index + 1)`, so the ps can exit non-zero.

Reporter indices: chief tasks first, then workers, in index order.  Without a chief, worker i
reports i (the seeds' numbering).  Evaluators do not report (the ps does not wait for them).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Iterator, Optional, Sequence

from tf_for_slurm.errors import UsageError, bad_value
from tf_for_slurm.host.environment import this_task
from tf_for_slurm.plan.cluster import ClusterPlan, Task
from tf_for_slurm.plan.strategy import reporter_tasks
from tf_for_slurm.plan.task_info import fill_from_task, one_of
from tf_for_slurm.runtime.hooks import SessionHook

log = logging.getLogger(__name__)

QUEUE_NAME = "done_queue"


def reporter_index(plan: ClusterPlan, task: Optional[Task] = None) -> int:
    """This task's (or `task`'s) reporter index; UsageError for ps/evaluator."""
    t = plan.me if task is None else task
    for i, r in enumerate(reporter_tasks(plan)):
        if r.rank == t.rank:
            return i
    raise UsageError(bad_value("role", t.role, "'chief' or 'worker' (only they report done)"))


def encode_done(worker_index: int, failed: bool = False) -> int:
    """Queue value for a report: the index, or -(index + 1) when training failed."""
    return -(worker_index + 1) if failed else worker_index


def decode_done(value: int) -> tuple:
    """(worker_index, failed) from a queue value."""
    value = int(value)
    return (-value - 1, True) if value < 0 else (value, False)


def _check_count(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(bad_value(name, value, "an int >= 1"))


def _check_counts(n_ps: int, n_workers: int, worker_index: Optional[int] = None,
                  names: Sequence[str] = ("n_ps", "n_workers")) -> None:
    for name, v in zip(names, (n_ps, n_workers)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise UsageError(bad_value(name, v, "an int >= 1"))
    if worker_index is not None and (isinstance(worker_index, bool) or not isinstance(worker_index, int)
                                     or not 0 <= worker_index < n_workers):
        raise UsageError(bad_value("worker_index", worker_index, f"an int in [0, {n_workers - 1}]"))


def create_done_queue(i: int, n_workers: Optional[int] = None, *, WorkersNumber: Optional[int] = None) -> Any:  # noqa: N803
    """The done queue of ps task `i`, in the current graph, placed on /job:ps/task:i.

    `WorkersNumber` is the original's name of `n_workers`; the ps and every worker must pass the
    same count (TensorFlow checks that a shared queue has the same capacity everywhere).
    """
    n_workers, name = one_of("n_workers", n_workers, "WorkersNumber", WorkersNumber)
    if n_workers is None:
        raise UsageError("create_done_queue: expected the number of workers (WorkersNumber, or n_workers)")
    _check_counts(1, n_workers, names=("n_ps", name))
    if isinstance(i, bool) or not isinstance(i, int) or i < 0:
        raise UsageError(bad_value("i", i, "a ps task index >= 0"))
    import tensorflow as tf

    with tf.compat.v1.device(f"/job:ps/task:{i}"):
        # Capacity 2x: duplicate reports must never block an enqueue while the ps drains.
        return tf.compat.v1.FIFOQueue(2 * n_workers, tf.int32, shapes=[[]],
                                      shared_name=f"{QUEUE_NAME}{i}", name=f"{QUEUE_NAME}{i}")


def create_done_queues(n_ps: Optional[int] = None, n_workers: Optional[int] = None, *,
                       PSNumber: Optional[int] = None, WorkersNumber: Optional[int] = None) -> list:  # noqa: N803
    """One done queue per ps task, in the current graph (PSNumber/WorkersNumber: original names)."""
    n_ps, ps_name = one_of("n_ps", n_ps, "PSNumber", PSNumber)
    n_workers, workers_name = one_of("n_workers", n_workers, "WorkersNumber", WorkersNumber)
    if n_ps is None or n_workers is None:
        raise UsageError("create_done_queues: expected the number of ps and of workers "
                         "(PSNumber and WorkersNumber, or n_ps and n_workers)")
    _check_counts(n_ps, n_workers, names=(ps_name, workers_name))
    return [create_done_queue(i, n_workers) for i in range(n_ps)]


def enqueue_done_ops(n_ps: int, n_workers: int, worker_index: int, failed: bool = False) -> list:
    """Ops (in the current graph) that report `worker_index` to every ps; each runs on its ps."""
    _check_counts(n_ps, n_workers, worker_index)
    import tensorflow as tf

    ops = []
    for i, q in enumerate(create_done_queues(n_ps, n_workers)):
        with tf.compat.v1.device(f"/job:ps/task:{i}"):
            ops.append(q.enqueue(tf.constant(encode_done(worker_index, failed), tf.int32)))
    return ops


def report_done(server_target: str, n_ps: int, n_workers: int, worker_index: int, *,
                failed: bool = False, device_filters: Optional[Sequence[str]] = None,
                timeout_s: float = 30.0) -> bool:
    """Report this worker done to every ps from a fresh graph and session.

    A fresh session is used because the training session may be closed, broken, or (sync
    training) still holding queue runners the ps must outlive.  Never raises for TensorFlow
    errors (the ps may already be gone): logs a warning and returns False instead, so a
    training exception being propagated is not masked.
    """
    _check_counts(n_ps, n_workers, worker_index)
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        ops = enqueue_done_ops(n_ps, n_workers, worker_index, failed)
    timeout_ms = max(1, int(timeout_s * 1000))
    config = tf.compat.v1.ConfigProto(device_filters=list(device_filters or ["/job:ps"]),
                                      operation_timeout_in_ms=timeout_ms)
    try:
        with tf.compat.v1.Session(server_target, graph=graph, config=config) as sess:
            sess.run(ops, options=tf.compat.v1.RunOptions(timeout_in_ms=timeout_ms))
    except tf.errors.OpError as exc:
        log.warning("worker %d could not report done to the ps (%s): %s", worker_index,
                    type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
        return False
    log.info("worker %d reported done%s to %d ps", worker_index, " (FAILED)" if failed else "", n_ps)
    return True


@contextlib.contextmanager
def reporting_done(server_target: str, n_ps: int, n_workers: int, worker_index: int,
                   **report_kwargs: Any) -> Iterator[None]:
    """Report done when the block exits, also when it raises (TensorFlow skips hook.end() then).

    Put the MonitoredTrainingSession *inside* the block so it has closed before the report:
    with sync training the ps must outlive the chief's session close.
    """
    _check_counts(n_ps, n_workers, worker_index)
    try:
        yield
    except BaseException:
        report_done(server_target, n_ps, n_workers, worker_index, failed=True, **report_kwargs)
        raise
    report_done(server_target, n_ps, n_workers, worker_index, failed=False, **report_kwargs)


class QueueManagementHook(SessionHook):
    """The original hook: reports this worker to every ps in `end()`.

    `end()` runs only when training did not raise and runs *before* the session closes (with
    SyncReplicasOptimizer the chief can then hang in close after the ps left), so prefer
    `reporting_done` (or `launch`, which uses it).  With `report_in_end=False` the hook only
    records, in `ended`, whether training ended normally.

    The original form, `QueueManagementHook(NumberOfPS=1, NumberOfWorkers=2)` (or positional
    counts), works too: what is not given (the worker index, or the counts) comes from this task's
    plan (`GetServerDictionary`), TF_CONFIG or the Slurm step; counts given are checked against it.
    """

    def __init__(self, n_ps: Optional[int] = None, n_workers: Optional[int] = None,
                 worker_index: Optional[int] = None, report_in_end: bool = True, *,
                 NumberOfPS: Optional[int] = None, NumberOfWorkers: Optional[int] = None):  # noqa: N803
        n_ps, ps_name = one_of("n_ps", n_ps, "NumberOfPS", NumberOfPS)
        n_workers, workers_name = one_of("n_workers", n_workers, "NumberOfWorkers", NumberOfWorkers)
        if worker_index is None or n_ps is None or n_workers is None:
            for name, v in ((ps_name, n_ps), (workers_name, n_workers)):  # bad counts before the lookup
                if v is not None:
                    _check_count(name, v)
            info = this_task(ps=n_ps, who="QueueManagementHook")
            n_ps, n_workers, worker_index = fill_from_task(info, "QueueManagementHook", n_ps, ps_name,
                                                           n_workers, workers_name, worker_index)
        _check_counts(n_ps, n_workers, worker_index, names=(ps_name, workers_name))
        self.n_ps, self.n_workers, self.worker_index = n_ps, n_workers, worker_index
        self.report_in_end = report_in_end
        self.ended = False
        self._ops: list = []

    def begin(self) -> None:
        if self.report_in_end:
            self._ops = enqueue_done_ops(self.n_ps, self.n_workers, self.worker_index)

    def end(self, session: Any) -> None:
        self.ended = True
        if self.report_in_end:
            session.run(self._ops)
            log.info("worker %d reported done from hook.end()", self.worker_index)
