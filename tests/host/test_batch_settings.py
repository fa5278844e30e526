"""The arithmetic the sbatch templates share (`tf-slurm batch-settings` / `batch-status`), tested once
with plain values; the templates themselves run in tests/slurm/test_templates.py."""

from __future__ import annotations

import pytest

from tf_for_slurm.errors import TfSlurmError, UsageError
from tf_for_slurm.host.allocation import batch_settings
from tf_for_slurm.plan.batch_settings import first_failure, strict_int

# -- the helper itself -------------------------------------------------------------------------
ENV = {"SLURM_NTASKS": "6", "SLURM_CPUS_PER_TASK": "2", "SLURM_TASKS_PER_NODE": "3,2,1", "SLURM_MEM_PER_CPU": "512"}


def test_batch_settings_values():
    assert batch_settings(ENV, num_ps="2") == {"NTASKS": 6, "CPUS_PER_TASK": 2, "NUM_WORKERS": 4,
                                               "MEM_PER_CPU": 512, "RESV_PORTS": 6}
    assert batch_settings(ENV, num_ps="0", mem_per_task_mb="1025")["MEM_PER_CPU"] == 513
    no_cpus = {k: v for k, v in ENV.items() if k != "SLURM_CPUS_PER_TASK"}
    assert batch_settings(no_cpus, num_ps="1")["CPUS_PER_TASK"] == 1


def test_spare_nodes_leave_the_allocations_last_nodes_out_of_the_step():
    """sbatch -N3 -n3 with SPARE_NODES=1: the step's 2 tasks on the first 2 nodes (-N3 -n2 would get 2 nodes)."""
    env = {**ENV, "SLURM_NTASKS": "3", "SLURM_TASKS_PER_NODE": "1(x3)"}
    assert batch_settings(env, num_ps="0", spare_nodes=1) == {"NTASKS": 2, "CPUS_PER_TASK": 2, "NUM_WORKERS": 2,
                                                              "MEM_PER_CPU": 512, "RESV_PORTS": 2}
    assert batch_settings(ENV, num_ps="1", spare_nodes=2)["NTASKS"] == 3  # 3,2,1: the first node's
    with pytest.raises(UsageError, match=r"SPARE_NODES=3 leaves no node for the step: the allocation has 3 "):
        batch_settings(ENV, num_ps="0", spare_nodes=3)


def test_a_job_given_nodes_alone_runs_a_task_on_each_node_it_got():
    """sbatch -N 3, or --nodes=2-3 started on 2 (measured on Slurm 22.05: no SLURM_NTASKS, TASKS_PER_NODE 1(xN))."""
    env = {k: v for k, v in ENV.items() if k != "SLURM_NTASKS"}
    assert batch_settings({**env, "SLURM_TASKS_PER_NODE": "1(x2)"}, num_ps="0")["NTASKS"] == 2
    assert batch_settings({**env, "SLURM_TASKS_PER_NODE": "1(x3)"}, num_ps="1")["NUM_WORKERS"] == 2


@pytest.mark.parametrize("env,kwargs,needle", [
    ({"SLURM_NTASKS": "a[$(touch x)]"}, {}, "SLURM_NTASKS='a[$(touch x)]'"),
    ({"SLURM_NTASKS": "+6"}, {}, "SLURM_NTASKS='+6'"),
    ({"SLURM_NTASKS": "6_0"}, {}, "SLURM_NTASKS='6_0'"),
    ({"SLURM_NTASKS": "٦"}, {}, "SLURM_NTASKS='٦'"),
    ({"SLURM_NTASKS": "0"}, {}, "SLURM_NTASKS='0': expected an integer in 1-"),
    ({"SLURM_NTASKS": "", "SLURM_TASKS_PER_NODE": ""}, {}, "SLURM_NTASKS is not set: expected sbatch --ntasks"),
    ({"SLURM_CPUS_PER_TASK": "`id`"}, {}, "SLURM_CPUS_PER_TASK='`id`'"),
    ({"SLURM_TASKS_PER_NODE": "PATH[$(id)]"}, {}, "SLURM_TASKS_PER_NODE='PATH[$(id)]'"),
    ({}, {"num_ps": "6"}, "NUM_PS=6 leaves no worker in 6 tasks"),
    ({}, {"num_ps": "0", "min_ps": 1}, "NUM_PS='0': expected an integer in 1-"),
    ({}, {"mem_per_task_mb": "1e3"}, "MEM_PER_TASK_MB='1e3'"),
    ({"SLURM_MEM_PER_CPU": "99999999999999999999999T"}, {}, "SLURM_MEM_PER_CPU='99999999999999999999999T'"),
])
def test_batch_settings_refuses(env, kwargs, needle):
    with pytest.raises(TfSlurmError) as info:
        batch_settings({**ENV, **env}, **{"num_ps": "1", **kwargs})
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_strict_int_bounds():
    assert strict_int(" 42 ", "X") == 42
    with pytest.raises(UsageError, match="X='9999999999999999999': expected an integer >= 0"):
        strict_int("9999999999999999999", "X")  # 19 digits: beyond any count a template needs


SRUN_143 = """0: some task output
srun: error: node3: task 2: Exited with exit code 3
srun: launch/slurm: _step_signal: Terminating StepId=222955.0
0: slurmstepd-node1: error: *** STEP 222955.0 ON node1 CANCELLED AT 2026-11-22T11:25:34 ***
srun: error: node2: task 1: Terminated
srun: error: node1: task 0: Terminated
"""


@pytest.mark.parametrize("text,status,expected", [
    (SRUN_143, 143, 3),  # as srun 22.05 wrote it (measured): the first failing task's own status
    ("srun: error: node2: tasks 1-2: Killed\nsrun: error: node1: task 0: Terminated\n", 137, 137),
    ("srun: error: node1: task 0: Exited with exit code 2\n", 2, 2),
    ("nothing srun said about its tasks\n", 1, 1),
    ("srun: error: node3: task 2: Exited with exit code 3\n", 0, 0),
])
def test_first_failure(text, status, expected):
    assert first_failure(text, status) == expected
