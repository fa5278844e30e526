"""A checkpoint save is progress (the shim's tf_slurm_save_progress): while a save runs, the task's
progress file gets an "eval" report (progress, no step) at once and then once a second, so the hub's
hang rule does not take a long save for a hang; and the report counts the saves: as each ends, the file
says how many this process finished ("saves") and the seconds spent in them ("save_s").

Each script runs under the shim as `tf-slurm exec` starts it (tests/runtime/test_progress_capture.py's
`run`).  The first save is made long by construction, not by a sleep: the script replaces a function the
save calls inside (below our patch) with one that waits until the progress file has said "eval" with
three different times, then saves; it prints how many it saw (0 after 20 s: the reports never came) and
the saves the reports counted meanwhile.  Then it saves SAVES - 1 more times (quick ones).
"""

from __future__ import annotations

import importlib.util

import pytest
from test_progress_capture import reported, run

pytestmark = [pytest.mark.tf,
              pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow")]

SAVES = 3

WAIT = f"""
import json, sys, time
SAVES = {SAVES}
""" + """
def wait_for_reports(original):
    calls = []
    def inner(*args, **kwargs):
        calls.append(1)
        seen, counted, deadline = set(), set(), time.monotonic() + 20
        while len(calls) == 1 and time.monotonic() < deadline and len(seen) < 3:  # the first save only
            try:
                d = json.loads(open(sys.argv[1]).read().split("\\n")[0])
            except ValueError:
                d = {}
            if d.get("eval"):
                seen.add(d["t"])
                counted.add(d.get("saves"))
            time.sleep(0.05)
        if len(calls) == 1:
            print("seen", len(seen), "counted", sorted(counted, key=str))
        return original(*args, **kwargs)
    return inner
"""

TF2 = WAIT + """
import tensorflow as tf
from tensorflow.python.checkpoint import functional_saver
w = tf.Variable(1.0)
functional_saver.MultiDeviceSaver.save = wait_for_reports(functional_saver.MultiDeviceSaver.save)
manager = tf.train.CheckpointManager(tf.train.Checkpoint(w=w), sys.argv[2], max_to_keep=1)
for _ in range(SAVES):
    print("saved", manager.save())
print("line", open(sys.argv[1]).read(), end="")
"""

TF1 = WAIT + """
import tensorflow as tf
from tensorflow.python.checkpoint import checkpoint_management
tf.compat.v1.disable_eager_execution()
w = tf.compat.v1.get_variable("w", [2])
saver = tf.compat.v1.train.Saver()
checkpoint_management.update_checkpoint_state_internal = wait_for_reports(
    checkpoint_management.update_checkpoint_state_internal)
with tf.compat.v1.Session() as sess:
    sess.run(tf.compat.v1.global_variables_initializer())
    for step in range(SAVES):
        print("saved", saver.save(sess, sys.argv[2] + "/model.ckpt", global_step=step))
print("line", open(sys.argv[1]).read(), end="")
"""

KERAS3 = WAIT + """
import keras
from keras.src.saving import saving_lib
saving_lib._save_state = wait_for_reports(saving_lib._save_state)
model = keras.Sequential([keras.Input(shape=(2,)), keras.layers.Dense(1)])
for _ in range(SAVES):
    model.save_weights(sys.argv[2] + "/w.weights.h5")
print("saved")
print("line", open(sys.argv[1]).read(), end="")
"""


@pytest.mark.parametrize("script", ["tf2", "tf1", "keras3"])
def test_a_long_save_is_reported_as_progress_while_it_runs(tmp_path, script):
    if script == "keras3":
        keras = importlib.util.find_spec("keras")
        if keras is None or importlib.util.find_spec("keras.src.saving.saving_lib") is None:
            pytest.skip("needs Keras 3")
    rc, out, err, _ = run(tmp_path, {"tf2": TF2, "tf1": TF1, "keras3": KERAS3}[script], str(tmp_path),
                          env={"TF_USE_LEGACY_KERAS": "0"})
    assert rc == 0, err[-3000:]
    assert "seen 3 counted [0]" in out and "saved" in out, (out, err[-3000:])  # the first save: none finished yet
    line = reported(out)  # after the saves: no step (no training ran), no save running, every save counted
    assert line["step"] == 0 and "eval" not in line and line["saves"] == SAVES, line
    assert isinstance(line["save_s"], float) and 2.0 <= line["save_s"] < 60, line  # the first waited for 3 reports
