"""MNIST with MultiWorkerMirroredStrategy: every task is a worker, gradients are all-reduced.

    tf-slurm local -n 2 --ps 0 -- python examples/mnist_distributed/tf2_mwms.py --data_dir DIR
    srun -n 4 python examples/mnist_distributed/tf2_mwms.py --data_dir DIR      (TF_SLURM_PS=0)

`tf_for_slurm.runtime.tf2.multi_worker_mirrored_strategy()` turns the Slurm step into TF_CONFIG
(workers only; worker 0 is the chief) and builds the strategy.  The loop is a custom one (see
tf2_common.py for why): each replica computes the gradient of its own batch, one all-reduce
averages them, and every replica applies the same update (synchronous data-parallel SGD; the
variables use ONLY_FIRST_REPLICA aggregation because the updates are already identical).  Every worker draws its own shuffled batches; the chief prints the held-out
accuracy at the end.

With --model_dir, training is resumable: SIGUSR1 (Slurm's time-limit warning, passed on by the
templates) or SIGTERM stops every worker at the same step, a checkpoint is written, the process
exits 0, and a rerun on the same --model_dir continues from that step to --Iterations.

--global_batch_size G keeps the global batch at G whatever the number of workers: each worker's
batch is its share (defaults.per_worker_batch).  After a lost node, `tf-slurm submit --min-workers K`
may start the run again with fewer workers (from the checkpoint); with --batch_size alone the global
batch then shrinks with the workers (each worker's batch kept), with --global_batch_size it does not.

--min_step_seconds S (tests, demos) paces every worker: its step k starts no earlier than k * S
seconds after the process started (pacing.py); the steps are synchronous, so t seconds after the
start at most floor(t / S) + 1 steps were made, on any machine.
"""

from __future__ import annotations

import logging
import sys
import time

from pacing import StepPacer, check_min_step_seconds  # first: its clock starts on import
from defaults import per_worker_batch
from tf2_common import MLP, common_flags, heldout_accuracy, loss_fn, tf, write_metrics

from mnist_data import BatchSampler, load_mnist
from tf_for_slurm.errors import TfSlurmError
from tf_for_slurm.runtime.resume import LoopCheckpoint, stop_agreement
from tf_for_slurm.runtime.tf2 import multi_worker_mirrored_strategy, mwms_is_chief
from tf_for_slurm.stop_request import shared_stop_request

log = logging.getLogger("tf2_mwms")


def main(argv=None) -> int:
    parser = common_flags(__doc__.splitlines()[0])
    parser.add_argument("--global_batch_size", type=int, default=None, metavar="G",
                        help="keep the global batch at G on any number of workers (each worker's batch: its share); "
                             "default: --batch_size per worker")
    args = parser.parse_args(argv)
    pacer = StepPacer(check_min_step_seconds(args.min_step_seconds))  # before any server starts
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    tf.get_logger().setLevel(logging.WARNING)  # one INFO line per all-reduce otherwise
    from tf_for_slurm import plan_from_env

    stop = shared_stop_request()  # SIGUSR1 (time-limit warning) / SIGTERM: stop, checkpoint, exit 0
    plan = plan_from_env(ps=0)  # MWMS has no parameter servers
    strategy = multi_worker_mirrored_strategy(plan)
    me, chief = plan.me, mwms_is_chief(plan)
    data = load_mnist(args.data_dir)

    with strategy.scope():
        model = MLP(aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
    ckpt = LoopCheckpoint(args.model_dir, is_chief=chief, model=model) if args.model_dir else None
    start = ckpt.restore() if ckpt else 0  # a requeued run continues where the last one saved
    try:
        batch = per_worker_batch(args.batch_size, args.global_batch_size, plan.count("worker"))
    except ValueError as e:
        parser.error(str(e))
    if chief:
        log.info("batch: %d per worker on %d worker(s), %d in all", batch, plan.count("worker"),
                 batch * plan.count("worker"))
    sampler = BatchSampler(data.train_images, data.train_labels, batch,
                           seed=1000 + me.rank + 7919 * start)  # new batches after a resume
    lr = tf.constant(args.learning_rate)

    @tf.function
    def train_step(x, y):
        def replica_step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(model, x, y)
            grads = tape.gradient(loss, model.params)
            grads = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.MEAN, grads)
            for v, g in zip(model.params, grads):
                v.assign_sub(lr * g)
            return loss

        per_replica = strategy.run(replica_step, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica, axis=None)

    agreed_stop = stop_agreement(strategy, stop)  # every worker stops at the same step
    t0 = time.time()
    step = start
    while step < args.Iterations and not agreed_stop():
        bx, by = sampler.next()
        pacer.step()  # no-op unless --min_step_seconds > 0
        loss = train_step(tf.constant(bx), tf.constant(by))
        step += 1
        if step % 100 == 0 and chief:
            log.info("step %d: loss %.4f", step, float(loss))
    saved = ckpt.save(step) if ckpt else None  # every worker saves (the chief into model_dir)
    stopped_by = stop.signal if step < args.Iterations else None
    if chief and stopped_by:
        log.warning("stopped by SIG%s at step %d of %d: checkpoint %s written %.1f s after the signal",
                    stopped_by, step, args.Iterations, saved, stop.seconds_since() or 0.0)
    acc = heldout_accuracy(model, data.heldout_images, data.heldout_labels)
    if chief:
        print(f"held-out accuracy: {acc:.4f} on {len(data.heldout_labels)} examples after "
              f"{step} steps (MultiWorkerMirroredStrategy, "
              f"{strategy.num_replicas_in_sync} replicas, {time.time() - t0:.1f} s"
              + (f"; stopped by SIG{stopped_by} before {args.Iterations})" if stopped_by else ")"), flush=True)
        if args.model_dir:
            write_metrics(args.model_dir, {"accuracy": acc, "heldout_examples": len(data.heldout_labels),
                                           "steps": step, "target": args.Iterations, "start_step": start,
                                           "stopped_by": stopped_by, "replicas": strategy.num_replicas_in_sync,
                                           "batch_per_worker": batch,
                                           "strategy": "MultiWorkerMirroredStrategy"})
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except TfSlurmError as e:
        print(f"tf2_mwms.py: error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
