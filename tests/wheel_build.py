"""Build a wheel of this checkout the way a user's `pip wheel .` would (shared by the packaging tests)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build_wheel(work: Path) -> Path:
    """Copy the package sources to `work/src` (building in the checkout would leave build/ behind),
    build with pip into `work/dist`, and return the wheel's path."""
    src = work / "src"
    src.mkdir(parents=True)
    for name in ("setup.cfg", "pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "tf_for_slurm", src / "tf_for_slurm", ignore=shutil.ignore_patterns("__pycache__"))
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
                          "-w", str(work / "dist"), str(src)], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    return next((work / "dist").glob("tf_for_slurm-*.whl"))
