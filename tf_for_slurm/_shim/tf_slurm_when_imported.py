"""Run a patch on a module now if it is loaded, else right after it is first imported.

Used by the shim's TensorFlow patches (device filters, the non-chief recovery wait) so that a
task's program needs no change and TensorFlow is not imported before the program imports it.
A patch that fails prints one line and leaves the program alone.
"""

import importlib.abc
import importlib.machinery
import sys as _sys


def when_imported(name, patch, what):
    """Call patch(module) for module `name` (now, or once imported); `what` names it in errors."""
    def safe(module):
        try:
            patch(module)
        except Exception as exc:  # never break the user's program for a convenience
            _sys.stderr.write(f"tf_for_slurm: {what} not applied: {exc}\n")

    if name in _sys.modules:
        safe(_sys.modules[name])
        return

    class _Loader(importlib.abc.Loader):
        def __init__(self, inner):
            self.inner = inner

        def create_module(self, spec):
            return self.inner.create_module(spec)

        def exec_module(self, module):
            self.inner.exec_module(module)
            safe(module)

    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target_module=None):
            if fullname != name:
                return None
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader)
            return spec

    _sys.meta_path.insert(0, _Finder())
