"""An unmodified script reports its training progress through the shim (tf_slurm_progress): Keras
`fit` (Keras 3, Keras 2, tf_keras), a custom loop's optimizer steps, a TF1 MonitoredTrainingSession's
global step, a ParameterServerStrategy coordinator's closures (in-process servers); off with
TF_SLURM_PROGRESS_CAPTURE=0, nothing without the file, and a capture that fails never stops the
training.

Each script runs in a subprocess with the shim first on PYTHONPATH (as `tf-slurm exec` starts it)
and TF_SLURM_PROGRESS_FILE naming a file the test made (the supervisor's part).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional

import pytest

SHIM = Path(__file__).resolve().parents[2] / "tf_for_slurm" / "_shim"
PY = sys.executable

pytestmark = [pytest.mark.tf,
              pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow")]

FIT = """
import os, sys
import numpy as np
import tensorflow as tf
x = np.random.rand(320, 4).astype("float32")
y = x.sum(axis=1, keepdims=True)
model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model.fit(x, y, batch_size=16, epochs=3, verbose=0)  # 3 epochs x 20 steps
print("keras", type(model).__module__.split(".")[0])
if os.path.exists(sys.argv[1]):
    print("line", open(sys.argv[1]).read(), end="")
"""

EVALUATE = """
import sys
import numpy as np
import tensorflow as tf
x = np.random.rand(64, 4).astype("float32")
model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model.evaluate(x, x[:, :1], batch_size=16, verbose=0)
print("line", open(sys.argv[1]).read(), end="")
"""

LOOP = """
import json, sys, time
import tensorflow as tf
w = tf.Variable(tf.zeros([4, 1]))
opt = tf.keras.optimizers.SGD(0.01)
x = tf.random.uniform([16, 4])
y = tf.reduce_sum(x, axis=1, keepdims=True)

@tf.function
def step():
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((x @ w - y) ** 2)
    opt.apply_gradients([(tape.gradient(loss, w), w)])
    return loss

for _ in range(50):
    step()
deadline = time.monotonic() + 20  # the sampler looks once a second
while time.monotonic() < deadline:
    text = open(sys.argv[1]).read()
    if text and json.loads(text.split("\\n")[0]).get("step") == 50:
        print("line", text, end="")
        sys.exit(0)
    time.sleep(0.05)
print("last", open(sys.argv[1]).read())
sys.exit(3)
"""

TF1 = """
import sys
import tensorflow as tf
tf.compat.v1.disable_eager_execution()
master = tf.distribute.Server.create_local_server().target if sys.argv[2] == "server" else ""
gs = tf.compat.v1.train.get_or_create_global_step()
w = tf.compat.v1.get_variable("w", [4, 1])
x = tf.random.uniform([16, 4])
loss = tf.reduce_mean((tf.matmul(x, w) - tf.reduce_sum(x, axis=1, keepdims=True)) ** 2)
train = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=gs)
runs = 0
with tf.compat.v1.train.MonitoredTrainingSession(
        master=master, hooks=[tf.compat.v1.train.StopAtStepHook(last_step=30)]) as sess:
    while not sess.should_stop():
        out = sess.run([train, loss])
        assert len(out) == 2, out  # the global step fetched along is not in the result
        runs += 1
print("runs", runs)
print("line", open(sys.argv[1]).read(), end="")
"""

PSS = """
import json, socket, sys, threading, time
import tensorflow as tf

def port():
    s = socket.socket()
    s.bind(("localhost", 0))
    p = s.getsockname()[1]
    s.close()
    return p

spec = {"worker": ["localhost:%d" % port() for _ in range(2)], "ps": ["localhost:%d" % port()]}
cluster = tf.train.ClusterSpec(spec)
config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=4)  # in-process servers share the pools
servers = [tf.distribute.Server(cluster, job_name=job, task_index=i, config=config)
           for job in ("worker", "ps") for i in range(len(spec[job]))]
strategy = tf.distribute.experimental.ParameterServerStrategy(
    tf.distribute.cluster_resolver.SimpleClusterResolver(cluster, rpc_layer="grpc"))
coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
with strategy.scope():
    v = tf.Variable(0.0)

@tf.function
def step():
    def replica():
        m = tf.random.uniform([300, 300])
        m = tf.while_loop(lambda i, m: i < 100, lambda i, m: (i + 1, tf.tanh(m @ m)), (0, m))[1]
        return v.assign_add(tf.reduce_min(m) * 0.0 + 1.0)
    return strategy.run(replica)

seen, stop = set(), threading.Event()

def watch():  # what the supervisor reads while the coordinator waits in join()
    while not stop.wait(0.05):
        text = open(sys.argv[1]).read()
        if text:
            seen.add(json.loads(text)["step"])

for _ in range(80):
    coordinator.schedule(step)
watcher = threading.Thread(target=watch)
watcher.start()
start = time.monotonic()
coordinator.join()
stop.set()
watcher.join()
seen = json.dumps(sorted(seen), separators=(",", ":"))
print("join", time.monotonic() - start, "seen", seen, "total", int(v.numpy()))
print("line", open(sys.argv[1]).read(), end="")
"""

# the capture's own write fails: one line on stderr, the training goes on
BROKEN_WRITE = """
import tf_slurm_progress

def _broken(path, data):
    raise OSError("disk on fire")

tf_slurm_progress._write = _broken
"""


def _env(path: Path, extra: Optional[Dict[str, str]]) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_SLURM_")}
    for name in ("TF_USE_LEGACY_KERAS", "TF_CONFIG", "PYTHONPATH"):
        env.pop(name, None)
    env.update({"PYTHONPATH": str(SHIM), "TF_SLURM_PROGRESS_FILE": str(path), "TF_CPP_MIN_LOG_LEVEL": "2",
                "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": ""})
    env.update(extra or {})
    return env


def run(tmp_path: Path, script: str, *args: str, env: Optional[Dict[str, str]] = None,
        create: bool = True) -> tuple:
    """(status, stdout, stderr, the progress file's path) of `script` run under the shim."""
    path = tmp_path / "progress"
    if create:
        path.write_bytes(b"")
    source = tmp_path / "script.py"
    source.write_text(script)
    proc = subprocess.run([PY, str(source), str(path), *args], env=_env(path, env), capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    return proc.returncode, proc.stdout, proc.stderr, path


def reported(out: str) -> dict:
    """The progress line the script printed (its 'line ...'), parsed; its file holds one line."""
    lines = [line for line in out.splitlines() if line.startswith("line ")]
    assert lines, out
    return json.loads(lines[-1][len("line "):])


def _assert_fit_end(line: dict) -> None:
    # epoch: epochs completed (the third epoch's end: 3); target: epochs x steps
    assert {k: line.get(k) for k in ("v", "step", "epoch", "target", "kind")} == {
        "v": 1, "step": 60, "epoch": 3, "target": 60, "kind": "keras"}, line
    assert isinstance(line["loss"], float) and isinstance(line["t"], float) and "eval" not in line, line


def test_keras_fit_reports_its_final_step_epoch_target_and_loss(tmp_path):
    rc, out, err, path = run(tmp_path, FIT)
    assert rc == 0, err[-3000:]
    _assert_fit_end(reported(out))
    text = path.read_text()
    assert text.count("\n") == 1 and text.endswith("\n") and len(text) < 512


def test_tf_keras_fit_reports_the_same(tmp_path):
    if importlib.util.find_spec("tf_keras") is None:
        pytest.skip("needs tf_keras")
    rc, out, err, _ = run(tmp_path, FIT, env={"TF_USE_LEGACY_KERAS": "1"})
    assert rc == 0, err[-3000:]
    assert "keras tf_keras" in out, out  # the legacy Keras trained, not Keras 3
    _assert_fit_end(reported(out))


def test_evaluation_alone_is_progress_but_no_step(tmp_path):
    rc, out, err, _ = run(tmp_path, EVALUATE)
    assert rc == 0, err[-3000:]
    line = reported(out)
    assert line["step"] == 0 and line["eval"] is True and line["kind"] == "keras", line


def test_custom_loop_reports_the_optimizer_steps(tmp_path):
    rc, out, err, _ = run(tmp_path, LOOP)
    assert rc == 0, (rc, out, err[-3000:])  # 3: the file never said step 50 within 20 s
    line = reported(out)
    assert line["step"] == 50 and line["kind"] == "optimizer", line


@pytest.mark.parametrize("master", ["local", "server"])
def test_tf1_monitored_session_reports_the_final_global_step(tmp_path, master):
    rc, out, err, _ = run(tmp_path, TF1, master)
    assert rc == 0, err[-3000:]
    assert "runs 30" in out, out  # the piggybacked fetch did not change what the loop ran
    line = reported(out)
    assert line["step"] == 30 and line["kind"] == "tf1", line


def test_pss_coordinator_reports_closures_done_also_while_it_waits_in_join(tmp_path):
    rc, out, err, _ = run(tmp_path, PSS)
    assert rc == 0, err[-3000:]
    words = next(line for line in out.splitlines() if line.startswith("join ")).split()
    join, seen = float(words[1]), json.loads(words[3])
    assert words[5] == "80", out
    line = reported(out)
    assert line["step"] == 80 and line["kind"] == "pss", line  # written as join() returned
    if join > 2.5:  # the sampler looks once a second: workers' progress seen while the coordinator waits
        assert any(0 < step < 80 for step in seen), (join, seen)


@pytest.mark.parametrize("word", ["0", "Off"])
def test_capture_off_leaves_the_file_untouched(tmp_path, word):
    rc, out, err, path = run(tmp_path, FIT, env={"TF_SLURM_PROGRESS_CAPTURE": word})
    assert rc == 0, err[-3000:]
    assert path.stat().st_size == 0


def test_no_file_no_capture_and_nothing_created(tmp_path):
    rc, out, err, path = run(tmp_path, FIT, create=False)
    assert rc == 0, err[-3000:]
    assert not path.exists() and "progress capture" not in err, err[-3000:]


def test_a_failing_capture_never_breaks_the_training(tmp_path):
    rc, out, err, path = run(tmp_path, BROKEN_WRITE + FIT)
    assert rc == 0, err[-3000:]
    assert "keras" in out and path.stat().st_size == 0
    assert err.count("tf_for_slurm: progress capture off: OSError: disk on fire") == 1, err[-3000:]
