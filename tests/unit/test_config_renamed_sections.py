"""The `execution:` section was called `inference:`: the old spelling is still read, in a file,
in a `policies:` entry and in --set, and each time a warning names the new one."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from controller.config import dump_config, load_config, policy_views
from controller.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tempo.yaml"
    path.write_text(text)
    return path


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_files_inference_section_is_read_as_execution_and_named_old(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="controller.config")
    path = write(tmp_path, "inference:\n  query_period: 4\n  batch_sizes: [1, 2]\n")
    config = load_config(path)
    assert config.execution.query_period == 4 and config.execution.batch_sizes == (1, 2)
    assert config.execution.model_fields_set == {"query_period", "batch_sizes"}
    [line] = warnings(caplog)
    assert str(path) in line and "inference: is now called execution:" in line
    dumped = dump_config(config)  # written back under the new name
    assert "\nexecution:" in dumped and "\ninference:" not in dumped


def test_a_set_of_inference_field_is_read_as_execution_and_named_old(caplog):
    caplog.set_level(logging.WARNING, logger="controller.config")
    config = load_config(None, ["inference.ensemble=newest"])
    assert config.execution.ensemble == "newest"
    [line] = warnings(caplog)
    assert "--set inference.ensemble" in line and "now called execution" in line


def test_a_named_policys_inference_section_is_read_as_its_execution(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="controller.config")
    path = write(
        tmp_path,
        "policies:\n  - name: a\n    inference: {query_period: 3}\n  - name: b\n",
    )
    (_, a), (_, b) = policy_views(load_config(path))
    assert a.execution.query_period == 3 and b.execution.model_fields_set == set()
    [line] = warnings(caplog)
    assert "policies[0].inference: is now called execution:" in line


def test_the_new_spelling_alone_says_nothing(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="controller.config")
    config = load_config(
        write(tmp_path, "execution: {query_period: 2}\n"), ["execution.max_load=0.5"]
    )
    assert config.execution.query_period == 2 and config.execution.max_load == 0.5
    assert warnings(caplog) == []


def test_both_spellings_in_one_file_are_refused_in_one_sentence(tmp_path):
    path = write(tmp_path, "inference: {query_period: 2}\nexecution: {query_period: 3}\n")
    with pytest.raises(ConfigError, match="inference: is the old name of execution:; set only"):
        load_config(path)
