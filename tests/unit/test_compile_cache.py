"""The compile cache's mega-cache file is loaded only where inductor's own caches are cold."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controller.inference.compile_cache import CompileCache


@pytest.fixture(autouse=True)
def _restore_inductor_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    # activate() sets this process-wide; monkeypatch restores the value from before the test.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", os.environ.get("TORCHINDUCTOR_CACHE_DIR", ""))
    monkeypatch.setenv("TRITON_CACHE_DIR", os.environ.get("TRITON_CACHE_DIR", ""))


def test_a_directory_marked_warm_skips_the_megacache_for_that_model_only(tmp_path: Path) -> None:
    first = CompileCache(tmp_path, "model-a")
    first.activate()
    assert first.outcome.startswith("cold")
    first.save()  # after a successful compile
    again = CompileCache(tmp_path, "model-a")
    again.file.write_bytes(b"not read: the local caches are warm")
    again.activate()
    assert again.outcome.startswith("local")
    other = CompileCache(tmp_path, "model-b")
    other.activate()
    assert other.outcome.startswith("cold")


def test_a_copied_megacache_is_loaded_where_inductor_is_cold(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path, "model-a")
    cache.file.parent.mkdir(parents=True, exist_ok=True)
    cache.file.write_bytes(b"garbage")  # a fleet copy, here corrupt: tried (torch warns)
    cache.activate()
    assert cache.outcome == "loaded" or cache.outcome.startswith("load failed")
