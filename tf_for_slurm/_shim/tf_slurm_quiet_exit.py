"""At the program's exit, TensorFlow no longer removes its functions from the other tasks one by one.

Installed by the `sitecustomize` shim under `tf-slurm exec`; it patches TensorFlow only once the
program imports it (tf_slurm_when_imported).  Why (TensorFlow 2.15.1 and 2.21):

- atomic_function.py: as the interpreter ends, every traced function's `__del__` calls
  `Context.remove_function`; with a remote eager context (a ParameterServerStrategy coordinator)
  that sends a RemoveFunction request to every worker and ps (context.cc), one function at a time.
- So a coordinator whose training is over spends 1-10 s exiting, and, when a worker's node was lost
  (the step goes on without it, plan/lost_task.py), 20 s measured on the local Slurm harness, with
  one "Failed to remove function remotely" ERROR line per function: the step's end waits for it.

At exit the removal is pointless: the other tasks are ended by the step's supervisor right after.
The patch registers an `atexit` handler that makes `Context.remove_function` do nothing; until the
program's end, TensorFlow behaves as before.
"""

import atexit

try:  # in-process, as tf_for_slurm._shim.tf_slurm_quiet_exit
    from .tf_slurm_when_imported import when_imported
except ImportError:  # from the shim directory on PYTHONPATH (tf-slurm exec)
    from tf_slurm_when_imported import when_imported  # type: ignore[no-redef]

_CONTEXT = "tensorflow.python.eager.context"


def _skip_removals(context_class):
    def at_exit():
        context_class.remove_function = lambda self, name: None

    return at_exit


def _patch(module):
    atexit.register(_skip_removals(module.Context))


def install():
    """Patch TensorFlow's eager context once the program imports it."""
    when_imported(_CONTEXT, _patch, "the quiet exit (no function removal at exit)")
