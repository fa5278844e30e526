"""MNIST with ParameterServerStrategy: a coordinator (chief) schedules steps on workers; variables
live on the parameter servers; updates are asynchronous.

    tf-slurm local -n 4 -- python examples/mnist_distributed/tf2_parameter_server.py \\
        --data_dir DIR --ps 1 --workers 2

The task list is chief, then `--ps` parameter servers, then `--workers` workers (one role per Slurm
task, in rank order); `tf_for_slurm.runtime.tf2.run_parameter_server_strategy` runs the chief's
training function and makes every ps/worker server exit (0) once the chief is done, or exit
non-zero if the chief dies, so the Slurm step ends either way.

With --model_dir, training is resumable: on SIGUSR1 (Slurm's time-limit warning, passed on by the
templates) or SIGTERM the coordinator stops scheduling, waits for the steps in flight, writes a
checkpoint and ends the servers with status 0; a rerun continues from that step to --Iterations.

--min_step_seconds S (tests, demos) paces the coordinator's scheduling loop: step k is scheduled no
earlier than k * S seconds after the process started (pacing.py), so t seconds after the start at
most floor(t / S) + 1 steps were even scheduled (and so applied), however many workers there are
and however fast they run.
"""

from __future__ import annotations

import logging
import sys
import time

from pacing import StepPacer, check_min_step_seconds  # first: its clock starts on import
from tf2_common import MLP, common_flags, heldout_accuracy, loss_fn, tf, write_metrics

from mnist_data import load_mnist
from tf_for_slurm import plan_from_env
from tf_for_slurm.errors import TfSlurmError, UsageError, bad_value
from tf_for_slurm.runtime.resume import LoopCheckpoint
from tf_for_slurm.runtime.tf2 import exit_now, run_parameter_server_strategy
from tf_for_slurm.stop_request import shared_stop_request

log = logging.getLogger("tf2_parameter_server")


def make_train_fn(args, data):
    """The coordinator's program: build variables on the ps, schedule steps, evaluate."""

    def train(strategy, plan) -> None:
        stop = shared_stop_request()  # SIGUSR1 (time-limit warning) / SIGTERM: stop, checkpoint, exit 0
        images = (data.train_images * 255).astype("uint8")  # 4x smaller to ship to each worker
        labels = data.train_labels
        with strategy.scope():
            model = MLP()
        ckpt = LoopCheckpoint(args.model_dir, model=model) if args.model_dir else None
        start = ckpt.restore() if ckpt else 0  # a requeued run continues where the last one saved

        def dataset_fn(input_context):
            ds = tf.data.Dataset.from_tensor_slices((images, labels))
            pipeline = input_context.input_pipeline_id if input_context else 0
            ds = ds.shuffle(len(labels), seed=pipeline + 7919 * start)  # new batches after a resume
            ds = ds.repeat().batch(args.batch_size, drop_remainder=True)
            return ds.map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, y)).prefetch(2)

        lr = tf.constant(args.learning_rate)
        coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
        per_worker = coordinator.create_per_worker_dataset(
            lambda: strategy.distribute_datasets_from_function(dataset_fn))
        iterator = iter(per_worker)

        @tf.function
        def step_fn(it):
            def replica_step(x, y):
                with tf.GradientTape() as tape:
                    loss = loss_fn(model, x, y)
                for v, g in zip(model.params, tape.gradient(loss, model.params)):
                    v.assign_sub(lr * g)  # lands on the ps that holds v, asynchronously
                return loss

            x, y = next(it)
            return strategy.run(replica_step, args=(x, y))

        pacer = StepPacer(args.min_step_seconds)  # no-op unless --min_step_seconds > 0
        t0 = time.time()
        step = start
        while step < args.Iterations and not stop.requested:  # the coordinator alone decides
            pacer.step()  # the global bound: step k is not scheduled before k * S s
            loss = coordinator.schedule(step_fn, args=(iterator,))
            step += 1
            if step % 100 == 0:
                coordinator.join()
                log.info("step %d: loss %.4f", step, float(loss.fetch()))
        coordinator.join()  # every scheduled step is done: `step` steps were applied
        saved = ckpt.save(step) if ckpt else None
        stopped_by = stop.signal if step < args.Iterations else None
        if stopped_by:
            log.warning("stopped by SIG%s at step %d of %d: checkpoint %s written %.1f s after the signal",
                        stopped_by, step, args.Iterations, saved, stop.seconds_since() or 0.0)
        acc = heldout_accuracy(model, data.heldout_images, data.heldout_labels)
        n_workers = plan.count("worker")
        print(f"held-out accuracy: {acc:.4f} on {len(data.heldout_labels)} examples after "
              f"{step} steps (ParameterServerStrategy, {plan.count('ps')} ps, "
              f"{n_workers} workers, {time.time() - t0:.1f} s"
              + (f"; stopped by SIG{stopped_by} before {args.Iterations})" if stopped_by else ")"), flush=True)
        if args.model_dir:
            write_metrics(args.model_dir, {"accuracy": acc, "heldout_examples": len(data.heldout_labels),
                                           "steps": step, "target": args.Iterations, "start_step": start,
                                           "stopped_by": stopped_by, "workers": n_workers,
                                           "strategy": "ParameterServerStrategy"})

    return train


def main(argv=None) -> int:
    parser = common_flags(__doc__.splitlines()[0])
    parser.add_argument("--ps", type=int, default=1, help="number of parameter servers")
    parser.add_argument("--workers", type=int, default=2, help="number of workers")
    args = parser.parse_args(argv)
    check_min_step_seconds(args.min_step_seconds)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    shared_stop_request()  # from the start: a time-limit warning may come before training does
    tf.get_logger().setLevel(logging.WARNING)
    if args.ps < 1:
        raise UsageError(bad_value("--ps", args.ps, "at least 1 parameter server"))
    if args.workers < 1:
        raise UsageError(bad_value("--workers", args.workers, "at least 1 worker"))
    tasks = ["chief"] + ["ps"] * args.ps + ["worker"] * args.workers
    plan = plan_from_env(tasks=tasks)  # checks 1 + ps + workers == the step's task count
    data = load_mnist(args.data_dir) if plan.me.role == "chief" else None  # only the chief reads
    status = run_parameter_server_strategy(make_train_fn(args, data), plan)
    if plan.me.role == "chief":
        # The checkpoint and metrics.json are written and closed: skip the interpreter's teardown with
        # TensorFlow loaded (slow, and seen to abort, status 134, after a stop at step 0 on a loaded
        # node, which failed a job that only had to requeue).
        exit_now(status)
    return status


if __name__ == "__main__":
    try:
        sys.exit(main())
    except TfSlurmError as e:
        print(f"tf2_parameter_server.py: error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
