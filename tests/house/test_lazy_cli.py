"""Start-up: a `tf-slurm` call imports only the module of the subcommand it runs.

Why: every task of a step starts `tf-slurm exec` (and batch scripts call tf-config per task); the
code of submit, status, logs, ... cost each of them start-up time it never used (bench/bench_startup.py).
Each check runs in a fresh interpreter and looks at sys.modules.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from envs import step_env

from tf_for_slurm import cli

ROOT = Path(__file__).resolve().parents[2]
SUBCOMMAND_MODULES = {f"tf_for_slurm.cli.{c.module}" for c in cli.COMMANDS}
OTHERS_OF_EXEC = SUBCOMMAND_MODULES - {"tf_for_slurm.cli.exec_command"}
# what only submit, status and logs use
JOB_MODULES = {"tf_for_slurm.host.batch_script", "tf_for_slurm.host.sbatch", "tf_for_slurm.host.scontrol",
               "tf_for_slurm.host.submit_checks", "tf_for_slurm.plan.submit_checks"}


def _modules_after(code: str, env=None) -> set:
    """The modules loaded once `code` ran (it prints them as JSON: `_PRINT`), in a fresh python."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SLURMD_", "TF_SLURM_", "TF_CONFIG"))}
    base.update({"PYTHONPATH": str(ROOT), **(env or {})})
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=base)
    assert r.returncode == 0, r.stderr
    return set(json.loads(r.stdout.strip().splitlines()[-1]))


_PRINT = "import json, sys; print(json.dumps(sorted(sys.modules)))"
# runs `tf-slurm ARGV` in this interpreter; os.execvpe (exec's last act) prints the modules instead
_MAIN = ("import os, sys, json\n"
         "def _exec(*a):\n"
         "    print(json.dumps(sorted(sys.modules))); sys.stdout.flush(); os._exit(0)\n"
         "os.execvpe = _exec\n"
         "from tf_for_slurm.cli import main\n"
         "status = main({argv!r})\n"
         "print(json.dumps(sorted(sys.modules))); sys.exit(status)\n")


def test_import_of_the_cli_imports_no_subcommand_module():
    loaded = _modules_after("import tf_for_slurm.cli; " + _PRINT)
    assert not loaded & (SUBCOMMAND_MODULES | JOB_MODULES), sorted(loaded & (SUBCOMMAND_MODULES | JOB_MODULES))
    assert not {m for m in loaded if m.startswith("tf_for_slurm.supervise")}
    assert "importlib.metadata" not in loaded  # --version's only


def test_exec_imports_no_other_subcommand():
    loaded = _modules_after(_MAIN.format(argv=["exec", "--ps", "0", "--", "true"]), step_env("localhost", "1"))
    assert "tf_for_slurm.cli.exec_command" in loaded and "tf_for_slurm.supervise.task_exec" in loaded
    assert not loaded & (OTHERS_OF_EXEC | JOB_MODULES), sorted(loaded & (OTHERS_OF_EXEC | JOB_MODULES))
    assert "difflib" not in loaded  # the typo suggestions' only: imported on a usage error


def test_tf_config_imports_no_supervisor():
    loaded = _modules_after(_MAIN.format(argv=["tf-config", "--ps", "0"]), step_env("localhost", "1"))
    assert "tf_for_slurm.cli.plan_commands" in loaded
    assert not {m for m in loaded if m.startswith("tf_for_slurm.supervise")}
    assert not loaded & (SUBCOMMAND_MODULES - {"tf_for_slurm.cli.plan_commands"})


def test_every_subcommand_module_imports_no_tensorflow():
    code = "import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in sorted(SUBCOMMAND_MODULES))
    loaded = _modules_after(code + _PRINT)
    assert SUBCOMMAND_MODULES <= loaded
    assert not loaded & {"tensorflow", "tf_keras", "mpi4py"}


def test_the_package_loads_its_public_names_on_first_use():
    code = ("import sys, tf_for_slurm; before = 'tf_for_slurm.host.environment' in sys.modules\n"
            "from tf_for_slurm import *  # noqa: F403\n"
            "assert not before and tf_for_slurm.plan_from_env is sys.modules['tf_for_slurm.host.environment']"
            ".plan_from_env and all(hasattr(tf_for_slurm, n) for n in tf_for_slurm.__all__)\n" + _PRINT)
    assert "tf_for_slurm.plan.cluster" in _modules_after(code)
