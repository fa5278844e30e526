"""Between-graph replicated training of a small CNN on MNIST (TF1 graph API through tf.compat.v1).

`DistributedTrain` is what runs on every worker once its server is up; it knows nothing of Slurm.
It also takes the seed's call, `DistributedTrain(FLAGS, task_index, TFCluster, TFServer, QueueHook)`.
Variables live on the parameter servers (`replica_device_setter`), each worker computes
gradients on its own mini-batches and applies them asynchronously, or, with `sync=True`, through
`SyncReplicasOptimizer` (one update per round of all workers).  The chief (worker 0) also
initialises or restores the variables, saves checkpoints and summaries in `model_dir`, and
measures held-out accuracy.

The model uses plain tf.compat.v1 variables and ops: Keras 3 layers cannot be trained by a v1
optimizer inside a v1 graph (see the project notes), and the seeds' API is the v1 one.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np
import tensorflow as tf

import defaults
from Hooks import ValidationHook
from mnist_data import BatchSampler, MnistData
from pacing import StepPacer, check_min_step_seconds
from tf_for_slurm.errors import UsageError, bad_value

log = logging.getLogger(__name__)
v1 = tf.compat.v1

DEFAULT_BATCH_SIZE = defaults.BATCH_SIZE
DEFAULT_ITERATIONS = defaults.ITERATIONS
DEFAULT_LEARNING_RATE = defaults.LEARNING_RATE


def _weight(name: str, shape: Sequence[int]) -> tf.Variable:
    fan_in = int(np.prod(shape[:-1]))
    init = v1.truncated_normal_initializer(stddev=(2.0 / fan_in) ** 0.5)  # He init for ReLU
    return v1.get_variable(name, shape, initializer=init)


def _bias(name: str, n: int) -> tf.Variable:
    return v1.get_variable(name, [n], initializer=v1.constant_initializer(0.01))


def build_cnn(x: tf.Tensor) -> tf.Tensor:
    """conv5x5x16 - pool - conv5x5x32 - pool - fc128 - fc10: ~99% on full MNIST, cheap on CPU."""
    img = tf.reshape(x, [-1, 28, 28, 1])
    h = tf.nn.relu(tf.nn.conv2d(img, _weight("conv1/w", [5, 5, 1, 16]), 1, "SAME") + _bias("conv1/b", 16))
    h = tf.nn.max_pool2d(h, 2, 2, "SAME")  # 14x14x16
    h = tf.nn.relu(tf.nn.conv2d(h, _weight("conv2/w", [5, 5, 16, 32]), 1, "SAME") + _bias("conv2/b", 32))
    h = tf.nn.max_pool2d(h, 2, 2, "SAME")  # 7x7x32
    h = tf.reshape(h, [-1, 7 * 7 * 32])
    h = tf.nn.relu(tf.matmul(h, _weight("fc1/w", [7 * 7 * 32, 128])) + _bias("fc1/b", 128))
    return tf.matmul(h, _weight("fc2/w", [128, 10])) + _bias("fc2/b", 10)


class WaitForChiefInitHook(v1.train.SessionRunHook):
    """Non-chief: poll (every 0.2 s, with a deadline) until the chief has initialised the model.

    TensorFlow's worker session creator checks once and then sleeps 30 s; a worker that starts a
    moment before the chief would lose those 30 s.  Polling here, in `begin()` (before the
    session is created), makes the creator's first check succeed.
    """

    def __init__(self, master: str, config: v1.ConfigProto, deadline_s: float = 600.0,
                 interval_s: float = 0.2):
        self._master, self._config = master, config
        self._deadline_s, self._interval_s = deadline_s, interval_s

    def begin(self) -> None:
        graph = v1.get_default_graph()
        with v1.name_scope("wait_for_chief"):
            not_ready = v1.report_uninitialized_variables(v1.global_variables())
        deadline = time.monotonic() + self._deadline_s
        while True:
            try:
                with v1.Session(self._master, graph=graph, config=self._config) as sess:
                    return self._poll(lambda: len(sess.run(not_ready)) == 0, deadline)
            except (tf.errors.AbortedError, tf.errors.UnavailableError) as exc:
                # what MonitoredSession recovers from too, with a new session: gRPC may deliver one
                # request twice under load ("The same RunGraph request was received twice": seen on
                # 2 busy cores), or a ps may still be starting
                if time.monotonic() > deadline:
                    raise
                log.warning("waiting for the chief: %s; opening a new session", type(exc).__name__)
                time.sleep(self._interval_s)

    def _poll(self, ready: Callable[[], bool], deadline: float) -> None:
        while not ready():
            if time.monotonic() > deadline:
                raise RuntimeError(f"chief did not initialise the model within {self._deadline_s:.0f} s")
            time.sleep(self._interval_s)


def DistributedTrain(*args: Any, **kwargs: Any) -> dict:
    """Train on this worker; two call forms.

    - `DistributedTrain(server, cluster, job_type, task_index, *, data, model_dir, ...)`: see
      `train_worker` (what `LaunchTFServerWithHooks.py` calls).
    - The seed's `DistributedTrain(FLAGS, task_index, TFCluster, TFServer, QueueHook)` (positional
      or keywords): FLAGS gives data_dir, model_dir, batch_size, Iterations (and, when present,
      learning_rate, sync, eval_every, min_step_seconds); see `train_worker_seed_form`.
    """
    seed_form = any(k in kwargs for k in ("FLAGS", "TFCluster", "TFServer", "QueueHook")) or (
        bool(args) and hasattr(args[0], "Iterations") and not hasattr(args[0], "target"))
    return train_worker_seed_form(*args, **kwargs) if seed_form else train_worker(*args, **kwargs)


def train_worker_seed_form(FLAGS: Any, task_index: int, TFCluster: Any, TFServer: Any,  # noqa: N803
                           QueueHook: Any = None) -> dict:
    """The seed's call: worker `task_index` of `TFCluster` (a ClusterSpec or dict), chief = worker 0.

    Our `QueueManagementHook` is not run as a session hook here: its report goes out after the
    session has closed (`reporting_done`), because the chief's last checkpoint is written in the
    session's end, after the user hooks, and needs the ps, which leaves on the last report.
    Any other hook object is added to the session's hooks as the seed did.
    """
    from mnist_data import load_mnist
    from tf_for_slurm.runtime.done_queue import QueueManagementHook, reporting_done

    for name in ("data_dir", "model_dir", "batch_size", "Iterations"):
        if not hasattr(FLAGS, name):
            raise UsageError(bad_value("FLAGS", type(FLAGS).__name__, f"flags with {name} (the seed's FLAGS)"))
    cluster = TFCluster.as_dict() if hasattr(TFCluster, "as_dict") else dict(TFCluster)
    kwargs = dict(data=load_mnist(FLAGS.data_dir), model_dir=FLAGS.model_dir, batch_size=FLAGS.batch_size,
                  iterations=FLAGS.Iterations, learning_rate=getattr(FLAGS, "learning_rate", DEFAULT_LEARNING_RATE),
                  sync=bool(getattr(FLAGS, "sync", False)), is_chief=task_index == 0,
                  eval_every=getattr(FLAGS, "eval_every", defaults.EVAL_EVERY),
                  min_step_seconds=getattr(FLAGS, "min_step_seconds", 0.0))
    if isinstance(QueueHook, QueueManagementHook):
        with reporting_done(TFServer.target, QueueHook.n_ps, QueueHook.n_workers, QueueHook.worker_index):
            return train_worker(TFServer, cluster, "worker", task_index, **kwargs)
    return train_worker(TFServer, cluster, "worker", task_index, hooks=[QueueHook] if QueueHook else (), **kwargs)


def train_worker(server: Any, cluster: dict, job_type: str, task_index: int, *,
                     data: MnistData, model_dir: str,
                     batch_size: int = DEFAULT_BATCH_SIZE,
                     iterations: int = DEFAULT_ITERATIONS,
                     learning_rate: float = DEFAULT_LEARNING_RATE,
                     sync: bool = False,
                     is_chief: Optional[bool] = None,
                     hooks: Sequence = (),
                     config: Optional[v1.ConfigProto] = None,
                     eval_every: int = 0,
                     checkpoint_every: int = 500,
                     stop_grace_period_secs: int = 2,
                     stop: Any = None,
                     min_step_seconds: float = 0.0) -> dict:
    """Train on this worker until the global step reaches `iterations`; return a summary dict.

    `iterations` is the global-step TARGET, not a count for this run: a rerun on the same
    `model_dir` restores the last checkpoint and continues up to the new target.  `hooks` come
    from the launcher (e.g. a start barrier) and are added to the session's hooks; `config` is
    the session ConfigProto (default: device filters so workers never depend on each other).
    `stop` is the launcher's StopRequest (its StopOnSignalHook is in `hooks`): when a signal
    stopped training early, the chief says which checkpoint it wrote and how long after the signal.
    `min_step_seconds` > 0 paces this worker (pacing.py): its step k starts no earlier than
    k * min_step_seconds after the process started, so in t seconds async workers make at most
    n_workers * (floor(t / min_step_seconds) + 1) global steps (sync: floor(t / min_step_seconds) + 1),
    however fast the machine.
    """
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations <= 0:
        raise UsageError(bad_value("iterations", iterations, "a positive global-step target"))
    pacer = StepPacer(check_min_step_seconds(min_step_seconds, "min_step_seconds"))
    if is_chief is None:
        is_chief = job_type == "chief" or ("chief" not in cluster and task_index == 0)
    trainers = len(cluster.get("worker", ())) + len(cluster.get("chief", ()))
    me = f"/job:{job_type}/task:{task_index}"
    if config is None:
        config = v1.ConfigProto(device_filters=["/job:ps", me], allow_soft_placement=True)
    result: dict = {"job_type": job_type, "task_index": task_index, "is_chief": is_chief,
                    "mode": "sync" if sync else "async"}

    graph = tf.Graph()
    with graph.as_default():
        with v1.device(v1.train.replica_device_setter(worker_device=me,
                                                      cluster=tf.train.ClusterSpec(cluster))):
            global_step = v1.train.get_or_create_global_step()
            x = v1.placeholder(tf.float32, [None, 784], name="x")
            y = v1.placeholder(tf.int64, [None], name="y")
            logits = build_cnn(x)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            correct = tf.equal(tf.argmax(logits, 1), y)
            correct_count = tf.reduce_sum(tf.cast(correct, tf.int32))
            accuracy = tf.reduce_mean(tf.cast(correct, tf.float32))
            opt = v1.train.AdamOptimizer(learning_rate)
            if sync:
                opt = v1.train.SyncReplicasOptimizer(opt, replicas_to_aggregate=trainers,
                                                     total_num_replicas=trainers)
            train_op = opt.minimize(loss, global_step=global_step)
            v1.summary.scalar("loss", loss)
            v1.summary.scalar("train_accuracy", accuracy)

        all_hooks = [v1.train.StopAtStepHook(last_step=iterations), *hooks]
        if sync:
            all_hooks.append(opt.make_session_run_hook(is_chief))
        if not is_chief:
            all_hooks.append(WaitForChiefInitHook(server.target, config))
        first_step: dict = {}
        def stopped_by() -> Optional[str]:
            return stop.signal if stop is not None and stop.requested else None

        validation = ValidationHook(correct_count=correct_count, x=x, y=y,
                                    images=data.heldout_images, labels=data.heldout_labels,
                                    model_dir=model_dir, every_steps=eval_every,
                                    extra=lambda: {**result, **first_step, "data": data.source,
                                                   "stopped_by": stopped_by(), "target": iterations})
        sampler = BatchSampler(data.train_images, data.train_labels, batch_size, seed=1000 + task_index)

        steps = 0
        t0 = time.time()
        # what MonitoredTrainingSession will restore (the chief restores; others get the ps state)
        result["resumed_from"] = v1.train.latest_checkpoint(model_dir)
        with v1.train.MonitoredTrainingSession(
                master=server.target, is_chief=is_chief, checkpoint_dir=model_dir,
                hooks=all_hooks, chief_only_hooks=[validation],
                save_checkpoint_steps=checkpoint_every, save_checkpoint_secs=None,
                save_summaries_steps=100, log_step_count_steps=200 if is_chief else 0,
                stop_grace_period_secs=stop_grace_period_secs, config=config) as sess:
            # Reading the step through the session lets StopAtStepHook stop at once when a
            # restored checkpoint is already at the target.  The batch is fed only because the
            # chief's summary hook adds the loss to every run; nothing is trained here.
            bx, by = sampler.next()
            start = int(sess.run(global_step, feed_dict={x: bx, y: by}))
            if start:  # a resumed run draws batches the first run did not (same seed, new stream)
                sampler = BatchSampler(data.train_images, data.train_labels, batch_size,
                                       seed=1000 + task_index + 7919 * start)
            result["start_global_step"] = start
            result["session_ready_time"] = time.time()
            if result["resumed_from"]:
                log.info("%s: resumed from %s at global step %d", me, result["resumed_from"], start)
            if pacer.min_seconds:
                log.info("%s: paced: at most one training step per %g s since the process started "
                         "(min_step_seconds)", me, pacer.min_seconds)
            while not sess.should_stop():
                bx, by = sampler.next()
                pacer.step()  # no-op unless min_step_seconds > 0
                sess.run(train_op, feed_dict={x: bx, y: by})
                steps += 1
                if steps == 1:  # start-up cost: wall clock, and this process's CPU seconds so far
                    first_step["first_step_time"] = time.time()
                    first_step["first_step_cpu_s"] = round(time.process_time(), 3)
        result.update(first_step)
        result["local_steps"] = steps
        result["stopped_by"] = stopped_by()
        if is_chief and result["stopped_by"]:
            saved = v1.train.latest_checkpoint(model_dir)
            log.warning("%s: checkpoint %s written %.1f s after SIG%s; a rerun on this model_dir resumes from it "
                        "(target %d)", me, saved, stop.seconds_since(), result["stopped_by"], iterations)
        result["train_seconds"] = round(time.time() - t0, 3)
        if is_chief:
            result["accuracy"] = validation.final_accuracy
            result["global_step"] = validation.final_step
            result["heldout_examples"] = int(len(data.heldout_images))
            print(f"held-out accuracy: {validation.final_accuracy:.4f} on {len(data.heldout_images)} "
                  f"examples after global step {validation.final_step} "
                  f"({result['mode']}, {trainers} workers"
                  + (f"; stopped by SIG{result['stopped_by']} before the target {iterations})"
                     if result["stopped_by"] else ")"), flush=True)
    log.info("%s: %d local steps in %.1f s", me, steps, result["train_seconds"])
    return result
