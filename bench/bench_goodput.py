"""What the goodput account costs (plan/goodput.py, with goodput_read.py and goodput_words.py): 100
synthetic jobs of 128 tasks each, every task a 240-point step history (plan.train_progress.MAX_HISTORY)
over the job's 3 runs (each after the first resuming 1000 steps back), a timeline of about 800 events
a job (each run's step start and end, its 128 task starts and exits, a hang and a restart), batch.json
with two earlier runs and Slurm's times; all accounted one after the other in this process (the
timeline parsed beforehand: plan.job_report's).  Target (issue 44): the 100 jobs in well under a
second in CPython.

    .venv/bin/python bench/bench_goodput.py [--jobs 100] [--tasks 128] [--repeat 5]

Measured on this repository's 2-core machine (CPython 3.11, its load average 4-9 from other work):
the 100 jobs in 264 ms best of 5 in the quietest of four runs (324-371 ms in the others): about 2.6 ms
a job, of which reading and merging the histories (every 16th point of each task, about 2,300 a job)
and the lead take about two thirds (cProfile).  In CPU time, interleaved in one process with the
module before its split into goodput_read and goodput_words: 248-264 ms against 248-263 ms, the
same.  Job 0: goodput 0.921 (queued 1230 s, start-up 180 s, saves 121 s, redone 232 s, end wait
103 s, other 207 s: the two runs' checkpoint and requeue), redone steps 2000 (each requeue resumed
1000 steps back: from 0, 28625, 57250).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tf_for_slurm.plan.goodput import account  # noqa: E402
from tf_for_slurm.plan.job_report import Event, Timeline  # noqa: E402

T = 1_800_000_000.0
RUN_S = 3600.0  # each run's time
GAP_S = 600.0  # the queue between runs
POINTS = 240


def job(seed: int, tasks: int) -> tuple:
    """status.json, batch.json and the timeline of one job: 3 runs, each after the first resuming 1000 steps back."""
    rnd = random.Random(seed)
    starts = [T + i * (RUN_S + GAP_S) for i in range(3)]
    per_run = POINTS // 3
    history, events = [], []
    for r, start in enumerate(starts):
        events.append(Event(start + 5, "step_start"))
        for rank in range(tasks):
            events.append(Event(start + 6, "start", rank, "worker", rank, f"node{rank // 8 + 16 * r:03d}"))
        events += [Event(start + 1800, "hang", 3, "worker", 3, "node000"),
                   Event(start + 1801, "restart", 3, "worker", 3, "node000")]
        for rank in range(tasks):
            events.append(Event(start + RUN_S - 20, "exit", rank, "worker", rank, None, 42 if r < 2 else 0))
        events.append(Event(start + RUN_S - 15, "step_end", status=42 if r < 2 else 0))
        base = r * ((per_run - 1) * 375 - 1000)  # each run resumes 1000 steps back: redone
        history += [(start + 60 + i * (RUN_S - 120) / per_run, base + i * 375) for i in range(per_run)]
    progress = {}
    for rank in range(tasks):
        jitter = rnd.random()
        progress[str(rank)] = {"step": history[-1][1], "history": [[t + jitter, s] for t, s in history],
                               "save_s": 120.0 + jitter, "saves": 30}
    status = {"job": str(seed), "state": "ended", "started_at": starts[-1] + 5, "updated_at": starts[-1] + RUN_S,
              "progress": progress}
    runs = [{"run": r + 1, "started_at": s + 2, "ended_at": s + RUN_S, "state": "requeued" if r < 2 else "ended",
             "status": 42 if r < 2 else 0, "slurm_start": s, "slurm_submit": s - 30} for r, s in enumerate(starts)]
    return status, {**runs[-1], "job": str(seed), "history": runs[:-1]}, Timeline(tuple(events))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=100)
    p.add_argument("--tasks", type=int, default=128)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    jobs = [job(i, args.tasks) for i in range(args.jobs)]
    times = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        accounts = [account(str(i), status, batch, timeline, T) for i, (status, batch, timeline) in enumerate(jobs)]
        times.append(time.perf_counter() - t)
    a = accounts[0]
    print(f"{args.jobs} jobs x {args.tasks} tasks x {POINTS} points, {len(jobs[0][2].events)} events a job: "
          f"best {min(times) * 1000:.0f} ms, median {statistics.median(times) * 1000:.0f} ms "
          f"({min(times) / args.jobs * 1000:.2f} ms a job)")
    print("job 0:", {k: round(v) for k, v in a.parts.items()}, f"goodput {a.goodput:.3f}, redone steps",
          a.redone_steps, "resumed from", [r.resumed_from for r in a.runs])


if __name__ == "__main__":
    main()
