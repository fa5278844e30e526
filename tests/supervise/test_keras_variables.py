"""exec's Keras decision (task_exec.keras_variables) follows plan.keras, the rule submit checks with."""

from __future__ import annotations

import logging

from tf_for_slurm.plan.keras import missing_tf_keras
from tf_for_slurm.supervise import task_exec
from tf_for_slurm.supervise.task_exec import keras_variables


def test_exec_sets_legacy_keras_or_warns_with_the_shared_line():
    assert keras_variables({}, True, "mwms", True)[0] == {"TF_USE_LEGACY_KERAS": "1"}
    assert keras_variables({}, True, "pss", False) == ({}, (logging.WARNING, missing_tf_keras()))
    assert keras_variables({}, True, "tf1", False) == ({}, None)
    assert keras_variables({}, False, "mwms", False) == ({}, None)  # one task
    assert keras_variables({"TF_USE_LEGACY_KERAS": "0"}, True, "mwms", True) == ({}, None)  # the user's choice
    assert keras_variables({}, True, "mwms", True, 3)[0] == {"TF_USE_LEGACY_KERAS": "1"}
    # TensorFlow <= 2.15: tf.keras is Keras 2 already; the switch would only swap in tf_keras (slower)
    assert keras_variables({}, True, "mwms", True, 2) == ({}, None)
    assert keras_variables({}, True, "pss", False, 2) == ({}, None)


def test_exec_reads_the_installed_keras_version(monkeypatch):
    monkeypatch.setattr(task_exec.importlib.metadata, "version", lambda name: {"keras": "2.15.0"}[name])
    assert task_exec.installed_keras_major() == 2

    def missing(name):
        raise task_exec.importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(task_exec.importlib.metadata, "version", missing)
    assert task_exec.installed_keras_major() is None
