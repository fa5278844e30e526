"""TensorFlow's SlurmClusterResolver answered from the plan (plan/slurm_resolver.py): every rule as a
table of plain data.  Fix lines are checked against the shape failure_words reads (FIX_LINE)."""

import pytest

from tf_for_slurm.errors import PlanError
from tf_for_slurm.plan.failure_words import FIX_LINE
from tf_for_slurm.plan.slurm_resolver import (
    ARGUMENTS,
    CLASS,
    DEFAULTS,
    Answer,
    cluster_from_tf_config,
    gpu_share,
    jobs_misfit,
    node_pool,
    node_table,
    rank_in,
    renamed,
    role_counts,
    roles_fix,
    roles_from_jobs,
    tasks_per_node_misfit,
    wanted_jobs,
)


def _is_fix_line(text):
    """The line as the task writes it (`tf-slurm: ...`) is one failure_words recognises, whole."""
    m = FIX_LINE.match(f"tf-slurm: {text}")
    return m is not None and m.group("line") == text


# -- constants -------------------------------------------------------------------------------------

def test_arguments_are_tensorflows_constructor_in_order_with_its_defaults():
    assert ARGUMENTS == ("jobs", "port_base", "gpus_per_node", "gpus_per_task", "tasks_per_node", "auto_set_gpu",
                         "rpc_layer")
    assert tuple(DEFAULTS) == ARGUMENTS
    assert DEFAULTS == {"jobs": None, "port_base": 8888, "gpus_per_node": None, "gpus_per_task": None,
                        "tasks_per_node": None, "auto_set_gpu": True, "rpc_layer": "grpc"}
    assert CLASS == "SlurmClusterResolver"


def test_answer_is_a_frozen_value():
    a = Answer({"worker": ["n1:1"]}, "worker", 0, 0, 1)
    assert a == Answer({"worker": ["n1:1"]}, "worker", 0, 0, 1)
    with pytest.raises(AttributeError):
        a.task_id = 1  # type: ignore[misc]


# -- role_counts / wanted_jobs ---------------------------------------------------------------------

@pytest.mark.parametrize("cluster,expected", [
    ({"worker": ["a:1", "b:1"]}, {"worker": 2}),
    ({"ps": ["a:1"], "worker": ["a:2", "b:1", "b:2"]}, {"ps": 1, "worker": 3}),
    ({"ps": [], "worker": ["a:1"]}, {"worker": 1}),  # an empty job is no job
    ({}, {}),
])
def test_role_counts(cluster, expected):
    assert role_counts(cluster) == expected


@pytest.mark.parametrize("jobs,ntasks,expected", [
    (None, 4, {"worker": 4}),  # TensorFlow's default: every task a worker
    (None, 1, {"worker": 1}),
    ({"ps": 1, "worker": 3}, 4, {"ps": 1, "worker": 3}),
    ({"ps": 0, "worker": 4}, 4, {"worker": 4}),  # zero counts dropped
    ({"worker": 5}, 4, {"worker": 5}),  # the count is the script's, the total is checked elsewhere
    ({"chief": 1, "evaluator": 1, "worker": 2}, 4, {"chief": 1, "evaluator": 1, "worker": 2}),
])
def test_wanted_jobs(jobs, ntasks, expected):
    assert wanted_jobs(jobs, ntasks) == expected


@pytest.mark.parametrize("jobs", [
    ["worker", "worker"],
    "worker",
    3,
    {"ps": -1, "worker": 3},
    {"ps": 1.0, "worker": 3},
    {"ps": True, "worker": 3},  # a bool is not a count
    {"worker": "4"},
    {1: 4},
    {"": 4},
    {"worker": None},
])
def test_wanted_jobs_rejects_what_tensorflow_could_not_use(jobs):
    with pytest.raises(PlanError) as info:
        wanted_jobs(jobs, 4)
    assert "SlurmClusterResolver(jobs=...)" in str(info.value)
    assert repr(jobs) in str(info.value)


# -- jobs_misfit / roles_fix -----------------------------------------------------------------------

@pytest.mark.parametrize("jobs,have", [
    (None, {"worker": 4}),  # jobs=None: any plan without ps trains
    (None, {"chief": 1, "worker": 3}),
    (None, {"evaluator": 1, "worker": 3}),
    (None, {"ps": 0, "worker": 2}),  # a zero count is no ps
    ({"worker": 4}, {"worker": 4}),
    ({"ps": 1, "worker": 3}, {"ps": 1, "worker": 3}),
    ({"ps": 1, "worker": 3}, {"worker": 3, "ps": 1}),  # order of either dict does not matter
    ({"ps": 0, "worker": 4}, {"worker": 4}),
    ({"worker": 4}, {"worker": 4, "evaluator": 0}),
    ({"chief": 1, "worker": 3}, {"chief": 1, "worker": 3}),
])
def test_jobs_that_fit(jobs, have):
    assert jobs_misfit(jobs, have) is None


@pytest.mark.parametrize("jobs,have,words", [
    (None, {"ps": 1, "worker": 3}, ["without jobs= makes every task a worker", "1 ps, 3 worker",
                                    "fix: run with --ps 0"]),
    (None, {"ps": 2, "chief": 1, "worker": 1}, ["fix: run with --ps 0"]),
    ({"ps": 1, "worker": 3}, {"worker": 4}, ["asks for 1 ps, 3 worker", "has 4 worker", "fix: run with --ps 1"]),
    ({"ps": 2, "worker": 2}, {"ps": 1, "worker": 3}, ["fix: run with --ps 2"]),
    ({"worker": 4}, {"ps": 1, "worker": 3}, ["fix: run with --ps 0"]),
    ({"chief": 1, "worker": 3}, {"worker": 4}, ["fix: run with --chief"]),
    ({"worker": 4}, {"chief": 1, "worker": 3}, ["fix: run with no --chief"]),
    ({"ps": 1, "chief": 1, "worker": 2}, {"worker": 4}, ["fix: run with --ps 1 and --chief"]),
    ({"worker": 5}, {"worker": 4}, ["asks for 5 worker", "fix: run 5 tasks (srun -n 5, sbatch --ntasks=5)",
                                    "add up to this step's 4"]),
    ({"ps": 1, "worker": 1}, {"worker": 4}, ["fix: run 2 tasks"]),
    ({"evaluator": 1, "worker": 3}, {"worker": 4}, ["fix: run with --tasks evaluator,worker,worker,worker"]),
    ({"chief": 2, "worker": 2}, {"worker": 4}, ["fix: run with --tasks chief,chief,worker,worker"]),  # 2 chiefs
    ({"ps": 4}, {"worker": 4}, ["fix: run with --tasks ps,ps,ps,ps"]),  # no worker
    ({"ps": 1, "worker": 3}, {"ps": 1, "evaluator": 1, "worker": 2},
     ["fix: run with --tasks ps,worker,worker,worker"]),  # ps and chief agree, the rest does not
    ({"trainer": 13}, {"worker": 13}, ["--tasks " + ",".join(["trainer"] * 11) + ",... (one role per task)"]),
])
def test_jobs_that_misfit_say_the_option(jobs, have, words):
    line = jobs_misfit(jobs, have)
    assert line is not None
    for w in words:
        assert w in line, (w, line)
    assert line.startswith("SlurmClusterResolver(")
    assert _is_fix_line(line), line


@pytest.mark.parametrize("jobs,have,option", [
    (None, {"ps": 1, "worker": 3}, "--ps 0 (TF_SLURM_PS=0)"),
    ({"ps": 1, "worker": 3}, {"worker": 4}, "--ps 1 (TF_SLURM_PS=1)"),
    ({"chief": 1, "worker": 3}, {"worker": 4}, "--chief (TF_SLURM_CHIEF=1)"),
])
def test_jobs_misfit_names_the_settings_when_given(jobs, have, option):
    line = jobs_misfit(jobs, have, "TF_SLURM_PS", "TF_SLURM_CHIEF")
    assert line is not None and option in line and _is_fix_line(line)


def test_jobs_misfit_rejects_bad_jobs_naming_the_argument():
    with pytest.raises(PlanError, match=r"SlurmClusterResolver\(jobs=\.\.\.\)"):
        jobs_misfit(["worker"], {"worker": 1})


@pytest.mark.parametrize("jobs", [{}, {"worker": 0}])
def test_jobs_asking_for_no_task_never_say_run_0_tasks(jobs):
    try:
        line = jobs_misfit(jobs, {"worker": 4})
    except PlanError as exc:
        line = str(exc)
    assert line is not None and "run 0 tasks" not in line and "-n 0" not in line


@pytest.mark.parametrize("wanted,have,fix", [
    ({"worker": 4}, {"ps": 1, "worker": 3}, "run with --ps 0"),
    ({"ps": 1, "worker": 3}, {"worker": 4}, "run with --ps 1"),
    ({"chief": 1, "worker": 3}, {"worker": 4}, "run with --chief"),
    ({"worker": 4}, {"chief": 1, "worker": 3}, "run with no --chief"),
    ({"ps": 2, "chief": 1, "worker": 1}, {"ps": 1, "worker": 3}, "run with --ps 2 and --chief"),
    ({"worker": 3}, {"worker": 4}, "run 3 tasks (srun -n 3, sbatch --ntasks=3), or let the script's jobs= add up "
                                   "to this step's 4"),
    ({"worker": 2, "evaluator": 1}, {"worker": 3}, "run with --tasks evaluator,worker,worker"),
    ({"b": 1, "a": 2}, {"worker": 3}, "run with --tasks a,a,b"),  # sorted job names, blocks
    ({"x": 12}, {"worker": 12}, "run with --tasks " + ",".join(["x"] * 12)),  # 12 roles: listed whole
])
def test_roles_fix(wanted, have, fix):
    assert roles_fix(wanted, have) == fix


def test_roles_fix_names_the_settings():
    assert roles_fix({"ps": 1, "chief": 1, "worker": 2}, {"worker": 4}, "TF_SLURM_PS", "TF_SLURM_CHIEF") == (
        "run with --ps 1 (TF_SLURM_PS=1) and --chief (TF_SLURM_CHIEF=1)")


# -- tasks_per_node_misfit -------------------------------------------------------------------------

NODES2 = ("n1", "n2")


@pytest.mark.parametrize("tasks_per_node,nodes,counts", [
    (None, NODES2, (2, 2)),
    (None, NODES2, (3, 1)),
    (2, NODES2, (2, 2)),
    (1, ("n1",), (1,)),
    ({"n1": 2, "n2": 2}, NODES2, (2, 2)),
    ({"n2": 1, "n1": 3}, NODES2, (3, 1)),
    ({"n1": 2, "n2": 2, "n3": 0}, NODES2, (2, 2)),  # a node with no task is no node
    ({"a.ib": 3, "b.ib": 1}, NODES2, (3, 1)),  # other names (a renaming subclass): the same counts
    ({"a.ib": 1, "b.ib": 3}, NODES2, (3, 1)),
])
def test_tasks_per_node_that_fit(tasks_per_node, nodes, counts):
    assert tasks_per_node_misfit(tasks_per_node, nodes, counts) is None


@pytest.mark.parametrize("tasks_per_node,nodes,counts,words", [
    (2, NODES2, (1, 1), ["SlurmClusterResolver(tasks_per_node=2) but this step runs 1,1 tasks per node (2 nodes)",
                         "fix: run 2 tasks on each node (sbatch --ntasks-per-node=2)"]),
    (2, NODES2, (3, 1), ["runs 3,1 tasks per node"]),
    (1, tuple(f"n{i}" for i in range(10)), (2,) * 9 + (1,), ["runs 1 to 2 tasks per node (10 nodes)"]),
    ({"n1": 2, "n2": 2}, NODES2, (3, 1), ["tasks_per_node={'n1': 2, 'n2': 2}", "runs 3,1 tasks per node on n1,n2",
                                          "fix: give the step that layout"]),
    ({"n1": 1, "n2": 3}, NODES2, (3, 1), ["runs 3,1"]),  # same counts, on the other nodes
    ({"a": 2, "b": 1}, NODES2, (3, 1), ["fix: "]),
    ({"n1": 1}, tuple(f"n{i}" for i in range(10)), (1,) * 10, ["on n0,n1,n2,n3,n4,n5,n6,n7,...;"]),
])
def test_tasks_per_node_that_misfit(tasks_per_node, nodes, counts, words):
    line = tasks_per_node_misfit(tasks_per_node, nodes, counts)
    assert line is not None
    for w in words:
        assert w in line, (w, line)
    assert _is_fix_line(line), line


@pytest.mark.parametrize("tasks_per_node", [0, -1, True, 2.0, "2", [2, 2], {"n1": -1}, {"n1": "2"}, {"n1": 1.5}])
def test_tasks_per_node_rejects_bad_values(tasks_per_node):
    with pytest.raises(PlanError) as info:
        tasks_per_node_misfit(tasks_per_node, NODES2, (2, 2))
    assert "SlurmClusterResolver(tasks_per_node=...)" in str(info.value)


# -- roles_from_jobs -------------------------------------------------------------------------------

@pytest.mark.parametrize("jobs,ntasks,roles", [
    (None, 3, ("worker", "worker", "worker")),
    ({"worker": 2, "ps": 1, "chief": 1}, 4, ("chief", "ps", "worker", "worker")),  # sorted names, blocks
    ({"ps": 1, "worker": 3}, 4, ("ps", "worker", "worker", "worker")),
    ({"worker": 2, "evaluator": 1}, 3, ("evaluator", "worker", "worker")),
    ({"worker": 2, "ps": 0}, 2, ("worker", "worker")),
    ({"b": 2, "a": 1, "c": 1}, 4, ("a", "b", "b", "c")),
])
def test_roles_from_jobs(jobs, ntasks, roles):
    assert roles_from_jobs(jobs, ntasks) == roles


def test_roles_from_jobs_with_another_total_says_the_fix():
    with pytest.raises(PlanError) as info:
        roles_from_jobs({"worker": 5}, 4)
    text = str(info.value)
    assert "asks for 5 tasks but this step has 4" in text and "fix: run 5 tasks" in text
    assert _is_fix_line(text), text


def test_roles_from_jobs_rejects_bad_jobs():
    with pytest.raises(PlanError, match=r"SlurmClusterResolver\(jobs=\.\.\.\)"):
        roles_from_jobs({"worker": -4}, 4)


# -- cluster_from_tf_config ------------------------------------------------------------------------

@pytest.mark.parametrize("config,expected", [
    ({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}},
     ({"worker": ["a:1", "b:1"]}, "worker", 1)),
    ({"cluster": {"ps": ["a:1"], "worker": ("a:2", "b:1")}, "task": {"type": "ps", "index": 0}},
     ({"ps": ["a:1"], "worker": ["a:2", "b:1"]}, "ps", 0)),
    ({"cluster": {"worker": {"1": "b:1", "0": "a:1"}}, "task": {"type": "worker", "index": 0}},
     ({"worker": ["a:1", "b:1"]}, "worker", 0)),
    ({"cluster": {"worker": {"10": "k:1", "2": "c:1", "0": "a:1"}}, "task": {"type": "worker", "index": 2}},
     ({"worker": ["a:1", "c:1", "k:1"]}, "worker", 2)),  # sorted as numbers, not as text
    ({"cluster": {"chief": ["a:1"], "worker": {"0": "b:1"}}, "task": {"type": "chief", "index": 0}},
     ({"chief": ["a:1"], "worker": ["b:1"]}, "chief", 0)),
    ({"task": {"type": "worker", "index": 0}}, ({}, "worker", 0)),  # no cluster: an empty one
])
def test_cluster_from_tf_config(config, expected):
    assert cluster_from_tf_config(config) == expected


@pytest.mark.parametrize("task", [None, {}, {"type": "worker"}, {"index": 0}, {"type": "", "index": 0},
                                  {"type": "worker", "index": "0"}, {"type": "worker", "index": 0.0}])
def test_cluster_from_tf_config_needs_a_task(task):
    config = {"cluster": {"worker": ["a:1"]}}
    if task is not None:
        config["task"] = task
    with pytest.raises(PlanError, match="TF_CONFIG"):
        cluster_from_tf_config(config)


# -- rank_in ---------------------------------------------------------------------------------------

CLUSTER = {"worker": ["w0:1", "w1:1"], "ps": ["p0:1"], "chief": ["c0:1"]}


@pytest.mark.parametrize("task_type,task_id,rank", [
    ("chief", 0, 0),  # job names sorted: chief, ps, worker
    ("ps", 0, 1),
    ("worker", 0, 2),
    ("worker", 1, 3),
])
def test_rank_in(task_type, task_id, rank):
    assert rank_in(CLUSTER, task_type, task_id) == rank


def test_rank_in_single_job():
    assert [rank_in({"worker": ["a:1"] * 4}, "worker", i) for i in range(4)] == [0, 1, 2, 3]


def test_rank_in_unknown_task_type():
    with pytest.raises(PlanError, match="evaluator:0"):
        rank_in(CLUSTER, "evaluator", 0)


# -- renamed ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("cluster,nodes,new_names,expected", [
    ({"worker": ["n1:2000", "n1:2001", "n2:2000"]}, ("n1", "n2"), ["n1.ib", "n2.ib"],
     {"worker": ["n1.ib:2000", "n1.ib:2001", "n2.ib:2000"]}),
    ({"ps": ["n2:5"], "worker": ["n1:6"]}, ("n1", "n2"), ("a", "b"), {"ps": ["b:5"], "worker": ["a:6"]}),
    ({"worker": ["10.0.0.1:2000", "n2:2000"]}, ("n1", "n2"), ["x", "y"],
     {"worker": ["10.0.0.1:2000", "y:2000"]}),  # an IP the plan chose is kept
    ({"worker": ["127.0.0.1:2000", "localhost:2001"]}, ("n1",), ["x"],
     {"worker": ["127.0.0.1:2000", "localhost:2001"]}),  # loopback kept
    ({"worker": ["[::1]:1234", "n1:1"]}, ("n1",), ["x"], {"worker": ["[::1]:1234", "x:1"]}),  # IPv6 kept
    ({"worker": ["n1.ib:2000"]}, ("n1",), ["x"], {"worker": ["n1.ib:2000"]}),  # not a node name: kept
    ({"worker": ["n1"]}, ("n1",), ["x"], {"worker": ["n1"]}),  # no port: kept
    ({"worker": ["n1:1", "n2:1"]}, ("n1", "n2"), ["n2", "n1"], {"worker": ["n2:1", "n1:1"]}),  # a swap, not chained
    ({}, ("n1",), ["x"], {}),
])
def test_renamed(cluster, nodes, new_names, expected):
    assert renamed(cluster, nodes, new_names) == expected


@pytest.mark.parametrize("nodes,new_names", [
    (("n1", "n2"), ["x"]),  # too few
    (("n1",), ["x", "y"]),  # too many
    (("n1",), []),
    (("n1", "n2"), ["x", ""]),  # an empty name
    (("n1", "n2"), ["x", None]),
    (("n1",), [1]),
])
def test_renamed_lists_that_do_not_pair_up(nodes, new_names):
    assert renamed({"worker": ["n1:1"]}, nodes, new_names) is None


def test_renamed_leaves_its_input_alone():
    cluster = {"worker": ["n1:1"]}
    renamed(cluster, ("n1",), ["x"])
    assert cluster == {"worker": ["n1:1"]}


# -- node_table / gpu_share / node_pool ------------------------------------------------------------

@pytest.mark.parametrize("nodes,counts,expected", [
    (("n1", "n2"), (2, 1), {"n1": 2, "n2": 1}),
    (("b", "a"), (1, 3), {"b": 1, "a": 3}),
    ((), (), {}),
])
def test_node_table(nodes, counts, expected):
    table = node_table(nodes, counts)
    assert table == expected and list(table) == list(nodes)  # the step's node order


@pytest.mark.parametrize("share,gpus_per_task,expected", [
    (("0", "1"), None, ("0", "1")),
    (["0", "1"], None, ("0", "1")),
    (("0", "1"), 1, ("0",)),  # cut to what the script asks
    (("0", "1"), 2, ("0", "1")),
    (("0", "1"), 5, ("0", "1")),  # never more than the plan gave
    (("4", "5", "6"), 2, ("4", "5")),
    (("0", "1"), 0, ()),
    ((), 1, ()),
    ((), None, ()),
])
def test_gpu_share(share, gpus_per_task, expected):
    assert gpu_share(share, gpus_per_task) == expected


@pytest.mark.parametrize("gpus_per_task", [-1, True, 1.0, "1"])
def test_gpu_share_rejects_bad_counts(gpus_per_task):
    with pytest.raises(PlanError, match=r"SlurmClusterResolver\(gpus_per_task=\.\.\.\)"):
        gpu_share(("0",), gpus_per_task)


@pytest.mark.parametrize("gpus_per_node,expected", [
    (None, ()),
    (0, ()),
    (1, ("0",)),
    (2, ("0", "1")),
    (4, ("0", "1", "2", "3")),
])
def test_node_pool(gpus_per_node, expected):
    assert node_pool(gpus_per_node) == expected


@pytest.mark.parametrize("gpus_per_node", [-1, False, 2.0, "2"])
def test_node_pool_rejects_bad_counts(gpus_per_node):
    with pytest.raises(PlanError, match=r"SlurmClusterResolver\(gpus_per_node=\.\.\.\)"):
        node_pool(gpus_per_node)
