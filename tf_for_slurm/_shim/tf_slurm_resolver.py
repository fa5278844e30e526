"""Under `tf-slurm exec`: TensorFlow's SlurmClusterResolver answers with the step's plan.

Without it, an unmodified script that builds its cluster with the resolver ignores the plan: it
runs nvidia-smi (absent on CPU nodes: FileNotFoundError), counts the GPUs exec narrowed as the
node's, and picks its own ports (port_base + local index: two jobs on a node collide).  The patch
is tf_for_slurm.runtime.slurm_resolver.patch_tf_class, applied once the program imports
TensorFlow's module; a Python without tf_for_slurm keeps TensorFlow's class, with one warning.
"""

import sys

try:  # in-process, as tf_for_slurm._shim.tf_slurm_resolver
    from .tf_slurm_when_imported import when_imported
except ImportError:  # from the shim directory on PYTHONPATH (tf-slurm exec)
    from tf_slurm_when_imported import when_imported  # type: ignore[no-redef]

MODULE = "tensorflow.python.distribute.cluster_resolver.slurm_cluster_resolver"


def _patch(module):
    try:
        from tf_for_slurm.runtime.slurm_resolver import patch_tf_class
    except ImportError as exc:
        sys.stderr.write(f"tf_for_slurm: warning: TensorFlow's SlurmClusterResolver is left as it is ({exc}): "
                         "its addresses are not the step's plan\n")
        return
    patch_tf_class(module)


def install():
    when_imported(MODULE, _patch, "the SlurmClusterResolver plan")
