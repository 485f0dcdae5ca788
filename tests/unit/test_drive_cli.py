"""`tempo drive`'s own options, its split of LeRobot's flags, and its sentence when LeRobot is
not installed (CI's Python has no LeRobot; LeRobot's Python must see the same sentence when
its import fails, so the import is blocked here rather than assumed absent)."""

from __future__ import annotations

import argparse
import sys

import pytest

from controller import cli
from controller.drive.drive_cli import NEEDS_LEROBOT, build_drive_parser, split_lerobot_flags
from controller.errors import ConfigError


def test_lerobot_flags_pass_through_with_their_values():
    rest = [
        "--robot.type=so101_follower",
        "--robot.port",
        "/dev/ttyACM0",
        "--robot.cameras={front: {type: opencv, index_or_path: 0}}",
        "--teleop.type=so101_leader",
    ]
    assert split_lerobot_flags(rest) == rest


@pytest.mark.parametrize("stray", ["--bogus", "stray-value", "--policy.path=x"])
def test_anything_else_is_refused_in_one_sentence(stray):
    with pytest.raises(ConfigError) as refused:
        split_lerobot_flags(["--robot.type=x", stray])
    assert repr(stray) in str(refused.value)
    assert "--robot.* or --teleop.*" in str(refused.value)


def test_without_lerobot_the_command_names_the_extra(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "lerobot", None)  # `import lerobot` fails, as uninstalled
    monkeypatch.delitem(sys.modules, "controller.drive.lerobot_devices", raising=False)
    code = cli.main(["drive", "--robot.type=so101_follower", "--robot.port=/dev/ttyACM0"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.splitlines() == [NEEDS_LEROBOT]
    assert "pip install 'tempo-controller[lerobot]'" in NEEDS_LEROBOT
    assert captured.out == ""


def test_a_stray_flag_is_one_sentence_through_the_tempo_command(capsys):
    assert cli.main(["drive", "--robot.type=x", "--bogus"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("tempo: '--bogus' is neither")


def test_drive_is_listed_and_every_option_has_help():
    assert "drive" in cli.build_parser().format_help()
    parser = build_drive_parser()
    undocumented = [
        action.option_strings
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction) and not action.help
    ]
    assert undocumented == []


def test_a_realtime_priority_out_of_range_is_refused_before_anything_is_built(capsys):
    assert cli.main(["drive", "--realtime-priority", "0", "--robot.type=x"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "tempo: --realtime-priority must be 1 to 99, not 0"
    ]
