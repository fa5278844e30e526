"""SlurmClusterResolver's answers (runtime/slurm_resolver.py) from recorded Slurm variables: the
drop-in planned by our planner, the step's TF_CONFIG under `tf-slurm exec`, host renaming, GPU
shares without GPUs, and the TensorFlow class's shape check.  No TensorFlow: nothing here imports
it, and a subprocess checks that the drop-in does not either."""

import json
import logging
import os
import subprocess
import sys
import textwrap
import types

import pytest

from tf_for_slurm.errors import PlanError, SlurmEnvError
from tf_for_slurm.host import slurm
from tf_for_slurm.plan import slurm_resolver as rules
from tf_for_slurm.plan.failure_words import FIX_LINE
from tf_for_slurm.runtime import slurm_resolver as rt
from tf_for_slurm.runtime.slurm_resolver import MisfitError, SlurmClusterResolver, answer, patch_tf_class, unknown_shape

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARGS = dict(rules.DEFAULTS)
TWO_BY_TWO = [(0, 0), (0, 1), (1, 0), (1, 1)]  # (node index, local id) of a 2 nodes x 2 tasks step, slot order


def step_env(node_index=0, local_id=0, tasks_per_node=(2, 2), rank=None, **extra):
    """Task (node_index, local_id)'s variables of job 77's step on nodes n1, n2, ...; rank: its
    SLURM_PROCID (default: block layout, the slot)."""
    nodes = [f"n{i + 1}" for i in range(len(tasks_per_node))]
    slot = sum(tasks_per_node[:node_index]) + local_id
    env = slurm.fake_step_env(job_id="77", nodelist=",".join(nodes), tasks_per_node=list(tasks_per_node),
                              rank=slot if rank is None else rank, local_id=local_id, node_index=node_index,
                              node_name=nodes[node_index])
    env.update(extra)
    return env


def exec_env(cluster, task_type, task_id, node_index=0, local_id=0, tasks_per_node=(2, 2), **extra):
    """step_env under `tf-slurm exec`: the supervisor's tag and the step's TF_CONFIG."""
    env = step_env(node_index, local_id, tasks_per_node, **extra)
    env["TF_SLURM_SUPERVISED"] = slurm.step_tag(env)
    env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": task_type, "index": task_id}})
    return env


def args(**given):
    return {**ARGS, **given}


def _is_fix_line(text):
    m = FIX_LINE.match(f"tf-slurm: {text}")
    return m is not None and m.group("line") == text


# -- drop-in mode (not under exec): our planner -----------------------------------------------------

def test_every_task_a_worker_by_default_with_distinct_ports_per_node():
    answers = [answer(step_env(node, local), ARGS) for node, local in TWO_BY_TWO]
    cluster = answers[0][0].cluster
    assert list(cluster) == ["worker"] and len(cluster["worker"]) == 4
    assert [a.cluster for a, _, _ in answers] == [cluster] * 4  # every task sees the same cluster
    hosts = [addr.rpartition(":")[0] for addr in cluster["worker"]]
    assert hosts == ["n1", "n1", "n2", "n2"]
    for node in ("n1", "n2"):
        ports = [addr.rpartition(":")[2] for addr in cluster["worker"] if addr.startswith(node + ":")]
        assert len(set(ports)) == 2 and all(p.isdigit() for p in ports)
    for slot, (found, table, visible) in enumerate(answers):
        assert (found.task_type, found.task_id, found.rank) == ("worker", slot, slot)
        assert table == {"n1": 2, "n2": 2}
        assert found.gpus == 0 and visible is None  # a CPU node: left alone


def test_a_cyclic_layout_answers_by_slot_never_by_procid():
    cyclic = {(0, 0): 0, (1, 0): 1, (0, 1): 2, (1, 1): 3}  # srun -m cyclic: procid round-robin over nodes
    for slot, (node, local) in enumerate(TWO_BY_TWO):
        found, _, _ = answer(step_env(node, local, rank=cyclic[node, local]), ARGS)
        block, _, _ = answer(step_env(node, local), ARGS)
        assert (found.task_type, found.task_id, found.rank) == ("worker", slot, slot)
        assert found == block


def test_jobs_ps_and_workers_make_slot_0_the_ps():
    jobs = {"ps": 1, "worker": 3}
    answers = [answer(step_env(node, local), args(jobs=jobs)) for node, local in TWO_BY_TWO]
    assert [(a.task_type, a.task_id, a.rank) for a, _, _ in answers] == [
        ("ps", 0, 0), ("worker", 0, 1), ("worker", 1, 2), ("worker", 2, 3)]
    cluster = answers[0][0].cluster
    assert rules.role_counts(cluster) == jobs
    assert cluster["ps"][0].startswith("n1:") and answers[0][2] == ""  # the ps sees no GPU


def test_jobs_in_tensorflows_order_chief_ps_workers():
    answers = [answer(step_env(node, local), args(jobs={"worker": 2, "ps": 1, "chief": 1}))
               for node, local in TWO_BY_TWO]
    assert [(a.task_type, a.task_id, a.rank) for a, _, _ in answers] == [
        ("chief", 0, 0), ("ps", 0, 1), ("worker", 0, 2), ("worker", 1, 3)]


def test_tasks_per_node_against_the_step_raises_the_fix_line():
    env = step_env(1, 0, tasks_per_node=(1, 1))
    with pytest.raises(MisfitError) as info:
        answer(env, args(tasks_per_node=2))
    text = str(info.value)
    assert text == rules.tasks_per_node_misfit(2, ("n1", "n2"), (1, 1))
    assert "fix: run 2 tasks on each node (sbatch --ntasks-per-node=2)" in text
    assert _is_fix_line(text)


@pytest.mark.parametrize("tasks_per_node", [2, {"n1": 2, "n2": 2}])
def test_tasks_per_node_that_fits(tasks_per_node):
    found, _, _ = answer(step_env(1, 1), args(tasks_per_node=tasks_per_node))
    assert (found.task_type, found.task_id) == ("worker", 3)


def test_jobs_that_do_not_add_up_say_the_fix():
    with pytest.raises(PlanError) as info:
        answer(step_env(), args(jobs={"worker": 5}))
    assert "fix: run 5 tasks" in str(info.value)


@pytest.mark.parametrize("jobs", [{"worker": 4}, {"ps": 1, "worker": 3}])
def test_explicit_jobs_are_the_roles_whatever_tf_slurm_chief_says(jobs):
    found, _, _ = answer(step_env(0, 0, TF_SLURM_CHIEF="1"), args(jobs=jobs))
    assert rules.role_counts(found.cluster) == jobs


# GPUs from recorded variables (no GPU needed): one node, (gpus, CUDA_VISIBLE_DEVICES to set) per local task
@pytest.mark.parametrize("ntasks,variables,given,expected", [
    (4, {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, {}, [(1, "0"), (1, "1"), (1, "2"), (1, "3")]),
    (2, {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, {}, [(2, "0,1"), (2, "2,3")]),
    (4, {"SLURM_STEP_GPUS": "4,5", "CUDA_VISIBLE_DEVICES": "0,1"}, {},
     [(1, "0"), (1, "1"), (1, "0"), (1, "1")]),  # more tasks than GPUs: shared round-robin
    (2, {"SLURM_STEP_GPUS": "4,5"}, {}, [(1, "4"), (1, "5")]),  # Slurm's ids when CUDA's are not set
    (2, {"SLURM_STEP_GPUS": "0,1,2,3", "CUDA_VISIBLE_DEVICES": "2"}, {},
     [(1, "2"), (1, "2")]),  # Slurm bound each task already: kept
    (2, {}, {}, [(0, None), (0, None)]),  # a CPU node: no GPU, left alone
    (2, {"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, {}, [(0, None), (0, None)]),
    (2, {}, {"gpus_per_node": 2}, [(1, "0"), (1, "1")]),  # the script's count when Slurm says nothing
    (2, {}, {"gpus_per_node": 4}, [(2, "0,1"), (2, "2,3")]),
    (2, {}, {"gpus_per_node": 0}, [(0, None), (0, None)]),
    (2, {"CUDA_VISIBLE_DEVICES": "0,1"}, {"gpus_per_node": 8}, [(1, "0"), (1, "1")]),  # Slurm's list wins
    (2, {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, {"gpus_per_task": 1}, [(1, "0"), (1, "2")]),  # a 2-GPU share cut
    (2, {}, {"gpus_per_node": 4, "gpus_per_task": 1}, [(1, "0"), (1, "2")]),
    (1, {"CUDA_VISIBLE_DEVICES": "0,1"}, {"gpus_per_task": 0}, [(0, "")]),
])
def test_gpu_shares_from_recorded_variables(ntasks, variables, given, expected):
    got = []
    for local in range(ntasks):
        found, _, visible = answer(step_env(0, local, tasks_per_node=(ntasks,), **variables), args(**given))
        got.append((found.gpus, visible))
    assert got == expected


def test_gpu_shares_skip_the_ps():
    got = []
    for local in range(4):
        found, _, visible = answer(step_env(0, local, tasks_per_node=(4,), CUDA_VISIBLE_DEVICES="0,1,2,3"),
                                   args(jobs={"ps": 1, "worker": 3}))
        got.append((found.task_type, found.gpus, visible))
    assert got == [("ps", 0, ""), ("worker", 2, "0,1"), ("worker", 1, "2"), ("worker", 1, "3")]


@pytest.mark.parametrize("variables,given", [
    ({}, {"gpus_per_task": -1}),
    ({"CUDA_VISIBLE_DEVICES": "0,1"}, {"gpus_per_node": -1}),
])
def test_bad_gpu_counts_are_refused_on_any_node(variables, given):
    with pytest.raises(PlanError, match=r"SlurmClusterResolver\(gpus_per_"):
        answer(step_env(0, 0, **variables), args(**given))


# -- exec mode: the step's TF_CONFIG ----------------------------------------------------------------

WORKERS = {"worker": ["n1:3000", "n1:3001", "n2:3000", "n2:3001"]}
PS_WORKERS = {"ps": ["n1:3000"], "worker": ["n1:3001", "n2:3000", "n2:3001"]}


def test_under_exec_the_answer_is_tf_config():
    env = exec_env(WORKERS, "worker", 2, node_index=1, local_id=0)
    assert slurm.under_exec(env)
    found, table, visible = answer(env, ARGS)
    assert found == rules.Answer(WORKERS, "worker", 2, 2, 0)
    assert table == {"n1": 2, "n2": 2} and visible is None


def test_under_exec_a_sparse_tf_config_and_tensorflows_rank():
    cluster = {"worker": {"1": "n1:3002", "0": "n1:3001"}, "ps": ["n1:3000"]}
    env = exec_env(cluster, "worker", 1, node_index=0, local_id=1, tasks_per_node=(3,))
    found, _, _ = answer(env, args(jobs={"ps": 1, "worker": 2}))
    assert found.cluster == {"ps": ["n1:3000"], "worker": ["n1:3001", "n1:3002"]}
    assert (found.task_type, found.task_id, found.rank) == ("worker", 1, 2)


@pytest.mark.parametrize("cuda,given,gpus", [
    ("3", {}, 1),  # exec narrowed the task to GPU 3: one GPU
    ("0,1", {}, 2),
    ("0,1", {"gpus_per_task": 1}, 1),
    ("", {}, 0),  # exec gave no GPU
    ("NoDevFiles", {}, 0),
    (None, {}, 0),
])
def test_under_exec_the_gpus_are_execs_and_never_overwritten(cuda, given, gpus):
    extra = {} if cuda is None else {"CUDA_VISIBLE_DEVICES": cuda}
    found, _, visible = answer(exec_env(WORKERS, "worker", 0, **extra), args(**given))
    assert found.gpus == gpus
    assert visible is None  # exec's narrowing is kept


@pytest.mark.parametrize("cluster,jobs,words", [
    (WORKERS, {"ps": 1, "worker": 3}, "fix: run with --ps 1 (TF_SLURM_PS=1)"),
    (PS_WORKERS, None, "fix: run with --ps 0 (TF_SLURM_PS=0)"),
    (WORKERS, {"chief": 1, "worker": 3}, "fix: run with --chief (TF_SLURM_CHIEF=1)"),
    (WORKERS, {"worker": 5}, "fix: run 5 tasks"),
])
def test_under_exec_jobs_against_the_plan_raise_the_fix_line(cluster, jobs, words):
    with pytest.raises(MisfitError) as info:
        answer(exec_env(cluster, "worker", 0), args(jobs=jobs))
    assert words in str(info.value) and _is_fix_line(str(info.value))


def test_under_exec_tasks_per_node_against_the_step_raises():
    with pytest.raises(MisfitError, match="fix: run 1 task on each node"):
        answer(exec_env(WORKERS, "worker", 0), args(tasks_per_node=1))


@pytest.mark.parametrize("jobs", [None, {"worker": 4}, {"worker": 4, "ps": 0}])
def test_under_exec_jobs_that_fit(jobs):
    found, _, _ = answer(exec_env(WORKERS, "worker", 3, node_index=1, local_id=1), args(jobs=jobs))
    assert (found.task_type, found.task_id, found.rank) == ("worker", 3, 3)


def test_another_tasks_supervisor_tag_is_not_exec():
    env = exec_env(WORKERS, "worker", 0)
    env["TF_SLURM_SUPERVISED"] = "77.0.3"  # inherited from another task: not this one's exec
    assert not slurm.under_exec(env)
    found, _, _ = answer(env, ARGS)
    planned, _, _ = answer(step_env(), ARGS)
    assert found == planned and found.cluster != WORKERS


# -- renaming (a subclass's _resolve_hostlist) ------------------------------------------------------

def test_renaming_replaces_the_plans_host_names():
    plain, _, _ = answer(step_env(1, 1), ARGS)
    found, _, _ = answer(step_env(1, 1), ARGS, new_names=["a.ib", "b.ib"])
    assert found.cluster == rules.renamed(plain.cluster, ("n1", "n2"), ["a.ib", "b.ib"])
    assert [a.rpartition(":")[0] for a in found.cluster["worker"]] == ["a.ib", "a.ib", "b.ib", "b.ib"]
    assert [a.rpartition(":")[2] for a in found.cluster["worker"]] == [
        a.rpartition(":")[2] for a in plain.cluster["worker"]]  # ports unchanged
    assert (found.task_type, found.task_id, found.rank) == ("worker", 3, 3)


def test_renaming_keeps_addresses_that_are_not_node_names():
    env = step_env(TF_SLURM_ADDRESS="template:{host}.ib")
    plain, _, _ = answer(env, ARGS)
    assert plain.cluster["worker"][0].startswith("n1.ib:")
    found, _, _ = answer(env, ARGS, new_names=["x", "y"])
    assert found.cluster == plain.cluster


def test_renaming_under_exec_renames_tf_config():
    found, _, _ = answer(exec_env(WORKERS, "worker", 1), ARGS, new_names=["x", "y"])
    assert found.cluster == {"worker": ["x:3000", "x:3001", "y:3000", "y:3001"]}


@pytest.mark.parametrize("under_exec", [False, True])
def test_renaming_with_a_wrong_length_keeps_the_names_and_warns(under_exec, caplog):
    env = exec_env(WORKERS, "worker", 0) if under_exec else step_env()
    plain, _, _ = answer(env, ARGS)
    with caplog.at_level(logging.WARNING, logger=rt.__name__):
        found, _, _ = answer(env, ARGS, new_names=["only-one"])
    assert found.cluster == plain.cluster
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == rt.__name__]
    assert len(warnings) == 1
    assert "_resolve_hostlist() gave 1 names for the step's 2 nodes" in warnings[0]


# -- TensorFlow's class: its shape, and the patch ---------------------------------------------------

def _tf_shaped(**changes):
    """A class shaped as TensorFlow's SlurmClusterResolver (2.15.1 to 2.21), with `changes` applied."""

    def __init__(self, jobs=None, port_base=8888, gpus_per_node=None, gpus_per_task=None,  # noqa: N807
                 tasks_per_node=None, auto_set_gpu=True, rpc_layer="grpc"):
        self.original = True

    def method(self, *args, **kwargs):
        return "original"

    body = {"__init__": __init__, "cluster_spec": method, "get_task_info": method, "master": method,
            "num_accelerators": method, "_resolve_hostlist": lambda self: ["n1", "n2"]}
    body.update(changes)
    return type("SlurmClusterResolver", (), {k: v for k, v in body.items() if v is not ...})


def _init_extra(self, jobs=None, port_base=8888, gpus_per_node=None, gpus_per_task=None,
                tasks_per_node=None, auto_set_gpu=True, rpc_layer="grpc", extra=None):
    pass


def _init_missing(self, jobs=None, port_base=8888, gpus_per_node=None, gpus_per_task=None,
                  tasks_per_node=None, auto_set_gpu=True):
    pass


def test_tensorflows_shape_is_known():
    assert unknown_shape(_tf_shaped()) is None


@pytest.mark.parametrize("changes,words", [
    ({"__init__": _init_extra}, "its constructor takes (jobs, port_base, gpus_per_node, gpus_per_task, "
                                "tasks_per_node, auto_set_gpu, rpc_layer, extra)"),
    ({"__init__": _init_missing}, "its constructor takes (jobs, port_base, gpus_per_node, gpus_per_task, "
                                  "tasks_per_node, auto_set_gpu)"),
    ({"__init__": ...}, "its constructor takes"),  # no constructor of its own
    ({"cluster_spec": ...}, "it has no cluster_spec"),
    ({"cluster_spec": None}, "it has no cluster_spec"),
    ({"master": ..., "_resolve_hostlist": ...}, "it has no master, _resolve_hostlist"),
])
def test_other_shapes_say_what_differs(changes, words):
    why = unknown_shape(_tf_shaped(**changes))
    assert isinstance(why, str) and words in why


def test_patch_leaves_a_class_of_another_shape_alone(capsys):
    cls = _tf_shaped(cluster_spec=...)
    before = dict(vars(cls))
    module = types.SimpleNamespace(SlurmClusterResolver=cls)
    assert patch_tf_class(module) is False
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tf_for_slurm: warning: ")
    assert "it has no cluster_spec" in err
    assert dict(vars(cls)) == before
    assert cls().original is True


def test_patch_without_the_class_does_nothing(capsys):
    assert patch_tf_class(types.SimpleNamespace()) is False
    assert capsys.readouterr().err == ""


# -- the drop-in class, from os.environ --------------------------------------------------------------

@pytest.fixture
def environ(monkeypatch):
    """Set this process's Slurm variables to those of a task (every other Slurm/tf_for_slurm one unset)."""
    for name in list(os.environ):
        if name.startswith(("SLURM", "TF_SLURM_")) or name in ("TF_CONFIG", "CUDA_VISIBLE_DEVICES"):
            monkeypatch.delenv(name)

    def use(env):
        for name, value in env.items():
            monkeypatch.setenv(name, value)

    return use


def test_drop_in_answers_from_the_environment(environ):
    environ(step_env(1, 1))
    r = SlurmClusterResolver()
    assert r.get_task_info() == ("worker", 3)
    assert (r.task_type, r.task_id, r.rpc_layer) == ("worker", 3, "grpc")
    assert r.num_accelerators() == {"GPU": 0}
    assert r.num_accelerators("worker", 0) == {"GPU": 0}  # as TensorFlow's: the task's own count
    assert r.environment == ""
    assert r._resolve_hostlist() == ["n1", "n2"]
    assert r._jobs == {"worker": 4} and r._task_configuration == {"n1": 2, "n2": 2} and r._rank == 3


def test_drop_in_positional_jobs_and_gpus(environ):
    environ(step_env(0, 1, CUDA_VISIBLE_DEVICES="0,1,2,3"))
    r = SlurmClusterResolver({"ps": 1, "worker": 3}, 15000)
    assert r.get_task_info() == ("worker", 0)
    assert r.num_accelerators() == {"GPU": 4}  # the only GPU task of n1 (the ps takes none)
    assert r._tf_slurm_visible == "0,1,2,3" and r._port_base == 15000


def test_drop_in_gpu_share_of_a_two_gpu_task(environ):
    environ(step_env(0, 1, CUDA_VISIBLE_DEVICES="0,1,2,3"))
    r = SlurmClusterResolver()
    assert r.num_accelerators() == {"GPU": 2} and r._tf_slurm_visible == "2,3"
    r = SlurmClusterResolver(gpus_per_task=1)
    assert r.num_accelerators() == {"GPU": 1} and r._tf_slurm_visible == "2"


def test_drop_in_subclass_renames_hosts(environ):
    environ(step_env(1, 0))

    class Renaming(SlurmClusterResolver):
        def _resolve_hostlist(self):
            return [f"{name}-ib" for name in super()._resolve_hostlist()]

    r = Renaming()
    assert r._resolve_hostlist() == ["n1-ib", "n2-ib"]
    assert [a.rpartition(":")[0] for a in r._cluster_allocation["worker"]] == ["n1-ib", "n1-ib", "n2-ib", "n2-ib"]
    assert r.get_task_info() == ("worker", 2)
    plain = SlurmClusterResolver()
    assert [a.rpartition(":")[0] for a in plain._cluster_allocation["worker"]] == ["n1", "n1", "n2", "n2"]


def test_drop_in_misfit_names_the_class(environ):
    environ(step_env(0, 0, tasks_per_node=(1, 1)))
    with pytest.raises(MisfitError) as info:
        SlurmClusterResolver(tasks_per_node=2)
    assert str(info.value).startswith("SlurmClusterResolver(tasks_per_node=2) ")  # named once, not twice
    assert "fix: run 2 tasks on each node" in str(info.value)


def test_drop_in_outside_slurm_is_one_error(environ):
    with pytest.raises(SlurmEnvError, match="SlurmClusterResolver: SLURM_JOB_ID is not set"):
        SlurmClusterResolver()


def test_patched_class_answers_from_the_plan(environ, capsys):
    environ(step_env(1, 1, CUDA_VISIBLE_DEVICES="0,1"))
    cls = _tf_shaped()
    module = types.SimpleNamespace(SlurmClusterResolver=cls)
    assert patch_tf_class(module) is True
    init = cls.__init__
    assert patch_tf_class(module) is True and cls.__init__ is init  # once only
    r = cls(None, 8888)
    assert (r.task_type, r.task_id) == ("worker", 3)
    assert r.num_accelerators() == {"GPU": 1} and r._tf_slurm_visible == "1"
    assert not hasattr(r, "original")

    class Renaming(cls):
        def _resolve_hostlist(self):
            return ["a", "b"]

    assert Renaming()._cluster_allocation["worker"][0].startswith("a:")
    assert capsys.readouterr().err == ""

    class OwnSpec(cls):
        def cluster_spec(self):
            return "mine"

    OwnSpec()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "OwnSpec.cluster_spec() is the script's own" in err
    with pytest.raises(TypeError, match="unexpected keyword argument 'jobz'"):
        cls(jobz=None)


def test_importing_and_using_the_drop_in_imports_no_tensorflow():
    code = textwrap.dedent("""
        import sys
        from tf_for_slurm import SlurmClusterResolver
        assert "tensorflow" not in sys.modules, "import"
        r = SlurmClusterResolver()
        assert r.get_task_info() == ("worker", 1), r.get_task_info()
        assert r.num_accelerators() == {"GPU": 0}
        assert "tensorflow" not in sys.modules, "use"
        print("ok")
    """)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM", "TF_SLURM_")) and k not in ("TF_CONFIG", "CUDA_VISIBLE_DEVICES")}
    env.update(step_env(0, 1))
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
