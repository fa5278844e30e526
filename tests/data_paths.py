"""Where the real MNIST test digits are: MNIST_DIR, else shared/ beside the checkout (as in CI),
else /work/shared.  Tests that need them skip when none holds the files."""

import os
from pathlib import Path

_REPO = Path(__file__).resolve().parent.parent


def mnist_dir() -> str:
    for candidate in (os.environ.get("MNIST_DIR"), _REPO.parent / "shared" / "data" / "mnist",
                      Path("/work/shared/data/mnist")):
        if candidate and any((Path(candidate) / f"t10k-images-idx3-ubyte{ext}").exists() for ext in ("", ".gz")):
            return str(candidate)
    return str(_REPO.parent / "shared" / "data" / "mnist")
