"""The sbatch templates evaluate nothing they are given, and the arithmetic they share is tested once.

Bash evaluates a variable's value inside `$((...))` as an expression, array subscripts included:
`SLURM_NTASKS='a[$(touch /tmp/x)]'` ran `touch` in the templates.  Here every variable a template
reads is set to `$(...)`, backticks and `a[$(...)]` payloads that would create a marker file, and the
templates run (under bash, with stand-ins for srun/scontrol that only record their arguments); the
marker must never exist.  The real-Slurm runs of the templates are in test_slurm_e2e.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tf_for_slurm.plan.batch_settings import batch_settings, first_failure, strict_int
from tf_for_slurm.errors import TfSlurmError, UsageError

REPO = Path(__file__).resolve().parent.parent
TEMPLATES = {"mnist": REPO / "scripts" / "BASH_Distributed_MNIST.sh", "generic": REPO / "scripts" / "tf_slurm_job.sh"}

# stand-ins: srun records its arguments (and optionally fails as srun does); scontrol knows nothing
FAKE_SRUN = """#!/bin/bash
printf '%s\\n' "$@" > "$FAKE_DIR/srun.args"
if [[ -n "${FAKE_SRUN_FAIL:-}" ]]; then
    echo "srun: error: node3: task 2: Exited with exit code $FAKE_SRUN_FAIL" >&2
    echo "srun: error: node1: task 0: Terminated" >&2
    exit 143
fi
exit 0
"""
FAKE_SCONTROL = "#!/bin/bash\nexit 1\n"

VARIABLES = ["IB", "NUM_PS", "LOG_LEVEL", "PS_LOG_LEVEL", "DATA_DIR", "DOWNLOAD", "MODEL_DIR", "ITERATIONS",
             "BATCH_SIZE", "SYNC", "MEM_PER_TASK_MB", "PYTHON", "TF_SLURM_REPO", "TRAIN_SCRIPT", "SLURM_JOB_ID",
             "SLURM_NTASKS", "SLURM_CPUS_PER_TASK", "SLURM_TASKS_PER_NODE", "SLURM_JOB_NODELIST",
             "SLURM_JOB_PARTITION", "SLURM_SUBMIT_DIR", "SLURM_MEM_PER_CPU", "TF_SLURM_IB_TEMPLATE",
             "TF_SLURM_ADDRESS", "TF_CPP_MIN_LOG_LEVEL", "TMPDIR", "WARN_MARGIN", "MAX_REQUEUES"]
PAYLOADS = ["$(touch {m})", "`touch {m}`", "a[$(touch {m})]", "PATH[$(touch {m})]"]
NUMERIC = {"SLURM_NTASKS", "SLURM_CPUS_PER_TASK", "SLURM_TASKS_PER_NODE", "SLURM_MEM_PER_CPU", "NUM_PS",
           "MEM_PER_TASK_MB", "WARN_MARGIN", "MAX_REQUEUES"}


@pytest.fixture(scope="module")
def fake_bin(tmp_path_factory):
    d = tmp_path_factory.mktemp("fakebin")
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (d / name).write_text(text)
        (d / name).chmod(0o755)
    return d


def run_template(name: str, tmp: Path, fake_bin: Path, **env: str) -> subprocess.CompletedProcess:
    (tmp / "train.py").write_text("print('training')\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TF_SLURM_"))}
    base.update({
        "PATH": f"{fake_bin}:{os.environ['PATH']}", "FAKE_DIR": str(tmp), "PYTHON": sys.executable,
        "TF_SLURM_REPO": str(REPO), "PYTHONPATH": str(REPO), "SLURM_JOB_ID": "4242", "SLURM_NTASKS": "3",
        "SLURM_CPUS_PER_TASK": "1", "SLURM_TASKS_PER_NODE": "1(x3)", "SLURM_JOB_NODELIST": "node[1-3]",
        "SLURM_MEM_PER_CPU": "100", "SLURM_SUBMIT_DIR": str(tmp), "MODEL_DIR": str(tmp / "model"),
        "DATA_DIR": str(tmp / "data"),
    })
    train = env.pop("TRAIN_SCRIPT", "train.py")
    base.update(env)
    args = [str(TEMPLATES[name])] + ([train] if name == "generic" else [])
    return subprocess.run(["bash", *args], env=base, cwd=str(tmp), capture_output=True, text=True, timeout=60)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", sorted(TEMPLATES))
@pytest.mark.parametrize("variable", VARIABLES)
def test_no_value_is_evaluated(name, variable, tmp_path, fake_bin):
    for i, payload in enumerate(PAYLOADS):
        marker = tmp_path / f"MARK{i}"
        run_dir = tmp_path / f"run{i}"
        run_dir.mkdir()
        r = run_template(name, run_dir, fake_bin, **{variable: payload.format(m=marker)})
        assert not marker.exists(), (variable, payload, r.stderr[-2000:])
        assert "Traceback" not in r.stderr, r.stderr[-2000:]
        if variable in NUMERIC:  # refused with one line naming the variable, before srun
            assert r.returncode == 2, (variable, payload, r.returncode, r.stderr[-2000:])
            assert variable in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
            assert not (run_dir / "srun.args").exists()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_template_numbers_reach_srun(name, tmp_path, fake_bin):
    r = run_template(name, tmp_path, fake_bin, SLURM_CPUS_PER_TASK="2", MEM_PER_TASK_MB="1001")
    assert r.returncode == 0, r.stderr[-2000:]
    args = (tmp_path / "srun.args").read_text().splitlines()
    assert args[args.index("-n") + 1] == "3" and args[args.index("-c") + 1] == "2"
    assert "--mem-per-cpu=501M" in args  # 1001 MB per task over 2 CPUs, rounded up


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_template_exits_with_the_first_failing_tasks_status(name, tmp_path, fake_bin):
    r = run_template(name, tmp_path, fake_bin, FAKE_SRUN_FAIL="3")
    assert r.returncode == 3, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "srun exit status 143" in r.stdout and "exit status 3 (the first failing task's)" in r.stdout


# -- the helper itself -------------------------------------------------------------------------
ENV = {"SLURM_NTASKS": "6", "SLURM_CPUS_PER_TASK": "2", "SLURM_TASKS_PER_NODE": "3,2,1", "SLURM_MEM_PER_CPU": "512"}


def test_batch_settings_values():
    assert batch_settings(ENV, num_ps="2") == {"NTASKS": 6, "CPUS_PER_TASK": 2, "NUM_WORKERS": 4,
                                               "MEM_PER_CPU": 512, "RESV_PORTS": 6}
    assert batch_settings(ENV, num_ps="0", mem_per_task_mb="1025")["MEM_PER_CPU"] == 513
    no_cpus = {k: v for k, v in ENV.items() if k != "SLURM_CPUS_PER_TASK"}
    assert batch_settings(no_cpus, num_ps="1")["CPUS_PER_TASK"] == 1


@pytest.mark.parametrize("env,kwargs,needle", [
    ({"SLURM_NTASKS": "a[$(touch x)]"}, {}, "SLURM_NTASKS='a[$(touch x)]'"),
    ({"SLURM_NTASKS": "+6"}, {}, "SLURM_NTASKS='+6'"),
    ({"SLURM_NTASKS": "6_0"}, {}, "SLURM_NTASKS='6_0'"),
    ({"SLURM_NTASKS": "٦"}, {}, "SLURM_NTASKS='٦'"),
    ({"SLURM_NTASKS": "0"}, {}, "SLURM_NTASKS='0': expected an integer in 1-"),
    ({"SLURM_NTASKS": ""}, {}, "SLURM_NTASKS is not set"),
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
