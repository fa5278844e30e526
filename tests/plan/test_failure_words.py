"""A task's failure in plain words (plan/failure_words.py): exit statuses, the signal that stops a
step, and the line of a task's log that says why it failed.  Plain data only."""

import signal

import pytest

from tf_for_slurm.plan.failure_words import ERROR_CHARS, exit_words, stop_words, why_from_log

MWMS = ("MultiWorkerMirroredStrategy cannot run with ps tasks (this step has 1 ps, the default); fix: run with "
        "--ps 0 (TF_SLURM_PS=0, or NUM_PS=0 in the sbatch templates)")
KERAS = ("tf_keras is not installed: Keras 3 `fit` fails under MultiWorkerMirroredStrategy/ParameterServerStrategy; "
         "fix: pip install tf-keras (with tensorflow-cpu: pip install --no-deps tf-keras)")
TRACE = ("Traceback (most recent call last):\n"
         '  File "/home/u/train.py", line 12, in <module>\n'
         "    model.fit(dataset)\n"
         "    ^^^^^^^^^^^^^^^^^^\n"
         '  File "/venv/keras/src/trainer.py", line 40, in fit\n'
         "    raise ValueError(...)\n")


@pytest.mark.parametrize("status,words", [
    (1, "exit 1"),
    (2, "exit 2"),
    (127, "exit 127, command not run"),
    (137, "exit 137, killed by SIGKILL"),
    (139, "exit 139, killed by SIGSEGV"),
    (143, "exit 143, ended by SIGTERM"),
    (130, "exit 130, ended by SIGINT"),
    (128, "exit 128"),
    (255, "exit 255"),
])
def test_exit_words(status, words):
    assert exit_words(status) == words


@pytest.mark.parametrize("signo,words", [
    (signal.SIGTERM, "SIGTERM reached the chief's supervisor (Slurm is ending the step: scancel, the time limit, "
                     "a preemption, or srun after a task failed)"),
    (signal.SIGINT, "SIGINT reached the chief's supervisor (Ctrl-C, or srun passing one on)"),
    (signal.SIGUSR1, "SIGUSR1 reached the chief's supervisor (the job's time limit is near: Slurm's warning, passed "
                     "on by batch-step so the tasks save and stop)"),
    (signal.SIGQUIT, "SIGQUIT reached the chief's supervisor"),
    (None, "the chief's supervisor was told to stop"),
])
def test_stop_words(signo, words):
    assert stop_words(signo) == words


@pytest.mark.parametrize("log,said", [
    # our fix line, alone or among other output; the last one wins
    (f"starting\ntf-slurm: {MWMS}\n", MWMS),
    (f"tf-slurm: old; fix: old\nmore\ntf-slurm: {MWMS}\n", MWMS),
    # a logged one (exec's warning) has its level after the prefix
    (f"tf-slurm: WARNING: {KERAS}\ntraining...\n", KERAS),
    # a traceback: its exception line, the first of a message of many lines
    (TRACE + "ValueError: Attempt to convert a value (PerReplica:{\n  0: <tf.Tensor: shape=(2,)>\n})\n",
     "ValueError: Attempt to convert a value (PerReplica:{"),
    # a warning with a fix, then the error it foretold: both, the error first
    (f"tf-slurm: WARNING: {KERAS}\n" + TRACE + "ValueError: Attempt to convert\nI0000 tf log line after\n",
     f"ValueError: Attempt to convert; it warned earlier: {KERAS}"),
    # an error, then our fix line (said after it): the fix line
    (TRACE + "RuntimeError: no ps\n" + f"tf-slurm: {MWMS}\n", MWMS),
    # chained tracebacks: the last one
    (TRACE + "KeyError: 'a'\n\nDuring handling of the above exception, another exception occurred:\n\n" + TRACE
     + "tensorflow.python.framework.errors_impl.UnavailableError: Socket closed\n",
     "tensorflow.python.framework.errors_impl.UnavailableError: Socket closed"),
    # a command that could not run
    ("/usr/bin/python3: can't open file '/home/u/trian_mwms.py': [Errno 2] No such file or directory\n",
     "/usr/bin/python3: can't open file '/home/u/trian_mwms.py': [Errno 2] No such file or directory"),
    ("tf-slurm exec: cannot run 'pythn': No such file or directory\n",
     "tf-slurm exec: cannot run 'pythn': No such file or directory"),
    ("bash: line 1: pythn: command not found\n", "bash: line 1: pythn: command not found"),
    # our own one-line error (a step that failed before its status was written), kept whole: it is bounded
    ("x\ntf-slurm exec: error: address host 'node1.x' of task 0 does not resolve " + "y" * 250 + "\n",
     "tf-slurm exec: error: address host 'node1.x' of task 0 does not resolve " + "y" * 250),
    ("slurmstepd: error: Detected 1 oom_kill event in StepId=7.0. Some of the step tasks have been OOM Killed.\n",
     "slurmstepd: error: Detected 1 oom_kill event in StepId=7.0. Some of the step tasks have been OOM Killed."),
    # nothing recognisable: None (TF's own missing-library lines are not errors of the task)
    ("W tensorflow: Could not load dynamic library 'libcudart.so.11.0'; No such file or directory\nstep 1\n", None),
    ("", None),
    ("tf-slurm: WARNING: tf_keras is not installed (no fix in it)\n", None),
    ("Traceback (most recent call last):\n  File \"x\", line 1\n", None),  # cut before its exception line
])
def test_why_from_log(log, said):
    assert why_from_log(log) == said


def test_a_long_error_is_cut_and_control_characters_are_not_passed_to_the_terminal():
    said = why_from_log(TRACE + "ValueError: " + "x" * 500 + "\n")
    assert said is not None and len(said) == ERROR_CHARS and said.endswith("...")
    assert why_from_log(TRACE + "ValueError: \x1b[2Jbad\n") == "ValueError: ?[2Jbad"
