"""Finding a task's processes on this machine, for the fault benches (every emulated node is here)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List


def pids_of(script_name: str, rank: int) -> List[int]:
    """Pids of the processes running `python .../<script_name>` with SLURM_PROCID=`rank` in their environment."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
            env = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(argv) > 1 and argv[1].endswith(script_name.encode()) and f"SLURM_PROCID={rank}".encode() in env:
            out.append(int(name))
    return out
