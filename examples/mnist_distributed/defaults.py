"""Default hyper-parameters of the distributed MNIST example, kept free of TensorFlow imports.

Why a separate file: LaunchTFServerWithHooks.py needs them to parse its flags, and must not import
TensorFlow before the library has set CUDA_VISIBLE_DEVICES for this task (GPU nodes).

Chosen so 1 ps + 2 async workers reach >= 0.95 held-out accuracy on the 2k held-out split of the
10k MNIST test digits in well under two minutes on two cores (measured: about 0.98 after 800
global steps, about 25 s of training).
"""

BATCH_SIZE = 64
ITERATIONS = 800
LEARNING_RATE = 2e-3  # Adam
EVAL_EVERY = 200


def per_worker_batch(batch_size: int, global_batch_size: "int | None", workers: int) -> int:
    """Each worker's batch: --batch_size, or with --global_batch_size its share of that global batch
    (rounded up), so that a run started again with fewer workers (`tf-slurm submit --min-workers`)
    keeps its global batch, and with it the learning rate's meaning, rather than shrink it."""
    if global_batch_size is None:
        return batch_size
    if global_batch_size < 1 or workers < 1:
        raise ValueError(f"--global_batch_size={global_batch_size} with {workers} worker(s): expected both >= 1")
    return -(-global_batch_size // workers)
