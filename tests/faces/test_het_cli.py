"""`tf-slurm explain` / `tf-config` for a heterogeneous step: offline --component, --roles-by-component,
and inside a recorded het step (forked CLI runs, tests/cli_runs.py)."""

import json

import pytest
from cli_runs import clean_env

HET = ["--component", "cpu[1-2]:1(x2)", "--component", "gpu[01-04]:4(x4)"]
RECORDED = {"SLURM_JOB_ID": "2", "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "node[1-3]",
            "SLURM_STEP_TASKS_PER_NODE": "2(x2),1", "SLURM_STEP_NUM_TASKS": "5", "SLURM_HET_SIZE": "2",
            "SLURM_JOB_NODELIST_HET_GROUP_0": "node3", "SLURM_JOB_NODELIST_HET_GROUP_1": "node[1-2]",
            "SLURM_PROCID": "3", "SLURM_NODEID": "2", "SLURM_LOCALID": "0", "SLURMD_NODENAME": "node2"}


def test_explain_offline_components_table(cli_runs):
    r = cli_runs.run(["explain", *HET, "--roles-by-component", "ps,worker", "--job-id", "7"], clean_env())
    assert r.returncode == 0, r.stderr
    lines = [line.split() for line in r.stdout.splitlines() if not line.startswith("#")]
    assert lines[0] == ["rank", "node", "component", "local_id", "role", "index", "address", "gpus"]
    rows = lines[1:]
    assert len(rows) == 18
    assert [row[:5] for row in rows[:3]] == [["0", "cpu1", "0", "0", "ps"], ["1", "cpu2", "0", "0", "ps"],
                                             ["2", "gpu01", "1", "0", "worker"]]
    assert rows[-1][:6] == ["17", "gpu04", "1", "3", "worker", "15"]


def test_explain_offline_components_json(cli_runs):
    r = cli_runs.run(["explain", "--json", *HET, "--roles-by-component", "ps,worker", "--chief"], clean_env())
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    tasks = out["tasks"]
    assert [t["component"] for t in tasks] == [0, 0] + [1] * 16
    assert [t["role"] for t in tasks[:4]] == ["ps", "ps", "chief", "worker"] and out["chief"] == 2


def test_plain_explain_has_no_component_column(cli_runs):
    r = cli_runs.run(["explain", "--json", "--nodelist", "n[1-2]"], clean_env())
    assert r.returncode == 0, r.stderr
    assert "component" not in json.loads(r.stdout)["tasks"][0]


def test_tf_config_offline_components(cli_runs):
    r = cli_runs.run(["tf-config", *HET, "--roles-by-component", "ps,worker", "--rank", "1"], clean_env())
    assert r.returncode == 0, r.stderr
    cfg = json.loads(r.stdout)
    assert cfg["task"] == {"type": "ps", "index": 1} and len(cfg["cluster"]["worker"]) == 16


def test_explain_inside_a_recorded_het_step(cli_runs):
    r = cli_runs.run(["explain", "--roles-by-component", "ps,worker"], clean_env(**RECORDED))
    assert r.returncode == 0, r.stderr
    marked = [line.split() for line in r.stdout.splitlines() if line.startswith("*")]
    assert len(marked) == 1 and marked[0][1:6] == ["3", "node2", "1", "0", "worker"]
    r = cli_runs.run(["tf-config"], clean_env(**RECORDED, TF_SLURM_COMPONENT_ROLES="ps,worker"))
    assert json.loads(r.stdout)["task"] == {"type": "worker", "index": 2}


@pytest.mark.parametrize("args,env,needle", [
    (["explain", "--component", "cpu[1-2:1"], {}, "--component 'cpu[1-2:1': node list='cpu[1-2'"),
    (["explain", "--component", "cpu1:0"], {}, "tasks per node='0'"),
    (["explain", "--component", "a1", "--component", "a1:2"], {}, "node 'a1' is also in component 0"),
    (["explain", "--component", "a1", "--nodelist", "b1"], {}, "--component given with --nodelist"),
    (["explain", *HET, "--roles-by-component", "ps"], {}, "--roles-by-component='ps' has 1 role"),
    (["explain", *HET, "--roles-by-component", "ps,worker", "--ps", "1"], {},
     "--roles-by-component and --ps were both given"),
    (["explain", "--nodelist", "n[1-2]", "--roles-by-component", "ps,worker"], {},
     "expected a heterogeneous step"),
    (["explain", *HET, "--roles-by-component", "chief,worker"], {}, "component 0 is 'chief' but has 2 tasks"),
    (["explain", "--roles-by-component", "ps,worker"], {**RECORDED, "SLURM_PROCID": "0"},
     "SLURM_PROCID=0: expected a rank in 1-4"),
    (["tf-config", *HET], {}, "--rank is required for an offline plan"),
])
def test_bad_het_inputs_are_one_line(args, env, needle, cli_runs):
    r = cli_runs.run(args, clean_env(**env))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, r.stderr
