"""A stand-in for training with no TensorFlow, for the Slurm rough-edge tests: steps at a fixed pace,
checkpoints as TensorFlow names them, resumes, and stops when told, like the examples do.

    paced_steps.py MODEL_DIR TARGET FIRST_RUN_STEPS [SAVE_SECONDS]

A job's first run (SLURM_RESTART_COUNT unset or 0) steps to FIRST_RUN_STEPS and then waits to be
told to stop, so it can never reach TARGET (true by construction, whatever the machine's speed); a
requeued run steps from the checkpoint to TARGET.  SIGUSR1, SIGUSR2 or SIGTERM (batch-step passing
the warning on, scancel): SAVE_SECONDS later (a slow checkpoint, default 0) task 0 writes
MODEL_DIR/checkpoint at the current step; the process exits 0.  Task 0 also checkpoints every 10 steps.
"""

import os
import re
import signal
import sys
import time

model_dir, target, first_run = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
save_seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
rank = int(os.environ.get("SLURM_PROCID", "0"))
restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
told = []
signal.signal(signal.SIGUSR1, lambda s, f: told.append(s))
signal.signal(signal.SIGUSR2, lambda s, f: told.append(s))
signal.signal(signal.SIGTERM, lambda s, f: told.append(s))


def saved() -> int:
    try:
        with open(os.path.join(model_dir, "checkpoint"), encoding="utf-8") as fh:
            return int(re.search(r"model\.ckpt-(\d+)", fh.read()).group(1))
    except (OSError, AttributeError):
        return 0


def save(step: int) -> None:
    if rank == 0:
        tmp = os.path.join(model_dir, f".checkpoint.{os.getpid()}")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(f'model_checkpoint_path: "model.ckpt-{step}"\n')
        os.replace(tmp, os.path.join(model_dir, "checkpoint"))


step = saved()
print(f"task {rank}: run {restarts + 1} resumed from step {step}", flush=True)
limit = target if restarts else min(first_run, target)
while not told:
    if step < limit:
        step += 1
        if step % 10 == 0:
            save(step)
            print(f"task {rank}: step {step}", flush=True)
        if step == target:
            save(step)
            print(f"task {rank}: at the target, step {step}", flush=True)
            sys.exit(0)
    time.sleep(0.05)
time.sleep(save_seconds)
save(step)
print(f"task {rank}: told to stop (signal {told[0]}): checkpointed at step {step}", flush=True)
