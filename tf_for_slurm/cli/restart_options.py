"""`tf-slurm exec`'s fault options (--max-restarts, --require-all-workers, --restart-on,
--progress-deadline): defined here to keep the parser small."""

from __future__ import annotations

import argparse
from typing import Any, Dict

from tf_for_slurm.host import settings
from tf_for_slurm.plan.restart_policy import MAX_BACKOFF, RETRY_ON


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("restarts in place (a PSS worker or evaluator, a TF1 worker alone; every task "
                                  "for MWMS, a ps, a PSS coordinator)")
    g.add_argument("--max-restarts", type=int, default=None, metavar="N",
                   help=f"restarts allowed in the step (default: {settings.MAX_RESTARTS}, else "
                        f"{settings.default_int(settings.MAX_RESTARTS)}; 0: off); at most "
                        f"{settings.MAX_TASK_RESTARTS} per task, each after a back-off doubling from "
                        f"{settings.RESTART_BACKOFF} up to {MAX_BACKOFF:g} s; a task failing again within "
                        f"{settings.CRASH_WINDOW} seconds of its restart ends the step")
    g.add_argument("--require-all-workers", action="store_true", default=None,
                   help="a lost PSS worker, TF1 non-chief worker or evaluator (its node failed) ends the step "
                        f"(default: {settings.REQUIRE_ALL_WORKERS}, else 0: the step goes on without it; "
                        "TF1 synchronous training needs every worker)")
    g.add_argument("--restart-on", choices=RETRY_ON, default=None,
                   help="which failures are restarted: signal (status 128-255: killed by a signal, OOM) or any "
                        f"non-zero status (default: {settings.RESTART_ON}, else "
                        f"{settings.default_text(settings.RESTART_ON)})")
    g.add_argument("--progress-deadline", type=float, default=None, metavar="S",
                   help="a command stopped (SIGSTOP) for S seconds, or silent for S seconds after it once "
                        "reported progress (tf_for_slurm.report_progress(), or touch "
                        f"${settings.PROGRESS_FILE}), is "
                        f"hung: it is killed, then restarted or the step fails (default: {settings.PROGRESS_DEADLINE}, "
                        "else 0: off)")


def values(args: argparse.Namespace) -> Dict[str, Any]:
    """The keyword arguments of task_exec.run these options give."""
    return {"max_restarts": args.max_restarts, "restart_on": args.restart_on,
            "progress_deadline": args.progress_deadline, "require_all_workers": args.require_all_workers}
