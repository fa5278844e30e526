"""Session hooks for `tf.compat.v1.train.MonitoredTrainingSession`.

MonitoredSession calls hook methods by name and never checks the type, so these hooks derive
from a small TF-free base and this module can be imported without TensorFlow.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Optional

from tf_for_slurm.errors import TfSlurmError, UsageError, bad_value
from tf_for_slurm.host.environment import this_task
from tf_for_slurm.host.stop_request import shared_stop_request
from tf_for_slurm.plan.task_info import fill_from_task, one_of

log = logging.getLogger(__name__)


class SessionHook:
    """Same methods as `tf.compat.v1.train.SessionRunHook`, all no-ops."""

    def begin(self) -> None:
        pass

    def after_create_session(self, session: Any, coord: Any) -> None:
        pass

    def before_run(self, run_context: Any) -> Any:
        return None

    def after_run(self, run_context: Any, run_values: Any) -> None:
        pass

    def end(self, session: Any) -> None:
        pass


class BarrierTimeout(TfSlurmError, TimeoutError):  # noqa: N818 (a public name)
    """The chief gave up waiting for workers at the start barrier."""


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(bad_value(name, value, "an int >= 1"))
    return value


_UNSET: Any = object()


def _avoid_window(value: Any) -> Optional[tuple]:
    """The original PrintStepHook's AvoidStep: None (log every step) or [first, last] not to log."""
    if value is None:
        return None
    ok = isinstance(value, (list, tuple)) and len(value) == 2 and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value) and value[0] <= value[1]
    if not ok:
        raise UsageError(bad_value("AvoidStep", value, "None or a pair [first, last] of global steps not to log"))
    return (value[0], value[1])


class PrintStepHook(SessionHook):
    """Log the global step and steps/s every `every_n_steps` local steps (INFO level).

    Useful on every worker: with async training the global step moves faster than any one
    worker's local count, so this shows both progress and the cluster's throughput.

    The original form `PrintStepHook(AvoidStep=[first, last])` logs the global step at every
    step except those in [first, last] (`AvoidStep=None`: every step), and once at the end.
    """

    def __init__(self, every_n_steps: Any = 100, name: str = "worker", *, AvoidStep: Any = _UNSET):  # noqa: N803
        if AvoidStep is _UNSET and (every_n_steps is None or isinstance(every_n_steps, (list, tuple))):
            every_n_steps, AvoidStep = 100, every_n_steps  # noqa: N806 (the original's positional AvoidStep)
        self.every_n_steps = _positive_int("every_n_steps", every_n_steps)
        self.per_step = AvoidStep is not _UNSET
        self.avoid = _avoid_window(AvoidStep) if self.per_step else None
        self.name = name
        self._global_step: Any = None
        self._local_steps = 0
        self._last: Optional[tuple] = None  # (time, global step) at the last log line

    def begin(self) -> None:
        import tensorflow as tf

        self._global_step = tf.compat.v1.train.get_global_step()
        if self._global_step is None:
            raise UsageError("PrintStepHook: the graph has no global step: expected "
                             "tf.compat.v1.train.get_or_create_global_step() before the session")

    def before_run(self, run_context: Any) -> Any:
        import tensorflow as tf

        return tf.compat.v1.train.SessionRunArgs(self._global_step)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self._local_steps += 1
        gs = int(run_values.results)
        if self.per_step:
            if self.avoid is None or not self.avoid[0] <= gs <= self.avoid[1]:
                log.info("%s: global step %d", self.name, gs)
            return
        now = time.monotonic()
        if self._last is None:
            self._last = (now, gs)
            return
        if self._local_steps % self.every_n_steps == 0:
            t0, gs0 = self._last
            rate = (gs - gs0) / (now - t0) if now > t0 else float("nan")
            log.info("%s: global step %d, %.1f global steps/s", self.name, gs, rate)
            self._last = (now, gs)


    def end(self, session: Any) -> None:
        if self.per_step:
            log.info("%s: session ends after %d local steps", self.name, self._local_steps)


class BarrierOnChiefHook(SessionHook):
    """The chief starts training only when every reporting task has its session.

    Each non-chief enqueues its reporter index into a queue on /job:ps/task:0 once its session
    exists; the chief (in after_create_session, i.e. after it initialised the variables the
    others wait for) dequeues until it has seen every index.  Without it, async workers that
    start late miss the first steps; with it, a worker that never comes raises BarrierTimeout
    on the chief after `timeout_s` instead of training on with fewer workers.

    The chief reads the queue's size and dequeues only what is there: a dequeue of a remote queue
    that hits a deadline can still take the next element on the ps and drop it (1 of 120 here),
    and the chief would then wait `timeout_s` for a worker long gone.
    """

    QUEUE_NAME = "barrier_queue"

    def __init__(self, n_workers: Optional[int] = None, worker_index: Optional[int] = None,
                 is_chief: Optional[bool] = None, timeout_s: float = 300.0, poll_ms: int = 100, *,
                 chief_task_index: Optional[int] = None, NumberOfWorkers: Optional[int] = None):  # noqa: N803
        """Original form: `BarrierOnChiefHook(is_chief=..., chief_task_index=0, NumberOfWorkers=N)`.

        What is not given comes from this task's plan / TF_CONFIG / Slurm step (worker_index, and
        n_workers); is_chief defaults to worker_index == chief_task_index (default 0).
        """
        n_workers, workers_name = one_of("n_workers", n_workers, "NumberOfWorkers", NumberOfWorkers)
        if n_workers is not None:
            _positive_int(workers_name, n_workers)
        if worker_index is None or n_workers is None:
            info = this_task(who="BarrierOnChiefHook")
            _, n_workers, worker_index = fill_from_task(info, "BarrierOnChiefHook", None, "n_ps", n_workers,
                                                        workers_name, worker_index)
        self.n_workers = _positive_int(workers_name, n_workers)
        if isinstance(worker_index, bool) or not isinstance(worker_index, int) or not 0 <= worker_index < n_workers:
            raise UsageError(bad_value("worker_index", worker_index, f"an int in [0, {n_workers - 1}]"))
        if chief_task_index is not None and (isinstance(chief_task_index, bool) or not isinstance(chief_task_index, int)
                                             or not 0 <= chief_task_index < n_workers):
            raise UsageError(bad_value("chief_task_index", chief_task_index, f"an int in [0, {n_workers - 1}]"))
        chief = 0 if chief_task_index is None else chief_task_index
        if is_chief is None:
            is_chief = worker_index == chief
        elif bool(is_chief) != (worker_index == chief) and chief_task_index is not None:
            raise UsageError(f"is_chief={is_chief!r} on worker {worker_index} with chief_task_index="
                             f"{chief_task_index}: expected is_chief=(task_index == chief_task_index)")
        if not timeout_s > 0:
            raise UsageError(bad_value("timeout_s", timeout_s, "a number of seconds > 0"))
        self.worker_index, self.is_chief, self.timeout_s = worker_index, bool(is_chief), float(timeout_s)
        self.poll_ms = _positive_int("poll_ms", poll_ms)
        self.seen: set = set()
        self._enqueue: Any = None
        self._size: Any = None
        self._count: Any = None
        self._dequeue: Any = None

    def begin(self) -> None:
        import tensorflow as tf

        with tf.compat.v1.device("/job:ps/task:0"):
            q = tf.compat.v1.FIFOQueue(2 * self.n_workers, tf.int32, shapes=[[]],
                                       shared_name=self.QUEUE_NAME, name=self.QUEUE_NAME)
            self._enqueue = q.enqueue(tf.constant(self.worker_index, tf.int32))
            self._size = q.size()
            self._count = tf.compat.v1.placeholder(tf.int32, [], name=self.QUEUE_NAME + "_count")
            self._dequeue = q.dequeue_many(self._count)

    def after_create_session(self, session: Any, coord: Any) -> None:
        if not self.is_chief:
            session.run(self._enqueue)
            return
        import tensorflow as tf

        wanted = set(range(self.n_workers)) - {self.worker_index}
        deadline = time.monotonic() + self.timeout_s
        while not wanted <= self.seen:
            if time.monotonic() > deadline:
                missing = sorted(wanted - self.seen)
                raise BarrierTimeout(bad_value("BarrierOnChiefHook timeout_s", self.timeout_s,
                                               f"all {self.n_workers} workers up; still missing "
                                               f"reporter indices {missing}"))
            left_ms = max(1, int((deadline - time.monotonic()) * 1000))
            try:  # a size read that hits its deadline takes nothing (a dead ps: BarrierTimeout)
                there = int(session.run(self._size, options=tf.compat.v1.RunOptions(timeout_in_ms=left_ms)))
            except tf.errors.DeadlineExceededError:
                continue
            if there:  # only the chief dequeues: these are there, the dequeue cannot block
                self.seen.update(int(i) for i in session.run(self._dequeue, feed_dict={self._count: there}))
            else:
                time.sleep(self.poll_ms / 1000.0)
        log.info("chief: all %d workers are up, training starts", self.n_workers)


class StopOnSignalHook(SessionHook):
    """Stop training at the next step once a stop signal arrived (see `tf_for_slurm.stop_request`).

    MonitoredTrainingSession then ends as it does at the target: the chief's CheckpointSaverHook
    writes a checkpoint at the current global step in its `end()`, workers report done and the
    ps exit 0; a rerun on the same checkpoint directory resumes from that step.  The default
    request is the process's shared one (SIGUSR1 and SIGTERM; TF_SLURM_STOP_SIGNALS).
    """

    def __init__(self, stop: Any = None, name: str = "this task"):
        if stop is None:
            stop = shared_stop_request()
        self.stop = stop
        self.name = name
        self.stopped_at_step: Optional[int] = None
        self._step: Any = None

    def begin(self) -> None:
        import tensorflow as tf

        self._step = tf.compat.v1.train.get_global_step()

    def before_run(self, run_context: Any) -> Any:
        if self._step is None:
            return None
        import tensorflow as tf

        return tf.compat.v1.train.SessionRunArgs(self._step)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        if not self.stop.requested or self.stopped_at_step is not None:
            return
        step = run_values.results if self._step is not None else None
        self.stopped_at_step = int(step) if step is not None else -1
        log.warning("%s: SIG%s: stopping at global step %s, %.1f s after the signal", self.name,
                    self.stop.signal, step if step is not None else "?", self.stop.seconds_since() or 0.0)
        run_context.request_stop()
