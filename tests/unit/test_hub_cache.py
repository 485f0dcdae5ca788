"""Finding a Hub repository's files in the local Hugging Face cache, offline, as
huggingface_hub lays it out (refs/main -> snapshots/<commit>/, files linked into blobs/)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from policies.checkpoints.hub_cache import cached_snapshot, hub_cache_dir, repo_folder

MAIN = "a" * 40
OLD = "b" * 40


def _snapshot(cache: Path, commit: str, *files: str) -> Path:
    folder = cache / "models--google--paligemma-3b-pt-224" / "snapshots" / commit
    folder.mkdir(parents=True)
    for name in files:
        (folder / name).write_bytes(b"x")
    return folder


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    return tmp_path


def test_the_snapshot_main_points_at_is_taken(cache: Path) -> None:
    old = _snapshot(cache, OLD, "tokenizer.model")
    main = _snapshot(cache, MAIN, "tokenizer.model")
    os.utime(old, (2e9, 2e9))  # newer than main's: main still wins
    (cache / "models--google--paligemma-3b-pt-224" / "refs").mkdir()
    (cache / "models--google--paligemma-3b-pt-224" / "refs" / "main").write_text(MAIN + "\n")
    assert cached_snapshot("google/paligemma-3b-pt-224", ("tokenizer.model",)) == main


def test_without_refs_the_newest_snapshot_holding_the_file_is_taken(cache: Path) -> None:
    holding = _snapshot(cache, OLD, "tokenizer.model")
    newer_without = _snapshot(cache, MAIN, "config.json")
    os.utime(newer_without, (2e9, 2e9))
    assert cached_snapshot("google/paligemma-3b-pt-224", ("tokenizer.model",)) == holding


def test_nothing_cached_or_a_name_that_is_a_path_is_none(cache: Path) -> None:
    assert cached_snapshot("google/paligemma-3b-pt-224", ("tokenizer.model",)) is None
    _snapshot(cache, MAIN, "config.json")
    assert cached_snapshot("google/paligemma-3b-pt-224", ("tokenizer.model",)) is None
    for name in ("../etc", "/abs/path", "a/b/c", "google/..", ""):
        assert repo_folder(name) is None


def test_the_cache_folder_follows_huggingface_hubs_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert hub_cache_dir() == tmp_path / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub_cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert hub_cache_dir() == tmp_path / "hf" / "hub"
    monkeypatch.setenv("HUGGINGFACE_HUB_CACHE", str(tmp_path / "old"))
    assert hub_cache_dir() == tmp_path / "old"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "new"))
    assert hub_cache_dir() == tmp_path / "new"
