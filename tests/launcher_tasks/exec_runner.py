"""What `tf-slurm exec` does for one task, with the plan given as JSON instead of read from Slurm:
  exec_runner.py '{"roles": [...], "ports": [...], "aux": [...], "rank": R, ...}' -- CMD ..."""

import dataclasses
import json
import logging
import os
import sys

from tf_for_slurm import sidecar
from tf_for_slurm.errors import TfSlurmError
from tf_for_slurm.plan import localhost_plan

spec = json.loads(sys.argv[1])
assert sys.argv[2] == "--"
argv = sys.argv[3:]
plan = localhost_plan(spec["roles"], spec["ports"], spec["rank"])
aux = spec.get("aux") or [None] * len(spec["roles"])
plan = dataclasses.replace(plan, tasks=tuple(t._replace(aux_port=a) for t, a in zip(plan.tasks, aux)))
logging.basicConfig(level=spec.get("runner_log_level", "WARNING"), format="runner %(levelname)s: %(message)s")
try:
    if plan.me.role == "ps":
        rc = sidecar.run_ps_with_sidecar(plan, argv, dict(os.environ), spec.get("log_level", "WARNING"),
                                         **spec.get("sidecar", {}))
    else:
        rc = sidecar.run_and_report(plan, argv, dict(os.environ))
except TfSlurmError as exc:
    print(f"error: {exc}", file=sys.stderr)
    rc = exc.exit_code
sys.exit(rc)
