"""The cost of the step's status file for the hub (issue 16, item 3: "cheap at 4,000 tasks").

    .venv/bin/python bench/bench_status.py [--sizes 100,1000,4000,16000] [--repeat 20]

For each size: a StepWatch as the hub has it mid-run (every task joined and heard, some exited),
then `repeat` times what the hub does per write: the snapshot (plan/step_status.py) and the
atomic write (host/job_folder.py).  Prints ms per write, the file's size, and the hub's CPU at the
highest rate it ever writes (one write a second while tasks change state: MIN_INTERVAL) and at the
idle refresh rate (every REFRESH seconds), as % of one core.  Target: <= 2% of a core at 4,000 tasks.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import namedtuple
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tf_for_slurm.host.job_folder import write_json  # noqa: E402
from tf_for_slurm.plan.step_status import snapshot  # noqa: E402
from tf_for_slurm.plan.step_watch import StepWatch  # noqa: E402
from tf_for_slurm.plan.strategy import step_roles  # noqa: E402
from tf_for_slurm.supervise.status_file import MIN_INTERVAL, REFRESH  # noqa: E402

T = namedtuple("T", "rank role index node")


def measure(size: int, repeat: int, folder: str) -> dict:
    tasks = [T(0, "chief", 0, "node0001")] + [T(r, "worker", r - 1, f"node{r // 4 + 1:04d}") for r in range(1, size)]
    roles = step_roles(tasks)
    watch = StepWatch(roles, [t.rank for t in tasks], {t.rank: f"{t.role} {t.index}" for t in tasks},
                      local_rank=0, now=0.0)
    for t in tasks[1:]:
        watch.join(t.rank, 1.0)
        watch.hear(t.rank, 2.0)
    for t in tasks[1:size // 10]:
        watch.exit(t.rank, 0, 3.0)
    path = os.path.join(folder, f"status-{size}.json")
    cpu0, t0 = time.process_time(), time.perf_counter()
    for i in range(repeat):
        write_json(path, snapshot(tasks, watch, roles, job="1", step="0", mono=10.0 + i, wall=time.time()))
    cpu = (time.process_time() - cpu0) / repeat
    wall = (time.perf_counter() - t0) / repeat
    return {"size": size, "ms_cpu": 1000 * cpu, "ms_wall": 1000 * wall, "kib": os.path.getsize(path) / 1024,
            "busy_pct": 100 * cpu / MIN_INTERVAL, "idle_pct": 100 * cpu / REFRESH}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100,1000,4000,16000")
    p.add_argument("--repeat", type=int, default=20)
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        rows = [measure(int(s), a.repeat, folder) for s in a.sizes.split(",")]
    print(f"{'tasks':>7} {'ms CPU/write':>13} {'ms wall/write':>14} {'file KiB':>9} "
          f"{'CPU % at 1 write/s':>19} {'CPU % idle (1/' + format(REFRESH, 'g') + ' s)':>20}")
    for r in rows:
        print(f"{r['size']:>7} {r['ms_cpu']:>13.2f} {r['ms_wall']:>14.2f} {r['kib']:>9.0f} {r['busy_pct']:>18.2f}% "
              f"{r['idle_pct']:>19.2f}%")
    at4k = [r for r in rows if r["size"] == 4000]
    if at4k:
        print(f"target: <= 2% of one core at 4,000 tasks while changing: {at4k[0]['busy_pct']:.2f}% "
              f"({'met' if at4k[0]['busy_pct'] <= 2 else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
