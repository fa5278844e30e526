"""Every bad input is one clear line: the table.

API rows: the call raises exactly one TfSlurmError whose message is one line and names the argument
or variable (and holds the other needles).  CLI rows: `tf-slurm ...` (or the example) exits 2 with one
line on stderr naming what the user set, and no traceback.  The rows already checked elsewhere
(envs.BAD_ENVS, memory_cases.BAD) are part of the table too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runs import clean_env
from envs import BAD_ENVS, batch_env, step_env
from memory_cases import BAD as BAD_MEMORY

import tf_for_slurm
from tf_for_slurm.errors import TfSlurmError
from tf_for_slurm.host.allocation import memory_per_task
from tf_for_slurm.host.settings import ADDRESS
from tf_for_slurm.plan.addresses import parse_policy
from tf_for_slurm.runtime import launch
from tf_for_slurm.ServerDictionary import GetServerDictionary

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "mnist_distributed" / "LaunchTFServerWithHooks.py"
STEP = step_env("node[1-3]", "2(x3)", slot=1)  # 6 tasks, this task on node1
SMALL = step_env("node[1-3]", "1(x3)", slot=1)  # 3 tasks, one per node


def _fn(ctx):  # a train_fn for the launch rows (never called: the arguments are refused first)
    raise AssertionError("not reached")


def _plan():
    return tf_for_slurm.plan_from_env(dict(SMALL), ps=1, check=False)


def _with(env: dict, **changes) -> dict:
    out = dict(env)
    for k, v in changes.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def _plan_env(**changes):
    return lambda: tf_for_slurm.plan_from_env(_with(STEP, **changes), check=False)


def _plan_small(**changes):
    return lambda: tf_for_slurm.plan_from_env(_with(SMALL, **changes), check=False)


def _gsd(*args, env=None, **kwargs):
    def call():
        old = dict(os.environ)
        os.environ.clear()
        os.environ.update({k: v for k, v in old.items() if not k.startswith(("SLURM", "TF_SLURM_"))},
                          **(SMALL if env is None else env))
        try:
            return GetServerDictionary(*args, **kwargs)
        finally:
            os.environ.clear()
            os.environ.update(old)
    return call


def _launch(**kwargs):
    def call():
        return launch(kwargs.pop("train_fn", _fn), **kwargs)
    return call


def _memory(env, **kwargs):
    return lambda: memory_per_task(env, **kwargs)


def _policy(spec):
    return lambda: parse_policy(spec, ADDRESS)


def _step(env):
    return lambda: tf_for_slurm.step_from_env(env)


API = [
    # wrong types at the public boundary
    ("tasks=5", lambda: tf_for_slurm.plan_from_env(dict(STEP), tasks=5), ["tasks=5"]),
    ("tasks=bytes", lambda: tf_for_slurm.plan_from_env(dict(STEP), tasks=b"ps,worker"), ["tasks=b'ps,worker'"]),
    ("tasks=dict", lambda: tf_for_slurm.plan_from_env(dict(STEP), tasks={"ps": 1}), ["tasks={'ps': 1}"]),
    ("tasks=[ps,3]", lambda: tf_for_slurm.plan_from_env(dict(SMALL), tasks=["ps", 3, "worker"]),
     ["ListOfTFTasks[1]=3"]),
    ("tasks wrong count", lambda: tf_for_slurm.plan_from_env(dict(STEP), tasks=["ps", "worker"]),
     ["ListOfTFTasks has 2 roles", "6 tasks"]),
    ("env=42", lambda: tf_for_slurm.plan_from_env(42), ["env=42"]),
    ("env=list", lambda: tf_for_slurm.plan_from_env([("SLURM_JOB_ID", "1")]), ["env=[('SLURM_JOB_ID', '1')]"]),
    ("env job id int", lambda: tf_for_slurm.plan_from_env(_with(STEP, SLURM_JOB_ID=5)), ["env['SLURM_JOB_ID']=5"]),
    ("env procid int", lambda: tf_for_slurm.plan_from_env(_with(STEP, SLURM_PROCID=1)), ["env['SLURM_PROCID']=1"]),
    ("env TF_SLURM_PS int", lambda: tf_for_slurm.plan_from_env(_with(STEP, TF_SLURM_PS=2)), ["env['TF_SLURM_PS']=2"]),
    ("address=123", lambda: tf_for_slurm.plan_from_env(dict(STEP), address=123), ["address=123"]),
    ("address bad policy", lambda: tf_for_slurm.plan_from_env(dict(STEP), address="ib"), ["address='ib'"]),
    ("ps='2'", lambda: tf_for_slurm.plan_from_env(dict(STEP), ps="2"), ["ps='2'"]),
    ("ps=True", lambda: tf_for_slurm.plan_from_env(dict(STEP), ps=True), ["ps=True"]),
    ("ps=-1", lambda: tf_for_slurm.plan_from_env(dict(STEP), ps=-1), ["ps=-1"]),
    ("ps=6", lambda: tf_for_slurm.plan_from_env(dict(STEP), ps=6), ["ps=6", "at most 5"]),
    ("placement=random", lambda: tf_for_slurm.plan_from_env(dict(STEP), placement="random"), ["placement='random'"]),
    ("chief='yes'", lambda: tf_for_slurm.plan_from_env(dict(STEP), chief="yes"), ["chief='yes'"]),
    ("check=None", lambda: tf_for_slurm.plan_from_env(dict(STEP), check=None), ["check=None"]),
    ("node_addresses=list", lambda: tf_for_slurm.plan_from_env(dict(STEP), node_addresses=["a"]),
     ["node_addresses=['a']"]),
    ("tasks and ps", lambda: tf_for_slurm.plan_from_env(dict(SMALL), tasks=["ps", "worker", "worker"], ps=1),
     ["tasks and ps were both given"]),
    ("no SLURM_LOCALID: plan.me", lambda: tf_for_slurm.plan_from_env(_with(STEP, SLURM_LOCALID=None), check=False).me,
     ["SLURM_LOCALID and SLURM_NODEID", "as srun sets them"]),
    ("step_from_env(None)", _step(None), ["env=None"]),
    ("step_from_env(str)", _step("SLURM_JOB_ID=1"), ["env='SLURM_JOB_ID=1'"]),
    ("step_from_env(nodes int)", _step(_with(STEP, SLURM_STEP_NODELIST=3)), ["env['SLURM_STEP_NODELIST']=3"]),
    ("GetServerDictionary(None)", _gsd(None), ["ListOfTFTasks=None"]),
    ("GetServerDictionary(5)", _gsd(5), ["ListOfTFTasks=5"]),
    ("GetServerDictionary(dict)", _gsd({"ps": 1}), ["ListOfTFTasks={'ps': 1}"]),
    ("GetServerDictionary NoIB='no'", _gsd(["ps", "worker", "worker"], NoIB="no"), ["NoIB='no'"]),
    ("GetServerDictionary NoIB=2", _gsd(["ps", "worker", "worker"], NoIB=2), ["NoIB=2"]),
    ("GetServerDictionary bad role", _gsd("ps,boss,worker"), ["[1]='boss'"]),
    ("launch plan=object()", _launch(plan=object()), ["plan=<object object"]),
    ("launch plan=dict", _launch(plan={"ps": ["h:1"]}), ["plan={'ps': ['h:1']}"]),
    ("launch train_fn=3", lambda: _launch(train_fn=3, plan=_plan())(), ["train_fn=3"]),
    ("launch liveness_timeout=0", lambda: _launch(plan=_plan(), liveness_timeout=0)(), ["liveness_timeout=0"]),
    ("launch startup_grace='9'", lambda: _launch(plan=_plan(), startup_grace="9")(), ["startup_grace='9'"]),
    ("launch late_start_grace=-1", lambda: _launch(plan=_plan(), late_start_grace=-1)(), ["late_start_grace=-1"]),
    ("launch timeout=0", lambda: _launch(plan=_plan(), timeout=0)(), ["timeout=0"]),
    ("launch report_timeout=True", lambda: _launch(plan=_plan(), report_timeout=True)(), ["report_timeout=True"]),
    ("launch tasks and plan", lambda: _launch(plan=_plan(), ps=1)(), ["tasks/ps=(None, 1)"]),
    # environment values, named as the user set them
    ("TF_SLURM_TASKS bad role", _plan_env(TF_SLURM_TASKS="ps,boss,worker,worker,worker,worker"),
     ["TF_SLURM_TASKS[1]='boss'"]),
    ("TF_SLURM_TASKS no worker", _plan_env(TF_SLURM_TASKS="ps,ps,ps,ps,ps,ps"), ["TF_SLURM_TASKS=", "'worker'"]),
    ("TF_SLURM_TASKS count", _plan_env(TF_SLURM_TASKS="ps,worker"), ["TF_SLURM_TASKS has 2 roles"]),
    ("TF_SLURM_TASKS two chiefs", _plan_env(TF_SLURM_TASKS="ps,chief,chief,worker,worker,worker"),
     ["TF_SLURM_TASKS=", "at most one 'chief'"]),
    ("TF_SLURM_PS=two", _plan_env(TF_SLURM_PS="two"), ["TF_SLURM_PS='two'"]),
    ("TF_SLURM_PS=6", _plan_env(TF_SLURM_PS="6"), ["TF_SLURM_PS=6", "at most 5"]),
    ("TF_SLURM_PS=-1", _plan_env(TF_SLURM_PS="-1"), ["TF_SLURM_PS=-1"]),
    ("TF_SLURM_PLACEMENT=random", _plan_env(TF_SLURM_PLACEMENT="random"), ["TF_SLURM_PLACEMENT='random'"]),
    ("TF_SLURM_PLACEMENT per-node 1/node", _plan_small(TF_SLURM_PLACEMENT="per-node"),
     ["TF_SLURM_PLACEMENT='per-node' gives roles"]),
    ("TF_SLURM_CHIEF=maybe", _plan_env(TF_SLURM_CHIEF="maybe"), ["TF_SLURM_CHIEF='maybe'"]),
    ("TF_SLURM_ADDRESS template:{host", _plan_env(TF_SLURM_ADDRESS="template:{host"),
     ["TF_SLURM_ADDRESS='template:{host'"]),
    ("TF_SLURM_ADDRESS template:{0}", _plan_env(TF_SLURM_ADDRESS="template:{0}-ib"),
     ["TF_SLURM_ADDRESS='template:{0}-ib'"]),
    ("TF_SLURM_ADDRESS template:{host!r}", _plan_env(TF_SLURM_ADDRESS="template:{host!r}"),
     ["TF_SLURM_ADDRESS='template:{host!r}'"]),
    ("TF_SLURM_ADDRESS template width", _plan_env(TF_SLURM_ADDRESS="template:{host:>99999999}"),
     ["TF_SLURM_ADDRESS='template:{host:>99999999}'"]),
    ("TF_SLURM_ADDRESS template space", _plan_env(TF_SLURM_ADDRESS="template:{host} ib"),
     ["TF_SLURM_ADDRESS='template:{host} ib'", "'node1 ib'"]),
    ("TF_SLURM_ADDRESS iface:nosuch0", _plan_env(TF_SLURM_ADDRESS="iface:nosuch0"),
     ["TF_SLURM_ADDRESS='iface:nosuch0'", "no 'nosuch0'", "lo", "tf-slurm node-address --iface nosuch0"]),
    ("TF_SLURM_ADDRESS file missing", _plan_env(TF_SLURM_ADDRESS="file:/nonexistent/addresses"),
     ["TF_SLURM_ADDRESS='file:/nonexistent/addresses'", "readable"]),
    ("TF_SLURM_ADDRESS=ib", _plan_env(TF_SLURM_ADDRESS="ib"), ["TF_SLURM_ADDRESS='ib'"]),
    ("TF_SLURM_BASE_PORT=x", _plan_env(TF_SLURM_BASE_PORT="x"), ["TF_SLURM_BASE_PORT='x'"]),
    ("TF_SLURM_BASE_PORT=80", _plan_env(TF_SLURM_BASE_PORT="80"), ["TF_SLURM_BASE_PORT=80"]),
    ("TF_SLURM_PORT_SCOPE=cluster", _plan_env(TF_SLURM_PORT_SCOPE="cluster"), ["TF_SLURM_PORT_SCOPE='cluster'"]),
    ("nodelist with a space", _step(_with(STEP, SLURM_STEP_NODELIST="node 1,node2,node3")),
     ["SLURM_STEP_NODELIST='node 1,node2,node3'", "no spaces", "'node 1'"]),
    ("nodelist non-ASCII", _step(_with(STEP, SLURM_STEP_NODELIST="nöde[1-3]")), ["SLURM_STEP_NODELIST='nöde[1-3]'"]),
    ("nodelist leading hyphen", _step(_with(STEP, SLURM_STEP_NODELIST="-n[1-3]")), ["SLURM_STEP_NODELIST='-n[1-3]'"]),
    ("nodelist semicolon", _step(_with(STEP, SLURM_STEP_NODELIST="n1,n2;id,n3")),
     ["SLURM_STEP_NODELIST='n1,n2;id,n3'"]),
    ("nodelist label > 63", _step(_with(STEP, SLURM_STEP_NODELIST="a" * 64 + "[1-3]")), ["SLURM_STEP_NODELIST="]),
    ("SLURMD_NODENAME space", _step(_with(STEP, SLURMD_NODENAME="node 1")), ["SLURMD_NODENAME='node 1'"]),
    ("SLURM_MEM_PER_CPU huge", _step(_with(STEP, SLURM_MEM_PER_CPU="99999999999999999999999T")),
     ["SLURM_MEM_PER_CPU='99999999999999999999999T'", "at most"]),
    ("SLURM_MEM_PER_NODE huge", _step(_with(STEP, SLURM_MEM_PER_NODE="9999999999999999G")),
     ["SLURM_MEM_PER_NODE='9999999999999999G'"]),
    ("tasks per node huge repeat", _step(_with(STEP, SLURM_STEP_TASKS_PER_NODE="1(x99999999)")),
     ["SLURM_STEP_TASKS_PER_NODE='1(x99999999)'"]),
    ("tasks per node huge count", _step(_with(STEP, SLURM_STEP_TASKS_PER_NODE="99999999999,1,1")),
     ["SLURM_STEP_TASKS_PER_NODE='99999999999,1,1'", "at most 100000 tasks"]),
    ("tasks per node x0", _step(_with(STEP, SLURM_STEP_TASKS_PER_NODE="2(x0),2,2")),
     ["SLURM_STEP_TASKS_PER_NODE='2(x0),2,2'"]),
    ("mem huge (tf-slurm mem)", _memory({"SLURM_MEM_PER_CPU": "99999999999999999999999T"}),
     ["SLURM_MEM_PER_CPU='99999999999999999999999T'", "at most"]),
    ("policy {host", _policy("template:{host"), ["TF_SLURM_ADDRESS='template:{host'"]),
    ("policy }", _policy("template:host}"), ["TF_SLURM_ADDRESS='template:host}'"]),
]
API += [(f"step: {msg[:40]}", _step(_with(STEP, **changes)), [msg]) for changes, msg in BAD_ENVS]
API += [(f"memory: {needle[:40]}", _memory(environ, **kwargs), [needle]) for environ, kwargs, needle in BAD_MEMORY]


@pytest.mark.parametrize("name,call,needles", API, ids=[row[0] for row in API])
def test_api_row(name, call, needles):
    with pytest.raises(TfSlurmError) as info:
        call()
    msg = str(info.value)
    assert "\n" not in msg, msg
    for needle in needles:
        assert needle in msg, (needle, msg)


BATCH = batch_env("node[1-3]", "1(x3)", job_id="77")  # the batch script of a 3-task job: no step, task 0's ids
NO_ID = _with(STEP, SLURM_LOCALID=None)
NO_NODE = _with(STEP, SLURM_NODEID=None, SLURMD_NODENAME=None)
CLI = [
    (["explain"], _with(STEP, TF_SLURM_TASKS="ps,boss,worker,worker,worker,worker"), ["TF_SLURM_TASKS[1]='boss'"]),
    (["explain"], _with(STEP, TF_SLURM_PS="two"), ["TF_SLURM_PS='two'"]),
    (["explain"], _with(STEP, TF_SLURM_PS="9"), ["TF_SLURM_PS=9"]),
    (["explain"], _with(STEP, TF_SLURM_PLACEMENT="random"), ["TF_SLURM_PLACEMENT='random'"]),
    (["explain"], _with(STEP, TF_SLURM_ADDRESS="template:{host"), ["TF_SLURM_ADDRESS='template:{host'"]),
    (["explain"], _with(STEP, TF_SLURM_ADDRESS="iface:nosuch0"), ["TF_SLURM_ADDRESS='iface:nosuch0'", "interfaces"]),
    (["explain"], _with(STEP, SLURM_STEP_NODELIST="node 1,node2,node3"), ["SLURM_STEP_NODELIST='node 1,node2,node3'"]),
    (["explain"], _with(STEP, SLURM_STEP_NODELIST="nöde[1-3]"), ["SLURM_STEP_NODELIST='nöde[1-3]'"]),
    (["explain"], _with(STEP, SLURM_CPUS_PER_TASK="PATH[$(id)]"), ["SLURM_CPUS_PER_TASK='PATH[$(id)]'"]),
    (["tf-config"], NO_ID, ["SLURM_LOCALID not set"]),
    (["tf-config"], NO_NODE, ["SLURM_NODEID not set"]),
    (["env"], NO_ID, ["SLURM_LOCALID not set"]),
    # the batch script is no task: refused as exec refuses it, naming srun and --rank
    (["tf-config"], BATCH, ["SLURM_NTASKS=3 but no job step", "batch script of job 77", "`srun tf-slurm tf-config`",
                            "--rank R"]),
    (["env", "--ps", "1"], BATCH, ["SLURM_NTASKS=3 but no job step", "eval \"$(tf-slurm env)\"", "--rank R"]),
    (["env", "--rank", "3"], BATCH, ["--rank=3: expected a rank in 0-2"]),
    (["tf-config", "--rank", "-1"], BATCH, ["--rank=-1: expected a rank in 0-2"]),
    (["explain", "--log-level", "LOUD"], {}, ["--log-level='LOUD'"]),
    (["explain", "--nodelist", "node 1"], {}, ["--nodelist='node 1'"]),
    (["explain", "--nodelist", "n1", "--tasks-per-node", "1(x0)"], {}, ["--tasks-per-node='1(x0)'"]),
    (["explain", "--nodelist", "n1", "--tasks-per-node", "2", "--address", "template:{host"], {},
     ["--address='template:{host'"]),
    (["explain", "--port-scope", "step"], {}, ["--port-scope given without --nodelist"]),
    (["explain", "--nodelist", "n1"], {}, ["--ps=1: expected at most 0 so that 1 tasks leave a worker"]),
    (["mem"], {"SLURM_MEM_PER_CPU": "99999999999999999999999T"}, ["SLURM_MEM_PER_CPU='99999999999999999999999T'"]),
    (["mem", "--per", "byte"], {}, ["argument --per: invalid choice: 'byte'"]),
    (["batch-settings", "--num-ps", "x"], {"SLURM_NTASKS": "3"}, ["NUM_PS='x'"]),
    (["batch-settings", "--num-ps", "1"], {"SLURM_NTASKS": "PATH[$(id)]"}, ["SLURM_NTASKS='PATH[$(id)]'"]),
    (["batch-settings", "--num-ps", "3"], {"SLURM_NTASKS": "3"}, ["NUM_PS=3 leaves no worker"]),
    (["batch-status", "--srun-status", "abc", "--srun-log", "/dev/null"], {}, ["--srun-status='abc'"]),
    (["batch-status", "--srun-status", "1", "--srun-log", "/nonexistent"], {}, ["--srun-log='/nonexistent'"]),
    (["node-address", "--iface", "nosuch0"], {}, ["iface='nosuch0'", "lo"]),
]
# more CLI rows, one needle each (args, environment, needle)
BAD_CALLS = [
    (["explain", "--nodelist", "n[1-"], {}, "--nodelist='n[1-': expected a Slurm hostlist"),
    (["explain", "--nodelist", "n[1-2]", "--tasks-per-node", "1,2,3"], {},
     "--tasks-per-node='1,2,3': expected one count per node"),
    (["explain", "--nodelist", "n1", "--tasks-per-node", "x"], {}, "--tasks-per-node='x': expected a task count list"),
    (["explain", "--nodelist", "n1", "--tasks-per-node", "2", "--tasks", "ps,boss"], {}, "ListOfTFTasks[1]='boss'"),
    (["explain", "--nodelist", "n1", "--tasks-per-node", "2", "--ps", "2"], {}, "ps=2: expected at most 1"),
    (["explain", "--nodelist", "n1", "--tasks-per-node", "2", "--address", "ib"], {},
     "--address='ib': expected 'hostname'"),
    (["explain", "--tasks-per-node", "2"], {}, "--tasks-per-node given without --nodelist"),
    (["explain", "--ps", "two"], {}, "tf-slurm explain: error: --ps='two': expected an integer >= 0"),
    (["exec", "--ps", "-1", "--", "true"], {}, "tf-slurm exec: error: --ps='-1': expected an integer >= 0"),
    (["submit", "-N", "2", "--ps", "x", "--", "true"], {},
     "tf-slurm submit: error: --ps='x': expected an integer >= 0"),
    (["tf-config"], {}, "SLURM_JOB_ID is not set"),
    (["tf-config", "--nodelist", "n1", "--tasks-per-node", "2"], {}, "--rank is required for an offline plan"),
    (["tf-config", "--nodelist", "n1", "--tasks-per-node", "2", "--rank", "5"], {}, "--rank=5: expected a rank in 0-1"),
    (["exec"], step_env("localhost", "2"), "exec: expected a command after '--'"),
    (["exec", "--", "true"], step_env("nohost.invalid", "2"),
     "'nohost.invalid' of ps:0 (rank 0, node nohost.invalid) does not resolve"),
    (["nonsense"], {}, "tf-slurm: error: unknown command 'nonsense': `tf-slurm --help` lists the commands"),
    (["sumbit", "-N", "3"], {}, "tf-slurm: error: unknown command 'sumbit': did you mean 'submit'?"),
    (["--log-level", "LOUD", "explain"], {}, "--log-level='LOUD': expected DEBUG"),
    (["explain"], {**step_env("n[1-2]", "2(x2)"), "SLURM_NODEID": "7"},
     "SLURM_NODEID=7: expected a node index below 2"),
]

CLI += [(args, env, [msg]) for args, env, msg in BAD_CALLS]


def _run(argv, env, timeout=60):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TF_SLURM_", "TF_CONFIG"))}
    base.update({"PYTHONPATH": str(ROOT), **env})
    return subprocess.run([sys.executable, *argv], env=base, capture_output=True, text=True, timeout=timeout)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("args,env,needles", CLI, ids=[" ".join(r[0])[:50] for r in CLI])
def test_cli_row(args, env, needles, cli_runs):
    r = cli_runs.run(args, clean_env(**env))  # forked: the interpreter's start-up once for every row
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    for needle in needles:
        assert needle in r.stderr, (needle, r.stderr)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("model_dir", ["/proc/tf_for_slurm/model", "{file}/model"], ids=["proc", "under-a-file"])
def test_example_unwritable_model_dir_is_one_line_before_tensorflow(tmp_path, model_dir):
    afile = tmp_path / "afile"
    afile.write_text("")
    r = _run([str(EXAMPLE), "--data_dir", str(tmp_path), "--model_dir", model_dir.format(file=afile)],
             {**SMALL, "TF_CPP_MIN_LOG_LEVEL": "0", "PYTHONPATH": f"{ROOT}:{EXAMPLE.parent}"})
    assert r.returncode == 2, (r.stdout, r.stderr[-3000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--model_dir=" in lines[0] and "writ" in lines[0], r.stderr[-3000:]


def test_table_size():
    assert len(API) + len(CLI) + 2 >= 90, len(API) + len(CLI)


def test_a_string_list_of_tasks_is_split_on_commas_not_characters():
    # one node that resolves everywhere (node1..3 resolve only while the local cluster is up)
    sd, job_type, index = _gsd("ps,worker,worker", NoIB=True, env=step_env("localhost", "3", slot=1))()
    assert (len(sd["ps"]), len(sd["worker"]), job_type, index) == (1, 2, "worker", 0)
