"""Device filters for the sessions a task opens on its own TensorFlow server (no import side effects).

Used by the `sitecustomize` shim that `tf-slurm exec` puts on PYTHONPATH, and in-process by
`GetServerDictionary`.  Why: a TF1 session created without device filters contacts every task of the
cluster, so one opened after another task has exited waits forever ("CreateSession still waiting
for response from worker").  TensorFlow takes the filters from the session's config (not the
server's), so `Session.__init__` is wrapped: a session whose target is this task's own server
(grpc://...:PORT) and whose config names no filters gets `filters`.  Nothing else changes.
"""

import sys as _sys

_TARGET = "tensorflow.python.client.session"


def install(filters, port):
    """Patch `tf.compat.v1.Session` now if TensorFlow is loaded, else when it is imported."""
    filters, port = list(filters), str(port)

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

    if _TARGET in _sys.modules:
        patch(_sys.modules[_TARGET])
        return

    import importlib.abc
    import importlib.machinery

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
            if name != _TARGET:
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader)
            return spec

    _sys.meta_path.insert(0, _Finder())
