"""The check before the command starts (issue 42 item 4): what it costs at 16, 256 and 4,096 tasks.

1. Pairs: plan.preflight.Pairs for one task (what each supervisor computes before it connects):
   microseconds per task, the connections each task makes (at most 9 past FULL_MESH tasks), and how many
   come to the chief's listener and to the busiest other one.
2. Real sockets: every task's `Check` of a step of N tasks on 127.0.0.1 (one port each), the chief alone
   in a process of its own, the other tasks GROUP to a process on threads, all told to start at once.
   Figures: the wall time until the last task had its verdict; the chief's own check time and CPU
   (accepting N - 1 proofs and reports, telling `go`); the other tasks' CPU per task.  All of it runs
   on this machine's 2 cores: at 4,096 tasks the wall time is the whole step's CPU queued on 2 cores
   (an upper bound: on a cluster each task does its share on its own node, and the chief's CPU is what
   it adds to the step's start).
3. A healthy `tf-slurm local -n 16 --nodes 4 -- true` with TF_SLURM_PREFLIGHT=0 and 1, alternately:
   the step's wall time (16 Python processes starting on 2 cores included) and the chief's logged check.

    .venv/bin/python bench/bench_preflight.py [--tasks 16,256,4096] [--runs 3]

Measured on this repository's 2-core machine (nothing else running):
- pairs: 16 tasks 4.5 us a task (15 connections each: every pair); 256: 53 us, at most 9 out, the chief
  255 in, a ps 255 (4 ps: every task checks each), a worker at most 4; 4,096: 0.8 ms, 9 out, chief 4,095,
  a ps 258 (64 ps), a worker 4; 16,384: 4.0 ms.
- sockets: 16 tasks: 0.19 s wall, the chief 0.16 s and 11.5 ms CPU, 13 ms CPU a task (15 pairs each way);
  256: 0.94 s wall, the chief 0.90 s and 111 ms CPU, 5.0 ms CPU a task; 4,096: 127 s wall (17 processes
  of threads queued on 2 cores), the chief 2.3 s CPU (0.55 ms a connection), 60 ms CPU a task (mostly
  its loop's 10 looks a second while it waits its turn on the 2 cores; 5 ms of work, as at 256).
- local -n 16: 2.14 / 2.37 / 2.44 s without the check, 2.45 / 2.22 / 2.43 s with it; the chief's
  check 241-635 ms from its own start (the other 15 processes starting on the same 2 cores), its last
  task's about 55 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from ports import free_base_port  # noqa: E402

from tf_for_slurm.plan import preflight as pf  # noqa: E402
from tf_for_slurm.plan.cluster import Task  # noqa: E402
from tf_for_slurm.supervise.preflight import GO  # noqa: E402

KEY = b"b" * 32
TIMEOUT = 300.0  # generous: the figure is how long it takes on this machine, not whether it fits 10 s
GROUP = 256  # tasks per helper process (threads of one interpreter)
# one process: tasks first..last-1 of a step of n tasks on 127.0.0.1 (worker 0, rank 0, the chief), on threads
TASKS = """import dataclasses, json, resource, sys, threading, time
sys.path.insert(0, {root!r})
from tf_for_slurm.host.reach import FIX_NAMES
from tf_for_slurm.plan.cluster import localhost_plan
from tf_for_slurm.supervise.preflight import Check
from tf_for_slurm.supervise.wire import raise_fd_limit
n, base, first, last = (int(x) for x in sys.argv[1:5])
raise_fd_limit(20 * (last - first) + (n if first == 0 else 0))
plan = localhost_plan(["worker"] * n, [base + r for r in range(n)])
done, gate = {{}}, threading.Event()
def one(rank):
    gate.wait()
    t = time.monotonic()
    line = Check(dataclasses.replace(plan, my_rank=rank), {key!r}, 0, {timeout}, FIX_NAMES).run()
    done[rank] = (line, time.monotonic() - t)
threads = [threading.Thread(target=one, args=(r,), daemon=True) for r in range(first, last)]
for t in threads:
    t.start()
print("ready", flush=True)
sys.stdin.readline()
u0 = resource.getrusage(resource.RUSAGE_SELF)
gate.set()
for t in threads:
    t.join()
u = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({{"lines": sorted({{line for line, _ in done.values()}}), "times": [s for _, s in done.values()],
                  "cpu": u.ru_utime + u.ru_stime - u0.ru_utime - u0.ru_stime}}), flush=True)
"""


def nodes_of(n: int, per_node: int = 8) -> list:
    """n tasks, per_node on each node (node-by-node ranks): ps 0 .. n/64 - 1, then workers."""
    nps = max(1, n // 64)
    return [Task(r, f"node{r // per_node}", r // per_node, r % per_node, "ps" if r < nps else "worker",
                 r if r < nps else r - nps, f"node{r // per_node}", 20000 + r) for r in range(n)]


def pairs(n: int) -> dict:
    tasks = nodes_of(n)
    chief = max(1, n // 64)  # worker 0: the first task after the ps
    runs = 200
    t0 = time.perf_counter()
    for i in range(runs):
        pf.Pairs(tasks, chief).targets(i % n)
    per_task = (time.perf_counter() - t0) / runs
    one = pf.Pairs(tasks, chief)
    incoming = [0] * n
    out_max = 0
    for r in range(n):
        targets = one.targets(r)
        out_max = max(out_max, len(targets))
        for t in targets:
            incoming[t] += 1
    ps_in = max(incoming[r] for r in range(n) if tasks[r].role == "ps")
    worker_in = max(c for r, c in enumerate(incoming) if r != chief and tasks[r].role != "ps")
    return {"tasks": n, "us_per_task": round(per_task * 1e6, 1), "out_max": out_max, "chief_in": incoming[chief],
            "ps_in_max": ps_in, "worker_in_max": worker_in}


def sockets(n: int) -> dict:
    """Every task's check: the chief alone in one process, the others GROUP to a process (see the docstring)."""
    base = free_base_port(n // 2 + 1)
    spans = [(0, 1)] + [(f, min(f + GROUP, n)) for f in range(1, n, GROUP)]
    procs = [subprocess.Popen([sys.executable, "-c", TASKS.format(root=str(ROOT), key=KEY, timeout=TIMEOUT),
                               str(n), str(base), str(first), str(last)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for first, last in spans]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    t0 = time.monotonic()
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    results = []
    for proc in procs:
        assert proc.stdout is not None
        results.append(json.loads(proc.stdout.readline()))
        proc.wait(60)
    wall = time.monotonic() - t0
    chief, others = results[0], results[1:]
    times = [s for r in others for s in r["times"]]
    return {"tasks": n, "all_go": all(r["lines"] == [GO] for r in results), "wall_s": round(wall, 3),
            "chief_s": round(chief["times"][0], 3), "chief_cpu_ms": round(1000 * chief["cpu"], 1),
            "others_cpu_ms_per_task": round(1000 * sum(r["cpu"] for r in others) / (n - 1), 2),
            "task_s_median": round(statistics.median(times), 3), "processes": len(procs)}


def local_step(preflight: str) -> tuple:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "tf_for_slurm", "local", "-n", "16", "--nodes", "4", "--folder",
                            tmp, "--", "true"], cwd=tmp, capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(ROOT), "TF_SLURM_PREFLIGHT": preflight,
                                "TF_SLURM_LOG_LEVEL": "INFO"})
        wall = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-2000:]
    ms = re.findall(r"every planned address answered \(16 tasks, (\d+) ms\)", r.stderr)
    return wall, (float(ms[0]) if ms else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="16,256,4096")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(x) for x in args.tasks.split(",")]
    for n in sizes + [16384]:
        print("pairs", json.dumps(pairs(n)), flush=True)
    for n in sizes:
        print("sockets", json.dumps(sockets(n)), flush=True)
    walls: dict = {"0": [], "1": []}
    checks = []
    for _ in range(args.runs):
        for flag in ("0", "1"):
            wall, ms = local_step(flag)
            walls[flag].append(round(wall, 2))
            if ms is not None:
                checks.append(ms)
    print("local -n 16", json.dumps({"wall_s_without": walls["0"], "wall_s_with": walls["1"],
                                     "chief_check_ms": checks}), flush=True)


if __name__ == "__main__":
    main()
