"""Shared test set-up: the real local Slurm cluster fixture (tests/slurm_harness.py), the wheel of
this tree, forked CLI runs (tests/cli_runs.py), the full-only markers' rule (FULL_ONLY), a bytecode
cache, and side-by-side runs (pytest-xdist, `--dist loadgroup`: see `pytest_configure`)."""

import os
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import netns  # noqa: E402  (tests/netns.py, found through the line above)
from alone import DONE, LANE_ENV, WINDOW_ENV, first_part_done, wait_for_the_window  # noqa: E402  (tests/alone.py)
from side_by_side import workers_for  # noqa: E402  (tests/side_by_side.py)

import background_slurm  # noqa: E402  (tests/background_slurm.py)


def _private_cache() -> str:
    """~/.cache/tf_for_slurm/pycache, made private (0700); a folder in /tmp others could fill is not."""
    path = os.path.join(os.path.expanduser("~"), ".cache", "tf_for_slurm", "pycache")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
        if st.st_uid == os.getuid() and not st.st_mode & 0o022:
            return path
    except OSError:
        pass
    return tempfile.mkdtemp(prefix="tf_slurm_pycache.")


# PYTHONDONTWRITEBYTECODE (this machine sets it) made pytest rewrite and compile every test module on
# every run (~3 s of the fast subset), and every `python -m tf_for_slurm` the tests start compile
# the package again (~80 ms of CPU each, thousands of them): keep the checkout free of bytecode, as
# it intends, but cache it in a private folder, for this process and the ones it starts (Python and
# pytest check each cached file against its source).
if sys.dont_write_bytecode:
    sys.pycache_prefix = _private_cache()
    sys.dont_write_bytecode = False
    os.environ["PYTHONPYCACHEPREFIX"] = sys.pycache_prefix
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# `tf-slurm local` and `submit` make a job folder per job: the tests' go to a temporary folder,
# never into the checkout (a test that needs its own sets TF_SLURM_JOBS_ROOT or --folder).
os.environ.setdefault("TF_SLURM_JOBS_ROOT", tempfile.mkdtemp(prefix="tf_slurm_jobs."))

try:
    from slurm_harness import slurm_cluster  # noqa: F401  (session fixture: starts scripts/local_slurm.sh)
except ImportError:  # the harness module is optional for partial checkouts
    pass


# markers whose tests run only in the full command, or when -m names them
FULL_ONLY = ("install", "hostile", "templates", "procs")


# Tests that need the machine's own network: the local Slurm cluster listens there, pip reaches the index.
HOST_NETWORK = ("slurm", "install")


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """setup.cfg's `-n auto` comes here (an explicit `-n N` does not): see workers_for."""
    return workers_for(config.getoption("markexpr") or "", dict(os.environ), len(os.sched_getaffinity(0)))


# fixtures whose time-limited Slurm jobs hold tests/alone.py's window: their tests go first in the Slurm group
ALONE_FIXTURES = {"one_minute_jobs", "requeued"}
# ... and those whose tests go last: the `away` scenario (a slurmd restarted under a task, the controller
# stopped) mostly waits on Slurm (2 minutes: in the window the other lane sat idle), and beside the
# TensorFlow tests its step's processes once outlived Slurm's UnkillableStepTimeout and drained its node:
# last, such a drain can fail no other Slurm test
LAST_FIXTURES = {"away"}


def _slurm_order(item) -> int:
    """Where a Slurm test goes in its group: the time-limited jobs first, LAST_FIXTURES last."""
    names = set(getattr(item, "fixturenames", ()))
    return 0 if ALONE_FIXTURES & names else 2 if LAST_FIXTURES & names else 1

# this process's lane of the full command (scripts/test.sh, tests/alone.py): "slurm", "tf" or "" (none);
# taken out of the environment, so that a pytest run inside a test is in no lane
LANE = os.environ.pop(LANE_ENV, "")


def pytest_configure(config):
    """Under pytest-xdist (`workers_for`), each worker gets a network of its own
    (tests/netns.py), so two tests at once never meet on a port. The run's controller makes the
    private folder of tests/alone.py's window, which its workers inherit; a lane of the full command
    uses the window scripts/test.sh gives it, and the `tf` lane gets a network of its own too."""
    if not hasattr(config, "workerinput") and not (LANE and os.environ.get(WINDOW_ENV)):
        os.environ[WINDOW_ENV] = tempfile.mkdtemp(prefix="tf_slurm_window.")  # also in a pytest run in a test
        config.own_window = True
    if hasattr(config, "workerinput") or LANE == "tf":
        why = netns.make_own()
        if why:
            who = f"worker {config.workerinput['workerid']}" if hasattr(config, "workerinput") else "the tf lane"
            sys.stderr.write(f"conftest: WARNING: {who} shares the machine's network ({why}): tests side by "
                             f"side may collide on ports\n")


def pytest_unconfigure(config):
    """The controller removes the window's folder it made (a holder that crashed left a mark: kept)."""
    folder = os.environ.get(WINDOW_ENV)
    if folder and getattr(config, "own_window", False):
        try:
            os.unlink(os.path.join(folder, DONE))
        except OSError:
            pass
        try:
            os.rmdir(folder)
        except OSError:
            pass


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """HOST_NETWORK tests (their fixtures too) run in the machine's network; the others in the worker's.
    Side by side, a test that is not a Slurm test waits until the Slurm tests' time-limited jobs are
    done (tests/alone.py); the worker that ran the last of those says so. The same across the full
    command's lanes: the `tf` lane's tests wait, the `slurm` lane says when."""
    side_by_side = hasattr(item.config, "workerinput")
    if (side_by_side and item.get_closest_marker("slurm") is None) or LANE == "tf":
        wait_for_the_window(item.nodeid, first_part=LANE == "tf" or bool(getattr(item.config, "alone_tests", ())))
    if item.get_closest_marker("slurm") is not None and not background_slurm.SCENARIOS.keys() & set(
            getattr(item, "fixturenames", ())):
        background_slurm.wait_all()  # no Slurm test while a background scenario may stop the controller
    host = any(item.get_closest_marker(m) is not None for m in HOST_NETWORK) and netns.enter_host()
    try:
        yield
    finally:
        if host:
            netns.enter_own()
        if (side_by_side or LANE == "slurm") and getattr(item.config, "alone_tests", ())[-1:] == [item.nodeid]:
            first_part_done()


def pytest_sessionfinish(session):
    """A worker (or the `slurm` lane) at its end: whatever it ran is over (a time-limited test it never
    ran frees the others)."""
    if hasattr(session.config, "workerinput") or LANE == "slurm":
        first_part_done()


@pytest.hookimpl(hookwrapper=True)
def pytest_collection_modifyitems(config, items):
    """Side by side (`--dist loadgroup`): the Slurm tests share one cluster, so they run one after
    another, as one group, and first (the longest unit: mostly waiting on Slurm, it overlaps the
    other worker's TensorFlow tests); a module whose tests share a module-scoped fixture is a group
    (the fixture is built once); every other test goes wherever a worker is free. Marked before any
    other implementation runs (a wrapper): xdist's turns the marks into node ids. In the Slurm group,
    the tests of the time-limited jobs (ALONE_FIXTURES) go first: until they are done no other test
    starts (tests/alone.py), and after them the other worker's tests overlap the rest. Then the
    FULL_ONLY markers' rule.  The full command's `slurm` lane orders and lists its time-limited tests
    the same way.  In one process, when a selected test uses a background scenario
    (tests/background_slurm.py), the Slurm tests go after every other test, so that the scenario runs
    beside those from the first test on."""
    if hasattr(config, "workerinput") or LANE == "slurm":  # a serial run keeps pytest's order (but see the end)
        slurm = [item for item in items if item.get_closest_marker("slurm") is not None]
        slurm.sort(key=_slurm_order)
        items[:] = slurm + [item for item in items if item.get_closest_marker("slurm") is None]
    if hasattr(config, "workerinput"):
        for item in items:
            if item.get_closest_marker("slurm") is not None:
                item.add_marker(pytest.mark.xdist_group("slurm"))
            elif _shares_a_fixture(item):
                item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    yield
    _leave_full_only(config, items)
    _keep_chunk(config, items)
    if not hasattr(config, "workerinput"):  # one process: the background scenarios the run needs
        config.background_slurm = background_slurm.wanted(getattr(item, "fixturenames", ()) for item in items)
        if config.background_slurm:
            items[:] = sorted(items, key=lambda item: item.get_closest_marker("slurm") is not None)  # stable
    if hasattr(config, "workerinput") or LANE == "slurm":  # the time-limited jobs' tests, in the order they run
        config.alone_tests = [item.nodeid for item in items if item.get_closest_marker("slurm") is not None
                              and ALONE_FIXTURES & set(getattr(item, "fixturenames", ()))]


def _shares_a_fixture(item) -> bool:
    """Whether the test uses a fixture built once for its module or class."""
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    return any(d.scope in ("module", "class", "package") for ds in defs.values() for d in ds)


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true",
                     help="part of the full test command: keep the FULL_ONLY tests (`install`, `hostile`, "
                          "`templates`, `procs`) whatever -m says")
    parser.addoption("--chunk", metavar="K/N", default=None,
                     help="only the selected tests of every N-th module from the K-th (0-based; modules in name "
                          "order): scripts/test.sh's lanes share the old-TF pass in chunks")


def _keep_chunk(config, items):
    """--chunk K/N: the tests of the modules whose index (in name order, among the selected) is K mod N."""
    spec = config.getoption("chunk", None)  # None: a pytest run inside a test, without this conftest's options
    if not spec:
        return
    k, n = (int(x) for x in spec.split("/"))
    if not 0 <= k < n:
        raise pytest.UsageError(f"--chunk {spec}: expected K/N with 0 <= K < N")
    modules = sorted({item.nodeid.split("::")[0] for item in items})
    keep = {m for i, m in enumerate(modules) if i % n == k}
    leave = [item for item in items if item.nodeid.split("::")[0] not in keep]
    if leave:
        config.hook.pytest_deselected(items=leave)
        items[:] = [item for item in items if item.nodeid.split("::")[0] in keep]


def _leave_full_only(config, items):
    """`install` tests (a wheel built and installed into a fresh virtualenv: ~10 s) and `hostile`
    tests (an attacker run as another user, property tests of the supervision channel: ~1.5 min) and
    `templates` tests (the sbatch templates under bash with stand-ins for srun: ~1 min of bash) and
    `procs` tests (tests/supervise's supervisors, launcher and batch-step as real processes waiting on
    their real timers: ~60 s of the workers' time; without them the fast subset took 39 s on this 2-core
    machine, with them 49-57 s, and 82 s beside another run) run
    in the full command (no -m, or --full: scripts/test.sh runs it in two parts) and when -m names
    them; a run that picks tests by marker without naming them, such as the fast subset
    `-m "not slurm and not tf and not mpi"`, leaves them out."""
    expr = config.getoption("markexpr") or ""
    if not expr or config.getoption("full"):
        return
    skipped = [m for m in FULL_ONLY if m not in expr]
    if not skipped:
        return
    leave = [item for item in items if any(item.get_closest_marker(m) is not None for m in skipped)]
    if leave:
        config.hook.pytest_deselected(items=leave)
        items[:] = [item for item in items if item not in leave]


@pytest.fixture(scope="session", autouse=True)
def _background_slurm(request):
    """The run's background Slurm scenarios (tests/background_slurm.py), started with its first test on
    the local cluster (no cluster: none, and their tests skip as they would); waited for at its end."""
    names = getattr(request.config, "background_slurm", ())
    if names:
        try:
            cluster = request.getfixturevalue("slurm_cluster")
        except pytest.skip.Exception:
            names = ()
        else:
            background_slurm.start(names, cluster, request.getfixturevalue("tmp_path_factory"))
    yield
    background_slurm.wait_all()


@pytest.fixture(scope="session")
def cli_runs():
    """`python -m tf_for_slurm` runs forked from one server that imported the CLI (tests/cli_runs.py)."""
    from cli_runs import CliRuns

    runs = CliRuns()
    yield runs
    runs.close()


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory) -> Path:
    """The wheel of this tree, built once per run (tests/wheel_build.py)."""
    from wheel_build import build_wheel

    return build_wheel(tmp_path_factory.mktemp("wheel"))
