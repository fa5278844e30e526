"""The test command runs tests side by side (pytest-xdist): the Slurm tests on one worker, one after
another, in the machine's network; every other test in its worker's own network (tests/conftest.py,
tests/netns.py). Under pytest 9, xdist 3.8 silently stopped grouping: this catches that kind of break."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from side_by_side import workers_for

TESTS = Path(__file__).resolve().parents[1]

CONFTEST = f"""
import importlib.util, sys
sys.path.insert(0, {str(TESTS)!r})
spec = importlib.util.spec_from_file_location("tf_slurm_tests_conftest", {str(TESTS / "conftest.py")!r})
real = importlib.util.module_from_spec(spec)
spec.loader.exec_module(real)
pytest_configure = real.pytest_configure
pytest_runtest_protocol = real.pytest_runtest_protocol
pytest_collection_modifyitems = real.pytest_collection_modifyitems
"""

TESTS_TEXT = """
import os, pytest

def _record(kind, i):
    ns = os.readlink(f"/proc/thread-self/ns/net")
    with open(os.path.join(os.environ["SIDE_OUT"], f"{kind}{i}"), "w") as f:
        f.write(f"{os.environ['PYTEST_XDIST_WORKER']} {ns}")

@pytest.mark.slurm
@pytest.mark.parametrize("i", range(6))
def test_slurm(i):
    _record("slurm", i)

@pytest.mark.parametrize("i", range(6))
def test_other(i):
    _record("other", i)
"""


def _can_unshare() -> bool:
    r = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(TESTS)!r}); import netns; "
                        "sys.exit(netns.make_own() is not None)"], timeout=30)
    return r.returncode == 0


@pytest.mark.timeout(120)
def test_slurm_tests_share_one_worker_in_the_machines_network_and_the_others_have_their_own(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_side.py").write_text(TESTS_TEXT)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "SIDE_OUT": str(out)}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
                        "loadgroup", "-o", "markers=slurm", str(tmp_path)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=100)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    runs = {p.name: p.read_text().split() for p in out.iterdir()}
    assert len(runs) == 12, sorted(runs)
    slurm = [v for k, v in runs.items() if k.startswith("slurm")]
    other = [v for k, v in runs.items() if k.startswith("other")]
    assert len({worker for worker, _ns in slurm}) == 1, slurm  # one after another, on one worker
    if not _can_unshare():
        pytest.skip("no network namespaces here (needs root): only the grouping is checked")
    here = os.readlink("/proc/thread-self/ns/net")
    assert {ns for _w, ns in slurm} == {here}, (slurm, here)  # the machine's network (the one pytest ran in)
    assert here not in {ns for _w, ns in other}, other
    by_worker = {}
    for worker, ns in other:
        by_worker.setdefault(worker, set()).add(ns)
    assert all(len(s) == 1 for s in by_worker.values()), by_worker  # one network per worker
    assert len(set().union(*by_worker.values())) == len(by_worker), by_worker  # not shared between workers


def test_a_network_of_its_own_has_every_port_free_and_the_host_is_one_switch_away():
    if not _can_unshare():
        pytest.skip("no network namespaces here (needs root)")
    with socket.socket() as held:  # a port taken in this network ...
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        code = (f"import sys, socket; sys.path.insert(0, {str(TESTS)!r}); import netns\n"
                "assert netns.make_own() is None\n"
                f"s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); s.close()  # ... is free here\n"
                f"with netns.host_network():\n"
                f"    socket.create_connection(('127.0.0.1', {port}), timeout=5).close()  # and reachable there\n"
                f"try:\n"
                f"    socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
                f"except ConnectionRefusedError:\n"
                f"    print('back in its own')\n")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout.strip() == "back in its own", r.stderr


@pytest.mark.parametrize("markexpr, env, cores, expected", [
    ("not slurm and not tf and not mpi", {}, 2, 4),  # the fast subset: two per core
    ("not tf and not slurm", {}, 1, 2),
    ("not tf and not slurm", {}, 16, 4),  # at most 4
    ("not tf and not slurm", {"TEST_WORKERS": "1"}, 2, 0),  # one process, in order
    ("not tf and not slurm", {"TEST_WORKERS": "3"}, 2, 3),
    ("tf or slurm", {}, 2, 0),  # TensorFlow and Slurm tests one at a time
    ("tf or slurm", {"TEST_WORKERS": "2"}, 2, 2),  # two lanes, when asked (tests/alone.py)
    ("tf", {}, 2, 0),
    ("tf and not slurm", {}, 2, 0),
    ("not slurm", {}, 2, 0),  # may pick tf tests
    ("nottf and not slurm", {}, 2, 0),  # words, not letters
    ("", {}, 2, 0),  # the whole suite in one go
    ("", {"TEST_WORKERS": "2"}, 2, 2),
])
def test_how_many_side_by_side(markexpr, env, cores, expected):
    assert workers_for(markexpr, env, cores) == expected


@pytest.mark.parametrize("bad", ["0", "two", "-1"])
def test_a_bad_worker_count_is_a_usage_error_naming_it(bad):
    with pytest.raises(pytest.UsageError, match="TEST_WORKERS"):
        workers_for("", {"TEST_WORKERS": bad}, 2)


def test_a_held_window_keeps_other_tests_waiting_until_it_closes(tmp_path, monkeypatch):
    import threading
    import time

    import alone

    monkeypatch.setenv(alone.WINDOW_ENV, str(tmp_path))
    waited = []
    with alone.alone("jobs"):
        assert os.listdir(tmp_path)  # held: a mark in the private folder
        waiter = threading.Thread(target=lambda: waited.append(alone.wait_for_the_window("a test")))
        waiter.start()
        time.sleep(1.0)
        assert not waited  # still waiting while the window is held
    waiter.join(timeout=30)
    assert waited and waited[0] >= 1.0 and not os.listdir(tmp_path)
    assert alone.wait_for_the_window("another") < 1.0  # closed: no wait


def test_outside_a_side_by_side_run_nothing_waits(monkeypatch):
    import alone

    monkeypatch.delenv(alone.WINDOW_ENV, raising=False)
    with alone.alone("jobs"):
        assert alone.wait_for_the_window("a test") == 0.0


def test_the_first_part_keeps_other_tests_waiting_until_it_is_done(tmp_path, monkeypatch):
    import threading
    import time

    import alone

    monkeypatch.setenv(alone.WINDOW_ENV, str(tmp_path))
    assert alone.wait_for_the_window("a run without time-limited jobs") < 1.0
    waited = []
    waiter = threading.Thread(target=lambda: waited.append(alone.wait_for_the_window("a test", first_part=True)))
    waiter.start()
    time.sleep(1.0)
    assert not waited  # no time-limited job runs yet, but their tests are not done: it waits
    alone.first_part_done()
    waiter.join(timeout=30)
    assert waited and waited[0] >= 1.0
    with alone.alone("jobs"):  # done, but held again: it waits
        late = threading.Thread(target=lambda: waited.append(alone.wait_for_the_window("b", first_part=True)))
        late.start()
        time.sleep(0.6)
        assert len(waited) == 1
    late.join(timeout=30)
    assert len(waited) == 2
