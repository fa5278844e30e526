"""MultiWorkerMirroredStrategy's peer health check, without freezing the task's Python while it waits.

Installed by the `sitecustomize` shim under `tf-slurm exec`; it patches TensorFlow only once the
program imports it (tf_slurm_when_imported).  Why (TensorFlow 2.15.1 and 2.21):

- collective_all_reduce_strategy.py: MWMS checks every peer from a thread of its own, at start and
  then every 30 s (`CollectiveAllReduceExtended._check_health`), each check with a 10 s timeout and
  retries, through `Context.check_collective_ops_peer_health`.
- tfe_wrapper.cc: that call's binding (`TFE_CollectiveOpsCheckPeerHealth`) waits for the peer's
  answer without releasing the GIL.  While a peer is slow to answer (a loaded node, a peer that is
  ending), every Python thread of the task stops: the training loop, and the signal handlers that
  turn a time-limit warning into a checkpoint.  Measured with a peer that takes the connection and
  never answers, a 3 s check: the main thread stopped 3.0 s (both releases); with this patch its
  longest pause was that of its own 10 ms sleeps.

The patch makes the same call through TensorFlow's C API with ctypes, which releases the GIL around
it: the same peer, timeout and error (the `tf.errors` class of the status's code), so TensorFlow's
own retries and its abort of the collectives when a peer is down work as before.  If the C API
cannot be reached, TensorFlow's binding stays (one line on stderr).
"""

import ctypes
import os

try:  # in-process, as tf_for_slurm._shim.tf_slurm_peer_health
    from .tf_slurm_when_imported import when_imported
except ImportError:  # from the shim directory on PYTHONPATH (tf-slurm exec)
    from tf_slurm_when_imported import when_imported  # type: ignore[no-redef]

_CONTEXT = "tensorflow.python.eager.context"
_LIBRARY = "libtensorflow_cc.so.2"  # next to tensorflow/python; loaded by TensorFlow already


class _CApi:
    """The four C functions the check needs, from the library TensorFlow loaded."""

    def __init__(self, path):
        lib = ctypes.CDLL(path)  # ctypes.CDLL, not PyDLL: the GIL is released during each call
        self.new_status = lib.TF_NewStatus
        self.new_status.restype = ctypes.c_void_p
        self.new_status.argtypes = []
        self.delete_status = lib.TF_DeleteStatus
        self.delete_status.restype = None
        self.delete_status.argtypes = [ctypes.c_void_p]
        self.code = lib.TF_GetCode
        self.code.restype = ctypes.c_int
        self.code.argtypes = [ctypes.c_void_p]
        self.message = lib.TF_Message
        self.message.restype = ctypes.c_char_p
        self.message.argtypes = [ctypes.c_void_p]
        self.check = lib.TFE_CollectiveOpsCheckPeerHealth
        self.check.restype = None
        self.check.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int64, ctypes.c_void_p]
        # a prototype of its own: ctypes.pythonapi's shared function object keeps the program's settings
        prototype = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)
        self.capsule_pointer = prototype(("PyCapsule_GetPointer", ctypes.pythonapi))

    def check_peer(self, handle, task, timeout_in_ms):
        """(code, message) of the peer's health check; code 0: healthy."""
        context = self.capsule_pointer(handle, None)
        status = self.new_status()
        try:
            self.check(context, task.encode(), int(timeout_in_ms), status)
            code = self.code(status)
            return code, (self.message(status) or b"").decode(errors="replace") if code else ""
        finally:
            self.delete_status(status)


def _error(code, message):
    from tensorflow.python.framework import errors_impl

    try:
        return errors_impl.exception_type_from_error_code(code)(None, None, message)
    except KeyError:  # a code TensorFlow has no class for
        return errors_impl.OpError(None, None, message, code)


def _patch(module):
    tf_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(module.__file__))))
    api = _CApi(os.path.join(tf_dir, _LIBRARY))
    original = module.Context.check_collective_ops_peer_health

    def check_collective_ops_peer_health(self, task, timeout_in_ms):
        self.ensure_initialized()
        code, message = api.check_peer(self._handle, task, timeout_in_ms)
        if code:
            raise _error(code, message)

    check_collective_ops_peer_health.__doc__ = original.__doc__
    check_collective_ops_peer_health.__wrapped__ = original  # type: ignore[attr-defined]
    module.Context.check_collective_ops_peer_health = check_collective_ops_peer_health


def install():
    """Patch TensorFlow's peer health check once the program imports TensorFlow."""
    when_imported(_CONTEXT, _patch, "the peer health check that lets Python run while it waits")
