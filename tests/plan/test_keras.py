"""plan.keras: when Keras 3 `fit` cannot run a multi-task step, and its one line with the fix."""

from __future__ import annotations

import pytest

from tf_for_slurm.plan.keras import (
    is_keras_2,
    keras_major_installed,
    keras_major,
    lacks_tf_keras,
    missing_tf_keras,
    multi_task_keras,
    script_strategy,
    tf_keras_fix,
    user_decides,
)


@pytest.mark.parametrize("strategy, multi_task, has_tf_keras, major, expected", [
    ("mwms", True, False, 3, True),
    ("pss", True, False, None, True),  # Keras's version unknown: taken as Keras 3
    ("mwms", True, True, 3, False),  # tf_keras is there: exec sets TF_USE_LEGACY_KERAS=1
    ("mwms", True, False, 2, False),  # TensorFlow <= 2.15: tf.keras is Keras 2
    ("mwms", False, False, 3, False),  # one task
    ("tf1", True, False, 3, False),
])
def test_lacks_tf_keras(strategy, multi_task, has_tf_keras, major, expected):
    assert lacks_tf_keras(strategy, multi_task, has_tf_keras, major) is expected


def test_the_fix_line():
    assert tf_keras_fix() == "pip install tf-keras (with tensorflow-cpu: pip install --no-deps tf-keras)"
    assert tf_keras_fix("2.21.0", "/v/bin/python -m pip") == "/v/bin/python -m pip install --no-deps 'tf-keras~=2.21.0'"
    assert tf_keras_fix("2.16.2") == "pip install --no-deps 'tf-keras~=2.16.0'"  # tf-keras 2.16.0 goes with 2.16.*
    assert missing_tf_keras() == ("tf_keras is not installed: Keras 3 `fit` fails under "
                                  "MultiWorkerMirroredStrategy/ParameterServerStrategy; fix: pip install tf-keras "
                                  "(with tensorflow-cpu: pip install --no-deps tf-keras)")
    assert (keras_major("3.15.1"), keras_major("2.15.0"), keras_major(None), keras_major("dev")) == (3, 2, None, None)
    assert (user_decides(None), user_decides(""), user_decides("0"), user_decides("1")) == (False, False, True, True)
    assert (is_keras_2(2), is_keras_2(3), is_keras_2(None)) == (True, False, False)


@pytest.mark.parametrize("entries, major", [
    (["numpy", "keras", "keras-3.12.0.dist-info"], 3),
    (["keras-2.15.0.dist-info", "tf_keras-2.15.1.dist-info"], 2),
    (["tf_keras-2.21.0.dist-info", "keras_nightly-3.0.dist-info"], None),  # neither is keras
    (["keras-2.15.0.egg-info"], None),
    ([], None),
])
def test_keras_major_installed(entries, major):
    assert keras_major_installed(entries) == major


MWMS_FIT = """import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
model.fit(dataset, epochs=3)
"""


def test_what_a_script_tells():
    assert script_strategy(MWMS_FIT) == "mwms"
    assert script_strategy("tf.distribute.experimental.ParameterServerStrategy(resolver)") == "pss"
    assert script_strategy("tf.distribute.MirroredStrategy()") is None
    assert multi_task_keras(MWMS_FIT)
    assert multi_task_keras("import keras, json, os\ncfg = json.loads(os.environ['TF_CONFIG'])\nm.fit(x)")
    assert not multi_task_keras(MWMS_FIT.replace("model.fit(", "train_loop("))  # a custom loop runs on Keras 3
    assert not multi_task_keras("import keras\nmodel.fit(x)")  # no multi-task strategy
    assert not multi_task_keras(MWMS_FIT.replace("keras", "nn"))
