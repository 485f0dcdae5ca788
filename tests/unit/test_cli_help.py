"""Every option and positional argument of every `tempo` command has a help line: the parser
tree of `tempo` (subcommands, the families' import commands, quantize, profile) and the bench
tools' own parsers."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from controller import cli


def _without_help(parser: argparse.ArgumentParser, path: str) -> Iterator[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _without_help(child, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction) and not action.help:
            yield f"{path} {'/'.join(action.option_strings) or action.dest}"


class _Captured(Exception):
    pass


def _parser_of(run, monkeypatch) -> argparse.ArgumentParser:  # type: ignore[no-untyped-def]
    """The parser a tool builds inside its main(), caught when it parses."""
    captured: list[argparse.ArgumentParser] = []

    def capture(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        captured.append(self)
        raise _Captured

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    with pytest.raises(_Captured):
        run()
    return captured[0]


def test_every_tempo_option_has_help():
    import controller.tools.profile_cli  # noqa: F401  (its parser is the tool's, as in main())

    assert list(_without_help(cli.build_parser(), "tempo")) == []


def test_the_walk_finds_an_option_without_help():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub.choices["status"].add_argument("--undocumented")
    assert list(_without_help(parser, "tempo")) == ["tempo status --undocumented"]


def test_every_bench_option_has_help(monkeypatch):
    from controller.tools import bench_policy, bench_tdmpc2

    bench = _parser_of(lambda: bench_policy.parse_args([]), monkeypatch)
    assert list(_without_help(bench, "tempo bench")) == []
    tdmpc2 = _parser_of(lambda: bench_tdmpc2.main([]), monkeypatch)
    assert list(_without_help(tdmpc2, "tempo bench --tdmpc2")) == []
