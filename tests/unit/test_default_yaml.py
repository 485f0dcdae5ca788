"""config/default.yaml lists every field of the config model, and only those, each with the
model's default. A field left unset on purpose (it follows the checkpoint or the environment)
is listed as a comment, `# field: default`, under its section."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from controller.config import TempoConfig, load_config
from controller.policy_sections import PolicyConfig
from controller.runner_config import RunnerConfig, default_cache_dir

DEFAULT_YAML = Path(__file__).resolve().parents[2] / "config" / "default.yaml"
_KEY = re.compile(r"^(?P<indent> *)(?P<comment># )?(?P<key>[a-z_]+):(?P<value>.*)$")


def _commented_fields(text: str) -> dict[tuple[str, ...], Any]:
    """`# field: value` lines -> {(section, ..., field): value}, placed by their indentation."""
    stack: list[tuple[int, str]] = []  # (indent, key) of the mappings around the current line
    commented: dict[tuple[str, ...], Any] = {}
    for line in text.splitlines():
        match = _KEY.match(line)
        if match is None:
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = (*(key for _, key in stack), match["key"])
        if match["comment"]:
            commented[path] = yaml.safe_load(match["value"])
        else:
            stack.append((indent, match["key"]))
    return commented


def _compare(
    model: BaseModel,
    listed: Any,
    commented: dict[tuple[str, ...], Any],
    path: tuple[str, ...],
    problems: list[str],
) -> None:
    listed = listed or {}
    fields = {name: getattr(model, name) for name in type(model).model_fields}
    if isinstance(model, PolicyConfig):  # the families' sections are listed as policy.<name>
        del fields["sections"]
        fields.update(model.sections)
    names = list(fields)
    for name, value in fields.items():
        where = ".".join((*path, name))
        if name in listed and isinstance(value, BaseModel):
            _compare(value, listed[name], commented, (*path, name), problems)
            continue
        default = model.model_dump(mode="json")[name]
        if name in listed:
            if listed[name] != default:
                problems.append(f"{where}: default.yaml says {listed[name]!r}, model {default!r}")
        elif (*path, name) in commented:
            said = commented[(*path, name)]
            if said != default:
                problems.append(f"{where}: commented {said!r}, model {default!r}")
        else:
            problems.append(f"{where}: missing from default.yaml")
    for name in listed:
        if name not in names:
            problems.append(f"{'.'.join((*path, name))}: in default.yaml but not in the model")


@pytest.fixture
def no_xdg(monkeypatch):
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)


def test_default_yaml_lists_every_field_with_its_default(no_xdg):
    text = DEFAULT_YAML.read_text()
    problems: list[str] = []
    _compare(TempoConfig(), yaml.safe_load(text), _commented_fields(text), (), problems)
    assert problems == []


def test_the_check_catches_a_missing_a_wrong_and_an_unknown_field(no_xdg):
    text = DEFAULT_YAML.read_text().replace("  parity_rtol: 0.01\n", "  parity_rtol: 0.02\n")
    text = text.replace("  warmup_steps: 3\n", "")
    text = text.replace("    time_constant_steps: 25.0\n", "")  # a family's section is checked too
    text = text.replace("logging:\n", "logging:\n  colour: red\n")
    problems: list[str] = []
    _compare(TempoConfig(), yaml.safe_load(text), _commented_fields(text), (), problems)
    assert sorted(problems) == [
        "logging.colour: in default.yaml but not in the model",
        "policy.reach.time_constant_steps: missing from default.yaml",
        "runner.parity_rtol: default.yaml says 0.02, model 0.01",
        "runner.warmup_steps: missing from default.yaml",
    ]


def test_default_yaml_loads_as_the_defaults(no_xdg):
    assert load_config(DEFAULT_YAML) == TempoConfig()


def test_cache_dir_follows_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert RunnerConfig().cache_dir == tmp_path / "tempo" / "compile"
    assert TempoConfig().runner.cache_dir == tmp_path / "tempo" / "compile"
    assert load_config(DEFAULT_YAML).runner.cache_dir == tmp_path / "tempo" / "compile"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # ignored, as the XDG spec says
    assert default_cache_dir() == Path("~/.cache/tempo/compile")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert RunnerConfig().cache_dir == Path("~/.cache/tempo/compile")
