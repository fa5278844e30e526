"""The files a job keeps under /tmp and in its job folder, against another user of the cluster.

Other users see job ids and can write to /tmp (here fs.protected_regular and fs.protected_symlinks
may be 0: what they plant at a predictable name is followed).  The attacker is `nobody`, started
with setpriv (`python3 -I`, cwd /); each adversarial test asserts the outcome equals the outcome
without the attacker.  Stand-ins play srun, squeue and scontrol; every multi-process test has a hard
timeout.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from envs import step_env

from tf_for_slurm.host import sbatch
from tf_for_slurm.host.batch_script import JobSpec, script_text
from tf_for_slurm.host.job_folder import read_json, write_json
from tf_for_slurm.plan.requeue import EXIT_TERMINATED
from tf_for_slurm.supervise.batch_step import read_warn_file

pytestmark = pytest.mark.hostile  # left out of the fast subset (tests/conftest.py)

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
ATTACKER_PY = "/usr/bin/python3"  # a python `nobody` can run (the venv's may live under /root)
TEMPLATES = ["tf_slurm_job.sh", "tf_slurm_hetjob.sh", "BASH_Distributed_MNIST.sh"]


def _why_no_attacker() -> str:
    if os.geteuid() != 0:
        return "needs root: the attacker is another user (nobody), started with setpriv"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is missing: no way to run the attacker as another user"
    if not os.access(ATTACKER_PY, os.X_OK):
        return f"{ATTACKER_PY} is missing: the attacker's python"
    try:
        pwd.getpwnam("nobody")
        grp.getgrnam("nogroup")
    except KeyError:
        return "no user nobody / group nogroup to play the attacker"
    return ""


needs_attacker = pytest.mark.skipif(bool(_why_no_attacker()), reason=_why_no_attacker() or "-")


def attacker(code: str, *args: str) -> None:
    """Run `code` as nobody (another user of the cluster)."""
    r = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", ATTACKER_PY, "-I", "-c",
                        code, *args], cwd="/", env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr


PLANT_FILE = "import sys; open(sys.argv[1], 'w').write(sys.argv[2])"
PLANT_LINK = "import os, sys; open(sys.argv[2], 'w').write(sys.argv[3]); os.symlink(sys.argv[2], sys.argv[1])"


@pytest.fixture
def shared_tmp():
    """A folder like /tmp: everybody may write (sticky); `nobody` can reach it."""
    path = Path(tempfile.mkdtemp(prefix="tf_slurm_test_shared.", dir="/tmp"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


# -- batch-step and its warning file ---------------------------------------------------------------
FAKE_SRUN = r"""#!/bin/bash
# a step that trains until told to stop (or FAKE_LOOPS x 0.1 s); records what it was given
trap 'echo told > "$FAKE_DIR/told"; echo "model_checkpoint_path: \"model.ckpt-300\"" > "$CKPT/checkpoint"; exit 0' \
    USR1 USR2 TERM
printf %s "${TF_SLURM_SECRET:-}" > "$FAKE_DIR/secret"
tr '\0' '\n' < /proc/$PPID/cmdline > "$FAKE_DIR/parent_argv"
tr '\0' '\n' < /proc/$PPID/environ > "$FAKE_DIR/parent_environ"
echo started > "$FAKE_DIR/started"
for i in $(seq 1 "${FAKE_LOOPS:-10}"); do sleep 0.1; done
echo "model_checkpoint_path: \"model.ckpt-800\"" > "$CKPT/checkpoint"
"""
FAKE_SQUEUE = "#!/bin/bash\nexit 0\n"  # EndTime unknown: a warning is passed on at once, no timer stops the step
FAKE_SCONTROL = '#!/bin/bash\n[[ "$1" == requeue ]] && echo "$@" >> "$FAKE_DIR/scontrol.args"\nexit 0\n'
# the templates' python: batch-settings waits for the test's go (the attacker plants first), batch-step
# records its arguments and its warning folder, then is the real one
FAKE_PYTHON = r"""#!/bin/bash
case " $* " in
*" batch-settings "*) until [[ -e "$FAKE_DIR/go" ]]; do sleep 0.05; done; echo "2 1 1 100 4" ;;
*" batch-step "*)
    printf '%s\n' "$@" > "$FAKE_DIR/batch_step.args"
    prev=""; for a in "$@"; do [[ "$prev" == --warn-file ]] && stat -c '%a %u %F' "$(dirname "$a")" \
        > "$FAKE_DIR/warn_dir.stat"; prev="$a"; done
    exec "$REAL_PY" "$@" ;;
esac
exit 0
"""


@pytest.fixture
def fake_slurm(tmp_path):
    """(folder of records, environment): stand-ins first on PATH, a job folder for batch.json."""
    bin_dir, ckpt = tmp_path / "bin", tmp_path / "ckpt"
    bin_dir.mkdir()
    ckpt.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("squeue", FAKE_SQUEUE), ("scontrol", FAKE_SCONTROL),
                       ("python", FAKE_PYTHON)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TF_SLURM_"))}
    env.update({"PATH": f"{bin_dir}:{env['PATH']}", "FAKE_DIR": str(tmp_path), "CKPT": str(ckpt),
                "SLURM_JOB_ID": "77", "PYTHONPATH": str(REPO), "REAL_PY": PY,
                "TF_SLURM_JOB_DIR": str(tmp_path / "job")})
    return tmp_path, env


def _outcome(proc: subprocess.Popen, rec: Path, jobs: Path) -> tuple:
    """Wait for `proc` (a hard limit); (exit status, batch.json's state/status/decision, requeued?, told?)."""
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError("batch-step did not end in 30 s (a stopped step?)") from None
    data = read_json(str(jobs / "batch.json")) or {}
    return (proc.returncode, data.get("state"), data.get("status"), data.get("decision"),
            (rec / "scontrol.args").exists(), (rec / "told").exists()), out + err


def batch_step(rec: Path, env: dict, *extra: str) -> tuple:
    for name in ("told", "started", "scontrol.args", "job/batch.json"):
        (rec / name).unlink(missing_ok=True)
    proc = subprocess.Popen([PY, "-m", "tf_for_slurm", "batch-step", "--checkpoint-dir", env["CKPT"], "--target",
                             "800", "--start-grace", "0", *extra, "--", "srun", "x"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    return _outcome(proc, rec, rec / "job")


def old_warn_path(job: str, pid: int, base: str = "/tmp") -> str:
    """Where the templates used to put the warning file: predictable from the job id."""
    return f"{base}/tf_slurm-warning.{job}.{pid}"


@needs_attacker
@pytest.mark.timeout(120)
@pytest.mark.parametrize("plant", ["TERM 0", "USR2 0", "STOP 0", "symlink to TERM 0"])
def test_batch_step_ignores_a_warning_planted_at_the_old_path(fake_slurm, shared_tmp, plant):
    rec, env = fake_slurm
    path = old_warn_path(f"77{uuid.uuid4().hex[:6]}", os.getpid())
    try:
        baseline, _ = batch_step(rec, env, "--warn-file", path)
        assert baseline[:2] == (0, "ended") and not baseline[4], baseline
        if plant.startswith("symlink"):
            attacker(PLANT_LINK, path, str(shared_tmp / "theirs"), plant.split(" to ")[1] + "\n")
        else:
            attacker(PLANT_FILE, path, plant + "\n")
        attacked, log = batch_step(rec, env, "--warn-file", path)
    finally:
        if os.path.lexists(path):
            os.unlink(path)
    assert attacked == baseline, log


@needs_attacker
@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", ["nobody's folder", "our folder others may write", "our private folder"])
def test_batch_step_reads_only_a_warning_file_of_ours_in_a_folder_of_ours(fake_slurm, shared_tmp, where):
    rec, env = fake_slurm
    folder = shared_tmp / "w"
    if where == "nobody's folder":
        attacker("import os, sys; os.mkdir(sys.argv[1], 0o755)", str(folder))
    else:
        folder.mkdir()
        folder.chmod(0o1777 if where == "our folder others may write" else 0o777)
    path = str(folder / "warning")
    baseline, _ = batch_step(rec, env, "--warn-file", path)
    attacker(PLANT_FILE, path, "USR2 0\n")
    if where == "our private folder":  # planted while the folder was open: now private, the file still theirs
        folder.chmod(0o700)
        assert os.stat(path).st_uid != os.getuid()
    attacked, log = batch_step(rec, env, "--warn-file", path)
    assert attacked == baseline, log


@pytest.mark.timeout(60)
def test_batch_step_still_takes_our_own_warning(fake_slurm):
    rec, env = fake_slurm
    folder = Path(tempfile.mkdtemp(dir=rec))  # 0700, as the batch shell's mktemp -d
    (folder / "warning").write_text(f"USR2 {time.time():.3f}\n")
    outcome, log = batch_step(rec, env, "--warn-file", str(folder / "warning"))
    assert outcome[:2] == (0, "requeued") and outcome[4:] == (True, True), log


def test_read_warn_file_takes_only_the_signals_batch_step_passes_on(tmp_path):
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    path = folder / "warning"
    assert read_warn_file(str(path)) == (None, None, "")  # no warning yet: nothing to say
    for text, want in [("USR1 12.5\n", ("USR1", 12.5)), ("USR2\n", ("USR2", None)), ("TERM nan\n", ("TERM", None)),
                       ("TERM 1\nSTOP 2\n", ("TERM", 1.0))]:
        path.write_text(text)
        assert read_warn_file(str(path))[:2] == want, text
    for text in ["STOP 0\n", "KILL 0\n", "SIGTERM 0\n", "CONT\n", "\n", "x" * 10000]:
        path.write_text(text)
        assert read_warn_file(str(path))[:2] == (None, None), text
    path.write_text("STOP 0\n")
    assert "not a signal batch-step passes on" in read_warn_file(str(path))[2]
    path.unlink()
    os.mkfifo(path)  # opened without blocking, then refused: the wait loop never hangs on it
    name, _, why = read_warn_file(str(path))
    assert name is None and "not a regular file" in why
    path.unlink()
    (folder / "real").write_text("TERM 0\n")
    path.symlink_to(folder / "real")  # never followed
    assert read_warn_file(str(path))[0] is None
    os.chmod(folder, 0o770)
    (folder / "plain").write_text("TERM 0\n")
    assert read_warn_file(str(folder / "plain"))[0] is None  # the group may write the folder


# -- the secret batch-step gives the step's tasks ----------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("given", [None, "a-given-secret-of-at-least-32-characters"])
def test_batch_step_gives_srun_a_secret_nobody_else_sees(fake_slurm, given):
    rec, env = fake_slurm
    if given is not None:
        env = {**env, "TF_SLURM_SECRET": given}
    outcome, log = batch_step(rec, env)
    assert outcome[0] == 0, log
    secret = (rec / "secret").read_text()
    assert len(secret) >= 32 and (secret == given if given else re.fullmatch(r"[0-9a-f]{64}", secret)), secret
    assert secret not in log and secret not in (rec / "parent_argv").read_text()
    assert secret not in (rec / "job" / "batch.json").read_text()
    if given is None:  # only srun's environment has it, never batch-step's own
        assert "TF_SLURM_SECRET" not in (rec / "parent_environ").read_text()
        batch_step(rec, env)
        assert (rec / "secret").read_text() != secret  # a fresh one for every run


# -- the batch scripts: the warning file in a private folder -----------------------------------------
def _header(text: str) -> str:
    """The warning's block: from its comment to the step's launch."""
    start = text.index("# The time-limit warning is SIGURG")
    return text[start:text.index("{ \"$", start)]


def _submit_script(python: str, jobs: Path, ckpt: Path) -> str:
    return script_text(JobSpec(command=("python", "train.py"), python=python, jobs_root=str(jobs), ntasks=2,
                               checkpoint_dir=str(ckpt), target=800, warn_margin=1000))


def test_every_batch_script_makes_a_private_folder_then_traps_after_its_last_command_substitution(tmp_path):
    texts = {name: (REPO / "scripts" / name).read_text() for name in TEMPLATES}
    texts["submit"] = _submit_script("python3", tmp_path, tmp_path)
    headers = {name: re.sub(r"echo \"[\w.]+: error", "echo \"X: error", _header(t)) for name, t in texts.items()}
    assert len(set(headers.values())) == 1, headers  # the same lines everywhere
    for name, text in texts.items():
        before, block = text.split("# The time-limit warning is SIGURG")
        code = [line for line in block.splitlines()[1:] if not line.startswith("#")]
        assert code[0].startswith('warn_dir="$(mktemp -d'), (name, code[0])  # the folder, then the traps
        assert "$(" not in block.partition("for sig in URG")[2].replace("$(mktemp", ""), name  # no $(...) after
        code_before = [line for line in before.splitlines() if not line.lstrip().startswith("#")]
        assert not [line for line in code_before if "trap " in line], name  # a shell ignores SIGURG until here
        assert 'mktemp -d "${TMPDIR:-/tmp}/tf_slurm.XXXXXXXXXX"' in text and "tf_slurm-warning" not in text, name
        assert "trap 'trap \"\" URG USR1 USR2 TERM; rm -rf -- \"$warn_dir\"' EXIT" in text, name


@pytest.mark.timeout(60)
def test_a_warning_while_the_private_folder_is_made_is_ignored_then_one_after_is_written(tmp_path):
    """SIGURG while mktemp runs (before the traps): the shell's default is to ignore it; one after the traps
    is written down as the warning (batch-step's backstop covers the one lost)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mktemp").write_text('#!/bin/bash\nkill -URG "$SHELL_PID"\nexec /usr/bin/mktemp "$@"\n')
    (bin_dir / "mktemp").chmod(0o755)
    body = _header(_submit_script("python3", tmp_path, tmp_path))
    script = "export SHELL_PID=$$\n" + body + 'kill -URG $$\ncat "$warn_file"; echo "dir=$warn_dir"\n'
    r = subprocess.run(["bash", "-c", script], env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
                                                    "TMPDIR": str(tmp_path)},
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2 and re.fullmatch(r"USR1 [0-9]+", lines[0]), r.stdout
    assert not Path(lines[1][4:]).exists()  # removed as the shell ended


def _run_script(kind: str, rec: Path, env: dict, tmpdir: Path, plant: bool, warn: bool = False) -> tuple:
    """Run a batch script (the generic template or the one `submit` writes) with the stand-ins."""
    jobs = rec / "jobs"
    job = f"5{uuid.uuid4().int % 10**8}"
    for name in ("go", "told", "started", "scontrol.args", "batch_step.args", "warn_dir.stat"):
        (rec / name).unlink(missing_ok=True)
    if kind == "template":
        (rec / "train.py").write_text("")
        argv = ["bash", str(REPO / "scripts" / "tf_slurm_job.sh"), "train.py"]
        env = {**env, "PYTHON": str(rec / "bin" / "python"), "MODEL_DIR": env["CKPT"], "TARGET": "800",
               "WARN_MARGIN": "1000", "TF_SLURM_JOBS_ROOT": str(jobs), "SLURM_SUBMIT_DIR": str(rec)}
    else:
        script = rec / "job.sh"
        script.write_text(_submit_script(str(rec / "bin" / "python"), jobs, Path(env["CKPT"])))
        argv = ["bash", str(script)]
    env = {**env, "SLURM_JOB_ID": job, "TMPDIR": str(tmpdir)}
    env.pop("TF_SLURM_JOB_DIR")
    proc = subprocess.Popen(argv, cwd=rec, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    old = old_warn_path(job, proc.pid, str(tmpdir))
    if plant:
        attacker(PLANT_FILE, old, "TERM 0\n")
    (rec / "go").touch()
    if warn:  # a signal for the batch shell alone (as --signal=B: sends) while the step runs
        deadline = time.monotonic() + 20
        while not (rec / "started").exists():
            assert time.monotonic() < deadline and proc.poll() is None, "the stand-in srun never started"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)  # passed on at once (a warning waits for the tasks' start-up)
    outcome, log = _outcome(proc, rec, jobs / job)
    args = (rec / "batch_step.args").read_text().splitlines()
    return outcome, log, args[args.index("--warn-file") + 1], (rec / "warn_dir.stat").read_text().split(), old


@needs_attacker
@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["template", "submit"])
def test_a_batch_script_keeps_its_warning_file_where_nobody_can_plant_one(fake_slurm, shared_tmp, kind):
    rec, env = fake_slurm
    baseline, _, _, _, _ = _run_script(kind, rec, env, shared_tmp, plant=False)
    assert baseline[:2] == (0, "ended"), baseline
    attacked, log, warn_file, dir_stat, old = _run_script(kind, rec, env, shared_tmp, plant=True)
    assert attacked == baseline, log
    assert warn_file != old and re.fullmatch(re.escape(str(shared_tmp)) + r"/tf_slurm\.\w{10}/warning", warn_file)
    assert dir_stat[:2] == ["700", str(os.getuid())] and dir_stat[2] == "directory", dir_stat
    assert not os.path.exists(os.path.dirname(warn_file))  # removed when the shell ended
    assert [p.name for p in shared_tmp.iterdir()] == [os.path.basename(old)]  # only the attacker's file


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["template", "submit"])
def test_a_signal_to_the_batch_shell_still_reaches_batch_step(fake_slurm, kind):
    rec, env = fake_slurm
    tmpdir = rec / "tmp"
    tmpdir.mkdir()
    outcome, log, _, _, _ = _run_script(kind, rec, {**env, "FAKE_LOOPS": "300"}, tmpdir, plant=False, warn=True)
    assert outcome[:2] == (EXIT_TERMINATED, "ended") and outcome[4:] == (False, True), log
    assert "SIGTERM reached the batch shell" in log and not list(tmpdir.iterdir()), log


# -- exec: one private folder per task for the progress file and the spilled TF_CONFIG -----------------
PROGRESS_BODY = ('[ "$TF_SLURM_JOB_TYPE" = worker ] && {{ stat -c "%a %u" "$(dirname "$TF_SLURM_PROGRESS_FILE")" '
                 '> {d}/dir.stat; echo "$TF_SLURM_PROGRESS_FILE" > {d}/path; touch "$TF_SLURM_PROGRESS_FILE"; }}; '
                 'exec sleep 600')


def _exec_step(rec: Path, tmpdir: Path, job: str, timeout: float = 40) -> list:
    """chief,worker under `tf-slurm exec` (progress deadline 1 s, no restarts): the worker reports
    progress once, then hangs; its supervisor must kill it at the deadline."""
    procs = []
    for slot in range(2):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "TF_SLURM", "GRPC_FAIL_FAST"))}
        env.update(step_env("node[1-2]", "1(x2)", slot=slot, job_id=job, TF_SLURM_ADDRESS="template:127.0.0.1",
                            TF_SLURM_PORT_SCOPE="step", TF_SLURM_TASKS="chief,worker", TF_SLURM_PROGRESS_DEADLINE="1",
                            TF_SLURM_MAX_RESTARTS="0", TMPDIR=str(tmpdir), PYTHONPATH=str(REPO)))
        procs.append(subprocess.Popen([PY, "-m", "tf_for_slurm", "exec", "--", "sh", "-c",
                                       PROGRESS_BODY.format(d=rec)], env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                                      stderr=(rec / f"err.{slot}").open("w"), start_new_session=True))
    end = time.monotonic() + timeout
    try:
        for p in procs:
            try:
                p.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                logs = "".join((rec / f"err.{i}").read_text() for i in range(2))
                raise AssertionError(f"the hung worker was never ended ({timeout} s):\n{logs}") from None
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    return [p.returncode for p in procs]


@needs_attacker
@pytest.mark.timeout(150)
@pytest.mark.parametrize("plant", ["folder", "symlink to a file of ours"])
def test_a_progress_file_planted_at_the_old_path_changes_nothing(tmp_path, shared_tmp, plant):
    job = str(1_000_000 + uuid.uuid4().int % 8_000_000)
    baseline = _exec_step(tmp_path, shared_tmp, job)
    assert baseline == [137, 137], (tmp_path / "err.1").read_text()
    victim = shared_tmp / "victim"  # a file of ours the attacker can name
    victim.write_text("ours")
    victim_mtime = victim.stat().st_mtime_ns
    job2 = str(int(job) + 1)  # the attacked run: its names are as predictable
    old = f"{shared_tmp}/tf_slurm_progress.{os.getuid()}.{job2}.0.1"  # the worker's (rank 1), as it used to be
    if plant == "folder":
        attacker("import os, sys; os.mkdir(sys.argv[1])", old)
    else:
        attacker("import os, sys; os.symlink(sys.argv[2], sys.argv[1])", old, str(victim))
    attacked = _exec_step(tmp_path, shared_tmp, job2)
    assert attacked == baseline, (tmp_path / "err.1").read_text()
    assert victim.stat().st_mtime_ns == victim_mtime and victim.read_text() == "ours"
    path = (tmp_path / "path").read_text().strip()
    assert re.fullmatch(re.escape(f"{shared_tmp}/tf_slurm.{job2}.0.1.") + r"[^/]+/progress", path), path
    assert (tmp_path / "dir.stat").read_text().split() == ["700", str(os.getuid())]
    assert sorted(p.name for p in shared_tmp.iterdir()) == sorted([os.path.basename(old), "victim"])  # ours: gone


@needs_attacker
@pytest.mark.timeout(200)
def test_a_folder_planted_at_the_old_spill_path_does_not_stop_exec(tmp_path, shared_tmp):
    table = tmp_path / "addresses"  # 16384 tasks: TF_CONFIG is too large for the environment, it spills
    table.write_text("".join(f"node{n:04d} 127.0.{n // 256}.{n % 256}\n" for n in range(1, 4097)))
    job = str(1_000_000 + uuid.uuid4().int % 8_000_000)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "TF_SLURM"))}
    env.update(step_env("node[0001-4096]", "4(x4096)", slot=5000, job_id=job, TF_SLURM_ADDRESS=f"file:{table}",
                        TMPDIR=str(shared_tmp), PYTHONPATH=str(REPO)))
    show = 'f="$TF_SLURM_TF_CONFIG_FILE"; stat -c "%a %u" "$(dirname "$f")" "$f"; echo "$f"'

    def run():
        r = subprocess.run([PY, "-m", "tf_for_slurm", "exec", "--no-supervise", "--", "sh", "-c", show], env=env,
                           capture_output=True, text=True, timeout=150)
        return r.returncode, r.stdout.splitlines(), r.stderr

    rc, lines, err = run()
    assert rc == 0 and lines[:2] == [f"700 {os.getuid()}", f"600 {os.getuid()}"], err
    attacker("import os, sys; os.mkdir(sys.argv[1], 0o700)", f"{shared_tmp}/tf_slurm.{os.getuid()}.{job}.0.5000")
    rc2, lines2, err2 = run()
    assert (rc2, lines2[:2]) == (rc, lines[:2]), err2
    assert lines2[2] != lines[2] and not os.path.exists(os.path.dirname(lines2[2]))  # a new random folder, gone


# -- the job folder ----------------------------------------------------------------------------------
@needs_attacker
def test_write_json_follows_no_symlink_planted_at_a_temporary_name(tmp_path, shared_tmp):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    folder = shared_tmp / "shared_status"  # e.g. TF_SLURM_STATUS_FILE in a folder the group shares
    folder.mkdir()
    folder.chmod(0o1777)
    write_json(str(folder / "status.json"), {"n": 1})  # without the attacker
    baseline = read_json(str(folder / "status.json"))
    attacker("import os, sys; os.symlink(sys.argv[2], sys.argv[1])", f"{folder}/.status.json.{os.getpid()}.tmp",
             str(victim))
    write_json(str(folder / "status.json"), {"n": 1})
    assert read_json(str(folder / "status.json")) == baseline and victim.read_text() == "precious"
    st = os.lstat(folder / "status.json")
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600


def test_write_json_makes_a_private_folder_and_leaves_nothing_on_failure(tmp_path):
    folder = tmp_path / "jobs" / "12"
    write_json(str(folder / "batch.json"), {"state": "running"})
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "batch.json").stat().st_mode) == 0o600
    with pytest.raises(TypeError):
        write_json(str(folder / "batch.json"), {"state": object()})
    assert [p.name for p in folder.iterdir()] == ["batch.json"] and read_json(str(folder / "batch.json"))


def test_submit_makes_the_job_folder_private(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("sbatch", "#!/bin/bash\ncat >/dev/null\necho 4243\n"), ("scontrol", "#!/bin/bash\nexit 0\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    old = os.umask(0o022)  # a common umask: the folder would be 0755 without an explicit mode
    try:
        folder = Path(sbatch.submit([], "#!/bin/bash\n", str(tmp_path / "jobs")))
    finally:
        os.umask(old)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "job.sh").stat().st_mode) == 0o600


@needs_attacker
@pytest.mark.timeout(60)
@pytest.mark.parametrize("plant", ["symlink to a file of ours", "their own file, world-writable", "fifo"])
def test_a_timeline_planted_beside_a_shared_status_file_gets_nothing_and_blocks_nothing(shared_tmp, plant):
    """TF_SLURM_STATUS_FILE in a folder others can write to: the hub's timeline beside it
    (supervise.timeline_file) writes nothing into what another user planted there and never blocks;
    it turns itself off with one warning, and the status file is still written."""
    from tf_for_slurm.supervise.status_file import StatusFile

    victim = shared_tmp / "victim"
    victim.write_text("ours")
    planted = shared_tmp / "timeline.jsonl"
    if plant == "symlink to a file of ours":
        attacker("import os, sys; os.symlink(sys.argv[2], sys.argv[1])", str(planted), str(victim))
    elif plant == "fifo":
        attacker("import os, sys; os.mkfifo(sys.argv[1], 0o666)", str(planted))
    else:
        attacker("import os, sys; open(sys.argv[1], 'w').write(''); os.chmod(sys.argv[1], 0o666)", str(planted))
    status = StatusFile(str(shared_tmp / "status.json"))
    snap = {"job": "5", "step": "0", "state": "running", "updated_at": 1.0, "started_at": 1.0, "tasks": []}
    status.update(0.0, 1, lambda: snap)
    assert read_json(str(shared_tmp / "status.json")) == snap  # the step's own state, written
    assert status.timeline.broken and status.timeline.written == 0
    assert victim.read_text() == "ours"
    if plant == "their own file, world-writable":
        assert planted.read_text() == ""
