"""A mistyped option or command: one line naming the subcommand and the closest name (issue 25, item 6)."""

from __future__ import annotations

import pytest

from tf_for_slurm import cli
from tf_for_slurm.cli import closest, unknown_words_line


def _options(name: str) -> list:
    parser = cli.build_parser([name])
    return sorted(o for o in parser._commands[name]._option_string_actions if o.startswith("--") and o != "--help")


def _typo(option: str) -> str:
    """The option with one letter dropped from its name (after the dashes)."""
    body = option[2:]
    i = len(body) // 2
    return "--" + body[:i] + body[i + 1:]


@pytest.mark.parametrize("name", [c.name for c in cli.COMMANDS])
def test_every_subcommand_names_itself_and_the_closest_option(name, capsys):
    """For every option of every subcommand: that option with a letter missing is refused with exit 2,
    one line, 'tf-slurm NAME: error: unrecognized option ...: did you mean OPTION?' (or another option
    just as close)."""
    options = _options(name)
    assert options, name
    for option in options:
        typo = _typo(option)
        if typo in options or len(option) < 6:
            continue
        with pytest.raises(SystemExit) as ended:
            cli.main([name, typo, "--", "true"] if name in ("exec", "local", "submit", "batch-step") else [name, typo])
        assert ended.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        assert err.startswith(f"tf-slurm {name}: error: unrecognized option {typo}: did you mean --"), err
        guess = err.rsplit("did you mean ", 1)[1].rstrip("?")
        assert guess == option or closest(typo, [guess, option]) == guess, (typo, guess, option)


@pytest.mark.parametrize("argv,line", [
    (["submit", "--partiton", "debug", "-N", "1", "--", "python", "t.py"],
     "tf-slurm submit: error: unrecognized option --partiton: did you mean --partition?"),
    (["submit", "-N", "3", "--ntask-per-node", "1", "--", "python", "t.py"],
     "tf-slurm submit: error: unrecognized option --ntask-per-node: did you mean --ntasks-per-node?"),
    (["exec", "--chef", "--", "python", "t.py"], "tf-slurm exec: error: unrecognized option --chef: did you mean --chief?"),
    (["submit", "--chef", "-N", "2", "--", "python", "t.py"],
     "tf-slurm submit: error: unrecognized option --chef: did you mean --chief?"),
    (["explain", "--nodelist", "n1", "--zzzzzz=3"], "tf-slurm explain: error: unrecognized option --zzzzzz: see --help"),
    (["status", "1", "2"], "tf-slurm status: error: unexpected argument '2': see --help"),
    (["sumbit"], "tf-slurm: error: unknown command 'sumbit': did you mean 'submit'?"),
])
def test_the_issue_typos(argv, line, capsys):
    with pytest.raises(SystemExit) as ended:
        cli.main(argv)
    assert ended.value.code == 2
    assert capsys.readouterr().err.strip() == line


@pytest.mark.parametrize("words,options,line", [
    (["--partiton=x"], ["--partition", "-p"], "unrecognized option --partiton: did you mean --partition?"),
    (["--chef", "--x"], ["--chief", "--help", "-h"], "unrecognized option --chef (and 1 more word(s)): did you mean --chief?"),
    (["--chelp"], ["--help", "-h"], "unrecognized option --chelp: see --help"),
    (["-Z"], ["-N", "--nodes"], "unrecognized option -Z: see --help"),
    (["extra"], ["--x"], "unexpected argument 'extra': see --help"),
])
def test_unknown_words_line(words, options, line):
    assert unknown_words_line(words, options) == line
