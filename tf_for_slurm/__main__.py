"""`python -m tf_for_slurm` is the `tf-slurm` command."""

import sys

from .cli import main

sys.exit(main())
