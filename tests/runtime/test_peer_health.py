"""The shim's MultiWorkerMirroredStrategy peer health check (tf_for_slurm/_shim/tf_slurm_peer_health.py):
the same answers as TensorFlow's binding, and the task's Python keeps running while it waits.

One process with collective ops enabled on a 2-task cluster: task 1's port is either closed or a
socket that takes connections and never answers (a peer that is slow or ending).  MWMS runs this check
from a thread of its own; the main thread here sleeps 10 ms at a time and records its longest pause.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.tf,
              pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow")]

SHIM = Path(__file__).resolve().parents[2] / "tf_for_slurm" / "_shim"
CHECK_MS = 2000

PROGRAM = """
import json, socket, sys
sys.path.insert(0, sys.argv[1])
from tf_slurm_peer_health import install
install()  # before TensorFlow is imported, as the shim does
import tensorflow as tf
from tensorflow.python.eager import context
from tensorflow.core.protobuf import tensorflow_server_pb2

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    return port
def enable(peer_port):
    ports = [free_port(), peer_port]  # this task's server binds its own
    spec = tf.train.ClusterSpec({"worker": [f"127.0.0.1:{p}" for p in ports]})
    context.context().enable_collective_ops(tensorflow_server_pb2.ServerDef(
        cluster=spec.as_cluster_def(), job_name="worker", task_index=0, protocol="grpc"))
Context = context.Context
out = {"patched": hasattr(Context.check_collective_ops_peer_health, "__wrapped__")}

def outcome(check, task):
    try:
        check(context.context(), task, MS)
        return "ok"
    except Exception as exc:
        return type(exc).__name__

enable(free_port())  # a peer whose port is closed
for task in ("/job:worker/replica:0/task:1", "/job:worker/replica:0/task:0", "/job:nope/replica:0/task:9"):
    out[task] = [outcome(Context.check_collective_ops_peer_health, task),
                 outcome(Context.check_collective_ops_peer_health.__wrapped__, task)]
print(json.dumps(out), flush=True)
""".replace("MS", str(CHECK_MS))

SILENT_PEER = """
import json, socket, sys, threading, time
sys.path.insert(0, sys.argv[1])
from tf_slurm_peer_health import install
install()
import tensorflow as tf
from tensorflow.python.eager import context
from tensorflow.core.protobuf import tensorflow_server_pb2

hole = socket.socket(); hole.bind(("127.0.0.1", 0)); hole.listen(16)  # takes connections, never answers
mine = socket.socket(); mine.bind(("127.0.0.1", 0)); port = mine.getsockname()[1]; mine.close()  # for our server
spec = tf.train.ClusterSpec({"worker": [f"127.0.0.1:{p}" for p in (port, hole.getsockname()[1])]})
context.context().enable_collective_ops(tensorflow_server_pb2.ServerDef(
    cluster=spec.as_cluster_def(), job_name="worker", task_index=0, protocol="grpc"))
out = {}
def check():  # as MWMS does, from a thread of its own
    t = time.monotonic()
    try:
        context.context().check_collective_ops_peer_health("/job:worker/replica:0/task:1", MS)
        out["error"] = None
    except Exception as exc:
        out["error"] = type(exc).__name__
    out["seconds"] = time.monotonic() - t
th = threading.Thread(target=check, daemon=True)
th.start()
longest, last = 0.0, time.monotonic()
while th.is_alive():
    time.sleep(0.01)
    now = time.monotonic(); longest = max(longest, now - last); last = now
out["longest_pause"] = longest
print(json.dumps(out), flush=True)
""".replace("MS", str(CHECK_MS))


def _run(program: str) -> dict:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    res = subprocess.run([sys.executable, "-c", program, str(SHIM)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(150)
def test_the_check_answers_as_tensorflows_binding_does():
    out = _run(PROGRAM)
    assert out.pop("patched") is True, out
    # [the shim's, TensorFlow's]: a closed port, this task itself, a task not in the cluster
    assert out == {"/job:worker/replica:0/task:1": ["UnavailableError"] * 2,
                   "/job:worker/replica:0/task:0": ["ok"] * 2,
                   "/job:nope/replica:0/task:9": ["InvalidArgumentError"] * 2}, out


@pytest.mark.timeout(150)
def test_python_keeps_running_while_a_silent_peer_is_checked():
    # TensorFlow's binding holds the GIL for the whole wait: measured, the main thread stopped for the
    # check's timeout (3.0 s of a 3 s check, TensorFlow 2.15.1 and 2.21); here it only sleeps
    out = _run(SILENT_PEER)
    assert out["error"] == "DeadlineExceededError", out
    assert out["seconds"] >= CHECK_MS / 1000 * 0.9, out  # the check did wait for the peer
    # a sleep of 10 ms, not the check's 2 s: TensorFlow's binding stops the thread for the whole check
    assert out["longest_pause"] < CHECK_MS / 1000 * 0.9, out
