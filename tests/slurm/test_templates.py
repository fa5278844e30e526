"""The sbatch templates evaluate nothing they are given (their shared arithmetic: tests/host/test_batch_settings.py).

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

# the templates run under bash with stand-ins for srun and scontrol (224 template runs, no cluster):
# side by side in the full command, left out of the fast subset
pytestmark = pytest.mark.templates

REPO = Path(__file__).resolve().parents[2]
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
             "TF_SLURM_ADDRESS", "TF_CPP_MIN_LOG_LEVEL", "TMPDIR", "WARN_MARGIN", "MAX_REQUEUES", "MIN_STEP_SECONDS"]
PAYLOADS = ["$(touch {m})", "`touch {m}`", "a[$(touch {m})]", "PATH[$(touch {m})]"]
NUMERIC = {"SLURM_NTASKS", "SLURM_CPUS_PER_TASK", "SLURM_TASKS_PER_NODE", "SLURM_MEM_PER_CPU", "NUM_PS",
           "MEM_PER_TASK_MB", "WARN_MARGIN", "MAX_REQUEUES"}
NUMERIC_IN = {"mnist": {"MIN_STEP_SECONDS"}, "generic": set()}  # read by one template only


@pytest.fixture
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
        if variable in NUMERIC | NUMERIC_IN[name]:  # refused with one line naming the variable, before srun
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
def test_mnist_template_passes_min_step_seconds_only_when_set(tmp_path, fake_bin):
    for value, expected in (("0", None), ("0.25", "0.25")):
        run_dir = tmp_path / f"run{value}"
        run_dir.mkdir()
        r = run_template("mnist", run_dir, fake_bin, MIN_STEP_SECONDS=value)
        assert r.returncode == 0, r.stderr[-2000:]
        args = (run_dir / "srun.args").read_text().splitlines()
        got = args[args.index("--min_step_seconds") + 1] if "--min_step_seconds" in args else None
        assert got == expected, args
    for bad in ("-1", "1e3", "0.25s", ".5"):
        r = run_template("mnist", tmp_path, fake_bin, MIN_STEP_SECONDS=bad)
        assert r.returncode == 2 and f"MIN_STEP_SECONDS='{bad}'" in r.stderr, r.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_template_exits_with_the_first_failing_tasks_status(name, tmp_path, fake_bin):
    r = run_template(name, tmp_path, fake_bin, FAKE_SRUN_FAIL="3")
    assert r.returncode == 3, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "srun exit status 143" in r.stdout and "exit status 3 (the first failing task's)" in r.stdout
