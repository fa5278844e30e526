"""What does the shim's progress capture (tf_for_slurm/_shim/tf_slurm_progress.py) cost a training step?

Two measures:
- hooks: the capture's patched methods called in a tight loop, against the same methods unpatched
  (a Keras CallbackList's on_train_batch_end with a tensor loss; a TF1 MonitoredSession.run with its
  once-a-second global-step fetch): nanoseconds per step, the writes of the file (2 a second)
  included.  Precise: this is the per-step overhead.
- end to end: a Keras `fit` (a dense model sized for ~5 ms steps) and a TF1 MonitoredSession loop
  (~5 ms steps), each in fresh processes under the shim with a progress file, capture on and
  TF_SLURM_PROGRESS_CAPTURE=0 alternately (as many processes each), the median step time of each
  side and their ratio.  A run times `--steps` steps after a warm-up; the difference is within the
  machine's noise unless the capture costs more than that noise.  Each capture-on process then
  switches the capture off and on for alternate blocks (fits of 200 steps, 200 runs; `--pairs`),
  which cancels the drift between processes (a loaded machine's step times are bimodal from one
  process to the next).  The TF1 program also times one run with the global step fetched along
  against one without (the capture's once-a-second fetch), spread over a second's steps in the
  own-cost figure.

Run: .venv/bin/python bench/bench_progress_capture.py [--runs 5] [--steps 600] [--pairs 5]
Measured on this repository's 2-core machine while a CI run loaded it (load average 1.4-4.7,
TensorFlow 2.21, Keras 3; --runs 5 --steps 600 --pairs 5): hooks 0.62 us per Keras step (bare
method 0.07 us), 0.34-0.46 us per TF1 run (the global-step fetch along: 20 us once a second, 0.12 us
a step); 0.012% and 0.008% of a ~5 ms step.  End to end the machine's noise dominated: Keras fit
5.09 ms off / 8.51 ms on by process medians (both sides had runs at 4.3-5.5 ms and at 8.51 ms),
6.32 ms off / 5.31 ms on in-process pairs; TF1 5.78 / 5.58 ms by processes, 5.85 / 5.88 ms (ratio
1.004) in pairs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIM = os.path.join(ROOT, "tf_for_slurm", "_shim")

FIT = """
import json, sys, time
import numpy as np
import tensorflow as tf
steps, width, PAIRS = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
x = np.random.RandomState(0).rand(64 * 256, 256).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(64).cache().repeat()  # built once
model = tf.keras.Sequential([tf.keras.Input(shape=(256,)), tf.keras.layers.Dense(width, activation="relu"),
                             tf.keras.layers.Dense(width, activation="relu"), tf.keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model.fit(data, steps_per_epoch=20, epochs=1, verbose=0)  # trace, warm up
start = time.perf_counter()
model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0)
took = (time.perf_counter() - start) / steps * 1e3
line = open(sys.argv[1]).read()
paired = {"on": [], "off": []}  # the capture switched on and off for alternate fits of this process
cap = sys.modules["tf_slurm_progress"]._capture[0] if "tf_slurm_progress" in sys.modules else None
for i in range(2 * PAIRS if cap else 0):
    cap.on = i % 2 == 0
    t0 = time.perf_counter()
    model.fit(data, steps_per_epoch=200, epochs=1, verbose=0)
    paired["on" if cap.on else "off"].append((time.perf_counter() - t0) / 200 * 1e3)
print(json.dumps({"step_ms": took, "line": line, "paired": paired}))
"""

TF1 = """
import json, statistics, sys, time
import tensorflow as tf
tf.compat.v1.disable_eager_execution()
steps, width, PAIRS = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
gs = tf.compat.v1.train.get_or_create_global_step()
w = tf.compat.v1.get_variable("w", [width, width])
x = tf.random.uniform([256, width])
loss = tf.reduce_mean(tf.nn.relu(tf.matmul(tf.nn.relu(tf.matmul(x, w)), w)))
train = tf.compat.v1.train.GradientDescentOptimizer(1e-6).minimize(loss, global_step=gs)
hooks = [tf.compat.v1.train.StopAtStepHook(last_step=10 ** 9)]
cap = sys.modules["tf_slurm_progress"]._capture[0] if "tf_slurm_progress" in sys.modules else None
paired = {"on": [], "off": []}  # the capture switched on and off for alternate blocks of 200 runs
with tf.compat.v1.train.MonitoredTrainingSession(hooks=hooks) as sess:
    for _ in range(20):  # warm up, both fetch structures
        sess.run(train)
        sess.run([train, gs])
    start = time.perf_counter()
    for _ in range(steps):
        sess.run(train)
    took = time.perf_counter() - start
    plain, along = [], []  # one run as it is, one with the global step fetched along (the capture's fetch)
    for _ in range(100):
        for fetches, into in ((train, plain), ([train, gs], along)):
            t0 = time.perf_counter()
            sess.run(fetches)
            into.append(time.perf_counter() - t0)
    for i in range(2 * PAIRS if cap else 0):
        cap.on = i % 2 == 0
        t0 = time.perf_counter()
        for _ in range(200):
            sess.run(train)
        paired["on" if cap.on else "off"].append((time.perf_counter() - t0) / 200 * 1e3)
extra = (statistics.median(along) - statistics.median(plain)) * 1e6
print(json.dumps({"step_ms": took / steps * 1e3, "fetch_along_us": extra, "line": open(sys.argv[1]).read(),
                  "paired": paired}))
"""

def _env(progress: str, on: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_SLURM_")}
    env.pop("TF_USE_LEGACY_KERAS", None)
    env.update({"PYTHONPATH": SHIM, "TF_SLURM_PROGRESS_FILE": progress, "TF_CPP_MIN_LOG_LEVEL": "2",
                "CUDA_VISIBLE_DEVICES": "", "TF_SLURM_PROGRESS_CAPTURE": "1" if on else "0"})
    return env


def end_to_end(program: str, runs: int, steps: int, width: int, pairs: int) -> dict:
    """Median step time (ms) with the capture on and off, over `runs` fresh processes each."""
    times: dict = {True: [], False: []}
    lines: list = []
    along: list = []
    paired: dict = {"on": [], "off": []}
    with tempfile.TemporaryDirectory() as tmp:
        script, progress = os.path.join(tmp, "train.py"), os.path.join(tmp, "progress")
        with open(script, "w") as fh:
            fh.write(program)
        for _ in range(runs):
            for on in (True, False):  # alternate: the machine's drift falls on both sides
                open(progress, "w").close()
                out = subprocess.run([sys.executable, script, progress, str(steps), str(width), str(pairs)],
                                     env=_env(progress, on),
                                     capture_output=True, text=True, timeout=600)
                if out.returncode != 0:
                    raise SystemExit(out.stderr[-3000:])
                result = json.loads(out.stdout.strip().splitlines()[-1])
                times[on].append(result["step_ms"])
                if on:
                    lines.append(result["line"].strip())
                    along.append(result.get("fetch_along_us"))
                    for side in ("on", "off"):
                        paired[side] += result["paired"][side]
    on, off = statistics.median(times[True]), statistics.median(times[False])
    out = {"step_ms_on": round(on, 4), "step_ms_off": round(off, 4), "ratio": round(on / off, 4),
           "min_ratio": round(min(times[True]) / min(times[False]), 4),
           "runs_on": [round(t, 3) for t in times[True]], "runs_off": [round(t, 3) for t in times[False]],
           "last_line": lines[-1] if lines else None}
    p_on, p_off = statistics.median(paired["on"]), statistics.median(paired["off"])
    out.update({"paired_ms_on": round(p_on, 4), "paired_ms_off": round(p_off, 4),
                "paired_ratio": round(p_on / p_off, 4), "paired_blocks": len(paired["on"])})
    if any(a is not None for a in along):  # TF1: the once-a-second global-step fetch, spread over a second's steps
        extra = max(0.0, statistics.median(a for a in along if a is not None))  # noise can make it negative
        out["fetch_along_us"] = round(extra, 1)
        out["fetch_along_us_per_step"] = round(extra * off / 1e3, 3)
    return out


def _per_call(fn, seconds: float = 1.0) -> float:
    """ns per call of fn(), over about `seconds` (the median of 5 slices)."""
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < 0.05:
        fn()
        n += 1
    batch = max(1000, int(n * seconds / 5 / 0.05))
    slices = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        slices.append((time.perf_counter() - t0) / batch * 1e9)
    return statistics.median(slices)


def hooks() -> dict:
    """The patched methods' own cost per step (ns), against the same methods unpatched."""
    sys.path.insert(0, SHIM)
    import tensorflow as tf  # noqa: PLC0415  (this measure only: the end-to-end one runs it in children)
    import tf_slurm_progress as progress  # noqa: PLC0415  (the shim's module, from SHIM above)

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "progress")
        open(path, "w").close()
        cap = progress._Capture(path)

        class Callbacks:  # a CallbackList's cheapest batch end, and TF1's run, with nothing to do
            params = {"epochs": 1, "steps": 10 ** 9}

            def on_train_begin(self, logs=None):
                pass

            def on_train_batch_end(self, batch, logs=None):
                pass

        class Monitored:
            def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
                return [fetches, 7] if isinstance(fetches, list) else fetches

            def _close_internal(self, exception_type=None):
                pass

        plain_cb, plain_run = Callbacks(), Monitored()
        logs = {"loss": tf.constant(0.25)}
        bare_keras = _per_call(lambda: plain_cb.on_train_batch_end(5, logs))
        bare_tf1 = _per_call(lambda: plain_run.run("op"))
        progress._wrap(Callbacks, "on_train_begin", cap.train_begin, cap)
        progress._wrap(Callbacks, "on_train_batch_end", cap.train_batch, cap)
        progress._patch_monitored(type("M", (), {"_MonitoredSession": Monitored}), cap)
        cb, session = Callbacks(), Monitored()
        session.__dict__[progress._MARK] = object()  # a "global step" the fake run answers 7 for
        cb.on_train_begin()
        keras = _per_call(lambda: cb.on_train_batch_end(5, logs))
        tf1 = _per_call(lambda: session.run("op"))
        line = open(path).read().strip()
    return {"keras_batch_end_ns": round(keras - bare_keras), "tf1_run_ns": round(tf1 - bare_tf1),
            "keras_bare_ns": round(bare_keras), "tf1_bare_ns": round(bare_tf1), "line": line}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--pairs", type=int, default=5, help="on/off block pairs in each capture-on process")
    parser.add_argument("--keras-width", type=int, default=1152, help="Dense width (~5 ms steps on 2 cores)")
    parser.add_argument("--tf1-width", type=int, default=480, help="matmul size (~5 ms steps on 2 cores)")
    args = parser.parse_args()
    report = {"hooks": hooks()}
    print(json.dumps(report["hooks"]), flush=True)
    for name, program, width in (("keras_fit", FIT, args.keras_width), ("tf1_monitored", TF1, args.tf1_width)):
        report[name] = end_to_end(program, args.runs, args.steps, width, args.pairs)
        overhead_us = (report[name]["step_ms_on"] - report[name]["step_ms_off"]) * 1e3
        report[name]["overhead_us_per_step"] = round(overhead_us, 1)
        print(json.dumps({name: report[name]}), flush=True)
    for name, key in (("keras_fit", "keras_batch_end_ns"), ("tf1_monitored", "tf1_run_ns")):
        r = report[name]
        own_us = report["hooks"][key] / 1e3 + r.get("fetch_along_us_per_step", 0.0)
        print(f"{name}: processes: step {r['step_ms_off']:.3f} ms (capture off), {r['step_ms_on']:.3f} ms (on), "
              f"median ratio {r['ratio']:.4f}, best-run ratio {r['min_ratio']:.4f}; in-process pairs "
              f"({r['paired_blocks']} blocks each): {r['paired_ms_off']:.3f} ms off, {r['paired_ms_on']:.3f} ms on, "
              f"ratio {r['paired_ratio']:.4f}; the capture's own cost {own_us:.2f} us per step = "
              f"{own_us / 1e3 / r['step_ms_off'] * 100:.3f}% of the step")


if __name__ == "__main__":
    main()
