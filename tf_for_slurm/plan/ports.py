"""Ports: a policy chain that gives every task a port no other task (or job) on its host uses.

Chain: an explicit base port if the user set one; Slurm-reserved ports (`srun --resv-ports`)
when present; otherwise a window derived from the job and step id.

The window lies in 20000-32767, below Linux's default ephemeral range (32768-60999), so outgoing
connections never squat on it.  The range is cut into blocks of B ports, B the smallest power of
two >= 2 x (tasks per host) and at least 16 (each task gets a TensorFlow port and an auxiliary
port: the chief's is where the exec supervisors meet).  A step takes block (job_id + 7919 x step_id) mod nblocks.
Collision odds: two steps on one host collide only if they map to the same block; consecutive
job ids never do until nblocks jobs apart (798 blocks for up to 8 tasks per host), and two
unrelated jobs collide with probability 1/nblocks (about 0.13% with 8 tasks per host).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Optional, Sequence

from tf_for_slurm.errors import PlanError, bad_value

WINDOW_LOW = 20000
WINDOW_HIGH = 32768  # exclusive; Linux's default ip_local_port_range starts here
MIN_BLOCK = 16


@dataclass(frozen=True)
class PortAssignment:
    ports: tuple  # per slot
    aux_ports: tuple  # per slot, None where no second port could be given
    policy: str  # 'fixed', 'reserved' or 'window'
    note: str  # one line for people: what was chosen and why
    span: tuple = ()  # (first, last) port of the range the ports come from


def _job_number(job_id: str) -> int:
    head = job_id.split("_")[0].split("+")[0]  # array '123_4' and het-job '123+0' forms
    if head.isdigit():
        tail = job_id[len(head):]
        return int(head) + (zlib.crc32(tail.encode()) if tail else 0)
    return zlib.crc32(job_id.encode())


def block_size(width: int) -> int:
    size = MIN_BLOCK
    while size < 2 * width:
        size *= 2
    return size


def window_base(job_id: str, step_id: str, width: int,
                low: int = WINDOW_LOW, high: int = WINDOW_HIGH, base_port_name: str = "a base port") -> int:
    """First port of the step's block (see module docstring)."""
    size = block_size(width)
    nblocks = (high - low) // size
    if nblocks < 1:
        raise PlanError(
            f"{width} tasks per host: expected at most {(high - low) // 2} for the port window "
            f"{low}-{high - 1}; set {base_port_name} or use srun --resv-ports"
        )
    step = int(step_id) if str(step_id).isdigit() else zlib.crc32(str(step_id).encode())
    block = (_job_number(str(job_id)) + 7919 * step) % nblocks
    return low + block * size


def assign_ports(offsets: Sequence[int], *, job_id: str, step_id: str,
                 reserved: Sequence[int] = (), base_port: Optional[int] = None,
                 base_port_name: str = "base_port", reserved_name: str = "reserved") -> PortAssignment:
    """Ports for slots whose offsets (ordinal among the tasks sharing their host) are given.

    base_port_name, reserved_name: where those values came from, for messages (host passes the
    variables' names)."""
    width = (max(offsets) + 1) if offsets else 0
    if base_port is not None:
        if not isinstance(base_port, int) or not 1024 <= base_port <= 65535 - 2 * width:
            raise PlanError(bad_value(base_port_name, base_port,
                                      f"a port in 1024-{65535 - 2 * width} (room for {width} tasks x 2)"))
        return PortAssignment(
            ports=tuple(base_port + o for o in offsets),
            aux_ports=tuple(base_port + width + o for o in offsets),
            policy="fixed", note=f"ports {base_port}+offset ({base_port_name})",
            span=(base_port, base_port + 2 * width - 1),
        )
    if reserved:
        if len(reserved) < width:
            raise PlanError(
                f"{reserved_name} holds {len(reserved)} ports: expected at least {width}, "
                f"one per task on the busiest node (srun --resv-ports={width})"
            )
        aux = tuple(reserved[width + o] if len(reserved) >= 2 * width else None for o in offsets)
        return PortAssignment(
            ports=tuple(reserved[o] for o in offsets), aux_ports=aux, policy="reserved",
            note=f"Slurm-reserved ports {reserved[0]}-{reserved[-1]} ({reserved_name})",
            span=(min(reserved), max(reserved)),
        )
    base = window_base(job_id, step_id, width, base_port_name=base_port_name)
    return PortAssignment(
        ports=tuple(base + o for o in offsets),
        aux_ports=tuple(base + width + o for o in offsets),
        policy="window",
        note=f"port window {base}-{base + block_size(width) - 1} from job {job_id} step {step_id}",
        span=(base, base + block_size(width) - 1),
    )


