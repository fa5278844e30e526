"""The shim's recovery-wait patch (TF_SLURM_RECOVERY_WAIT, default 1 s): a TF1 non-chief looks for the
chief's model every that many seconds instead of TensorFlow's 30.

Tested on a stand-in module (the patch only changes a default argument), and through the
environment `tf-slurm exec` gives TF1 tasks."""

from __future__ import annotations

import sys
import types

import pytest

from tf_for_slurm._shim.tf_slurm_session_filters import _MANAGER, install_recovery_wait
from tf_for_slurm.errors import UsageError
from tf_for_slurm.host.settings import recovery_wait


def _fake_session_manager_module():
    module = types.ModuleType(_MANAGER)

    class SessionManager:  # TensorFlow's signature, recovery_wait_secs 5th
        def __init__(self, local_init_op=None, ready_op=None, ready_for_local_init_op=None, graph=None,
                     recovery_wait_secs=30, local_init_run_options=None, local_init_feed_dict=None):
            self.recovery_wait_secs = recovery_wait_secs

    module.SessionManager = SessionManager
    return module


def test_only_the_default_changes(monkeypatch):
    module = _fake_session_manager_module()
    monkeypatch.setitem(sys.modules, _MANAGER, module)
    install_recovery_wait(0.5)
    install_recovery_wait(7)  # a second install does not wrap twice
    manager = module.SessionManager
    assert manager().recovery_wait_secs == 0.5
    assert manager(graph="g").recovery_wait_secs == 0.5
    assert manager(recovery_wait_secs=12).recovery_wait_secs == 12
    assert manager(None, None, None, None, 9).recovery_wait_secs == 9  # given positionally


@pytest.mark.parametrize("raw,seconds", [(None, 1.0), ("", 1.0), (" ", 1.0), ("0.2", 0.2), ("30", 30.0)])
def test_recovery_wait_from_env(raw, seconds):
    assert recovery_wait({} if raw is None else {"TF_SLURM_RECOVERY_WAIT": raw}) == seconds


@pytest.mark.parametrize("raw", ["x", "0", "-1", "3600", "nan"])
def test_recovery_wait_bad_values(raw):
    with pytest.raises(UsageError, match=r"TF_SLURM_RECOVERY_WAIT='.*': expected seconds"):
        recovery_wait({"TF_SLURM_RECOVERY_WAIT": raw})
