"""The supervisor every task runs under `tf-slurm exec`: the step ends when training ends, or fails fast.

Why: with unmodified TF_CONFIG scripts some tasks never end (a ps or a ParameterServerStrategy
worker `join()`s forever) and, under `srun` without `--kill-on-bad-exit`, one task's failure
leaves the others holding the allocation.  No TensorFlow here: each task's command runs as a child
(child_process.py: own process group, killed with us, its exit seen by waiting on it), and the
supervisors talk over TCP.

Topology (events, no polling): the chief's supervisor is the hub (hub.py).  It listens on the
chief's auxiliary port; every other task's supervisor, a spoke (spoke.py), keeps ONE connection to
it, says `hello`, sends a heartbeat every few seconds and, when its command exits by itself,
`exit <status>`.  The hub feeds what it sees into a `StepWatch` (plan/step_watch.py) and sends
`end <status>` to the tasks it decides to end.  A killed supervisor closes its connection at once
(the kernel does it); a dead node is a missed heartbeat (and TCP keepalive on both sides); a dead
hub is an error on the spokes' socket.  The line protocol and the timing are in wire.py.

This module is the one name for all of it (`tf_for_slurm.supervisor`, the old path, is this module).
"""

from __future__ import annotations

from tf_for_slurm.plan.step_watch import LOST_STATUS
from tf_for_slurm.supervise.hub import Hub
from tf_for_slurm.supervise.spoke import Spoke
from tf_for_slurm.supervise.wire import MAX_HEARTBEATS_PER_SECOND, Timing, heartbeat_interval

__all__ = ["LOST_STATUS", "MAX_HEARTBEATS_PER_SECOND", "Hub", "Spoke", "Timing", "heartbeat_interval"]
