"""Pieces shared by the two TF2 examples: a small MLP as a tf.Module and its evaluation.

Why plain tf.Variables and a hand-written SGD update: in TF 2.21 Keras 3 `model.fit` fails under
both MultiWorkerMirroredStrategy and ParameterServerStrategy (keras-team/keras#20585), and a
custom loop over plain variables shows exactly what each strategy does with them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
try:  # run from a checkout without installing the package
    import tf_for_slurm  # noqa: F401
except ImportError:  # pragma: no cover - depends on how the example is run
    sys.path.insert(0, os.path.dirname(os.path.dirname(_HERE)))

import tensorflow as tf  # noqa: E402

from pacing import HELP as PACING_HELP  # noqa: E402


class MLP(tf.Module):
    """784-128-10 with ReLU; variables are created where the strategy's scope puts them."""

    def __init__(self, seed: int = 0, aggregation=tf.VariableAggregation.NONE):
        super().__init__(name="mlp")
        rng = np.random.RandomState(seed)  # identical initial values on every task

        def var(shape, scale, name):
            init = (rng.standard_normal(shape) * scale).astype(np.float32) if scale else np.zeros(shape, np.float32)
            return tf.Variable(init, name=name, aggregation=aggregation)

        self.w1 = var((784, 128), (2.0 / 784) ** 0.5, "w1")
        self.b1 = var((128,), 0, "b1")
        self.w2 = var((128, 10), (2.0 / 128) ** 0.5, "w2")
        self.b2 = var((10,), 0, "b2")

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        h = tf.nn.relu(tf.matmul(x, self.w1) + self.b1)
        return tf.matmul(h, self.w2) + self.b2

    @property
    def params(self) -> list:
        return [self.w1, self.b1, self.w2, self.b2]


def loss_fn(model: MLP, x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=model(x)))


def heldout_accuracy(model: MLP, images: np.ndarray, labels: np.ndarray) -> float:
    """Accuracy from the current variable values (read once, evaluated locally)."""
    w1, b1, w2, b2 = (np.asarray(v.read_value()) for v in model.params)
    h = np.maximum(images @ w1 + b1, 0.0)
    return float(np.mean(np.argmax(h @ w2 + b2, axis=1) == labels))


def common_flags(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--data_dir", required=True, help="folder with the MNIST IDX files")
    p.add_argument("--model_dir", default=None, help="where the chief writes metrics.json (optional)")
    p.add_argument("--batch_size", type=int, default=64, help="per-worker batch size")
    p.add_argument("--Iterations", type=int, default=300, help="training steps")
    p.add_argument("--learning_rate", type=float, default=0.1, help="SGD learning rate")
    p.add_argument("--min_step_seconds", type=float, default=0.0, metavar="S",
                   help=PACING_HELP + ": at most floor(t / S) + 1 steps in t seconds")
    return p


def write_metrics(model_dir: str, metrics: dict) -> None:
    os.makedirs(model_dir, exist_ok=True)
    path = os.path.join(model_dir, "metrics.json")
    with open(path + ".tmp", "w") as f:
        json.dump(metrics, f, indent=1, sort_keys=True)
    os.replace(path + ".tmp", path)
