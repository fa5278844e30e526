"""The CLI's options: each declared once (the role options, sbatch's named options), every command's
--help complete although its module is imported only when it runs, and the help texts say what
the defaults are."""

from __future__ import annotations

import argparse

import pytest
from cli_runs import clean_env

from tf_for_slurm import cli
from tf_for_slurm.cli import role_options
from tf_for_slurm.host import batch_script

NAMES = [c.name for c in cli.COMMANDS]
ROLE_FLAGS = ["--tasks", "--ps", "--chief", "--roles-by-component", "--address"]


def _parse(argv):
    return cli.build_parser(argv).parse_args(argv)


def test_top_level_help_lists_every_subcommand(cli_runs):
    r = cli_runs.run(["--help"], clean_env())
    assert r.returncode == 0, r.stderr
    listed = r.stdout.split("positional arguments:")[1].split("options:")[0]
    for name in NAMES:
        assert f"\n    {name} " in listed, (name, listed)
    assert "TF_SLURM_TASK_INDEX, ..." in listed  # a "..." is no sentence's end: kept


@pytest.mark.parametrize("name", NAMES)
def test_each_subcommand_help_works_and_shows_its_options(name, cli_runs):
    r = cli_runs.run([name, "--help"], clean_env())
    assert r.returncode == 0 and r.stdout.startswith(f"usage: tf-slurm {name}"), (r.stdout, r.stderr)
    command = next(c for c in cli.COMMANDS if c.name == name)
    sub = argparse.ArgumentParser(prog=name)
    getattr(cli.module_of(command), command.add)(sub)
    flags = [f for a in sub._actions for f in a.option_strings if f.startswith("--") and f != "--help"]
    assert flags, name
    for flag in flags:
        assert flag in r.stdout, (name, flag)


def test_exec_and_submit_help_keep_every_role_option(cli_runs):
    for name, extra in (("exec", ["--placement", "--strategy", "--max-restarts", "--no-supervise"]),
                        ("submit", ["--strategy", *(o.option for o in batch_script.NAMED_OPTIONS), "--exclusive",
                                    "--sbatch-arg", "--dry-run"])):
        r = cli_runs.run([name, "--help"], clean_env())
        assert r.returncode == 0, r.stderr
        for flag in ROLE_FLAGS + extra:
            assert flag in r.stdout, (name, flag)
        assert "--ps N " in r.stdout and "the first N tasks" in r.stdout


def test_max_restarts_help_says_the_default_and_what_0_means(cli_runs):
    r = cli_runs.run(["exec", "--help"], clean_env())
    text = " ".join(r.stdout.split())  # argparse wraps lines
    assert "(default: TF_SLURM_MAX_RESTARTS, else 3; 0: off)" in text, text
    assert "3: off" not in text


def test_role_options_are_one_declaration_with_one_type():
    runs = {
        "explain": ["explain", "--ps", "2"],
        "exec": ["exec", "--ps", "2", "--", "true"],
        "submit": ["submit", "-N", "3", "--ps", "2", "--", "true"],
    }
    for name, argv in runs.items():
        args = _parse(argv)
        assert args.ps == 2 and type(args.ps) is int, name
        command = next(c for c in cli.COMMANDS if c.name == name)
        sub = argparse.ArgumentParser(prog=name)
        getattr(cli.module_of(command), command.add)(sub)
        assert next(a for a in sub._actions if a.dest == "ps").type is role_options.ps_count, name


@pytest.mark.parametrize("argv", [["exec", "--ps", "x", "--", "true"],
                                  ["submit", "-N", "2", "--ps", "-1", "--", "true"], ["tf-config", "--ps", "1.5"]])
def test_a_bad_ps_is_one_line_exit_2_the_same_everywhere(argv, cli_runs):
    r = cli_runs.run(argv, clean_env())
    value = argv[argv.index("--ps") + 1]
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr == f"tf-slurm {argv[0]}: error: --ps={value!r}: expected an integer >= 0\n"


# A valid value of each kind of batch_script's table: the value sbatch gets is the one parsed.
VALUES = {"count": "2", "nodes": "2-3", "time": "1:00:00", "names": "gpu,debug", "gpus": "a100:2", "memory": "4G", "text": "my job"}


def test_submit_parses_and_checks_sbatch_options_from_one_table():
    argv = ["submit"]
    for named in batch_script.NAMED_OPTIONS:
        argv += [named.flags[0], VALUES[named.kind]]  # the short spelling where there is one
    args = _parse(argv + ["--", "true"])
    values = {named.dest: getattr(args, named.dest) for named in batch_script.NAMED_OPTIONS}
    words = batch_script.sbatch_words(values)
    assert words == tuple(f"{n.option}={VALUES[n.kind]}" for n in batch_script.NAMED_OPTIONS)
    assert {n.option for n in batch_script.NAMED_OPTIONS} >= {"--nodes", "--ntasks", "--time", "--job-name"}
