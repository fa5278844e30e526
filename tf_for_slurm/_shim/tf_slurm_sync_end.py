"""SyncReplicasOptimizer's chief ends when its training does, not 120 s (or never) later.

Installed by the `sitecustomize` shim under `tf-slurm exec`; it patches TensorFlow only once the
program imports it (tf_slurm_when_imported).  Why (TensorFlow 2.21, tensorflow/python/training):

- sync_replicas_optimizer.py: the chief's hook starts a QueueRunner whose loop runs `sync_op` over
  and over.  Each run first takes the aggregated gradients from the accumulators on the ps
  (`take_grad(replicas_to_aggregate)`), which blocks until that many replicas pushed a gradient
  for the round, then applies them and refills the token queue.  Once the last step is applied,
  every worker stops (StopAtStepHook) and none pushes a gradient again, so the runner's next run
  blocks forever: with replicas_to_aggregate equal to the number of workers, no round can complete
  once the chief itself has stopped contributing.
- queue_runner_impl.py: on stop, the runner only closes the *token queue* (cancel_op); that does
  not cancel a `take_grad` that is waiting, so the thread stays in its session run.
- monitored_session.py / coordinator.py: closing a MonitoredTrainingSession runs the hooks' end()
  (the final checkpoint, then the user's hooks: the original DistributedTFQueueHook reports done to
  the ps here), then `_CoordinatedSession.close()`: `coord.join(stop_grace_period_secs=120)` waits
  out the whole default grace for that thread, then closes the session.  Measured under
  `tf-slurm local` (MNIST-04 style, 150 steps in ~2 s): 137 s per run with a ps that outlives it;
  with a ps that leaves once both workers reported done (the original's dequeue loop without its
  `time.sleep(180)`), the chief then hangs for good in the session's close, which waits for the
  step still in flight towards the ps that is gone.

The fix, for a chief whose hook aggregates every worker (replicas_to_aggregate >= total_num_replicas)
on a distributed session (grpc://, shared session state): the hook's runner threads run `sync_op`
in a session of their own (same target, graph and config, so the same variables, accumulators and
queues on the ps: what is computed does not change).  When the chief's MonitoredSession closes,
before any hook's end(), that session runs the runner's own cancel_op (closes the token queue, as
the runner would on stop) and is closed, which cancels the blocked `take_grad`; the runner thread
ends as it does for a closed queue (CancelledError counts as one from then on, else it would be
the coordinator's error) and the coordinator's join returns at once.
The round cancelled could never complete, the final checkpoint is written afterwards as before,
and the ps is still there since the done report comes later.  Anything else (a non-chief, backup
replicas, a local session, isolate_session_state) keeps TensorFlow's behaviour.  If closing that
session does not return within CLOSE_WAIT seconds, TensorFlow's grace applies as before.
"""

import threading

try:  # in-process, as tf_for_slurm._shim.tf_slurm_sync_end
    from .tf_slurm_when_imported import when_imported
except ImportError:  # from the shim directory on PYTHONPATH (tf-slurm exec)
    from tf_slurm_when_imported import when_imported  # type: ignore[no-redef]

_SYNC = "tensorflow.python.training.sync_replicas_optimizer"
_MONITORED = "tensorflow.python.training.monitored_session"
_RELEASE = "_tf_slurm_release_sync"  # on the Coordinator: ends the chief's sync runner
CLOSE_WAIT = 10.0  # s for the runner's own session to close (the in-flight step cancelled)
CANCEL_MS = 5000  # ms for the token queue's close


def install():
    """Patch the sync-replicas hook and the monitored session's close, now or once imported."""
    when_imported(_SYNC, _patch_hook, "the sync-replicas end")
    when_imported(_MONITORED, _patch_close, "the sync-replicas end")


def _runner_session(hook, session, coord):
    """A session of its own for the chief's sync runner, or None to keep TensorFlow's way."""
    opt = getattr(hook, "_sync_optimizer", None)
    if coord is None or opt is None or opt._replicas_to_aggregate < opt._total_num_replicas:
        return None  # backup replicas: a round may still complete without the chief
    target = session.sess_str
    text = target.decode() if isinstance(target, bytes) else str(target or "")
    config = getattr(session, "_config", None)
    if not text.startswith("grpc://") or (config is not None and config.isolate_session_state):
        return None  # a local session has state of its own: the runner must use the training one
    from tensorflow.python.client import session as session_lib

    return session_lib.Session(target, graph=session.graph, config=config)


def _releaser(own, runner):
    """release(): close the token queue, then the runner's session (cancels its waiting step); once."""
    lock, done = threading.Lock(), []

    def release():
        with lock:
            if done:
                return
            done.append(True)
        from tensorflow.core.protobuf import config_pb2
        from tensorflow.python.framework import errors

        # the step cancelled by the close below ends the runner's loop as a closed queue does (its
        # default is OutOfRangeError only: the CancelledError would become the coordinator's error)
        closed = tuple(runner._queue_closed_exception_types)
        runner._queue_closed_exception_types = closed + (errors.CancelledError,)
        try:
            own.run(runner.cancel_op, options=config_pb2.RunOptions(timeout_in_ms=CANCEL_MS))
        except Exception:  # the ps gone, or the queue closed already: the runner would ignore it too
            pass
        closer = threading.Thread(target=_close_quietly, args=(own,), name="tf_slurm_sync_close", daemon=True)
        closer.start()
        closer.join(CLOSE_WAIT)

    return release


def _close_quietly(session):
    try:
        session.close()
    except Exception:
        pass


def _patch_hook(module):
    hook = getattr(module, "_SyncReplicasOptimizerHook", None)
    if hook is None or getattr(hook, "_tf_slurm_sync_end", False):
        return
    original = hook.after_create_session

    def after_create_session(self, session, coord):
        runner = getattr(self, "_q_runner", None)
        try:
            own = _runner_session(self, session, coord) if runner is not None else None
        except Exception:  # no session of its own: TensorFlow's way, the grace included
            own = None
        if own is None:
            return original(self, session, coord)
        self._q_runner = None  # TensorFlow's init ops and tokens, without its runner threads
        try:
            original(self, session, coord)
        except BaseException:
            _close_quietly(own)
            raise
        finally:
            self._q_runner = runner
        runner.create_threads(own, coord=coord, daemon=True, start=True)
        setattr(coord, _RELEASE, _releaser(own, runner))

    hook.after_create_session = after_create_session
    hook._tf_slurm_sync_end = True


def _release(coord):
    release = getattr(coord, _RELEASE, None)
    if release is not None:
        release()


def _patch_close(module):
    monitored = getattr(module, "_MonitoredSession", None)
    coordinated = getattr(module, "_CoordinatedSession", None)
    if monitored is None or coordinated is None or getattr(monitored, "_tf_slurm_sync_end", False):
        return
    close_internal, close = monitored._close_internal, coordinated.close

    def _close_internal(self, exception_type=None):  # training is over: before any hook's end()
        _release(getattr(getattr(self, "_coordinated_creator", None), "coord", None))
        return close_internal(self, exception_type)

    def coordinated_close(self):  # also a session being recreated after an error
        _release(getattr(self, "_coord", None))
        return close(self)

    monitored._close_internal = _close_internal
    coordinated.close = coordinated_close
    monitored._tf_slurm_sync_end = True
