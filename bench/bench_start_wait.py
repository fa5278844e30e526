"""The start-up rule's figures (issue 42): how soon a stuck start is named, and what the hub's look costs.

1. Detection: `tf-slurm local -n 3 -N 3` of a TensorFlow-free task (tests/supervise/test_start_wait.py's):
   worker 1 stays in load_data, the others wait for their peers at once; TF_SLURM_START_WAIT=B.  Figure:
   from the first waiter's `since` (its own clock) to the hub's named line in status.json's `hangs`
   (`at`), minus B: the look (LOOK_EVERY, 1 s) and the phase's way to the hub (the spoke's look at the
   phase file, 1 s); target: the bound + one look.
2. The look: the hub's StartWaitWatch.look at N tasks (every task's phase new, one laggard), in this process.

    .venv/bin/python bench/bench_start_wait.py [--bound 2] [--runs 3] [--tasks 1000,16000]

Measured on this repository's 2-core machine (other tests running beside it): named 0.83-0.92 s
after the 2 s bound (3 runs); the look 1.5 ms at 1,000 tasks (every 1.25 s), 25.6-27.2 ms at 16,000
(every 5 s: 0.5% of a core), only while no step was made.  3. `import tensorflow` with and without
the phase file, whole processes, best of 5-7 interleaved: 3.430 / 3.533 s, 2.722 / 2.929 s (TF 2.21),
2.829 / 2.825 s (TF 2.15.1): the machine's noise is larger than the cost; timed inside the process,
the module's import, install() and its patches take about 1 ms in all (0.05% of the import).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "supervise"))

from tf_for_slurm.plan.start_phase import Phase  # noqa: E402
from tf_for_slurm.plan.step_watch import StepWatch  # noqa: E402
from tf_for_slurm.plan.strategy import StepRoles  # noqa: E402
from tf_for_slurm.supervise.start_wait import LOOK_EVERY, StartWaitWatch  # noqa: E402


def detection(bound: float) -> float:
    from test_start_wait import TASK  # the test's task: rank 1 lags, the others wait

    with tempfile.TemporaryDirectory() as tmp:
        gate = Path(tmp) / "gate"
        gate.write_text("")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_SLURM_PROGRESS_CAPTURE": "0", "TF_SLURM_STRATEGY": "mwms",
               "TF_SLURM_START_WAIT": f"{bound:g}", "TF_SLURM_START_FAULT": "0"}
        proc = subprocess.Popen([sys.executable, "-m", "tf_for_slurm", "local", "-n", "3", "-N", "3", "--ps", "0",
                                 "--folder", tmp, "--job-id", "91", "--", sys.executable, "-c", TASK, str(gate)],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                try:
                    status = json.loads((Path(tmp) / "91" / "status.json").read_text())
                except (OSError, ValueError):
                    status = {}
                hangs, start = status.get("hangs") or [], status.get("start") or {}
                if hangs and start.get("since"):
                    return hangs[0]["at"] - start["since"] - bound
                time.sleep(0.1)
            raise SystemExit("never named")
        finally:
            gate.write_text("go")
            proc.wait(timeout=60)


def look_cost(n: int, repeat: int = 5) -> float:
    class T:
        def __init__(self, rank: int):
            self.rank, self.role, self.index, self.node = rank, "worker", rank, f"node{rank}"

    tasks = [T(r) for r in range(n)]
    roles = StepRoles(strategy="mwms", rule="", chief_rank=0, trainers=tuple(range(n)), servers=())
    best = float("inf")
    for _ in range(repeat):
        watch = StepWatch(roles, list(range(n)), {r: str(r) for r in range(n)}, local_rank=0, now=0.0, drain=1,
                          silence=10, connect_grace=300, end_grace=5, role_of={r: "worker" for r in range(n)})
        for r in range(n):
            watch.join(r, 0.0)
        sw = StartWaitWatch(300, 1800, tasks, "mwms", 0, {r: f"worker {r}" for r in range(n)})
        now = time.time()
        phases = {r: Phase("waiting", now, now - 10, detail="the start barrier") for r in range(1, n)}
        t0 = time.perf_counter()
        sw.look(phases, {}, watch, now, 1.0)
        best = min(best, time.perf_counter() - t0)
    return best


def phase_cost(repeat: int) -> tuple:
    """Best-of-`repeat` seconds of `python -c 'import tensorflow'` under the shim, without and with the phase file."""
    def once(with_phase: bool) -> float:
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tf_for_slurm" / "_shim"), str(ROOT)]),
                   "TF_CPP_MIN_LOG_LEVEL": "3", "TF_SLURM_PROGRESS_FILE": os.path.join(tmp, "progress")}
            Path(env["TF_SLURM_PROGRESS_FILE"]).write_text("")
            if with_phase:
                env["TF_SLURM_PHASE_FILE"] = os.path.join(tmp, "phase")
                Path(env["TF_SLURM_PHASE_FILE"]).write_text("")
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", "import tensorflow"], env=env, check=True, timeout=300)
            return time.perf_counter() - t0

    without, with_ = [], []
    for _ in range(repeat):  # interleaved: the machine's load hits both alike
        without.append(once(False))
        with_.append(once(True))
    return min(without), min(with_)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bound", type=float, default=2.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tasks", default="1000,16000")
    parser.add_argument("--import-runs", type=int, default=5)
    args = parser.parse_args()
    without, with_ = phase_cost(args.import_runs)
    print(f"import tensorflow under the shim: {without:.3f} s without the phases, {with_:.3f} s with them "
          f"({(with_ - without) / without:+.1%}; best of {args.import_runs}, interleaved; target under 1%)")
    late = [detection(args.bound) for _ in range(args.runs)]
    print(f"named after the bound ({args.bound:g} s) + " + ", ".join(f"{x:.2f}" for x in late)
          + " s (target: at most one look, 1 s, plus the phase's way to the hub, 1 s)")
    for n in (int(x) for x in args.tasks.split(",")):
        every = min(5.0, LOOK_EVERY + n / 4000)
        print(f"the hub's look at {n} tasks: {look_cost(n) * 1000:.1f} ms (best of 5), one every {every:g} s")


if __name__ == "__main__":
    main()
