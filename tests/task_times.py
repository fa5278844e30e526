"""tests/tf4slurm_tasks/timed.sh's record of each task's exit, read by the tf4slurm-era runs under
`tf-slurm local` (tests/faces) and under Slurm (tests/slurm)."""

from __future__ import annotations

from pathlib import Path


def task_times(path: Path) -> dict:
    """{procid: (exit status, unix time)} from timed.sh's lines."""
    out = {}
    for line in path.read_text().splitlines():
        procid, rc, t = line.split()
        out[int(procid)] = (int(rc), float(t))
    return out


def assert_ps_left_with_the_workers(times: dict, out: str) -> float:
    """Every task exited 0, the ps (rank 0) too: its own dequeue loop ended it; returns the gap (the ps's
    exit minus the last worker's), a figure to print, not to bound.

    What the design guarantees, and so all this asserts: the ps's loop ends once it dequeued every
    worker's done report, which a worker enqueues before it exits; nobody ends the ps for it (srun, and
    `tf-slurm local --slurm-env-only`, which behaves like it, wait for every task, and end the others
    only after a failure), so a ps that never left would hold the step until the caller's timeout.  How
    soon after the last worker it exits depends on the machine (1.14 s once on a loaded 2-core CI
    machine): bench/bench_shutdown.py prints it."""
    assert sorted(times) == [0, 1, 2] and all(rc == 0 for rc, _ in times.values()), (times, out[-3000:])
    return times[0][1] - max(times[1][1], times[2][1])
