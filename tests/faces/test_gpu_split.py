"""One GPU split for `tf-slurm exec`, runtime.launch and the TF2 helpers, and what explain shows."""

from collections import namedtuple

import pytest

from tf_for_slurm.plan.gpus import devices_for_task, gpu_view

T = namedtuple("T", "rank role node_index gpus")


def layout(*nodes, gpus=()):
    """nodes: role lists per node -> tasks in rank order."""
    out = []
    for node_index, roles in enumerate(nodes):
        for role in roles:
            out.append(T(len(out), role, node_index, tuple(gpus)))
    return out


@pytest.mark.parametrize("nodes,step_gpus,expected", [
    # 1 ps + 4 workers on one node with 4 GPUs: the ps none, each worker one
    ((["ps", "worker", "worker", "worker", "worker"],), "0,1,2,3", ["", "0", "1", "2", "3"]),
    # fewer workers than GPUs: contiguous shares, the first ones one more
    ((["ps", "worker", "worker"],), "0,1,2,3,4", ["", "0,1,2", "3,4"]),
    # more workers than GPUs: round robin, nobody without a GPU
    ((["worker", "worker", "worker"],), "0,1", ["0", "1", "0"]),
    # non-contiguous ids are Slurm's own: used as given, never renumbered
    ((["ps", "worker", "worker"],), "2,5", ["", "2", "5"]),
    # uneven tasks per node: each node splits its own pool
    ((["ps", "worker", "worker", "chief"], ["worker"]), "0,1", ["", "0", "1", "0", "0,1"]),
    # evaluators get a share too
    ((["chief", "evaluator"],), "3,4", ["3", "4"]),
])
def test_split_from_slurm_step_gpus(nodes, step_gpus, expected):
    tasks = layout(*nodes)
    got = [devices_for_task(tasks, t.rank, None, step_gpus) for t in tasks]
    assert got == expected


def test_cuda_visible_devices_wins_and_a_per_task_binding_is_kept():
    tasks = layout(["ps", "worker", "worker"])
    assert devices_for_task(tasks, 1, "4,5,6", None) == "4,5"
    assert devices_for_task(tasks, 2, "1", "0,1,2,3") == "1"  # Slurm bound this task already (--gpus-per-task)


def test_cpu_nodes_are_left_alone_and_ps_sees_none():
    tasks = layout(["ps", "worker"])
    assert devices_for_task(tasks, 1, None, None) is None
    assert devices_for_task(tasks, 0, None, None) == ""


def test_explain_view_offline_and_in_step():
    tasks = layout(["ps", "worker", "worker"], ["worker"])
    assert gpu_view(tasks, None, node_pool=("2", "5")) == {0: "-", 1: "2", 2: "5", 3: "2,5"}
    assert gpu_view(tasks, None) == {0: "", 1: "", 2: "", 3: ""}
    # inside the step: this node from its environment, other nodes unknown
    assert gpu_view(tasks, 1, None, "0,1") == {0: "-", 1: "0", 2: "1", 3: "?"}
    assert gpu_view(tasks, 1, None, None) == {0: "", 1: "", 2: "", 3: ""}


def test_explain_shows_each_tasks_gpus():
    import json
    import os
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "tf_for_slurm", "explain", "--json", "--nodelist", "g[1-2]",
                        "--tasks-per-node", "3,1", "--gpus", "2,5"], capture_output=True, text=True, timeout=60,
                       env={k: v for k, v in os.environ.items() if not k.startswith("SLURM")})
    assert r.returncode == 0, r.stderr
    assert [row["gpus"] for row in json.loads(r.stdout)["tasks"]] == ["-", "2", "5", "2,5"]
    r = subprocess.run([sys.executable, "-m", "tf_for_slurm", "explain", "--nodelist", "g[1-2]", "--gpus", "0,,1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--gpus='0,,1'" in r.stderr
