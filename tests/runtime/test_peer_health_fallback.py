"""The peer health patch's fallback (tf_for_slurm/_shim/tf_slurm_peer_health.py): where TensorFlow's C
API cannot be reached, TensorFlow's own binding stays and one line on stderr says so.  No TensorFlow
needed: a stand-in `tensorflow.python.eager.context` module whose folder holds no library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SHIM = Path(__file__).resolve().parents[2] / "tf_for_slurm" / "_shim"

PROGRAM = """
import sys, types
sys.path.insert(0, sys.argv[1])
context = types.ModuleType("tensorflow.python.eager.context")
context.__file__ = sys.argv[2]  # <tmp>/tensorflow/python/eager/context.py: no libtensorflow_cc.so.2 beside it

class Context:
    def check_collective_ops_peer_health(self, task, timeout_in_ms):
        return "tensorflow's binding"

context.Context = Context
sys.modules["tensorflow.python.eager.context"] = context
from tf_slurm_peer_health import install
install()
print(Context().check_collective_ops_peer_health("/job:worker/replica:0/task:1", 10))
"""


def test_without_the_c_api_tensorflows_binding_stays_with_one_line(tmp_path):
    fake = tmp_path / "tensorflow" / "python" / "eager" / "context.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("")
    run = subprocess.run([sys.executable, "-c", PROGRAM, str(SHIM), str(fake)], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "tensorflow's binding\n", run.stdout
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "tf_for_slurm: the peer health check that lets Python run while it waits not applied: "), run.stderr
    assert "libtensorflow_cc.so.2" in lines[0], run.stderr
