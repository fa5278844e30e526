"""Module paths from before the layers became folders keep working, as the same module objects.

`import tf_for_slurm.slurm` gives `tf_for_slurm.host.slurm` itself (not a copy: patching one
patches the other), and `python -m tf_for_slurm.launcher` runs the module's new file.  Only the
path moved; see docs/ARCHITECTURE.md for where each module lives now.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from importlib.machinery import ModuleSpec
from types import CodeType, ModuleType
from typing import Optional, Sequence

MOVED = {  # old path -> new path
    "tf_for_slurm.addresses": "tf_for_slurm.plan.addresses",
    "tf_for_slurm.batch": "tf_for_slurm.host.allocation",
    "tf_for_slurm.batch_step": "tf_for_slurm.supervise.batch_step",
    "tf_for_slurm.child_process": "tf_for_slurm.supervise.child_process",
    "tf_for_slurm.environment": "tf_for_slurm.host.environment",
    "tf_for_slurm.gpus": "tf_for_slurm.plan.gpus",
    "tf_for_slurm.launcher": "tf_for_slurm.supervise.launcher",
    "tf_for_slurm.liveness": "tf_for_slurm.host.network",
    "tf_for_slurm.memory": "tf_for_slurm.host.allocation",
    "tf_for_slurm.mpi": "tf_for_slurm.host.mpi",
    "tf_for_slurm.ports": "tf_for_slurm.plan.ports",
    "tf_for_slurm.requeue": "tf_for_slurm.plan.requeue",
    "tf_for_slurm.roles": "tf_for_slurm.plan.roles",
    "tf_for_slurm.slurm": "tf_for_slurm.host.slurm",
    "tf_for_slurm.step_rules": "tf_for_slurm.plan.strategy",
    "tf_for_slurm.step_watch": "tf_for_slurm.plan.step_watch",
    "tf_for_slurm.stop_request": "tf_for_slurm.host.stop_request",
    "tf_for_slurm.supervisor": "tf_for_slurm.supervise.supervisor",
    "tf_for_slurm.table": "tf_for_slurm.cli.table",
    "tf_for_slurm.task_env": "tf_for_slurm.host.task_env",
    "tf_for_slurm.task_exec": "tf_for_slurm.supervise.task_exec",
    "tf_for_slurm.threads": "tf_for_slurm.host.threads",
}


# old paths that were also programs (`python -m tf_for_slurm.launcher ...`): the tf-slurm command they ran
COMMANDS = {"tf_for_slurm.launcher": "local", "tf_for_slurm.memory": "mem"}


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the target module ran when it was imported."""

    def get_code(self, fullname: str) -> Optional[CodeType]:  # for `python -m OLD.PATH`
        command = COMMANDS.get(fullname)
        if command is not None:
            source = f"import sys\nfrom tf_for_slurm.cli import main\nsys.exit(main([{command!r}, *sys.argv[1:]]))\n"
            return compile(source, f"<python -m {fullname}>", "exec")
        spec = importlib.util.find_spec(self.target)
        loader = spec.loader if spec is not None else None
        get_code = getattr(loader, "get_code", None)
        return get_code(self.target) if get_code is not None else None


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
                  ) -> Optional[ModuleSpec]:
        new = MOVED.get(fullname)
        return None if new is None else ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Put the finder on sys.meta_path once (importing `tf_for_slurm` does it)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
