"""Put first on PYTHONPATH by `tf-slurm exec` for the task's Python programs; no effect elsewhere.

- TF_SLURM_TF_CONFIG_FILE (a TF_CONFIG over 128 KiB): the full JSON goes into this interpreter's
  os.environ only, never into the C environment, so TensorFlow sees the whole cluster while the
  program's own subprocesses still start (the kernel refuses an environment string over 128 KiB).
- TF_SLURM_SESSION_FILTERS (TF1 ps/worker tasks): a session whose master is this task's own server,
  made without device filters, gets them, so a worker's session never waits for the other workers.
Then any other sitecustomize further down sys.path runs as usual.
"""

import os as _os
import sys as _sys


def _in_process_only(name, value):
    environ = _os.environ
    try:  # CPython: os.environ's mapping without putenv()
        environ._data[environ.encodekey(name)] = environ.encodevalue(value)
    except AttributeError:
        environ[name] = value


_path = _os.environ.get("TF_SLURM_TF_CONFIG_FILE")
if _path:
    try:
        with open(_path, encoding="utf-8") as _fh:
            _in_process_only("TF_CONFIG", _fh.read())
    except OSError as _exc:
        _sys.stderr.write(f"tf_for_slurm: cannot read TF_SLURM_TF_CONFIG_FILE={_path!r}: {_exc.strerror}\n")


def _install_device_filters(filters, port):
    """Give sessions whose master is this task's own server the task's device filters (TensorFlow
    takes them from the session's config, not the server's), unless the program set some."""
    import importlib.abc
    import importlib.machinery

    target = "tensorflow.python.client.session"

    def ours(session_target):
        text = session_target.decode() if isinstance(session_target, bytes) else str(session_target or "")
        return text.startswith("grpc://") and text.rsplit(":", 1)[-1] == port

    def patch(module):
        session = getattr(module, "Session", None)
        if session is None or getattr(session, "_tf_slurm_filters", False):
            return
        original = session.__init__

        def __init__(self, target="", graph=None, config=None):
            if ours(target):
                from tensorflow.core.protobuf import config_pb2

                if config is None:
                    config = config_pb2.ConfigProto(device_filters=filters)
                elif not config.device_filters:
                    merged = config_pb2.ConfigProto()
                    merged.CopyFrom(config)
                    merged.device_filters.extend(filters)
                    config = merged
            original(self, target, graph, config)

        session.__init__ = __init__
        session._tf_slurm_filters = True

    class _Loader(importlib.abc.Loader):
        def __init__(self, inner):
            self.inner = inner

        def create_module(self, spec):
            return self.inner.create_module(spec)

        def exec_module(self, module):
            self.inner.exec_module(module)
            try:
                patch(module)
            except Exception as exc:  # never break the user's program for a convenience
                _sys.stderr.write(f"tf_for_slurm: device filters not applied: {exc}\n")

    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target_module=None):
            if name != target:
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader)
            return spec

    _sys.meta_path.insert(0, _Finder())


_filters = _os.environ.get("TF_SLURM_SESSION_FILTERS")
_self = _os.environ.get("TF_SLURM_SELF_ADDRESS", "")
if _filters and ":" in _self:
    _install_device_filters([f for f in _filters.split(",") if f], _self.rsplit(":", 1)[1])

_here = _os.path.dirname(_os.path.abspath(__file__))
for _entry in _sys.path:
    if _entry and _os.path.abspath(_entry) != _here and _os.path.isfile(_os.path.join(_entry, "sitecustomize.py")):
        _file = _os.path.join(_entry, "sitecustomize.py")
        with open(_file, encoding="utf-8") as _fh:
            exec(compile(_fh.read(), _file, "exec"), {"__name__": "sitecustomize", "__file__": _file})
        break
