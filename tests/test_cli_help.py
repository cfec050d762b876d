"""The command line explains itself: every subcommand has a one-line description and every
option a help text that gives its default."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from rousseau.cli import build_parser, main


def parsers(
    parser: argparse.ArgumentParser, path: str = "rousseau"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from parsers(child, f"{path} {name}")


ALL = list(parsers(build_parser()))


@pytest.mark.parametrize(("path", "parser"), ALL, ids=[p for p, _ in ALL])
def test_every_command_and_option_says_what_it_does(
    path: str, parser: argparse.ArgumentParser
) -> None:
    assert parser.description, f"{path}: no description"
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if action.help == argparse.SUPPRESS:
            continue  # --config and --debug repeated after the subcommand
        name = "/".join(action.option_strings) or action.dest
        assert action.help, f"{path} {name}: no help text"
        if action.option_strings and not action.required and name != "--version":
            assert "default" in action.help, f"{path} {name}: the help hides its default"


def test_version_flag_and_command_agree(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    flag = capsys.readouterr().out
    assert main(["version"]) == 0
    assert capsys.readouterr().out == flag and flag.startswith("rousseau ")


def test_global_options_go_before_or_after_the_command() -> None:
    parser = build_parser()
    before = parser.parse_args(["--config", "a.yaml", "cron", "list"])
    after = parser.parse_args(["cron", "list", "--config", "a.yaml", "--debug"])
    assert before.config == after.config == "a.yaml" and after.debug
