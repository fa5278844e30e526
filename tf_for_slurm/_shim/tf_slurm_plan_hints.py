"""When the step's plan does not fit the script: one line with the fix and exit 1, not TF's error or a hang.

Installed by the `sitecustomize` shim under `tf-slurm exec`; each check patches TensorFlow once the
program imports it (tf_slurm_when_imported), and anything failing inside a check leaves the call
to TensorFlow as it was.  What happens without them (measured under `tf-slurm local`):

- MultiWorkerMirroredStrategy in a step with ps (one ps is the default): the ps raises "There is
  no id for task_type 'ps'", nothing says why.  The chief prints the line and exits 1, which ends
  the step; any other task that builds the strategy does the same CHIEF_FIRST seconds later (a
  script whose chief builds none still ends).
- A ParameterServerStrategy script in a plan without a chief: every task calls Server.join(), the
  step never ends.  The step's chief (worker 0 when the plan has no chief) calling join() means no
  task coordinates: it prints the line and exits 1, which ends the step; the others are left alone.
- A TF1 ps/worker script under --ps 0: replica_device_setter places nothing, each worker keeps its
  own variables, the chief trains alone and the other workers wait for its model until the drain
  ends them (status 0, silently wrong).  The chief prints the line and exits 1.

Each line has the form of a fix line, `tf-slurm: <what is wrong>; fix: <what to do>`
(plan/failure_words.py's FIX_LINE): `tf-slurm status` and the step's end line show it.
"""

import json
import os
import sys
import time

try:  # in-process, as tf_for_slurm._shim.tf_slurm_plan_hints
    from .tf_slurm_when_imported import when_imported
except ImportError:  # from the shim directory on PYTHONPATH (tf-slurm exec)
    from tf_slurm_when_imported import when_imported  # type: ignore[no-redef]

_MWMS = "tensorflow.python.distribute.collective_all_reduce_strategy"
_SERVER = "tensorflow.python.training.server_lib"
_DEVICE_SETTER = "tensorflow.python.training.device_setter"
CHIEF_FIRST = 5.0  # s a non-chief task that found the same misfit waits for the chief to end the step
PREFIX = "tf-slurm: "  # of a fix line (plan.failure_words.FIX_LINE); the shim cannot import tf_for_slurm


def _stop(line, wait=0.0):
    """Say it on stderr (seen at any log level) and end this task: bounded, even from a thread.

    wait: seconds to stay silent first, so that the chief, which says the same, ends the step
    alone and the user reads the line once (a task the step ends meanwhile never says it).
    """
    if wait > 0:
        time.sleep(wait)
    try:
        sys.stdout.flush()
    except Exception:
        pass
    sys.stderr.write(f"{PREFIX}{line}\n")
    sys.stderr.flush()
    os._exit(1)


def _cluster_tasks(tf_config):
    """[(role, index)] of TF_CONFIG's cluster (lists, or sparse {"7": address} maps: trimmed, it
    still holds every ps and the chief)."""
    cluster = json.loads(tf_config or "{}").get("cluster") or {}
    out = []
    for role, addrs in cluster.items():
        indices = [int(i) for i in addrs] if isinstance(addrs, dict) else range(len(addrs))
        out += [(role, i) for i in indices]
    return out


def mwms_line(num_ps):
    default = ", the default" if num_ps == 1 else ""
    return (f"MultiWorkerMirroredStrategy cannot run with ps tasks (this step has {num_ps} ps{default}); "
            "fix: run with --ps 0 (TF_SLURM_PS=0, or NUM_PS=0 in the sbatch templates)")


def join_line(role, index):
    if role == "chief":
        return ("the chief called Server.join(), so no task coordinates and the step would never end; fix: under "
                "ParameterServerStrategy the chief is the coordinator: it must train, not serve")
    return (f"{role} {index} is this step's chief (the plan has no chief task) and called Server.join(), so no "
            "task trains or coordinates and the step would never end (a ParameterServerStrategy script needs a chief); "
            "fix: run with --chief (TF_SLURM_CHIEF=1) or --tasks chief,ps,worker,...")


def no_ps_line():
    return ("replica_device_setter found no ps in this step, so every worker keeps its own variables and the "
            "other workers wait forever for the chief's (a TF1 ps/worker script needs ps tasks); fix: run with --ps N "
            "(N >= 1; TF_SLURM_PS=N)")


def install(role, index, num_ps, num_workers, is_chief, tf_config):
    """Arm the three checks for this task: its role and index, the step's counts, whether it is the
    step's chief (as tf_for_slurm's plan says, passed by task_env), its TF_CONFIG at start-up."""
    index, num_ps, num_workers = int(index), int(num_ps), int(num_workers)
    is_chief = is_chief == "1"

    def mwms_patch(module):
        for name in ("CollectiveAllReduceStrategy", "CollectiveAllReduceStrategyV1"):
            cls = getattr(module, name, None)
            if cls is None or "_tf_slurm_hint" in vars(cls):
                continue
            _wrap_init(cls, lambda args, kwargs: num_ps > 0 and _own_cluster(args, kwargs), lambda: mwms_line(num_ps),
                       0.0 if is_chief else CHIEF_FIRST)

    def server_patch(module):
        server = module.Server
        if getattr(server, "_tf_slurm_hint", False):
            return
        original = server.join

        def join(self, *args, **kwargs):
            if is_chief:
                _stop(join_line(role, index))
            return original(self, *args, **kwargs)

        server.join = join
        server._tf_slurm_hint = True

    def device_setter_patch(module):
        original = module.replica_device_setter
        if getattr(original, "_tf_slurm_hint", False):
            return

        def no_ps(args, kwargs):
            ps_tasks = kwargs.get("ps_tasks", args[0] if args else 0)
            cluster = kwargs.get("cluster", args[4] if len(args) > 4 else None)
            if num_ps or ps_tasks or cluster is None or "ps" in module.server_lib.ClusterSpec(cluster).jobs:
                return False
            trainers = num_workers + sum(1 for r, _ in _cluster_tasks(tf_config) if r == "chief")
            return trainers > 1 and is_chief

        def replica_device_setter(*args, **kwargs):
            if _safe(lambda: no_ps(args, kwargs)):
                _stop(no_ps_line())
            return original(*args, **kwargs)

        replica_device_setter.__doc__ = original.__doc__
        replica_device_setter._tf_slurm_hint = True
        module.replica_device_setter = replica_device_setter

    when_imported(_MWMS, mwms_patch, "the MultiWorkerMirroredStrategy check")
    when_imported(_SERVER, server_patch, "the Server.join check")
    when_imported(_DEVICE_SETTER, device_setter_patch, "the replica_device_setter check")


def _safe(check):
    """A check's answer; False when the check itself fails (the program goes on as it would)."""
    try:
        return bool(check())
    except Exception:
        return False


def _own_cluster(args, kwargs):
    """Whether the strategy reads TF_CONFIG (no resolver given, or TensorFlow's TF_CONFIG resolver)."""
    given = kwargs.get("cluster_resolver")
    given = given if given is not None else next((a for a in args if hasattr(a, "cluster_spec")), None)
    return given is None or type(given).__name__ == "TFConfigClusterResolver"


def _wrap_init(cls, wrong, line, wait):
    original = cls.__init__

    def __init__(self, *args, **kwargs):
        if _safe(lambda: wrong(args, kwargs)):
            _stop(line(), wait)
        original(self, *args, **kwargs)

    cls.__init__ = __init__
    cls._tf_slurm_hint = True
