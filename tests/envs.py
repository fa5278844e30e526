"""Environment mappings as Slurm writes them, for tests."""

from __future__ import annotations

from tf_for_slurm.host.slurm import expand_nodelist, parse_tasks_per_node


def step_env(nodelist: str, tpn: str, *, slot: int = 0, job_id: str = "4242", step_id: str = "0",
             distribution: str = "block", **extra: str) -> dict:
    """The environment of the task in `slot` (node by node) of an srun step."""
    nodes = expand_nodelist(nodelist)
    counts = parse_tasks_per_node(tpn)
    node, local = 0, slot
    while local >= counts[node]:
        local -= counts[node]
        node += 1
    if distribution == "block":
        procid = slot
    else:  # cyclic: ranks dealt round-robin over nodes that still have room
        order = []
        left = list(counts)
        taken = [0] * len(counts)
        while any(left):
            for n in range(len(counts)):
                if left[n]:
                    order.append((n, taken[n]))
                    taken[n] += 1
                    left[n] -= 1
        procid = order.index((node, local))
    env = {
        "SLURM_JOB_ID": job_id, "SLURM_STEP_ID": step_id, "SLURM_JOB_NODELIST": nodelist,
        "SLURM_STEP_NODELIST": nodelist, "SLURM_TASKS_PER_NODE": tpn, "SLURM_STEP_TASKS_PER_NODE": tpn,
        "SLURM_NTASKS": str(sum(counts)), "SLURM_STEP_NUM_TASKS": str(sum(counts)),
        "SLURM_PROCID": str(procid), "SLURM_LOCALID": str(local), "SLURM_NODEID": str(node),
        "SLURMD_NODENAME": nodes[node],
    }
    env.update(extra)
    return env
