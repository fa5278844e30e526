"""Print the Slurm/tf-slurm variables this task sees, one 'NAME=value' per line, on stdout; one line on stderr.

--ps-printed PATH (under `tf-slurm exec`): a ps touches PATH once it has printed, and the other
tasks wait for it before they exit (at most 30 s): the step ends a ps once its trainers are done,
possibly before it printed.
"""
import os
import sys
import time

for name in sorted(os.environ):
    if name.startswith(("SLURM", "TF_SLURM", "TF_CONFIG")):
        print(f"{name}={os.environ[name]}")
print(f"stderr-of-{os.environ.get('SLURM_PROCID')}", file=sys.stderr)
sys.stdout.flush()
sys.stderr.flush()
if len(sys.argv) == 3 and sys.argv[1] == "--ps-printed":
    mark = sys.argv[2]
    if os.environ.get("TF_SLURM_JOB_TYPE") == "ps":
        open(mark, "a").close()
    else:
        deadline = time.monotonic() + 30
        while not os.path.exists(mark) and time.monotonic() < deadline:
            time.sleep(0.05)
