"""Print the Slurm/tf-slurm variables this task sees, one 'NAME=value' per line, on stdout; one line on stderr."""
import os
import sys

for name in sorted(os.environ):
    if name.startswith(("SLURM", "TF_SLURM", "TF_CONFIG")):
        print(f"{name}={os.environ[name]}")
print(f"stderr-of-{os.environ.get('SLURM_PROCID')}", file=sys.stderr)
