"""Slurm scenarios with no TensorFlow that mostly wait on Slurm, run beside the TensorFlow tests of a
one-process test run (the full command's `tf or slurm` part), from its first test.

Why: the `away` scenario (tests/slurm/away_job.py: a slurmd restart, then the controller stopped at a
requeue) takes about two minutes of waiting on Slurm and almost no CPU; one test at a time, the run
paid all of it.  Run beside the TensorFlow tests it costs nearly nothing, and it is safe: it touches
only the local Slurm cluster, which no TensorFlow test uses, and it stops the controller, so every
other Slurm test waits until it is over (tests/conftest.py: they run after the TensorFlow tests, and
each first waits here).  A fixture that wants the result takes it with `result_of`; its scenario
raised: the same error there.  Side by side (pytest-xdist) nothing runs in the background.
"""

from __future__ import annotations

import importlib
import sys
import threading
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent / "slurm"))

# the fixture whose result it is -> its module in tests/slurm (`run(cluster, tmp)`).  Empty for now: run beside
# the TensorFlow tests, the `away` scenario's slurmd restart and requeue once left its node drained ("Kill task
# failed": the step's processes did not die within Slurm's UnkillableStepTimeout on the loaded machine), and
# every later Slurm test needing that node failed; until that is made safe, it runs in its own fixture again.
SCENARIOS: Dict[str, str] = {}  # e.g. {"away": "away_job"}
WAIT_S = 900.0  # the longest a test waits for a scenario (each bounds its own waits far below)


class _Run:
    def __init__(self, name: str, cluster: Any, tmp: Path):
        self.name, self.result, self.error = name, None, None  # type: ignore[assignment]
        self.thread = threading.Thread(target=self._main, args=(cluster, tmp), name=f"background-{name}",
                                       daemon=True)

    def _main(self, cluster: Any, tmp: Path) -> None:
        try:
            self.result = importlib.import_module(SCENARIOS[self.name]).run(cluster, tmp)
        except BaseException as exc:  # noqa: BLE001 (handed to the test that reads it)
            self.error = exc


_runs: Dict[str, _Run] = {}


def wanted(fixture_names: Iterable[Iterable[str]]) -> List[str]:
    """The scenarios the selected tests use (each item's fixture names)."""
    used = set()
    for names in fixture_names:
        used.update(SCENARIOS.keys() & set(names))
    return sorted(used)


def start(names: Iterable[str], cluster: Any, tmp_factory: Any) -> None:
    for name in names:
        if name not in _runs:
            run = _runs[name] = _Run(name, cluster, tmp_factory.mktemp(name))
            run.thread.start()


def result_of(name: str) -> Optional[Any]:
    """The scenario's result once it ended (its error raised here); None when it was not started."""
    run = _runs.get(name)
    if run is None:
        return None
    run.thread.join(WAIT_S)
    if run.thread.is_alive():
        raise AssertionError(f"the background scenario {name} did not end within {WAIT_S:g} s")
    if run.error is not None:
        raise run.error
    return run.result


def wait_all() -> None:
    """Until every scenario ended (a Slurm test must not run while one may stop the controller)."""
    for run in list(_runs.values()):
        run.thread.join(WAIT_S)
