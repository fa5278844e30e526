"""TF1 session fixes for a task's own program: device filters, and a short non-chief recovery wait.

Used by the `sitecustomize` shim that `tf-slurm exec` puts on PYTHONPATH, and in-process by
`GetServerDictionary`.  Why: a TF1 session created without device filters contacts every task of the
cluster, so one opened after another task has exited waits forever ("CreateSession still waiting
for response from worker").  TensorFlow takes the filters from the session's config (not the
server's), so `Session.__init__` is wrapped: a session whose target is this task's own server
(grpc://...:PORT) and whose config names no filters gets `filters`.  Nothing else changes.
`install_recovery_wait` shortens TensorFlow's 30 s default wait of a non-chief for the chief.
"""

try:  # in-process, as tf_for_slurm._shim.tf_slurm_session_filters
    from .tf_slurm_when_imported import when_imported
except ImportError:  # from the shim directory on PYTHONPATH (tf-slurm exec)
    from tf_slurm_when_imported import when_imported  # type: ignore[no-redef]

_TARGET = "tensorflow.python.client.session"
_MANAGER = "tensorflow.python.training.session_manager"


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

    when_imported(_TARGET, patch, "device filters")


def install_recovery_wait(seconds):
    """Non-chief TF1 workers look for the chief's initialised model every `seconds` s, not 30.

    Why: MonitoredTrainingSession's worker session creator builds a SessionManager with TensorFlow's
    default recovery_wait_secs=30, so a worker that comes up a moment before the chief sleeps 30 s
    before its next look (measured: an original-style job took 36 s instead of 7).  Only the
    default changes; a SessionManager given recovery_wait_secs keeps it.
    """
    seconds = float(seconds)

    def patch(module):
        manager = getattr(module, "SessionManager", None)
        if manager is None or getattr(manager, "_tf_slurm_recovery_wait", False):
            return
        original = manager.__init__

        def __init__(self, *args, **kwargs):
            if len(args) < 5 and "recovery_wait_secs" not in kwargs:  # the 5th parameter, not given
                kwargs["recovery_wait_secs"] = seconds
            original(self, *args, **kwargs)

        manager.__init__ = __init__
        manager._tf_slurm_recovery_wait = True

    when_imported(_MANAGER, patch, "the recovery wait")
