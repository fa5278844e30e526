"""MNIST with MultiWorkerMirroredStrategy and TensorFlow's PreemptionCheckpointHandler.

    tf-slurm local -n 2 --ps 0 -- python examples/mnist_distributed/tf2_preemption.py \
        --data_dir DIR --model_dir runs/pch --Iterations 2000
    srun -n 4 tf-slurm exec -- python examples/mnist_distributed/tf2_preemption.py ...  (TF_SLURM_PS=0)

The same model and synchronous custom loop as tf2_mwms.py, but the stop is TensorFlow's own
mechanism: `tf_for_slurm.runtime.preemption.preemption_handler` builds a
`tf.distribute.experimental.PreemptionCheckpointHandler` whose termination watcher follows the
library's stop request (SIGUSR1: Slurm's time-limit warning, passed on by `tf-slurm batch-step`;
SIGUSR2; SIGTERM).  On a stop every worker saves at the step the handler agrees on and exits 42,
which `batch-step` reads as "checkpointed, requeue"; the requeued run builds the handler again,
which restores the checkpoint, and training continues from that step to --Iterations.

The step is a variable in the checkpoint, and each checkpoint is named by it (`ckpt-<step>`, via
`save_checkpoint_if_preempted(checkpoint_number=step)`), so `batch-step` sees how far training got
without TensorFlow.  At the target the chief saves a final checkpoint (`ckpt-<Iterations>`), prints
the step reached and "done", and every worker exits 0.

--min_step_seconds S (tests, demos) paces the steps as in tf2_mwms.py: at most floor(t / S) + 1
steps in t seconds, on any machine.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import time

from pacing import StepPacer, check_min_step_seconds  # first: its clock starts on import
from tf2_common import MLP, common_flags, heldout_accuracy, loss_fn, tf

from mnist_data import BatchSampler, load_mnist
from tf_for_slurm.errors import TfSlurmError, UsageError
from tf_for_slurm.runtime.preemption import preemption_handler
from tf_for_slurm.runtime.tf2 import multi_worker_mirrored_strategy, mwms_is_chief

log = logging.getLogger("tf2_preemption")


def save_final(checkpoint, model_dir: str, step: int, chief: bool) -> str:
    """At the target: the chief writes `ckpt-<step>` into model_dir; other workers write to a
    scratch folder removed at once (as the handler does), so no worker skips its part of a save."""
    if chief:
        return tf.train.CheckpointManager(checkpoint, model_dir, max_to_keep=1).save(checkpoint_number=step)
    scratch = tempfile.mkdtemp(prefix="tf_slurm_ckpt_")
    try:
        checkpoint.write(os.path.join(scratch, f"ckpt-{step}"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return ""


def main(argv=None) -> int:
    parser = common_flags(__doc__.splitlines()[0])
    args = parser.parse_args(argv)
    if not args.model_dir:
        raise UsageError("--model_dir is required: PreemptionCheckpointHandler saves and restores there")
    pacer = StepPacer(check_min_step_seconds(args.min_step_seconds))  # before any server starts
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    tf.get_logger().setLevel(logging.WARNING)  # one INFO line per all-reduce otherwise
    from tf_for_slurm import plan_from_env

    plan = plan_from_env(ps=0)  # MWMS (and PreemptionCheckpointHandler) have no parameter servers
    strategy = multi_worker_mirrored_strategy(plan)
    me, chief = plan.me, mwms_is_chief(plan)
    data = load_mnist(args.data_dir)

    with strategy.scope():
        model = MLP(aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="step",
                               aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
    checkpoint = tf.train.Checkpoint(model=model, step=step_var)
    # restores the last checkpoint of model_dir (if any); installs the stop signals' handler
    handler = preemption_handler(strategy, checkpoint, args.model_dir)
    start = int(step_var.numpy())
    if start:
        log.info("resumed from %s at step %d", tf.train.latest_checkpoint(args.model_dir), start)
    sampler = BatchSampler(data.train_images, data.train_labels, args.batch_size,
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

    t0 = time.time()
    step = start
    while step < args.Iterations:
        bx, by = sampler.next()
        pacer.step()  # no-op unless --min_step_seconds > 0
        loss = train_step(tf.constant(bx), tf.constant(by))
        step += 1
        step_var.assign(step)
        if step == start + 1 and chief:
            log.info("training: first step %d done", step)
        if step % 100 == 0 and chief:
            log.info("step %d: loss %.4f", step, float(loss))
        # on a stop (any worker's): every worker saves ckpt-<step> at the same step and exits 42
        handler.save_checkpoint_if_preempted(checkpoint_number=step)
    saved = save_final(checkpoint, args.model_dir, step, chief)
    acc = heldout_accuracy(model, data.heldout_images, data.heldout_labels)
    if chief:
        print(f"held-out accuracy: {acc:.4f} on {len(data.heldout_labels)} examples after {step} steps "
              f"(from step {start}, {strategy.num_replicas_in_sync} replicas, {time.time() - t0:.1f} s; "
              f"checkpoint {saved})", flush=True)
    print(f"worker {me.rank}: reached step {step} of {args.Iterations}: done", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except TfSlurmError as e:
        print(f"tf2_preemption.py: error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
