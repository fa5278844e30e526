"""`python -m tf_for_slurm` is the `tf-slurm` command."""

import sys

from tf_for_slurm.cli import main

sys.exit(main())
