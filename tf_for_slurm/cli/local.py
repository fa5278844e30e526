"""`tf-slurm local`: run N tasks on this machine with the environment a Slurm step would give them.

The options and the entry only; the step and its processes are tf_for_slurm.supervise.launcher's.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional

from tf_for_slurm.errors import TfSlurmError, UsageError, bad_value
from tf_for_slurm.host import job_folder, settings, slurm
from tf_for_slurm.host.environment import plan_from_env
from tf_for_slurm.plan.summary import roles_line
from tf_for_slurm.supervise import emulated_step
from tf_for_slurm.supervise.emulated_step import Layout, check_job_id, new_job_id
from tf_for_slurm.supervise.launcher import DEFAULT_KILL_GRACE, launch, make_layout

DESCRIPTION = "`tf-slurm local`: run N tasks on this machine with the environment a Slurm step would give them."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `tf-slurm local` (the CLI's subcommand table wires them in)."""
    parser.add_argument("-n", "--ntasks", type=int, required=True, metavar="N",
                        help="number of tasks to start (like srun -n)")
    parser.add_argument("-N", "--nodes", type=int, default=None, metavar="K",
                        help="number of emulated nodes node[1-K] (default 1, or as many as --tasks-per-node lists)")
    parser.add_argument("--tasks-per-node", default=None, metavar="SPEC",
                        help="tasks on each emulated node in Slurm's form, e.g. '2(x3),1' "
                             "(default: block layout, n//K each, the first n%%K nodes one more)")
    roles = parser.add_mutually_exclusive_group()
    roles.add_argument("--ps", type=int, default=None, metavar="P",
                       help=f"number of parameter servers (exported as {settings.PS})")
    roles.add_argument("--tasks", default=None, metavar="ROLES",
                       help=f"comma-separated role per task, e.g. ps,worker,worker (exported as {settings.TASKS})")
    parser.add_argument("--job-id", default=None, metavar="ID",
                        help=f"numeric {slurm.JOB_ID} to use (default: a fresh random one per launch)")
    parser.add_argument("--kill-grace", type=float, default=DEFAULT_KILL_GRACE, metavar="SECONDS",
                        help="seconds between SIGTERM and SIGKILL when ending tasks (default %(default)s)")
    parser.add_argument("--output", "-o", default=None, metavar="PATTERN",
                        help="write each task's output to its own file, e.g. 'train-%%j-%%t.log' (srun's %%j job, "
                             "%%t rank, %%n node index, %%N node name)")
    parser.add_argument("--slurm-env-only", action="store_true",
                        help="give the tasks the Slurm variables only (default: each task runs under "
                             "`tf-slurm exec`, with TF_CONFIG and the supervisor)")
    parser.add_argument("--folder", default=None, metavar="DIR",
                        help="the folder of job folders: the step's status goes to DIR/<job id>/status.json, for "
                             f"`tf-slurm status` (default: {settings.JOBS_ROOT}, else "
                             f"{settings.default_text(settings.JOBS_ROOT)})")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...",
                        help="the command every task runs")


def main(args: argparse.Namespace) -> int:
    """Run `tf-slurm local`; TfSlurmError (exit 2) for bad arguments, else the step's status."""
    command = list(args.command or [])
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError(bad_value("command", command, "a command after '--', e.g. -- python train.py"))
    layout = make_layout(args.ntasks, args.nodes, args.tasks_per_node)
    job_id = new_job_id() if args.job_id is None else check_job_id(args.job_id)
    job_dir = None if args.slurm_env_only else os.path.join(job_folder.jobs_root(given=args.folder), job_id)

    def started() -> None:
        if job_dir is not None:
            sys.stderr.write(f"tf-slurm local: job {job_id}: `tf-slurm status {job_dir}` shows its tasks\n")
            line = plan_line(layout, job_id, args.ps, args.tasks)
            if line:
                sys.stderr.write(f"tf-slurm local: {line}\n")

    return launch(command, layout, job_id=job_id, ps=args.ps, tasks=args.tasks, kill_grace=args.kill_grace,
                  under_exec=not args.slurm_env_only, output=args.output, job_dir=job_dir, on_start=started)


def plan_line(layout: Layout, job_id: str, ps: Optional[int], tasks: Optional[str]) -> Optional[str]:
    """The roles and the strategy every task's `tf-slurm exec` will plan (as task 0 sees them), or None
    when the settings give no plan (then each task says why, as before)."""
    env = settings.environ()
    task0 = emulated_step.task_env(layout, 0, job_id, env, ps=ps, tasks=tasks)
    try:
        plan = plan_from_env(task0, check=False)
        return roles_line(plan.tasks, settings.text(env, settings.STRATEGY), settings.STRATEGY)
    except TfSlurmError:
        return None
