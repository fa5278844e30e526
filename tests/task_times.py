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
    """Every task exited 0 and the ps (rank 0) within 1 s of the last worker; returns the gap."""
    assert sorted(times) == [0, 1, 2] and all(rc == 0 for rc, _ in times.values()), (times, out[-3000:])
    gap = times[0][1] - max(times[1][1], times[2][1])
    assert gap <= 1.0, (gap, times)
    return gap
