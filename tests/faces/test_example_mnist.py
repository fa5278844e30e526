"""The distributed MNIST example: IDX reader, data split, flags, and real multi-process runs.

The multi-process tests go through `tf-slurm local` exactly as the example's README does.  They
use the real MNIST test digits from /work/shared/data/mnist when present (and then require the
demo's >= 0.95 held-out accuracy); otherwise a synthetic, learnable IDX set written here.
"""

from __future__ import annotations

import gzip
import http.server
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from data_paths import mnist_dir
from ports import free_base_port

from tf_for_slurm.errors import UsageError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(REPO, "examples", "mnist_distributed")
sys.path.insert(0, EXAMPLE)

import mnist_data  # noqa: E402
from mnist_data import load_mnist, read_idx, write_idx  # noqa: E402

REAL_MNIST = mnist_dir()
HAVE_REAL = os.path.isfile(os.path.join(REAL_MNIST, "t10k-images-idx3-ubyte.gz"))
# class counts of the 10k MNIST test set (from the data's README)
REAL_CLASS_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


# -- IDX reader ------------------------------------------------------------------------------------

@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_idx_roundtrip_plain_and_gzip(tmp_path, suffix):
    rng = np.random.RandomState(1)
    images = rng.randint(0, 256, size=(7, 28, 28)).astype(np.uint8)
    labels = rng.randint(0, 10, size=7).astype(np.uint8)
    write_idx(str(tmp_path / f"i{suffix}"), images)
    write_idx(str(tmp_path / f"l{suffix}"), labels)
    got_i = read_idx(str(tmp_path / f"i{suffix}"), mnist_data.IMAGE_MAGIC)
    got_l = read_idx(str(tmp_path / f"l{suffix}"), mnist_data.LABEL_MAGIC)
    assert got_i.shape == (7, 28, 28) and np.array_equal(got_i, images)
    assert got_l.shape == (7,) and np.array_equal(got_l, labels)


def test_idx_header_is_big_endian_standard(tmp_path):
    p = str(tmp_path / "l")
    write_idx(p, np.arange(3, dtype=np.uint8))
    assert open(p, "rb").read() == bytes.fromhex("00000801 00000003".replace(" ", "")) + bytes([0, 1, 2])


def _raw(path, data: bytes):
    with open(path, "wb") as f:
        f.write(data)
    return str(path)


def test_idx_rejects_bad_magic(tmp_path):
    p = _raw(tmp_path / "x", b"\x12\x34\x08\x01" + b"\x00\x00\x00\x01" + b"\x05")
    with pytest.raises(UsageError, match=r"magic=0x12340801"):
        read_idx(p)


def test_idx_rejects_wrong_kind(tmp_path):
    p = str(tmp_path / "labels")
    write_idx(p, np.zeros(4, np.uint8))
    with pytest.raises(UsageError, match=r"magic=0x00000801: expected 0x00000803"):
        read_idx(p, mnist_data.IMAGE_MAGIC)


def test_idx_rejects_truncated_payload(tmp_path):
    p = str(tmp_path / "imgs")
    write_idx(p, np.zeros((2, 28, 28), np.uint8))
    data = open(p, "rb").read()
    _raw(p, data[:-10])
    with pytest.raises(UsageError, match=r"payload of 1558 bytes: expected 1568 bytes"):
        read_idx(p)


def test_idx_rejects_short_header_and_bad_gzip(tmp_path):
    with pytest.raises(UsageError, match=r"expected an IDX header"):
        read_idx(_raw(tmp_path / "a", b"\x00\x00"))
    with pytest.raises(UsageError, match=r"expected a header of 12 bytes"):
        read_idx(_raw(tmp_path / "b", b"\x00\x00\x08\x02\x00\x00\x00\x01"))
    with pytest.raises(UsageError, match=r"cannot read IDX file"):
        read_idx(_raw(tmp_path / "c.gz", b"not gzip at all"))


# -- data sets ---------------------------------------------------------------------------------------

def synthetic_mnist(folder, n=3000, seed=0, gz=True, prefix="t10k"):
    """A learnable stand-in: class k lights a 7x7 block at its own place, over noise."""
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 10, size=n).astype(np.uint8)
    images = rng.randint(0, 90, size=(n, 28, 28)).astype(np.uint8)
    for i, k in enumerate(labels):
        r, c = 7 * (k // 4), 7 * (k % 4)
        images[i, r:r + 7, c:c + 7] = rng.randint(150, 256, size=(7, 7))
    ext = ".gz" if gz else ""
    os.makedirs(folder, exist_ok=True)
    write_idx(os.path.join(folder, f"{prefix}-images-idx3-ubyte{ext}"), images)
    write_idx(os.path.join(folder, f"{prefix}-labels-idx1-ubyte{ext}"), labels)
    return images, labels


def test_split_of_test_files_is_deterministic_and_disjoint(tmp_path, caplog):
    images, _ = synthetic_mnist(tmp_path, n=500, gz=False)
    caplog.set_level("INFO")
    a = load_mnist(str(tmp_path))
    b = load_mnist(str(tmp_path))
    assert a.train_images.shape == (400, 784) and a.heldout_images.shape == (100, 784)
    assert np.array_equal(a.heldout_images, b.heldout_images)
    assert "splitting the 500 test examples into 400 train / 100 held-out" in caplog.text
    # every example lands in exactly one part: compare as byte rows
    rows = {r.tobytes() for r in (images.reshape(500, -1) / 255.0).astype(np.float32)}
    parts = [r.tobytes() for r in np.concatenate([a.train_images, a.heldout_images])]
    assert len(parts) == 500 and set(parts) == rows
    c = load_mnist(str(tmp_path), seed=1)
    assert not np.array_equal(a.heldout_labels, c.heldout_labels)
    assert a.train_images.dtype == np.float32 and 0.0 <= a.train_images.min() and a.train_images.max() <= 1.0
    with pytest.raises(UsageError, match=r"heldout=500: expected 0 < heldout < 500"):
        load_mnist(str(tmp_path), heldout=500)


def test_training_files_make_test_files_the_heldout_set(tmp_path):
    synthetic_mnist(tmp_path, n=300, prefix="train")
    _, test_labels = synthetic_mnist(tmp_path, n=120, seed=5, gz=False, prefix="t10k")
    d = load_mnist(str(tmp_path))
    assert len(d.train_labels) == 300 and len(d.heldout_labels) == 120
    assert np.array_equal(d.heldout_labels, test_labels)


def test_count_mismatch_and_bad_labels(tmp_path):
    write_idx(str(tmp_path / "t10k-images-idx3-ubyte"), np.zeros((5, 28, 28), np.uint8))
    write_idx(str(tmp_path / "t10k-labels-idx1-ubyte"), np.zeros(4, np.uint8))
    with pytest.raises(UsageError, match=r"has 5 images but .* has 4 labels"):
        load_mnist(str(tmp_path))
    write_idx(str(tmp_path / "t10k-labels-idx1-ubyte"), np.array([0, 1, 2, 3, 12], np.uint8))
    with pytest.raises(UsageError, match=r"label 12: expected labels 0..9"):
        load_mnist(str(tmp_path))


def test_missing_data_names_data_dir_and_files(tmp_path):
    with pytest.raises(UsageError, match=r"--data_dir=.*t10k-images-idx3-ubyte\[\.gz\].*--download") as e:
        load_mnist(str(tmp_path))
    assert "\n" not in str(e.value)
    with pytest.raises(UsageError, match=r"--data_dir='/nonexistent/x': expected a folder"):
        load_mnist("/nonexistent/x")


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_download_fails_clearly_offline(tmp_path):
    mirror = f"http://127.0.0.1:{_closed_port()}/mnist/"
    with pytest.raises(UsageError, match=r"--download: cannot fetch http://127\.0\.0\.1:\d+/mnist/train-images"):
        mnist_data.download_mnist(str(tmp_path), mirror=mirror, timeout=5)
    assert os.listdir(tmp_path) == []  # nothing half-written is left to look like data


def test_download_rejects_wrong_md5(tmp_path):
    served = tmp_path / "mirror"
    served.mkdir()
    (served / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(b"not mnist"))

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **k):
            super().__init__(*a, directory=str(served), **k)

        def log_message(self, *a):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    # a short poll: shutdown() waits for serve_forever to look (0.5 s by default)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        dest = tmp_path / "data"
        with pytest.raises(UsageError, match=r"has md5 [0-9a-f]{32}: expected f68b3c2dcbeaaa9fbdd348bbdeb94873"):
            mnist_data.download_mnist(str(dest), mirror=f"http://127.0.0.1:{httpd.server_port}/")
        assert os.listdir(dest) == []
    finally:
        httpd.shutdown()


def test_batch_sampler_covers_every_example_each_epoch():
    x = np.arange(10, dtype=np.float32).reshape(10, 1)
    s = mnist_data.BatchSampler(x, np.arange(10), batch_size=5, seed=3)
    seen = np.concatenate([s.next()[1] for _ in range(2)])
    assert sorted(seen) == list(range(10))
    with pytest.raises(UsageError, match=r"--batch_size=0"):
        mnist_data.BatchSampler(x, np.arange(10), batch_size=0, seed=0)


@pytest.mark.skipif(not HAVE_REAL, reason=f"real MNIST digits not present in {REAL_MNIST}")
def test_real_test_digits():
    d = load_mnist(REAL_MNIST)
    assert d.train_images.shape == (8000, 784) and d.heldout_images.shape == (2000, 784)
    counts = np.bincount(np.concatenate([d.train_labels, d.heldout_labels]), minlength=10)
    assert counts.tolist() == REAL_CLASS_COUNTS
    raw = read_idx(os.path.join(REAL_MNIST, "t10k-images-idx3-ubyte.gz"), mnist_data.IMAGE_MAGIC)
    assert raw.shape == (10000, 28, 28) and raw.dtype == np.uint8 and raw.max() == 255


# -- launcher script without TensorFlow ------------------------------------------------------------

def test_list_of_tf_tasks_checks_the_step_size():
    from LaunchTFServerWithHooks import list_of_tf_tasks

    assert list_of_tf_tasks(2, 3, 5) == ["ps", "ps", "worker", "worker", "worker"]
    with pytest.raises(UsageError, match=r"--ps=1 \+ --workers=3 = 4: expected the number of tasks in the step \(3\)"):
        list_of_tf_tasks(1, 3, 3)
    with pytest.raises(UsageError, match=r"--ps=0"):
        list_of_tf_tasks(0, 3, 3)
    with pytest.raises(UsageError, match=r"--workers=0"):
        list_of_tf_tasks(1, 0, 1)


@pytest.mark.parametrize("flag,value,message", [
    ("--Iterations", "0", "--Iterations=0: expected a global-step target >= 1"),
    ("--batch_size", "-1", "--batch_size=-1: expected a batch size >= 1"),
    ("--learning_rate", "0", "--learning_rate=0.0: expected a learning rate > 0"),
])
def test_bad_flags_are_one_line_usage_errors(flag, value, message):
    from LaunchTFServerWithHooks import parse_args

    with pytest.raises(UsageError) as e:
        parse_args(["--data_dir", "d", "--model_dir", "m", "--ps", "1", "--workers", "2", flag, value])
    assert str(e.value) == message


def _env():
    env = dict(os.environ)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_launch_script_parses_flags_without_importing_tensorflow():
    # The library must set CUDA_VISIBLE_DEVICES before TensorFlow loads: the script may not
    # import it while parsing flags, building the task list or loading data.
    code = ("import sys; sys.path.insert(0, %r); import LaunchTFServerWithHooks as L; "
            "a = L.parse_args(['--data_dir', 'd', '--model_dir', 'm', '--ps', '1', '--workers', '2', '--sync']); "
            "import mnist_data; assert a.sync and a.Iterations > 0; "
            "assert 'tensorflow' not in sys.modules, 'tensorflow imported'" % EXAMPLE)
    r = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


@pytest.mark.timeout(60)
def test_wrong_task_count_fails_fast_through_the_launcher(tmp_path):
    r = _local(3, ["--ps", "1"], "LaunchTFServerWithHooks.py",
               ["--data_dir", str(tmp_path), "--model_dir", str(tmp_path / "m"), "--ps", "1", "--workers", "3"],
               timeout=50)
    assert r.returncode == 2, r.stdout[-2000:]
    assert "--ps=1 + --workers=3 = 4: expected the number of tasks in the step (3)" in r.stdout


# -- real distributed runs -------------------------------------------------------------------------

# The step's supervisor ends a ps (TF2: every server) once training is over: SIGTERM, then SIGKILL
# after TF_SLURM_KILL_GRACE (3 s). The example's servers keep serving on SIGTERM until their done
# reports came, then print how they ended and exit by themselves; the tests read those lines, so
# the grace is longer than any run (the test timeouts bound the whole step anyway).
SERVERS_END_BY_THEMSELVES = {"TF_SLURM_KILL_GRACE": "600"}


def _local(n, launcher_args, script, args, timeout):
    cmd = [sys.executable, "-m", "tf_for_slurm", "local", "-n", str(n), *launcher_args, "--",
           sys.executable, os.path.join(EXAMPLE, script), *args]
    env = {**_env(), **SERVERS_END_BY_THEMSELVES}
    env["TF_SLURM_BASE_PORT"] = str(free_base_port(n))
    return subprocess.run(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    if HAVE_REAL:
        return REAL_MNIST
    d = tmp_path_factory.mktemp("synthetic_mnist")
    synthetic_mnist(str(d), n=3000)
    return str(d)


def _metrics(model_dir):
    with open(os.path.join(model_dir, "metrics.json")) as f:
        return json.load(f)


@pytest.mark.tf
@pytest.mark.timeout(420)
def test_async_run_checkpoints_reaches_accuracy_and_resumes(tmp_path, data_dir):
    model_dir = str(tmp_path / "run")
    common = ["--data_dir", data_dir, "--model_dir", model_dir, "--ps", "1", "--workers", "2",
              "--eval_every", "0"]
    r = _local(3, ["--ps", "1"], "LaunchTFServerWithHooks.py", common + ["--Iterations", "400"], timeout=200)
    out = r.stdout
    assert r.returncode == 0, out[-4000:]
    assert "ps:0: all 2 workers reported done; exiting cleanly (status 0)" in out
    assert "held-out accuracy:" in out
    m = _metrics(model_dir)
    # a fresh run: nothing restored (the other async worker may already have taken a step or two
    # when the chief first reads the global step, so that is not always 0)
    assert m["mode"] == "async" and m["resumed_from"] is None and m["start_global_step"] < 20
    assert 400 <= m["global_step"] < 420  # async: the other worker may add a step or two
    assert m["heldout_examples"] == (2000 if HAVE_REAL else 600)
    assert m["accuracy"] >= 0.95, m  # the demo target (real digits) / an easy synthetic set
    # the final checkpoint: saved at the end, at (or, async, a step or two past) the metrics' step
    saved = re.search(r'^model_checkpoint_path: ".*model\.ckpt-(\d+)"', open(os.path.join(model_dir, "checkpoint")).read(), re.M)
    assert saved, "no checkpoint recorded"
    first = int(saved.group(1))
    assert m["global_step"] <= first < 420
    assert os.path.isfile(os.path.join(model_dir, f"model.ckpt-{first}.index"))
    assert any(f.startswith("events.out.tfevents") for f in os.listdir(model_dir))

    # the rerun resumes; SIGUSR1 to `tf-slurm local` (as Slurm's warning through the template, or a
    # rehearsal by hand) stops it at the next step with a checkpoint, and every task exits 0.
    # --eval_every 10: the chief's first held-out line comes at the first multiple of 10 past the
    # restored step (never at once: ValidationHook), so the chief has trained on when it is sent
    # (its "global_step/sec" line comes only after 200 steps)
    cmd = [sys.executable, "-m", "tf_for_slurm", "local", "-n", "3", "--ps", "1", "--", sys.executable,
           os.path.join(EXAMPLE, "LaunchTFServerWithHooks.py"), *common, "--Iterations", "100000",
           "--eval_every", "10"]
    env = {**_env(), **SERVERS_END_BY_THEMSELVES, "TF_SLURM_BASE_PORT": str(free_base_port(3))}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        for line in proc.stdout:  # until the chief resumed and trained on
            lines.append(line)
            if "global_step/sec" in line or "global step" in line and "held-out" in line:
                break
        proc.send_signal(signal.SIGUSR1)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = "".join(lines) + (out or "")
    assert proc.returncode == 0, out[-4000:]
    m2 = _metrics(model_dir)
    assert m2["start_global_step"] >= first  # restored from the last checkpoint, not from scratch
    assert m2["resumed_from"] == os.path.join(model_dir, f"model.ckpt-{first}")
    assert f"resumed from {model_dir}" in out
    assert m2["stopped_by"] == "USR1" and first < m2["global_step"] < 100000, m2
    saved = re.search(r'^model_checkpoint_path: ".*model\.ckpt-(\d+)"', open(os.path.join(model_dir, "checkpoint")).read(),
                      re.M)
    assert int(saved.group(1)) >= m2["global_step"], saved.group(0)
    assert re.search(r"checkpoint \S+model\.ckpt-\d+ written [0-9.]+ s after SIGUSR1", out), out[-4000:]
    assert "ps:0: all 2 workers reported done; exiting cleanly (status 0)" in out, out[-4000:]


@pytest.mark.tf
@pytest.mark.timeout(300)
def test_sync_run_exits_cleanly(tmp_path, data_dir):
    model_dir = str(tmp_path / "sync")
    r = _local(3, ["--ps", "1"], "LaunchTFServerWithHooks.py",
               ["--data_dir", data_dir, "--model_dir", model_dir, "--ps", "1", "--workers", "2",
                "--Iterations", "20", "--eval_every", "0", "--sync"], timeout=180)
    assert r.returncode == 0, r.stdout[-4000:]
    assert "exiting cleanly (status 0)" in r.stdout
    m = _metrics(model_dir)
    # one global step per round of both workers: the step count is exact in sync mode
    assert m["mode"] == "sync" and m["global_step"] == 20, m


@pytest.mark.tf
@pytest.mark.timeout(240)
def test_a_worker_lost_mid_training_the_example_goes_on_and_every_task_ends_0(tmp_path, data_dir):
    """Spawned the way srun would (no launcher to clean up): worker 1's task (launch() re-ran it under
    tf-slurm exec: its supervisor, and with it its command) SIGKILLed mid-training, as when its node
    is lost.  Asynchronous TF1 training goes on with the chief (plan/lost_task.py); the ps, which
    waits for done reports, is ended by the step's supervisor once training is over.  Paced: 300
    global steps of at least 0.02 s, so the chief trains on for 5 s and more after the loss."""
    from tf_for_slurm.supervise.launcher import make_layout, task_env

    layout, env = make_layout(3), _env()
    env["TF_SLURM_BASE_PORT"] = str(free_base_port(3))
    model_dir = str(tmp_path / "run")
    args = ["--data_dir", data_dir, "--model_dir", model_dir, "--ps", "1", "--workers", "2",
            "--Iterations", "300", "--eval_every", "50", "--min_step_seconds", "0.02"]
    logs = [open(tmp_path / f"task{r}.log", "w+") for r in range(3)]
    procs = [subprocess.Popen([sys.executable, os.path.join(EXAMPLE, "LaunchTFServerWithHooks.py"), *args],
                              env=task_env(layout, r, "7654321", env), stdout=logs[r], stderr=subprocess.STDOUT)
             for r in range(3)]
    try:
        deadline = time.monotonic() + 150
        while "held-out accuracy" not in (tmp_path / "task1.log").read_text():  # training is under way
            assert time.monotonic() < deadline and procs[1].poll() is None, (tmp_path / "task1.log").read_text()[-3000:]
            time.sleep(0.2)
        procs[2].kill()
        statuses = [procs[r].wait(timeout=120) for r in (0, 1)]  # a hang fails here
        chief_log = (tmp_path / "task1.log").read_text()
        assert statuses == [0, 0], (statuses, chief_log[-3000:], (tmp_path / "task0.log").read_text()[-3000:])
        assert "worker 1 (rank 2, node1) was lost (its supervisor went away" in chief_log, chief_log[-3000:]
        assert re.search(r"ended with status 0 after [0-9.]+ s: training is over; finished with 1 of 2 workers "
                         r"\(worker 1 on node1 lost at \d\d:\d\d:\d\d\)", chief_log), chief_log[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        for f in logs:
            f.close()


@pytest.mark.tf
@pytest.mark.timeout(300)
def test_tf2_multi_worker_mirrored(tmp_path, data_dir):
    r = _local(2, ["--ps", "0"], "tf2_mwms.py",
               ["--data_dir", data_dir, "--model_dir", str(tmp_path), "--Iterations", "60",
                "--global_batch_size", "96"], timeout=180)
    assert r.returncode == 0, r.stdout[-4000:]
    m = _metrics(str(tmp_path))
    assert m["replicas"] == 2 and m["steps"] == 60
    assert m["batch_per_worker"] == 48, m  # the global batch kept: its share on each of 2 workers
    assert m["accuracy"] > 0.5, m  # 60 SGD steps from random init: well above chance (0.1)


@pytest.mark.tf
@pytest.mark.timeout(300)
def test_tf2_parameter_server(tmp_path, data_dir):
    r = _local(4, [], "tf2_parameter_server.py",
               ["--data_dir", data_dir, "--model_dir", str(tmp_path), "--Iterations", "60",
                "--ps", "1", "--workers", "2"], timeout=180)
    assert r.returncode == 0, r.stdout[-4000:]
    assert r.stdout.count("said done (status 0)") == 3  # ps:0, worker:0, worker:1 all released
    m = _metrics(str(tmp_path))
    assert m["workers"] == 2 and m["accuracy"] > 0.5, m


@pytest.mark.tf
@pytest.mark.timeout(120)
def test_a_non_chief_waiting_for_the_chief_opens_a_new_session_after_a_transient_grpc_error(monkeypatch):
    """CI, 2 busy cores: the ps answered the waiting worker's first poll with AbortedError ("The same
    RunGraph request was received twice", gRPC delivered it twice) and the worker failed the step.
    MonitoredSession recovers from that error with a new session; the example's wait does too."""
    import tensorflow as tf

    import DeepMNIST_DistributedTRAIN as example

    answers = [tf.errors.AbortedError(None, None, "The same RunGraph (Worker) request was received twice"),
               tf.errors.UnavailableError(None, None, "Socket closed"), ["w"], []]
    opened = []

    class Session:
        def __init__(self, master, graph, config):
            opened.append(master)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def run(self, _fetch):
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

    with tf.Graph().as_default():
        tf.compat.v1.Variable(1.0, name="v")
        monkeypatch.setattr(example.v1, "Session", Session)
        example.WaitForChiefInitHook("grpc://ps:1", None, deadline_s=30, interval_s=0.01).begin()
    assert answers == [] and len(opened) == 3, (answers, opened)

    answers[:] = [tf.errors.AbortedError(None, None, "again")]
    with tf.Graph().as_default():
        tf.compat.v1.Variable(1.0, name="v")
        with pytest.raises(tf.errors.AbortedError):  # bounded: past its deadline it gives up
            example.WaitForChiefInitHook("grpc://ps:1", None, deadline_s=0, interval_s=0.01).begin()
