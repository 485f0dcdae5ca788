"""Files of a Hugging Face Hub repository already in the local Hub cache, found offline.

LeRobot's pi0 / pi0.5 directories ship no tokenizer: LeRobot loads PaliGemma's by its Hub name
from this cache. Tempo never downloads; it looks where huggingface_hub keeps what it fetched:

    <cache>/models--google--paligemma-3b-pt-224/refs/main        the commit `main` points at
    <cache>/models--google--paligemma-3b-pt-224/snapshots/<commit>/tokenizer.model

    folder = cached_snapshot("google/paligemma-3b-pt-224", ("tokenizer.model",))  # or None

<cache> is $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else
$XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub (huggingface_hub's order).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

# A Hub repository id: an optional owner, then a name; never a path (no `..`, no separators).
_REPO_ID = re.compile(r"(?:[A-Za-z0-9][\w.-]{0,95}/)?[A-Za-z0-9][\w.-]{0,95}")
_COMMIT = re.compile(r"[0-9a-f]{40}")


def hub_cache_dir() -> Path:
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.environ[variable]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "huggingface" / "hub"


def repo_folder(repo_id: str) -> Path | None:
    """Where the cache keeps `repo_id` (a model repository), or None for a name that is no
    repository id (a path, `..`)."""
    if _REPO_ID.fullmatch(repo_id) is None or ".." in repo_id:
        return None
    return hub_cache_dir() / ("models--" + repo_id.replace("/", "--"))


def cached_snapshot(repo_id: str, any_of: Sequence[str]) -> Path | None:
    """The cached snapshot of `repo_id` holding at least one of the files `any_of`: the one
    `main` points at, else the newest that holds one; None when the cache has none."""
    folder = repo_folder(repo_id)
    if folder is None or not (folder / "snapshots").is_dir():
        return None

    def holds(snapshot: Path) -> bool:
        return any((snapshot / name).is_file() for name in any_of)

    try:
        main = (folder / "refs" / "main").read_text().strip()
    except (OSError, UnicodeDecodeError):
        main = ""
    if _COMMIT.fullmatch(main) and holds(folder / "snapshots" / main):
        return folder / "snapshots" / main
    try:
        snapshots = [s for s in (folder / "snapshots").iterdir() if s.is_dir() and holds(s)]
    except OSError:
        return None
    return max(snapshots, key=lambda s: s.stat().st_mtime, default=None)
