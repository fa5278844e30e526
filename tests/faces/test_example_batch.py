"""The MNIST example's batch rule (examples/mnist_distributed/defaults.py): a global batch kept on
any number of workers, as after a relaunch with fewer workers (issue 43).  No TensorFlow."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "mnist_distributed"))

from defaults import per_worker_batch  # noqa: E402


@pytest.mark.parametrize("batch,global_batch,workers,want", [
    (64, None, 4, 64),  # no global batch: each worker's kept, the global one shrinks with the workers
    (64, None, 3, 64),
    (64, 256, 4, 64),
    (64, 256, 3, 86),  # 3 workers after a loss: each takes its share, rounded up (258 in all)
    (64, 256, 1, 256),
])
def test_per_worker_batch(batch, global_batch, workers, want):
    assert per_worker_batch(batch, global_batch, workers) == want


@pytest.mark.parametrize("global_batch,workers", [(0, 2), (-4, 2), (64, 0)])
def test_bad_values_are_one_error(global_batch, workers):
    with pytest.raises(ValueError, match="--global_batch_size"):
        per_worker_batch(64, global_batch, workers)
