"""The house rules, checked on the source: layers, one home per name, small modules, old paths.

Plain data only (the package's files read as text and parsed), so this runs in the fast subset.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tf_for_slurm._moved import MOVED
from tf_for_slurm.host import settings

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tf_for_slurm"
SHIM = PACKAGE / "_shim"
# the two modules that define the names: Slurm's variables and tf_for_slurm's settings
NAME_HOMES = {PACKAGE / "host" / "slurm.py", PACKAGE / "host" / "settings.py"}
NAME = re.compile(r"\b(?:TF_SLURM|SLURMD?)_[A-Z][A-Z0-9_]*")
MAX_LINES = 400


def _sources(include_shim: bool = False) -> list:
    return sorted(p for p in PACKAGE.rglob("*.py") if include_shim or SHIM not in p.parents)


def _docstrings(tree: ast.AST) -> set:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _string_names(path: Path) -> list:
    """(line, name) of every Slurm / TF_SLURM_ variable name inside a string literal (docstrings aside)."""
    tree = ast.parse(path.read_text())
    skip = _docstrings(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            out += [(node.lineno, m) for m in NAME.findall(node.value)]
    return out


def test_variable_names_are_spelled_only_where_they_are_defined():
    stray = [f"{p.relative_to(ROOT)}:{line}: {name}" for p in _sources() if p not in NAME_HOMES
             for line, name in _string_names(p)]
    assert not stray, "take these names from tf_for_slurm.host.settings / host.slurm:\n" + "\n".join(stray)


def test_each_setting_is_defined_once_in_the_registry():
    text = (PACKAGE / "host" / "settings.py").read_text()
    for name in settings.REGISTRY:
        assert len(re.findall(rf'"{name}"', text)) == 1, name


def test_the_shim_reads_only_registered_settings():
    # the shim runs inside the task's own program, before (or without) the package: it spells names
    for path in SHIM.glob("*.py"):
        for line, name in _string_names(path):
            assert name in settings.REGISTRY, f"{path.name}:{line}: {name} is not in host.settings.REGISTRY"


def test_every_tf_slurm_name_in_code_docs_and_scripts_is_registered():
    texts = [p.read_text() for p in _sources(include_shim=True)]
    texts += [p.read_text() for p in (ROOT / "scripts").glob("*.sh")]
    texts += [(ROOT / "README.md").read_text()] + [p.read_text() for p in (ROOT / "docs").glob("*.md")]
    names = {n for t in texts for n in re.findall(r"\bTF_SLURM_[A-Z][A-Z0-9_]*", t)}
    assert names - set(settings.REGISTRY) == set()


def test_reference_settings_table_is_the_registry():
    reference = (ROOT / "docs" / "REFERENCE.md").read_text()
    m = re.search(r"<!-- settings: generated[^\n]*-->\n(.*?)\n<!-- end of settings -->", reference, re.S)
    assert m, "docs/REFERENCE.md lost its settings table markers"
    assert m.group(1) == settings.markdown_table(), (
        "docs/REFERENCE.md's settings table differs from host.settings.REGISTRY; paste the output of "
        "`python -c 'from tf_for_slurm.host import settings; print(settings.markdown_table())'`")


def test_only_the_host_layer_touches_os_environ():
    stray = []
    for path in _sources():
        if (PACKAGE / "host") in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "putenv") \
                    and isinstance(node.value, ast.Name) and node.value.id == "os":
                stray.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not stray, "read the environment through tf_for_slurm.host:\n" + "\n".join(stray)


@pytest.mark.parametrize("path", _sources(include_shim=True), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_stay_small(path):
    assert len(path.read_text().splitlines()) <= MAX_LINES


def test_layers_are_folders():
    for layer in ("plan", "host", "supervise", "runtime", "cli"):
        assert (PACKAGE / layer / "__init__.py").is_file(), layer
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))
    # the faces with the original names, the package's own files, and the one shared error family
    assert flat == ["DistributedTFQueueHook.py", "ServerDictionary.py", "__init__.py", "__main__.py",
                    "_moved.py", "compat.py", "errors.py"]


@pytest.mark.parametrize("old,new", sorted(MOVED.items()))
def test_old_module_paths_are_the_moved_modules(old, new):
    assert importlib.import_module(old) is importlib.import_module(new)


def test_public_paths_and_names():
    import tf_for_slurm

    for name in ("ServerDictionary", "plan_from_env", "step_from_env", "ClusterPlan", "build_plan"):
        assert hasattr(tf_for_slurm, name) or importlib.import_module(f"tf_for_slurm.{name}")
    from tf_for_slurm.ServerDictionary import GetServerDictionary  # noqa: F401
    from tf_for_slurm.stop_request import shared_stop_request  # noqa: F401
    from tf_for_slurm.plan import ClusterPlan, Task  # noqa: F401
    from tf_for_slurm.environment import noib_address  # noqa: F401
    from tf_for_slurm.task_env import apply_tf_config  # noqa: F401
    from tf_for_slurm.liveness import port_accepts  # noqa: F401


def test_import_does_not_pull_tensorflow_or_mpi():
    code = ("import sys, tf_for_slurm, tf_for_slurm.cli, tf_for_slurm.runtime, tf_for_slurm.compat; "
            "import tf_for_slurm.supervise.task_exec, tf_for_slurm.host.environment; "
            "print(sorted(m for m in ('tensorflow', 'mpi4py', 'tf_keras') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out


@pytest.mark.parametrize("template", ["tf_slurm_job.sh", "tf_slurm_hetjob.sh", "BASH_Distributed_MNIST.sh"])
def test_every_template_carries_the_one_warning_trap(template):
    """The trap must be a template's first lines (users copy the file; Slurm copies it to its spool),
    so each carries a copy: the same lines as submit's script (host.batch_script.warn_trap)."""
    from tf_for_slurm.host.batch_script import warn_trap
    text = (ROOT / "scripts" / template).read_text()
    assert warn_trap(template) in text, f"scripts/{template}: paste host.batch_script.warn_trap({template!r})"
    assert text.count("mktemp -d \"") == 1  # one private folder
