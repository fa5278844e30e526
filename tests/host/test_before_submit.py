"""host.submit_checks: the command's files, the pythons (stand-ins answer the probe) and the partition
(a stand-in scontrol prints Slurm 22.05's text); anything that cannot be asked is skipped, quickly."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from submit_cases import NODES, PARTITIONS

from tf_for_slurm.errors import UsageError
from tf_for_slurm.host import submit_checks
from tf_for_slurm.host.submit_checks import (
    Program,
    check_command,
    check_partitions,
    check_pythons,
    job_directory,
    probe,
)
from tf_for_slurm.plan.submit_checks import Ask

ROOT = Path(__file__).resolve().parents[2]

MWMS_FIT = ("import tensorflow as tf\nstrategy = tf.distribute.MultiWorkerMirroredStrategy()\n"
            "model = tf.keras.Sequential()\nmodel.fit(x)\n")


def _exe(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_job_directory_is_sbatchs():
    assert job_directory(("--nodes=2",), "/home/u") == "/home/u"
    assert job_directory(("--chdir=runs/a",), "/home/u") == "/home/u/runs/a"
    assert job_directory(("-D/scratch/x",), "/home/u") == "/scratch/x"


def test_a_missing_script_or_program_is_one_line_with_a_guess(tmp_path):
    (tmp_path / "train_mwms.py").write_text("print(1)\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "train.py").write_text("import tensorflow\n")
    env = {"PATH": os.environ["PATH"]}
    py = sys.executable
    cases = {
        (py, "trian_mwms.py"): f"command: 'trian_mwms.py' does not exist in {tmp_path} (the job's working directory):"
                               " expected the script's path; did you mean 'train_mwms.py'?",
        (py, "-u", "sub/trian.py"): "did you mean 'sub/train.py'?",
        (py, "/nonexistent/t.py"): "command: '/nonexistent/t.py' does not exist: expected the script's path",
        ("pyhton3", "train_mwms.py"): "command: 'pyhton3' is not a program on PATH: expected a program on PATH or "
                                      "a file's path; did you mean 'python3'?",
        ("./run.sh",): "command: './run.sh' does not exist in",
        ("./train_mwms.py",): "command: './train_mwms.py' is not an executable file: expected `chmod +x "
                              "./train_mwms.py`, or its interpreter first (e.g. -- bash ./train_mwms.py)",
    }
    for command, needle in cases.items():
        with pytest.raises(UsageError) as err:
            check_command(command, str(tmp_path), env)
        assert needle in str(err.value) and "\n" not in str(err.value), (command, str(err.value))


def test_what_the_command_runs(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "train.py").write_text("import tensorflow\n")
    env = {"PATH": os.environ["PATH"]}
    py = sys.executable
    assert check_command((py, "-u", "sub/train.py", "--x"), str(tmp_path), env) == Program(
        py, True, "sub/train.py", "import tensorflow\n")
    assert check_command((py, "-m", "nosuch.module"), str(tmp_path), env) == Program(py, True, None, "")
    assert check_command((py, "-c", "import keras"), str(tmp_path), env).text == "import keras"
    assert check_command(("true", "nosuch.py"), str(tmp_path), env) == Program(
        submit_checks.shutil.which("true"), False, None, "")  # not a python: its arguments are its own


def test_the_probe_asks_a_real_python(tmp_path):
    seen = probe(sys.executable, str(tmp_path), {**os.environ, "PYTHONPATH": str(ROOT)})
    assert seen is not None and seen["have"]["tf_for_slurm"] is True
    assert set(seen) == {"have", "tensorflow", "keras"}
    assert probe(str(_exe(tmp_path / "python", "#!/bin/sh\nexit 1\n")), str(tmp_path), os.environ) is None
    assert probe(str(_exe(tmp_path / "python", "#!/bin/sh\necho nonsense\n")), str(tmp_path), os.environ) is None


def _fake_python(tmp_path: Path, name: str = "python", **have) -> str:
    """A python that answers the probe with `have` (tensorflow/keras: versions, the rest: found or not)."""
    answer = {"have": {m: bool(have.get(m)) for m in ("tf_for_slurm", "tensorflow", "tf_keras", "keras")},
              "tensorflow": have.get("tensorflow") or None, "keras": have.get("keras") or None}
    return str(_exe(tmp_path / name, f"#!/bin/sh\necho '{json.dumps(answer)}'\n"))


def _program(python: str, text: str) -> Program:
    return Program(python, True, "train.py", text)


def test_the_pythons(tmp_path):
    env = {"PATH": os.environ["PATH"]}
    full = dict(tf_for_slurm=True, tensorflow="2.21.0", keras="3.15.1", tf_keras=True)
    ok = _fake_python(tmp_path, "ok", **full)
    check_pythons(ok, _program(ok, MWMS_FIT), "mwms", True, str(tmp_path), env)

    bare = _fake_python(tmp_path, "bare")
    with pytest.raises(UsageError, match=r"^--python='[^']*bare': expected a python that has tf_for_slurm"):
        check_pythons(bare, _program(ok, MWMS_FIT), "mwms", True, str(tmp_path), env)

    no_tf = _fake_python(tmp_path, "no_tf", tf_for_slurm=True)
    with pytest.raises(UsageError) as err:
        check_pythons(no_tf, _program(no_tf, "import tensorflow as tf\n"), "tf1", True, str(tmp_path), env)
    assert str(err.value) == (f"--python={no_tf!r}: expected a python that has TensorFlow (train.py imports it): "
                              f"{no_tf} -m pip install tensorflow-cpu (or tensorflow, for GPUs) "
                              "(--no-checks skips the checks)")
    check_pythons(no_tf, _program(no_tf, "print('no TensorFlow here')\n"), "tf1", True, str(tmp_path), env)
    with pytest.raises(UsageError, match=r"^the command's python '[^']*no_tf': expected a python that has"):
        check_pythons(ok, _program(no_tf, "import tensorflow\n"), "tf1", True, str(tmp_path), env)


def test_keras_3_without_tf_keras(tmp_path):
    env = {"PATH": os.environ["PATH"]}
    k3 = _fake_python(tmp_path, "k3", tf_for_slurm=True, tensorflow="2.21.0", keras="3.15.1")
    with pytest.raises(UsageError) as err:
        check_pythons(k3, _program(k3, MWMS_FIT), "tf1", True, str(tmp_path), env)  # the script names mwms
    assert str(err.value) == (
        f"--python={k3!r}: tf_keras is not installed: Keras 3 `fit` fails under MultiWorkerMirroredStrategy/"
        f"ParameterServerStrategy; fix: {k3} -m pip install --no-deps 'tf-keras~=2.21.0' (train.py calls Keras fit "
        "under mwms; TF_USE_LEGACY_KERAS=0 keeps Keras 3; --no-checks skips the checks)")
    for strategy, multi_task, extra_env in (("mwms", False, {}), ("mwms", True, {"TF_USE_LEGACY_KERAS": "0"})):
        check_pythons(k3, _program(k3, MWMS_FIT), strategy, multi_task, str(tmp_path), {**env, **extra_env})
    check_pythons(k3, _program(k3, MWMS_FIT.replace("model.fit(", "loop(")), "mwms", True, str(tmp_path), env)
    old = _fake_python(tmp_path, "old", tf_for_slurm=True, tensorflow="2.15.1")  # Keras 2 inside TensorFlow
    check_pythons(old, _program(old, MWMS_FIT), "mwms", True, str(tmp_path), env)


def test_a_python_that_cannot_answer_is_skipped_quickly(tmp_path, monkeypatch):
    monkeypatch.setattr(submit_checks, "PROBE_TIMEOUT", 0.5)
    slow = str(_exe(tmp_path / "python", "#!/bin/sh\nexec sleep 30\n"))
    start = time.monotonic()
    check_pythons(slow, _program(slow, MWMS_FIT), "mwms", True, str(tmp_path), {"PATH": os.environ["PATH"]})
    assert time.monotonic() - start < 5


@pytest.fixture
def scontrol(tmp_path, monkeypatch):
    """A stand-in scontrol first on PATH printing PARTITIONS / NODES (its body replaceable)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "partitions").write_text(PARTITIONS)
    (tmp_path / "nodes").write_text(NODES)
    script = bin_dir / "scontrol"
    _exe(script, f'#!/bin/sh\n[ "$2" = partition ] && exec cat {tmp_path}/partitions\nexec cat {tmp_path}/nodes\n')
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return script


def test_a_job_that_can_never_start(scontrol):
    with pytest.raises(UsageError) as err:
        check_partitions([(None, Ask(nodes=5, ntasks=5))], {})
    assert str(err.value) == ("-N/--nodes=5: expected at most 3: partition 'debug' has 3 node(s), so the job would "
                              "pend forever; ask for less, or another partition (-p) (--no-checks skips the checks)")
    check_partitions([(None, Ask(nodes=3, ntasks=12))], {})
    with pytest.raises(UsageError, match="partition 'gpu' allows 2 node"):
        check_partitions([(None, Ask(nodes=3, ntasks=3))], {"SBATCH_PARTITION": "gpu"})  # sbatch's variable
    wide = Ask(nodes=2, ntasks=2, cpus_per_task=8)  # 16 CPUs: more than debug's 12, not gpu's 256
    check_partitions([("debug,gpu", wide)], {})  # one of the partitions -p names can run it
    with pytest.raises(UsageError, match="partition 'debug' has 12 CPUs"):
        check_partitions([("debug", wide)], {"SBATCH_PARTITION": "gpu"})  # -p wins over sbatch's variable
    with pytest.raises(UsageError, match="component 1: "):
        check_partitions([(None, Ask(nodes=1, ntasks=1)), ("debug", Ask(nodes=4, ntasks=4, label="component 1: "))],
                         {})
    check_partitions([("nosuch", Ask(nodes=50, ntasks=50))], {})  # sbatch says what is wrong with the name


def test_scontrol_missing_failing_or_slow_skips_the_check(scontrol, monkeypatch):
    too_many = [(None, Ask(nodes=50, ntasks=50))]
    _exe(scontrol, "#!/bin/sh\necho 'slurm_load_partitions: Unable to contact slurm controller' >&2\nexit 1\n")
    check_partitions(too_many, {})
    monkeypatch.setattr(submit_checks, "SCONTROL_TIMEOUT", 0.5)
    _exe(scontrol, "#!/bin/sh\nexec sleep 30\n")
    start = time.monotonic()
    check_partitions(too_many, {})
    assert time.monotonic() - start < 5
    monkeypatch.setenv("PATH", "/nonexistent")
    check_partitions(too_many, {})
