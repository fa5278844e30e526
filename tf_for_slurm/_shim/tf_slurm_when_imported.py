"""Run a patch on a module now if it is loaded, else right after it is first imported.

Used by the shim's TensorFlow patches (device filters, the non-chief recovery wait) so that a
task's program needs no change and TensorFlow is not imported before the program imports it.
A patch that fails prints one line and leaves the program alone.  Several patches of one module
all run, in the order they were asked for (one finder for all: a second finder per module would
never be asked, as the first one found the module).
"""

import importlib.abc
import importlib.machinery
import sys as _sys

_PENDING = {}  # module name -> [(patch, what)] still waiting for its import


def _safe(module, patch, what):
    try:
        patch(module)
    except Exception as exc:  # never break the user's program for a convenience
        _sys.stderr.write(f"tf_for_slurm: {what} not applied: {exc}\n")


class _Loader(importlib.abc.Loader):
    def __init__(self, inner, name):
        self.inner, self.name = inner, name

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        for patch, what in _PENDING.pop(self.name, []):
            _safe(module, patch, what)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target_module=None):
        if fullname not in _PENDING:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, fullname)
        return spec


_FINDER = _Finder()
# this file is imported twice in a task under exec (as the shim's top-level module, and in-process as
# tf_for_slurm._shim.tf_slurm_when_imported): both copies share one registry and one finder
_TWIN = _sys.modules.get("tf_for_slurm._shim.tf_slurm_when_imported" if __name__ == "tf_slurm_when_imported"
                         else "tf_slurm_when_imported")
if _TWIN is not None and hasattr(_TWIN, "_PENDING") and hasattr(_TWIN, "_FINDER"):
    _PENDING, _FINDER = _TWIN._PENDING, _TWIN._FINDER


def when_imported(name, patch, what):
    """Call patch(module) for module `name` (now, or once imported); `what` names it in errors."""
    if name in _sys.modules:
        _safe(_sys.modules[name], patch, what)
        return
    _PENDING.setdefault(name, []).append((patch, what))
    if _FINDER not in _sys.meta_path:
        _sys.meta_path.insert(0, _FINDER)
