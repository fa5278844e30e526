"""How long does freeing a tf.data iterator stop the program? (TensorFlow's, not ours: issue 25, item 8)

Why: a MultiWorkerMirroredStrategy `fit` under srun returned ~10 s late in some runs
(bench/bench_mwms_repeat.py); py-spy showed the program's thread freeing fit's iterator and joining
a tf.data thread.  That thread is the iterator's autotuning thread (root_dataset.cc, model.cc
`Model::OptimizeLoop`), which sleeps between re-tunings, the sleep doubling from 10 ms up to 60 s.
Freeing the iterator cancels it, but `CancellationManager::StartCancel` (cancellation.cc) runs the
callback that wakes the thread before it marks itself cancelled: a thread that wakes in between
sees "not cancelled" and sleeps out the rest of its period, and the free waits for it.

Each round here uses an iterator (autotuned prefetch, tf.data's default) for --seconds, one element
every 10 ms, then frees it and prints how long the program's `del` took.  One process, so
TensorFlow's import is paid once.

Run: .venv/bin/python bench/bench_iterator_end.py [--rounds 10] [--seconds 12]
Measured on this repository's 2-core machine, quiet (2026-11-27, TensorFlow 2.21), 10 rounds of 12 s:
0.000-0.001 s seven times, 8.46 s three times; 6 rounds of 15 s: 5.45 s once.
Tried and dropped: freeing the iterators from a thread of exec's shim (the program runs on while it
waits) aborted a task at exit in 2 of 5 MWMS runs of bench_mwms_repeat.py ("terminate called ...
FATAL: exception not rethrown"): a Python thread inside TensorFlow's destructor when the
interpreter ends is killed mid-C++ by CPython's finalization.  Waiting for it at exit would move
the wait, not remove it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAM = """
import json, sys, time
import numpy as np
import tensorflow as tf

rounds, seconds = int(sys.argv[1]), float(sys.argv[2])
x = np.random.RandomState(0).rand(6000, 28, 28).astype(np.float32)
for r in range(rounds):
    it = iter(tf.data.Dataset.from_tensor_slices(x).repeat().batch(64).prefetch(tf.data.AUTOTUNE))
    end = time.time() + seconds
    while time.time() < end:
        next(it)
        time.sleep(0.01)
    t0 = time.time()
    del it
    print(json.dumps({"round": r, "program_stalled_s": round(time.time() - t0, 3)}), flush=True)
"""


def rounds_of(rounds: int, seconds: float) -> list:
    """One process's rounds: [{'round', 'program_stalled_s'}, ...]."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    res = subprocess.run([sys.executable, "-c", PROGRAM, str(rounds), str(seconds)], capture_output=True,
                         text=True, env=env, timeout=rounds * (seconds + 70) + 120)
    if res.returncode != 0:
        raise RuntimeError(res.stderr[-3000:])
    return [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=12.0, help="how long each round uses its iterator")
    args = ap.parse_args()
    stalls = [row["program_stalled_s"] for row in rounds_of(args.rounds, args.seconds)]
    late = [s for s in stalls if s >= 1.0]
    print(f"freeing the iterator took {stalls} s: {len(late)} of {len(stalls)} rounds waited >= 1 s", flush=True)


if __name__ == "__main__":
    main()
