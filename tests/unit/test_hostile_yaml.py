"""Hostile YAML in a config, a `--set` value and TD-MPC2's official config: anchors and aliases
(an alias bomb: a few hundred bytes standing for hundreds of millions of values) and nesting
are refused with one sentence before any value is built (controller.bounded_yaml)."""

from __future__ import annotations

import os
from itertools import pairwise
from pathlib import Path

import pytest

from controller.config import load_config
from controller.errors import ConfigError
from policies.tdmpc2.official_config import read_official_config


def alias_bomb(levels: int) -> str:
    """`levels` lines, each a list of nine aliases of the line above: 9**levels values."""
    names = "abcdefghij"[:levels]
    lines = ["a: &a [x,x,x,x,x,x,x,x,x]"]
    for below, name in pairwise(names):
        lines.append(f"{name}: &{name} [{','.join([f'*{below}'] * 9)}]")
    return "\n".join(lines) + "\n"


def _refusal(config: Path) -> str:
    with pytest.raises(ConfigError) as refused:
        load_config(config)
    message = str(refused.value)
    assert "\n" not in message
    return message


def test_a_300_byte_alias_bomb_is_refused_at_its_first_anchor(tmp_path: Path) -> None:
    # 9**9 values in 330 bytes: on main's code the load walked them (hung for minutes).
    config = tmp_path / "bomb.yaml"
    config.write_text(alias_bomb(9))
    assert config.stat().st_size <= 330
    message = _refusal(config)
    assert str(config) in message and "line 1" in message and "anchor &a" in message


def test_a_small_alias_bomb_under_policies_is_refused_as_an_alias(tmp_path: Path) -> None:
    # Small enough that main's code answers quickly, with pydantic's refusal of 729 names.
    config = tmp_path / "policies.yaml"
    config.write_text(alias_bomb(3) + "policies: [*c, *c]\n")
    message = _refusal(config)
    assert "anchor &a" in message and "no anchors or aliases" in message


def test_an_alias_to_a_valid_section_is_refused_not_expanded(tmp_path: Path) -> None:
    # Merge keys (<<: *name) are aliases too: a valid config written with them is refused.
    config = tmp_path / "merge.yaml"
    config.write_text("control: &c {rate_hz: 50}\nrecord:\n  <<: *c\n")
    assert "anchor &c" in _refusal(config)


def test_an_alias_in_a_set_value_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--set .*alias \*a|anchor &a"):
        load_config(None, ["policy.path=[&a x, *a]"])


def test_block_nesting_200000_deep_is_refused_before_the_parser_recurses(tmp_path: Path) -> None:
    # `- - - ...` nests one sequence per two bytes; libyaml's builder overflows the C stack on it.
    config = tmp_path / "dashes.yaml"
    config.write_text("control:\n" + "- " * 200_000 + "x\n")
    assert "nests more than 64 levels" in _refusal(config)


def test_an_official_tdmpc2_config_with_aliases_is_refused(tmp_path: Path) -> None:
    official = tmp_path / "config.yaml"
    official.write_text("horizon: &h 3\nnum_samples: *h\n")
    with pytest.raises(ConfigError, match="anchor &h"):
        read_official_config(official)


def test_an_official_tdmpc2_config_that_is_a_fifo_is_refused_without_waiting(
    tmp_path: Path,
) -> None:
    # main's code read it by path and waited for a writer forever.
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="a pipe, not a regular file"):
        read_official_config(fifo)


def test_a_list_of_200000_values_is_refused_before_it_is_built(tmp_path: Path) -> None:
    config = tmp_path / "long.yaml"
    config.write_text("control:\n  rate_hz: [" + ",".join(["1"] * 200_000) + "]\n")
    assert "more than 20,000 values" in _refusal(config)
