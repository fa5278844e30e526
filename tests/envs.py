"""Environment mappings as Slurm writes them, for tests."""

from __future__ import annotations

import os

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


def batch_env(nodelist: str, tpn: str, *, job_id: str = "4242", **extra: str) -> dict:
    """The environment of a job's batch script: the job's variables and task 0's ids, no step ones."""
    nodes = expand_nodelist(nodelist)
    ntasks = str(sum(parse_tasks_per_node(tpn)))
    env = {
        "SLURM_JOB_ID": job_id, "SLURM_JOBID": job_id, "SLURM_JOB_NODELIST": nodelist, "SLURM_NODELIST": nodelist,
        "SLURM_JOB_NUM_NODES": str(len(nodes)), "SLURM_NNODES": str(len(nodes)), "SLURM_TASKS_PER_NODE": tpn,
        "SLURM_NTASKS": ntasks, "SLURM_NPROCS": ntasks,
        "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURMD_NODENAME": nodes[0],
    }
    env.update(extra)
    return env


# (changes to step_env("node[1-3]", "2(x3)", slot=0), a needle of the one-line message; None: unset)
# Shared by tests/host/test_slurm_env.py and tests/faces/test_bad_inputs.py (the table of every bad input).
BAD_ENVS = [
    ({"SLURM_JOB_ID": None}, "SLURM_JOB_ID is not set"),
    ({"SLURM_JOB_ID": "12 34"}, "SLURM_JOB_ID='12 34': expected a job id"),
    ({"SLURM_STEP_NODELIST": "node[1-3", "SLURM_JOB_NODELIST": None},
     "SLURM_STEP_NODELIST='node[1-3': expected a Slurm hostlist"),
    ({"SLURM_STEP_NODELIST": "node[3-1]"}, "SLURM_STEP_NODELIST='node[3-1]'"),
    ({"SLURM_STEP_NODELIST": None, "SLURM_JOB_NODELIST": None}, "SLURM_JOB_NODELIST is not set"),
    ({"SLURM_STEP_TASKS_PER_NODE": "2(x)"}, "SLURM_STEP_TASKS_PER_NODE='2(x)': expected a task count list"),
    ({"SLURM_STEP_TASKS_PER_NODE": "0,2,2"}, "expected task counts and repeats of at least 1"),
    ({"SLURM_STEP_TASKS_PER_NODE": "abc"}, "SLURM_STEP_TASKS_PER_NODE='abc'"),
    ({"SLURM_STEP_TASKS_PER_NODE": "2,2"}, "expected one count per node of SLURM_STEP_NODELIST"),
    ({"SLURM_STEP_TASKS_PER_NODE": None, "SLURM_TASKS_PER_NODE": None}, "SLURM_TASKS_PER_NODE is not set"),
    ({"SLURM_STEP_NUM_TASKS": "7"}, "SLURM_STEP_NUM_TASKS='7': expected 6"),
    ({"SLURM_STEP_NUM_TASKS": "six"}, "SLURM_STEP_NUM_TASKS='six': expected an integer"),
    ({"SLURM_PROCID": "-1"}, "SLURM_PROCID='-1': expected an integer >= 0"),
    ({"SLURM_PROCID": "9"}, "SLURM_PROCID=9: expected a rank below 6"),
    ({"SLURM_LOCALID": "x"}, "SLURM_LOCALID='x'"),
    ({"SLURM_LOCALID": "2"}, "SLURM_LOCALID=2: expected a local id below 2"),
    ({"SLURM_NODEID": "5"}, "SLURM_NODEID=5: expected a node index below 3"),
    ({"SLURMD_NODENAME": "other"}, "SLURMD_NODENAME='other': expected one of the step's nodes"),
    ({"SLURMD_NODENAME": "node3"}, "SLURM_NODEID=0 names node 'node1' but SLURMD_NODENAME='node3'"),
    ({"SLURM_STEP_RESV_PORTS": "12000-11000"}, "SLURM_STEP_RESV_PORTS='12000-11000'"),
    ({"SLURM_STEP_RESV_PORTS": "abc"}, "SLURM_STEP_RESV_PORTS='abc': expected ports"),
    ({"SLURM_CPUS_PER_TASK": "0"}, "SLURM_CPUS_PER_TASK='0': expected an integer >= 1"),
    ({"SLURM_MEM_PER_CPU": "lots"}, "SLURM_MEM_PER_CPU='lots': expected memory in MB"),
]


def no_slurm_env(tmp_path) -> dict:
    """This process's environment with an scontrol that knows no job (as when Slurm has forgotten it)
    first on PATH, and the jobs root under tmp_path."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "scontrol"
    fake.write_text("#!/bin/sh\necho 'slurm_load_jobs error: Invalid job id specified' >&2\nexit 1\n")
    fake.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "TF_SLURM_JOBS_ROOT": str(tmp_path / "jobs")}
