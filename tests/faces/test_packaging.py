"""What a user installs: the wheel carries the licence, py.typed and the shim, requires python-hostlist
(a dependency, not copied code) but not numpy, and `tf-slurm --version` says the metadata's version."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import tf_for_slurm

ROOT = Path(__file__).resolve().parents[2]


def _setup_cfg() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return cfg


@pytest.mark.install
@pytest.mark.timeout(300)
def test_wheel_contents(built_wheel):
    wheel = zipfile.ZipFile(built_wheel)
    names = wheel.namelist()
    assert "tf_for_slurm/py.typed" in names and "tf_for_slurm/_shim/sitecustomize.py" in names
    assert "tf_for_slurm/_shim/tf_slurm_session_filters.py" in names
    assert any(n.endswith(".dist-info/LICENSE") for n in names)
    meta = wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    requires = [line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    unconditional = [r for r in requires if ";" not in r]
    assert unconditional == ["python-hostlist>=1.23"], requires
    assert "License: MIT" in meta
    assert not any("hostlist" in n.lower() for n in names if not n.startswith("tf_for_slurm-"))


def test_library_never_imports_numpy():
    code = "import sys, tf_for_slurm, tf_for_slurm.cli, tf_for_slurm.runtime, tf_for_slurm.batch; print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "False", out.stderr
    for path in (ROOT / "tf_for_slurm").rglob("*.py"):
        assert "import numpy" not in path.read_text(), path


def test_version_from_metadata():
    version = _setup_cfg()["metadata"]["version"]
    out = subprocess.run([sys.executable, "-m", "tf_for_slurm", "--version"], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (out.returncode, out.stdout.strip()) == (0, f"tf-slurm {version}"), out.stderr
    assert tf_for_slurm.__version__ == version


def test_licence_and_changelog():
    assert _setup_cfg()["metadata"]["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## {_setup_cfg()['metadata']['version']}" in changelog
