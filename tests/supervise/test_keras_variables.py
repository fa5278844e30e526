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


def test_exec_reads_the_installed_keras_version(tmp_path, monkeypatch):
    import importlib.metadata
    import sys

    # this python's own keras, as importlib.metadata reads it
    assert task_exec.installed_keras_major() == int(importlib.metadata.version("keras").split(".")[0])
    # a site folder with Keras 2 first on the path
    (tmp_path / "keras").mkdir()
    (tmp_path / "keras" / "__init__.py").write_text("")
    (tmp_path / "keras-2.15.0.dist-info").mkdir()
    (tmp_path / "tf_keras-3.0.0.dist-info").mkdir()  # not keras's
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "keras", raising=False)
    assert task_exec.installed_keras_major() == 2
    (tmp_path / "keras-2.15.0.dist-info").rmdir()
    assert task_exec.installed_keras_major() is None  # no dist-info: not known
