"""The quiet exit (tf_for_slurm/_shim/tf_slurm_quiet_exit.py): once the program is exiting, TensorFlow's
`Context.remove_function` does nothing (a PSS coordinator no longer sends every worker one removal
per traced function as its interpreter ends); until then it works as before.

With a stand-in `tensorflow.python.eager.context` (no TensorFlow), and under `tf-slurm exec`'s shim with
the real one (marked `tf`, so the old-TF pass checks TensorFlow 2.15's too)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIM = ROOT / "tf_for_slurm" / "_shim"

STAND_IN = """
import atexit, sys, types
sys.path.insert(0, sys.argv[1])
context = types.ModuleType("tensorflow.python.eager.context")

class Context:
    def remove_function(self, name):
        print(f"removed {name}", flush=True)

context.Context = Context
sys.modules["tensorflow.python.eager.context"] = context
atexit.register(lambda: Context().remove_function("after"))  # registered first: runs after the patch's handler
from tf_slurm_quiet_exit import install
install()  # the module is loaded: patched now (else once the program imports it)
atexit.register(lambda: Context().remove_function("before"))  # runs before the patch's handler
Context().remove_function("during")  # the program's own time: removed as before
"""


def test_removal_works_until_the_exit_and_is_skipped_from_the_patchs_handler_on():
    run = subprocess.run([sys.executable, "-c", STAND_IN, str(SHIM)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "removed during\nremoved before\n", run.stdout  # "after": skipped
    assert run.stderr == "", run.stderr


UNDER_SHIM = """
import atexit
def report():  # registered before TensorFlow is imported: runs after the shim's handler
    from tensorflow.python.eager import context
    print("remove_function:", context.Context.remove_function.__name__, flush=True)
atexit.register(report)
import tensorflow as tf
print("sum", int(tf.function(lambda x: x + 1)(tf.constant(1))), flush=True)
"""


@pytest.mark.tf
@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow")
def test_under_the_exec_shim_tensorflows_remove_function_is_a_no_op_at_exit():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SHIM), str(ROOT)]), "TF_CPP_MIN_LOG_LEVEL": "2"}
    for name in ("TF_SLURM_JOB_TYPE", "TF_SLURM_SESSION_FILTERS", "TF_CONFIG"):
        env.pop(name, None)
    run = subprocess.run([sys.executable, "-c", UNDER_SHIM], capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout == "sum 2\nremove_function: <lambda>\n", (run.stdout, run.stderr[-3000:])
