"""Hostile config files given to `tempo serve --config`: each is one sentence on stderr and exit
code 2, long before anything is read to its end or parsed to its depth."""

from __future__ import annotations

import os
import subprocess
import sys
from itertools import pairwise
from pathlib import Path


def _serve(config: Path | str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controller.cli", "serve", "--config", str(config)]
        + ["--set", f"server.bind=ipc://{tmp_path}/t.sock"],
        capture_output=True,
        text=True,
        timeout=30,  # the command itself; reading /dev/zero to a MemoryError takes minutes
        stdin=subprocess.DEVNULL,
    )


def _one_sentence(result: subprocess.CompletedProcess[str], *expected: str) -> str:
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tempo: "), lines[:5]
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def test_dev_zero_is_not_a_config_file(tmp_path: Path) -> None:
    _one_sentence(_serve("/dev/zero", tmp_path), "/dev/zero", "character device")


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    _one_sentence(_serve(fifo, tmp_path), "a pipe, not a regular file")


def test_brackets_nested_200000_deep(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("[" * 200_000)
    _one_sentence(_serve(path, tmp_path), str(path), "nests more than 64 levels")


def test_mappings_nested_by_indentation_only(tmp_path: Path) -> None:
    # Block nesting has no brackets to count: the parser's own recursion limit is caught.
    path = tmp_path / "indented.yaml"
    path.write_text("".join(" " * i + f"k{i}:\n" for i in range(1200)) + " " * 1200 + "x: 1\n")
    _one_sentence(_serve(path, tmp_path), str(path), "nests more than 64 levels")


def test_random_bytes(tmp_path: Path) -> None:
    path = tmp_path / "random.yaml"
    path.write_bytes(b"\xff" + os.urandom(64 * 1024))
    _one_sentence(_serve(path, tmp_path), str(path), "is not UTF-8 text")


def test_a_config_larger_than_1_mib(tmp_path: Path) -> None:
    path = tmp_path / "large.yaml"
    path.write_text("# padding\n" * (110 * 1024))
    _one_sentence(_serve(path, tmp_path), str(path), "larger than 1 MiB")


def test_a_config_at_the_depth_limit_is_parsed(tmp_path: Path) -> None:
    # 64 levels (the mapping and 63 lists) reach validation, which names the field.
    path = tmp_path / "nested.yaml"
    path.write_text("control: " + "[" * 63 + "]" * 63 + "\n")
    result = _serve(path, tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "control" in result.stderr and "nests more" not in result.stderr


def test_a_300_byte_alias_bomb_is_refused_by_serve(tmp_path: Path) -> None:
    # Nine lines of nine aliases each stand for 9**9 values; main's serve hung on it.
    names = "abcdefghi"
    lines = ["a: &a [x,x,x,x,x,x,x,x,x]"]
    lines += [f"{n}: &{n} [{','.join([f'*{b}'] * 9)}]" for b, n in pairwise(names)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    _one_sentence(_serve(path, tmp_path), str(path), "anchor &a", "no anchors or aliases")
