"""`tf-slurm submit [OPTIONS] -- CMD ARGS`: write a batch script into a job folder and submit it.

The options, their checks, the offline plan and the printing; the script is
tf_for_slurm.host.batch_script's, the submission (held, folder, release) tf_for_slurm.host.sbatch's,
the checks made before submitting (--no-checks: none) tf_for_slurm.host.submit_checks's.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from typing import Any, List, NamedTuple, Optional, Sequence, Tuple

from tf_for_slurm.cli import het, role_options
from tf_for_slurm.cli.table import render_table
from tf_for_slurm.errors import PlanError, UsageError, bad_value
from tf_for_slurm.host import batch_script, job_folder, sbatch, settings, submit_checks
from tf_for_slurm.host.environment import roles_for
from tf_for_slurm.plan.addresses import parse_policy
from tf_for_slurm.plan.batch_settings import strict_int
from tf_for_slurm.plan.cluster import build_plan
from tf_for_slurm.plan.hetjob import offline_het_step
from tf_for_slurm.plan.roles import count_workers, fitted_to_step
from tf_for_slurm.plan.step import format_tasks_per_node, offline_step
from tf_for_slurm.plan.strategy import step_roles
from tf_for_slurm.plan.submit_checks import ask_of
from tf_for_slurm.plan.summary import roles_line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `tf-slurm submit` (the CLI's subcommand table wires them in)."""
    add_sbatch_options(parser.add_argument_group(
        "sbatch's options (its own names; checked here, passed on sbatch's command line); a heterogeneous job: "
        "component 0's options, then ': OPTIONS' for each further component, before '--'"))
    _add_our_options(parser)


def add_sbatch_options(s: Any) -> None:
    """sbatch's options `submit` knows by name (also each further component's, after ':'): those of
    batch_script.NAMED_OPTIONS, which also checks their values, then --exclusive and --sbatch-arg."""
    for named in batch_script.NAMED_OPTIONS:
        s.add_argument(*named.flags, dest=named.dest, metavar=named.metavar, help=named.help)
    s.add_argument("--exclusive", action="store_true", help="whole nodes")
    s.add_argument("--sbatch-arg", action="append", default=[], metavar="OPTION",
                   help="any other sbatch option, one word each, e.g. --sbatch-arg=--constraint=a100 (repeatable)")


def _add_our_options(parser: argparse.ArgumentParser) -> None:
    role_options.add_arguments(parser, title=f"roles and strategy, as `tf-slurm exec` {role_options.DEFAULTS}",
                               placement=False, strategy=True)
    b = parser.add_argument_group("time limit and requeue (as `tf-slurm batch-step`)")
    b.add_argument("--checkpoint-dir", metavar="DIR", help="the training's checkpoint directory (made if missing)")
    b.add_argument("--target", metavar="STEP", help="the global step that means done: a checkpoint at it, no requeue")
    b.add_argument("--warn-margin", metavar="SECONDS",
                   help="seconds before the time limit at which the tasks stop and the chief checkpoints (default: "
                        f"{settings.WARN_MARGIN}, else {settings.default_int(settings.WARN_MARGIN)})")
    b.add_argument("--max-requeues", metavar="N", help=f"requeues allowed (default: {settings.MAX_REQUEUES}, else "
                                                       f"{settings.default_int(settings.MAX_REQUEUES)})")
    b.add_argument("--spare-nodes", metavar="K", help="allocate K nodes more than -N, the step leaves them free: a "
                   "lost node's place is taken at once (default 0)")
    b.add_argument("--max-relaunches", metavar="N", help="times a step that lost a node starts again at once on "
                   f"the healthy nodes (default: {settings.MAX_RELAUNCHES}, else "
                   f"{settings.default_int(settings.MAX_RELAUNCHES)})")
    b.add_argument("--min-workers", metavar="K", help="with too few healthy nodes left for a relaunch, go on with "
                   f"fewer workers, down to K, rather than requeue (default: {settings.MIN_WORKERS}, else the "
                   "planned count: never fewer)")
    parser.add_argument("--folder", metavar="DIR", help=f"the folder of job folders: the job's is DIR/<job id> "
                        f"(default: {settings.JOBS_ROOT}, else {settings.default_text(settings.JOBS_ROOT)})")
    parser.add_argument("--python", metavar="PATH", default=None,
                        help=f"the python that has tf_for_slurm on the nodes (default: this one, {sys.executable})")
    parser.add_argument("--dry-run", action="store_true", help="print the script and the plan; submit nothing")
    parser.add_argument("--parsable", action="store_true",
                        help="print only the job id on stdout, as sbatch --parsable does (JOB=$(tf-slurm submit "
                             "--parsable ...)); the other lines go to stderr")
    parser.add_argument("--no-checks", action="store_true",
                        help="submit without the checks made before submitting: that the command's program and "
                             "script exist, that the partition can ever run the job (scontrol), that the job's "
                             "python has tf_for_slurm, and TensorFlow and tf_keras where the script needs them")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...", help="what every task runs")


def layout(nodes: Optional[int], ntasks: Optional[int], per_node: Optional[int]) -> Tuple[Tuple[int, ...], str]:
    """Tasks on each node as the plan shows them (Slurm decides where it can), and a note saying how."""
    if per_node is not None:
        k = nodes if nodes is not None else (-(-ntasks // per_node) if ntasks is not None else 1)
        total = ntasks if ntasks is not None else k * per_node
        if not k <= total <= k * per_node:
            raise UsageError(bad_value("-n/--ntasks", total, f"{k}-{k * per_node} tasks on {k} node(s) with "
                                       f"--ntasks-per-node={per_node}"))
        counts = tuple(min(per_node, total - i * per_node) for i in range(k))
        if counts[-1] < 1:
            raise UsageError(bad_value("-n/--ntasks", total, f"at least one task on each of the {k} nodes"))
        return counts, f"{k} node(s), at most {per_node} task(s) each"
    if nodes is not None and ntasks is not None:
        if nodes > ntasks:
            raise UsageError(bad_value("-N/--nodes", nodes, f"at most -n/--ntasks {ntasks} (every node runs a task)"))
        base, extra = divmod(ntasks, nodes)
        return (tuple(base + (1 if i < extra else 0) for i in range(nodes)),
                "Slurm decides how many tasks each node runs (shown: as even as can be)")
    if nodes is not None:
        return (1,) * nodes, "one task per node (--ntasks-per-node for more)"
    if ntasks is not None:
        return (ntasks,), "Slurm decides the nodes (shown: one node)"
    raise UsageError("no task count: expected -N/--nodes, -n/--ntasks or both (e.g. -N 3 --ntasks-per-node 1)")


def _roles(args: argparse.Namespace, env) -> Tuple[Optional[Tuple[str, ...]], int, bool, Optional[str], str]:
    """(tasks, ps, chief, strategy, its source): the options, else the settings exec would read."""
    tasks_text = args.tasks if args.tasks is not None else (None if args.ps is not None
                                                              else settings.text(env, settings.TASKS))
    if tasks_text is not None and args.ps is not None:
        raise UsageError("--tasks and --ps were both given: expected one of them")
    tasks = tuple(r.strip() for r in tasks_text.split(",") if r.strip()) if tasks_text is not None else None
    if args.ps is not None:
        ps = args.ps
    else:
        from_env = settings.integer(env, settings.PS, minimum=0)
        ps = 1 if from_env is None else from_env
    chief = args.chief or settings.flag(env, settings.CHIEF)
    strategy = args.strategy or settings.text(env, settings.STRATEGY)
    source = "--strategy" if args.strategy else settings.STRATEGY
    return tasks, ps, chief, (None if strategy == "auto" else strategy), source


def _count(value: Optional[str], name: str) -> Optional[int]:
    return None if value is None else strict_int(value, name, 1)


def node_range(value: Optional[str]) -> Tuple[Optional[int], Optional[int]]:
    """-N's (MIN, MAX): a count N is (N, N), a range MIN-MAX lets Slurm start the job on fewer nodes
    (its form is checked with the other sbatch options, batch_script's "nodes" kind)."""
    if value is None:
        return None, None
    low, _, high = str(value).partition("-")
    nodes = strict_int(low, "-N/--nodes", 1), strict_int(high or low, "-N/--nodes", 1)
    if nodes[1] < nodes[0]:
        raise UsageError(bad_value("-N/--nodes", value, "a node count N >= 1, or a range MIN-MAX with MIN <= MAX"))
    return nodes


def _ranged(args: argparse.Namespace, nodes: Tuple[int, int], het_job: bool, tasks: Optional[Sequence[str]],
            fewest: Optional[int], ps_chief: Tuple[int, bool]) -> Tuple[Optional[int], str]:
    """-N MIN-MAX: Slurm starts the job on MIN to MAX nodes, a task on each; (the fewest workers the job
    trains with: --min-workers, else what a role list keeps on MIN nodes; the layout's note)."""
    low, high = nodes
    given = f"{low}-{high}"
    if het_job:
        raise UsageError(bad_value("-N/--nodes", given, "one count in a heterogeneous job"))
    if args.ntasks is not None or args.ntasks_per_node is not None:
        raise UsageError(bad_value("-N/--nodes", given, "a count N with -n/--ntasks or --ntasks-per-node: with a "
                                   "range Slurm runs a task on each node it gives (with them sbatch asks for MIN "
                                   "x K tasks, and Slurm gives MIN nodes)"))
    if args.spare_nodes is not None and args.spare_nodes != "0":
        raise UsageError(bad_value("--spare-nodes", args.spare_nodes, "0 with -N MIN-MAX (Slurm decides the nodes)"))
    note = f"Slurm gives {low} to {high} nodes, a task on each (shown: {high})"
    try:
        kept, left = fitted_to_step(tasks, low, 1 if fewest is None else fewest, "--tasks", "--min-workers") \
            if tasks is not None else (None, 0)
        roles_for(offline_step(f"node[1-{low}]" if low > 1 else "node1", f"1(x{low})"), kept,  # MIN nodes' plan
                  None if kept is not None else ps_chief[0], "first", ps_chief[1], names={"ps": "--ps"})
    except PlanError as exc:
        raise UsageError(f"-N/--nodes={given}: on {low} node(s): {exc}") from None
    if kept is None:
        return fewest, note
    fewest = count_workers(kept) if fewest is None else fewest
    return fewest, f"{note}; on {low}, --tasks loses its last {left} worker(s) (--min-workers {fewest})"


def _path(value: str, name: str) -> str:
    """A path that a shell, sbatch and srun carry literally (one line; no '\\': it stops Slurm's %j)."""
    batch_script.one_line(value, name)
    if "\\" in value:
        raise UsageError(bad_value(name, value, "a path without '\\' (Slurm's file names read it)"))
    return value


class Job(NamedTuple):
    """What `build` checked and made: the script's spec and what is shown about the plan."""

    spec: batch_script.JobSpec
    plan: Any  # the offline ClusterPlan (placeholder node names)
    chief_rank: int
    note: str  # how the layout shown was chosen
    summary: str  # plan.summary.roles_line: the roles, the chief, the strategy exec will infer
    strategy: str  # the strategy the step ends as ('tf1', 'pss', 'mwms')
    tasks_per_node: Tuple[Tuple[int, ...], ...]  # each component's, as laid out (for the checks)


def build(args: argparse.Namespace) -> Job:
    """Every value checked -> the job's spec and its offline plan (one UsageError otherwise)."""
    env = settings.environ()
    command, segments = split_components(args.command or [])
    if not command:
        raise UsageError(bad_value("command", command, "a command after '--', e.g. -- python train.py"))
    components = [args] + [_component(words, c + 1) for c, words in enumerate(segments)]
    words_of, counts_of = _component_words(components)
    low, high = node_range(args.nodes)
    counts, note = layout(high, _count(args.ntasks, "--ntasks"), _count(args.ntasks_per_node, "--ntasks-per-node"))
    tasks, ps, chief, strategy, source = _roles(args, env)
    fewest = (strict_int(args.min_workers, "--min-workers", 1) if args.min_workers is not None
              else settings.integer(env, settings.MIN_WORKERS, minimum=1))
    if low is not None and high is not None and low < high:
        fewest, note = _ranged(args, (low, high), bool(segments), tasks, fewest, (ps, chief))
        counts_of[0] = (1,) * low  # what the checks ask of the partition: the job may start on MIN nodes
    component_roles = het.component_roles(args)
    if len(components) > 1:
        step = offline_het_step([f"het{c}node[1-{len(k)}]:{format_tasks_per_node(k)}" for c, k in enumerate(counts_of)])
        counts = step.tasks_per_node
        note = f"a heterogeneous job of {len(components)} components (node names het<c>node<n>)"
    else:
        nodelist = f"node[1-{len(counts)}]" if len(counts) > 1 else "node1"
        step = offline_step(nodelist, format_tasks_per_node(counts))
    use_ps = None if tasks is not None or component_roles is not None else ps
    roles = roles_for(step, tasks, use_ps, "first", chief, component_roles=component_roles,
                      names={"ps": "--ps", "tasks": "--tasks", "component_roles": "--roles-by-component"})
    plan = build_plan(step, roles)
    who = step_roles(plan.tasks, strategy, source)
    address = args.address or settings.text(env, settings.ADDRESS)
    if address is not None:
        parse_policy(address, "--address" if args.address else settings.ADDRESS)
        batch_script.one_line(address, "--address")
    python = _path(args.python or sys.executable, "--python")
    if shutil.which(python) is None:
        raise UsageError(bad_value("--python", python, "a python on PATH or the path of one"))
    root = os.path.abspath(_path(job_folder.jobs_root(env, args.folder), "--folder"))
    margin = (strict_int(args.warn_margin, "--warn-margin") if args.warn_margin is not None
              else settings.count_from(env, settings.WARN_MARGIN, settings.default_int(settings.WARN_MARGIN)))
    limit = batch_script.time_limit_seconds(args.time) if args.time is not None else None
    if limit is not None and margin >= limit:
        raise UsageError(bad_value("--warn-margin", margin, f"fewer seconds than the time limit -t {args.time} "
                                   f"({limit} s): the tasks stop --warn-margin s before it"))
    requeues = (strict_int(args.max_requeues, "--max-requeues") if args.max_requeues is not None
                else settings.count_from(env, settings.MAX_REQUEUES, settings.default_int(settings.MAX_REQUEUES)))
    spare, words_of[0], ntasks = _with_spares(args, counts, words_of[0], bool(segments))
    relaunches = (strict_int(args.max_relaunches, "--max-relaunches") if args.max_relaunches is not None
                  else settings.count_from(env, settings.MAX_RELAUNCHES, settings.default_int(settings.MAX_RELAUNCHES)))
    spec = batch_script.JobSpec(
        command=tuple(command), python=python, jobs_root=root, ntasks=ntasks, sbatch_args=words_of[0],
        more_components=tuple(words_of[1:]), component_ntasks=tuple(sum(k) for k in counts_of) if segments else (),
        component_roles=tuple(component_roles) if component_roles is not None else None,
        ps=ps, tasks=tuple(roles) if tasks is not None else None, chief=chief and tasks is None, strategy=strategy,
        address=address, target=strict_int(args.target, "--target", 1) if args.target is not None else None,
        checkpoint_dir=_path(args.checkpoint_dir, "--checkpoint-dir") if args.checkpoint_dir is not None else None,
        warn_margin=margin, max_requeues=requeues, spare_nodes=spare, max_relaunches=relaunches,
        min_workers=fewest)
    return Job(spec, plan, who.chief_rank, note, roles_line(plan.tasks, strategy, source), who.strategy,
               tuple(counts_of))


def _with_spares(args: argparse.Namespace, counts: Sequence[int], words: Tuple[str, ...],
                 het: bool) -> Tuple[int, Tuple[str, ...], int]:
    """(--spare-nodes, component 0's sbatch words, sbatch's task count): with K spares, sbatch gets
    --nodes=N+K and the same tasks on every node (the step leaves the last K free, batch-settings)."""
    spare = strict_int(args.spare_nodes, "--spare-nodes") if args.spare_nodes is not None else 0
    if not spare:
        return 0, words, sum(counts)
    if het:
        raise UsageError(bad_value("--spare-nodes", spare, "0 for a heterogeneous job (one step over its components)"))
    if args.nodes is None or len(set(counts)) != 1:
        raise UsageError(bad_value("--spare-nodes", spare, "-N/--nodes with the same number of tasks on each node "
                                   "(e.g. -N 3 --ntasks-per-node 1)"))
    per_node, nodes = counts[0], len(counts) + spare
    kept = [w for w in words if w.split("=", 1)[0] not in ("--nodes", "--ntasks", "--ntasks-per-node")]
    return spare, (f"--nodes={nodes}", f"--ntasks-per-node={per_node}", *kept), nodes * per_node


def _component_words(components: Sequence[argparse.Namespace]) -> Tuple[List[Tuple[str, ...]], List[Tuple[int, ...]]]:
    """Each component's sbatch words and tasks per node, checked."""
    words_of, counts_of = [], []
    for ns in components:
        values = {named.dest: getattr(ns, named.dest) for named in batch_script.NAMED_OPTIONS}
        words_of.append(batch_script.sbatch_words(values, exclusive=ns.exclusive, extra=ns.sbatch_arg))
        counts_of.append(layout(node_range(ns.nodes)[1], _count(ns.ntasks, "--ntasks"),
                                _count(ns.ntasks_per_node, "--ntasks-per-node"))[0])
    return words_of, counts_of


def split_components(words: Sequence[str]) -> Tuple[List[str], List[List[str]]]:
    """argparse's remainder -> (the command, each further component's sbatch words): ': OPTS : OPTS -- CMD'
    (a heterogeneous job, as sbatch writes one) or '-- CMD'."""
    words = list(words)
    segments: List[List[str]] = []
    while words and words[0] == ":":
        end = next((i for i, w in enumerate(words[1:], 1) if w in (":", "--")), len(words))
        segments.append(words[1:end])
        words = words[end:]
    if words and words[0] == "--":
        words = words[1:]
    elif segments:
        raise UsageError("no '--' after the last component's options: expected ': OPTIONS -- CMD ...'")
    return words, segments


def _component(words: Sequence[str], c: int) -> argparse.Namespace:
    """Component c's sbatch options (after its ':'), checked; one UsageError otherwise."""
    parser = argparse.ArgumentParser(prog=f"component {c}", add_help=False, exit_on_error=False)
    add_sbatch_options(parser)
    try:
        ns, rest = parser.parse_known_args(list(words))
    except argparse.ArgumentError as exc:
        raise UsageError(f"component {c}: {exc}") from None
    if rest or not words:
        raise UsageError(bad_value(f"component {c}'s options", " ".join(rest or words) or "(none)",
                                   "sbatch options of that component (-N, -n, --ntasks-per-node, -p, ...); "
                                   "tf-slurm's own options go before the first ':'"))
    return ns


def plan_text(job: Job) -> str:
    """The plan as `tf-slurm explain` shows it, offline (placeholder node names), as comment lines."""
    rows = [{"rank": t.rank, "node": t.node, "local_id": t.local_id, "index": t.index,
             "role": t.role + (" (chief)" if t.rank == job.chief_rank and t.role != "chief" else "")}
            for t in job.plan.tasks]
    table = render_table(rows, ["rank", "node", *het.component_column(job.plan, rows), "local_id", "role", "index"])
    lines = ["the plan, offline: node names are placeholders; addresses and ports come with the job",
             f"layout: {job.note}"]
    lines += table.splitlines() + ["plan: " + job.summary]
    return "\n".join(("# " + line).rstrip() for line in lines)


def check(job: Job) -> None:
    """What can be told before submitting (host.submit_checks): one UsageError, with the fix."""
    spec = job.spec
    words = (spec.sbatch_args, *spec.more_components)
    asks = [ask_of(w, counts, f"component {c}: " if c else "") for c, (w, counts)
            in enumerate(zip(words, job.tasks_per_node))]
    submit_checks.before_submit(spec.command, spec.python, spec.sbatch_args, asks, strategy=job.strategy,
                                multi_task=len(job.plan.tasks) > 1, env=settings.environ(),
                                roles=[t.role for t in job.plan.tasks])


def main(args: argparse.Namespace) -> int:
    """Submit the job (or, with --dry-run, print its script and plan); exit 2 on a bad option.
    With --parsable, stdout gets the job id alone (the other lines go to stderr)."""
    job = build(args)
    spec = job.spec
    script = batch_script.script_text(spec)
    options = batch_script.sbatch_argv(spec)
    if args.dry_run:
        print(script + "\n" + plan_text(job))
        return 0
    if not args.no_checks:
        check(job)
    folder = sbatch.submit(options, script, spec.jobs_root)
    job_id = os.path.basename(folder)
    out = sys.stderr if args.parsable else sys.stdout
    print(job_id if args.parsable else f"Submitted batch job {job_id}", flush=True)
    print(f"job folder: {folder} ({job_folder.SCRIPT}; batch log {job_folder.BATCH_LOG}; one log per task "
          f"{job_folder.TASK_LOG.format(rank='<rank>')})", file=out)
    print("plan: " + job.summary, file=out)
    default_root = spec.jobs_root == os.path.abspath(job_folder.jobs_root())
    where = "" if default_root else f" --folder {shlex.quote(spec.jobs_root)}"
    print(f"see: tf-slurm status {job_id}{where}   tf-slurm logs {job_id}{where} [--task RANK | --role ps]", file=out)
    return 0
