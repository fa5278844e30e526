"""When Keras 3 `fit` cannot run a multi-task step, and the one line that says the fix.  Pure.

Why one home: `tf-slurm exec` decides from it whether a task's command gets TF_USE_LEGACY_KERAS=1 (only
under Keras 3; and warns when tf_keras is missing: supervise/task_exec.py), and `tf-slurm submit` refuses, before
submitting, a Keras script the job's python cannot run (host/submit_checks.py); the two must agree.
Keras 3 `fit` does not run under MultiWorkerMirroredStrategy or ParameterServerStrategy
(keras-team/keras#20585, #18624); tf_keras (Keras 2) does.
"""

from __future__ import annotations

import re
from typing import Iterable, Optional

LEGACY_KERAS = "TF_USE_LEGACY_KERAS"  # TensorFlow's switch: tf.keras is tf_keras (Keras 2)
FIT_FAILS = "Keras 3 `fit` fails under MultiWorkerMirroredStrategy/ParameterServerStrategy"
_STRATEGY_NAMES = (("ParameterServerStrategy", "pss"), ("MultiWorkerMirroredStrategy", "mwms"))
_KERAS = re.compile(r"\bkeras\b")
_FIT = re.compile(r"\.fit\s*\(")


def user_decides(legacy_setting: Optional[str]) -> bool:
    """Whether the user set TF_USE_LEGACY_KERAS (to anything): their setting always wins."""
    return legacy_setting not in (None, "")


def is_keras_2(keras_major: Optional[int]) -> bool:
    """Whether tf.keras is Keras 2 already (TensorFlow <= 2.15 ships Keras 2): then
    TF_USE_LEGACY_KERAS=1 gains nothing and only swaps in the tf_keras package (measured, TF 2.15.1
    with tf-keras 2.15.1: a 2-worker MultiWorkerMirroredStrategy `fit` took 17 s to its first step with
    it, 1 s without).  None (not known) is taken as Keras 3."""
    return keras_major in (1, 2)


def lacks_tf_keras(strategy: str, multi_task: bool, has_tf_keras: bool,
                   keras_major: Optional[int] = None) -> bool:
    """Whether a Keras `fit` of this step needs tf_keras that is not there: several tasks under
    MultiWorkerMirroredStrategy or ParameterServerStrategy, no tf_keras, and Keras 3 (`keras_major`
    None: not known, taken as Keras 3, TensorFlow's since 2.16)."""
    return multi_task and strategy in ("pss", "mwms") and not has_tf_keras and not is_keras_2(keras_major)


def tf_keras_fix(tf_version: Optional[str] = None, pip: str = "pip") -> str:
    """The install line: tf_keras of the same TensorFlow minor version (tf-keras X.Y.* goes with
    TensorFlow X.Y), without its dependencies (they would pull `tensorflow` next to `tensorflow-cpu`)."""
    m = re.match(r"(\d+)\.(\d+)", tf_version or "")
    if m is None:
        return f"{pip} install tf-keras (with tensorflow-cpu: {pip} install --no-deps tf-keras)"
    return f"{pip} install --no-deps 'tf-keras~={m.group(1)}.{m.group(2)}.0'"


def missing_tf_keras(where: str = "", tf_version: Optional[str] = None, pip: str = "pip") -> str:
    """The one line: tf_keras is missing (`where`: ' in PYTHON'), why it matters, the fix."""
    return f"tf_keras is not installed{where}: {FIT_FAILS}; fix: {tf_keras_fix(tf_version, pip)}"


def keras_major(version: Optional[str]) -> Optional[int]:
    """The major version of a Keras version string ('3.15.1' -> 3), None when unknown."""
    m = re.match(r"(\d+)\.", version or "")
    return int(m.group(1)) if m else None


_DIST_INFO = re.compile(r"keras-([^-]+)\.dist-info")


def keras_major_installed(site_entries: Iterable[str]) -> Optional[int]:
    """The major version of the `keras` distribution among a site folder's entries, from its
    `keras-<version>.dist-info` folder's name (the wheel layout; tf_keras's is `tf_keras-...`), None
    when there is none."""
    for name in site_entries:
        m = _DIST_INFO.fullmatch(name)
        if m:
            return keras_major(m.group(1))
    return None


def script_strategy(text: str) -> Optional[str]:
    """The multi-task TF2 strategy a script's text names ('pss', 'mwms'), else None."""
    return next((short for name, short in _STRATEGY_NAMES if name in text), None)


def multi_task_keras(text: str) -> bool:
    """Whether a script's text looks like a multi-task Keras `fit`: it names keras, calls `.fit(`, and
    names a TF2 multi-task strategy or TF_CONFIG (a custom training loop runs under Keras 3)."""
    return (bool(_KERAS.search(text)) and bool(_FIT.search(text))
            and (script_strategy(text) is not None or "TF_CONFIG" in text))
