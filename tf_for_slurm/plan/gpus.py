"""Which GPUs each task of a node may see.  Pure logic: no TensorFlow, no os.environ.

Slurm hands a node's tasks a list of GPU ids (CUDA_VISIBLE_DEVICES, SLURM_STEP_GPUS, or the
plan's `Task.gpus`).  Those ids are used as given: under cgroup device confinement Slurm
renumbers CUDA_VISIBLE_DEVICES from 0 while SLURM_STEP_GPUS keeps physical ids, so inventing
`range(n)` would pick the wrong devices on one of the two.  The caller (runtime/server.py)
reads the environment and writes CUDA_VISIBLE_DEVICES; this module only decides.

Rules:
- ps tasks see no GPU (they hold variables; a GPU would only waste memory).
- worker / chief / evaluator tasks on one node split that node's list into contiguous shares,
  the first `len % n` tasks getting one extra GPU (5 GPUs, 2 workers -> 3 + 2).
- more GPU tasks than GPUs: task k shares GPU `k % len` (2 GPUs, 3 workers -> 0, 1, 0).
- no GPUs: an empty share (CPU-only nodes just work).
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence, Tuple

from tf_for_slurm.errors import UsageError, bad_value

VISIBLE_GPUS = "the visible GPU list"  # the ids this process may use (host.slurm names the variable)
STEP_GPUS = "the step's GPU list"  # Slurm's step GPU ids (host.slurm names the variable)
NEUTRAL_NAMES = (VISIBLE_GPUS, STEP_GPUS)  # callers that read the variables pass host.slurm.GPU_NAMES

GPU_ROLES = ("worker", "chief", "evaluator")
# Values Slurm (older releases) or users put in CUDA_VISIBLE_DEVICES to mean "none".
_NO_DEVICE_MARKERS = {"", "nodevfiles", "none", "-1"}


def parse_gpu_list(value: Optional[str], name: str = VISIBLE_GPUS) -> tuple:
    """'0,1,3' -> ('0', '1', '3'); None, '' or 'NoDevFiles' -> ().

    Entries are kept as strings (UUIDs such as 'GPU-5f3a...' and MIG ids are valid too).
    """
    if value is None:
        return ()
    text = value.strip()
    if text.lower() in _NO_DEVICE_MARKERS:
        return ()
    items = tuple(part.strip() for part in text.split(","))
    if any(not item for item in items):
        raise UsageError(bad_value(name, value, "a comma-separated list of GPU ids without empty entries"))
    return items


def share_gpus(available: Sequence[str], n_local_workers: int, local_worker_ordinal: int) -> tuple:
    """The GPUs of `available` that local GPU task number `local_worker_ordinal` should see.

    Contiguous shares keep a task's GPUs adjacent (usually the same PCIe switch / NVLink
    island); when tasks outnumber GPUs they share round-robin instead of some getting none.
    """
    if isinstance(n_local_workers, bool) or not isinstance(n_local_workers, int) or n_local_workers < 1:
        raise UsageError(bad_value("n_local_workers", n_local_workers, "an int >= 1"))
    if (isinstance(local_worker_ordinal, bool) or not isinstance(local_worker_ordinal, int)
            or not 0 <= local_worker_ordinal < n_local_workers):
        raise UsageError(bad_value("local_worker_ordinal", local_worker_ordinal,
                                   f"an int in [0, {n_local_workers - 1}]"))
    gpus = tuple(str(g) for g in available)
    if len(set(gpus)) != len(gpus):
        raise UsageError(bad_value("available", list(gpus), "GPU ids without duplicates"))
    n = len(gpus)
    if n == 0:
        return ()
    if n_local_workers >= n:
        return (gpus[local_worker_ordinal % n],)
    base, extra = divmod(n, n_local_workers)
    start = local_worker_ordinal * base + min(local_worker_ordinal, extra)
    size = base + (1 if local_worker_ordinal < extra else 0)
    return gpus[start:start + size]


def pick_gpu_source(cuda_visible_devices: Optional[str], task_gpus: Iterable[str] = (),
                    slurm_step_gpus: Optional[str] = None, names: Tuple[str, str] = NEUTRAL_NAMES) -> tuple:
    """The node's GPU pool, from the first source that names any GPU.

    Order: CUDA_VISIBLE_DEVICES (ids valid in this process's device namespace, even under
    cgroup renumbering), then the plan's Task.gpus, then SLURM_STEP_GPUS (physical ids).
    An explicitly empty CUDA_VISIBLE_DEVICES still falls through, because Slurm sets
    'NoDevFiles'/'' on nodes without GPUs, where the other sources are empty as well.
    """
    from_env = parse_gpu_list(cuda_visible_devices, names[0])
    if from_env:
        return from_env
    plan_gpus = tuple(str(g) for g in task_gpus)
    if plan_gpus:
        return plan_gpus
    return parse_gpu_list(slurm_step_gpus, names[1])


def local_gpu_ordinal(tasks: Sequence, rank: int) -> tuple:
    """(number of GPU tasks on `rank`'s node, position of `rank` among them).

    `tasks` are plan Tasks (anything with rank, node_index, role).  Only GPU roles count,
    so a ps sharing the node does not take a share.  Returns (0, -1) for a ps.
    """
    me = next((t for t in tasks if t.rank == rank), None)
    if me is None:
        raise UsageError(bad_value("rank", rank, f"one of the plan's ranks 0..{len(tasks) - 1}"))
    if me.role not in GPU_ROLES:
        return (0, -1)
    local = sorted((t for t in tasks if t.node_index == me.node_index and t.role in GPU_ROLES),
                   key=lambda t: t.rank)
    return (len(local), [t.rank for t in local].index(rank))


def visible_devices_for(tasks: Sequence, rank: int, pool: Sequence[str]) -> str:
    """The CUDA_VISIBLE_DEVICES value for task `rank` given its node's GPU `pool`."""
    n_local, ordinal = local_gpu_ordinal(tasks, rank)
    if n_local == 0:
        return ""
    return ",".join(share_gpus(pool, n_local, ordinal))


def bound_per_task(cuda_visible_devices: Optional[str], slurm_step_gpus: Optional[str],
                   names: Tuple[str, str] = NEUTRAL_NAMES) -> bool:
    """True when Slurm already gave this task its own subset (`--gpus-per-task`, `--gpu-bind`).

    Slurm sets SLURM_STEP_GPUS to the node's GPUs of the step; a CUDA_VISIBLE_DEVICES that
    names fewer of them means the split was done per task already and must not be split again.
    """
    mine = parse_gpu_list(cuda_visible_devices, names[0])
    step = parse_gpu_list(slurm_step_gpus, names[1])
    return bool(mine) and len(mine) < len(step)


def devices_for_task(tasks: Sequence, rank: int, cuda_visible_devices: Optional[str],
                     slurm_step_gpus: Optional[str], names: Tuple[str, str] = NEUTRAL_NAMES) -> Optional[str]:
    """CUDA_VISIBLE_DEVICES for task `rank` on its own node, or None to leave it as Slurm set it.

    ps: '' (none).  A task Slurm already bound to its own GPUs keeps them.  Otherwise its share of
    the node's pool (CUDA_VISIBLE_DEVICES, the plan's GPUs, or SLURM_STEP_GPUS: Slurm's own ids).
    No GPU anywhere: None (CPU nodes are left alone).
    """
    me = next((t for t in tasks if t.rank == rank), None)
    if me is None:
        raise UsageError(bad_value("rank", rank, f"one of the plan's ranks 0..{len(tasks) - 1}"))
    if me.role not in GPU_ROLES:
        return ""
    if bound_per_task(cuda_visible_devices, slurm_step_gpus, names):
        return (cuda_visible_devices or "").strip()
    pool = pick_gpu_source(cuda_visible_devices, me.gpus, slurm_step_gpus, names)
    if not pool:
        return None
    return visible_devices_for(tasks, rank, pool)


def gpu_view(tasks: Sequence, my_rank: Optional[int], cuda_visible_devices: Optional[str] = None,
             slurm_step_gpus: Optional[str] = None, node_pool: Optional[Sequence[str]] = None,
             names: Tuple[str, str] = NEUTRAL_NAMES) -> dict:
    """rank -> the CUDA_VISIBLE_DEVICES each task will get, for people to read (`tf-slurm explain`).

    node_pool: every node's GPUs (planning offline).  Otherwise only this task's node is known
    (from its environment): tasks elsewhere show '?'.  '' means the task is left alone (no GPU
    anywhere), '-' that it sees none (a ps).
    """
    view = {}
    me = next((t for t in tasks if t.rank == my_rank), None)
    if node_pool is None and (me is None or not pick_gpu_source(cuda_visible_devices, me.gpus, slurm_step_gpus, names)):
        return {t.rank: "" for t in tasks}  # no GPU known here (a CPU node, or offline without --gpus)
    for t in tasks:
        if node_pool is not None:
            value: Optional[str] = visible_devices_for(tasks, t.rank, tuple(node_pool)) if node_pool else None
        elif me is not None and t.node_index == me.node_index:
            if t.rank == me.rank:
                value = devices_for_task(tasks, t.rank, cuda_visible_devices, slurm_step_gpus, names)
            elif bound_per_task(cuda_visible_devices, slurm_step_gpus, names):
                value = "?"  # Slurm bound each task: only its own set is visible from here
            else:
                value = devices_for_task(tasks, t.rank, None if slurm_step_gpus else cuda_visible_devices,
                                         slurm_step_gpus, names)
        else:
            value = "?"
        if t.role not in GPU_ROLES and value != "?" and (node_pool or value is not None):
            value = "-"
        view[t.rank] = "" if value is None else (value or "-")
    return view
