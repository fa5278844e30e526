"""The same SlurmStep from mpi4py, for `mpirun` / `srun --mpi=pmix` launches.

Rank, size and host names come from MPI (allgather), so the plan is identical to the one a Slurm
step gives.  The rendezvous port option lets each task take a free port from the OS and share it.
"""

from __future__ import annotations

import os
import socket
from typing import Mapping, Optional, Sequence

from tf_for_slurm.errors import SlurmEnvError
from tf_for_slurm.host import settings, slurm
from tf_for_slurm.host.environment import ME_HINT, PLAN_NAMES, roles_for
from tf_for_slurm.host.network import interface_address
from tf_for_slurm.plan.addresses import parse_policy
from tf_for_slurm.plan.cluster import build_plan
from tf_for_slurm.plan.step import SlurmStep


def layout_from_hosts(hosts: Sequence[str]) -> tuple:
    """Per-rank host names -> (nodes in first-seen order, tasks per node, per-rank (nodeid, localid))."""
    nodes: list = []
    counts: list = []
    where: list = []
    position: dict = {}
    for host in hosts:
        if host not in position:
            position[host] = len(nodes)
            nodes.append(host)
            counts.append(0)
        n = position[host]
        where.append((n, counts[n]))
        counts[n] += 1
    return tuple(nodes), tuple(counts), tuple(where)


def step_from_mpi(comm=None, env: Optional[Mapping[str, str]] = None) -> SlurmStep:
    """Build the SlurmStep of this MPI job (collective: every rank must call it)."""
    try:
        from mpi4py import MPI  # noqa: PLC0415 (lazy: `import tf_for_slurm` must not start MPI)
    except ImportError:
        raise SlurmEnvError("mpi4py is not installed: expected `pip install tf_for_slurm[mpi]`") from None
    comm = comm or MPI.COMM_WORLD
    env = os.environ if env is None else env
    host = env.get(slurm.NODENAME) or socket.gethostname()
    hosts = comm.allgather(host)
    nodes, counts, where = layout_from_hosts(hosts)
    rank = comm.Get_rank()
    job_id = env.get(slurm.JOB_ID) or comm.bcast(f"mpi{os.getpid()}" if rank == 0 else None, root=0)
    nodeid, localid = where[rank]
    return SlurmStep(job_id=str(job_id), step_id=env.get(slurm.STEP_ID) or "0", nodes=nodes,
                     tasks_per_node=counts, procid=rank, localid=localid, nodeid=nodeid, node_name=host,
                     source="mpi")


def rendezvous_ports(step: SlurmStep, comm=None) -> tuple:
    """Each task binds port 0, learns the port, releases it, and all tasks exchange them (slot order).

    There is a short window between release and TensorFlow's bind; the port is outside nothing's
    control, so the runtime's bind check still reports a collision clearly.
    """
    from mpi4py import MPI  # noqa: PLC0415 (lazy: `import tf_for_slurm` must not start MPI)

    comm = comm or MPI.COMM_WORLD
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        port = sock.getsockname()[1]
    gathered = comm.allgather((step.my_slot, port))
    ports = [0] * step.ntasks
    for slot, p in gathered:
        ports[slot] = p
    return tuple(ports)


def plan_from_mpi(comm=None, *, tasks=None, ps: Optional[int] = None, placement: str = "first",
                  chief: bool = False, address: Optional[str] = None, rendezvous: bool = False):
    """ClusterPlan of an MPI job; `rendezvous=True` uses OS-chosen ports exchanged over MPI."""
    step = step_from_mpi(comm)
    roles = roles_for(step, tasks, ps, placement, chief)
    ports = rendezvous_ports(step, comm) if rendezvous else None
    name = "address" if address is not None else settings.ADDRESS
    policy = parse_policy(address if address is not None else settings.text(os.environ, settings.ADDRESS), name)
    node_addresses = None
    if policy.kind == "iface":
        node_addresses = dict(zip(step.nodes, _gather_per_node(step, interface_address(policy.arg), comm)))
    return build_plan(step, roles, address=policy, ports=ports, node_addresses=node_addresses,
                      names=PLAN_NAMES, me_hint=ME_HINT)


def _gather_per_node(step: SlurmStep, value: str, comm) -> list:
    """One value per node, in node order (allgather, keep each node's first answer)."""
    pairs = comm.allgather((step.nodeid, value))
    per_node = [None] * len(step.nodes)
    for node, v in pairs:
        if per_node[node] is None:
            per_node[node] = v
    return per_node
