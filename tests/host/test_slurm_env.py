"""Reading the step: hostlists, tasks-per-node, STEP-before-JOB, this task's slot."""

import pytest

from tf_for_slurm.errors import SlurmEnvError
from tf_for_slurm.host.slurm import expand_nodelist, format_tasks_per_node, parse_port_list, parse_tasks_per_node, step_from_env
from tf_for_slurm.plan.step import offline_step
from envs import BAD_ENVS, step_env


@pytest.mark.parametrize("spec,expected", [
    ("node1", ["node1"]),
    ("node[1-3]", ["node1", "node2", "node3"]),
    ("n[009-011]", ["n009", "n010", "n011"]),
    ("n[8-10]", ["n8", "n9", "n10"]),
    ("gpu-a100-[01-02],cpu[5-6]", ["gpu-a100-01", "gpu-a100-02", "cpu5", "cpu6"]),
    ("rack[1-2]n[1-2]", ["rack1n1", "rack1n2", "rack2n1", "rack2n2"]),
    ("c[001-003]-ib", ["c001-ib", "c002-ib", "c003-ib"]),
    ("b3,a1,b2", ["b3", "a1", "b2"]),  # Slurm's order, never sorted
    ("x[3,1,3]", ["x3", "x1", "x3"]),  # duplicates kept
    ("n[1,3-4,10]", ["n1", "n3", "n4", "n10"]),
])
def test_nodelist_forms(spec, expected):
    assert list(expand_nodelist(spec)) == expected


@pytest.mark.parametrize("spec,expected", [
    ("1", (1,)), ("4", (4,)), ("2(x3),1", (2, 2, 2, 1)), ("3(x2),2,1", (3, 3, 2, 1)),
    ("4,1(x2)", (4, 1, 1)), (" 2 ( x 2 ) ", (2, 2)), ("1(x4096)", (1,) * 4096),
])
def test_tasks_per_node_forms(spec, expected):
    assert parse_tasks_per_node(spec) == expected
    assert parse_tasks_per_node(format_tasks_per_node(expected)) == expected


def test_ports_list():
    assert parse_port_list("12000-12002,12010") == (12000, 12001, 12002, 12010)


def test_step_variables_win_over_job_variables():
    env = step_env("node[1-3]", "4,1(x2)", slot=4)
    env["SLURM_JOB_NODELIST"] = "node[1-8]"
    env["SLURM_TASKS_PER_NODE"] = "4(x8)"
    env["SLURM_NTASKS"] = "32"
    step = step_from_env(env)
    assert step.nodes == ("node1", "node2", "node3") and step.tasks_per_node == (4, 1, 1)
    assert step.my_slot == 4 and step.source == "slurm-step"


def test_job_variables_in_a_batch_script():
    env = {"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_TASKS_PER_NODE": "3(x2)",
           "SLURM_NTASKS": "6", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
           "SLURMD_NODENAME": "node1", "SLURM_MEM_PER_CPU": "256", "SLURM_CPUS_PER_TASK": "2"}
    step = step_from_env(env)
    assert step.source == "slurm-job" and step.step_id == "0" and step.ntasks == 6
    assert step.mem_per_cpu_mb == 256 and step.cpus_per_task == 2 and step.my_slot == 0


@pytest.mark.parametrize("nodelist,tpn", [("node[1-3]", "4,1(x2)"), ("n[1-4]", "3(x2),2,1"), ("a,b", "1,5")])
def test_every_slot_finds_itself_block_and_cyclic(nodelist, tpn):
    total = sum(parse_tasks_per_node(tpn))
    for dist in ("block", "cyclic"):
        slots = [step_from_env(step_env(nodelist, tpn, slot=s, distribution=dist)).my_slot for s in range(total)]
        assert slots == list(range(total))


def test_cyclic_slot_is_not_the_procid():
    env = step_env("node[1-2]", "2(x2)", slot=2, distribution="cyclic")  # node2, local 0
    assert env["SLURM_PROCID"] == "1"
    assert step_from_env(env).my_slot == 2


def test_unpadded_names_are_not_sorted_as_strings():
    env = step_env("n[9-11]", "1(x3)", slot=0)  # string order would put n10 first
    step = step_from_env(env)
    assert step.nodes == ("n9", "n10", "n11") and step.my_slot == 0


def test_slot_from_node_name_when_nodeid_missing():
    env = step_env("node[1-3]", "2(x3)", slot=3)
    del env["SLURM_NODEID"]
    assert step_from_env(env).my_slot == 3


def test_gpus_and_resv_ports():
    env = step_env("g[1-2]", "2(x2)", slot=1, SLURM_STEP_GPUS="2,3", SLURM_STEP_RESV_PORTS="13000-13003")
    step = step_from_env(env)
    assert step.gpus == ("2", "3") and step.resv_ports == (13000, 13001, 13002, 13003)


def test_offline_single_count_applies_to_every_node():
    assert offline_step("n[1-3]", "2").tasks_per_node == (2, 2, 2)


@pytest.mark.parametrize("changes,message", BAD_ENVS)
def test_bad_environment_is_one_clear_line(changes, message):
    env = step_env("node[1-3]", "2(x3)", slot=0)
    for k, v in changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    with pytest.raises(SlurmEnvError) as info:
        step_from_env(env)
    assert message in str(info.value)
    assert "\n" not in str(info.value)
