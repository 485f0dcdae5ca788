"""The files one recorder finished, oldest first, with their sizes on disk, kept within a total:
continuous mode's rotated files (record.max_total_mb) and ring mode's incident files
(record.max_incidents_mb). Only files this recorder wrote are ever deleted, never another
program's nor the one being written; the newest finished one is always kept."""

from __future__ import annotations

import collections
import logging
from pathlib import Path

log = logging.getLogger(__name__)


class FileBudget:
    def __init__(self, limit_mb: int, setting: str) -> None:
        """`limit_mb`: 0 for no limit; `setting`: the config field, named in the log."""
        self.limit = limit_mb * 1024 * 1024
        self.setting = setting
        self._finished: collections.deque[tuple[Path, int]] = collections.deque()
        self.files_deleted = 0
        self.bytes_deleted = 0

    def finished(self, path: Path) -> None:
        """A file this recorder wrote is complete (or cut short by a write error)."""
        try:
            size = path.stat().st_size
        except OSError:  # removed already (by an operator), or never made: nothing to count
            return
        self._finished.append((path, size))

    def make_room(self, reserved: int = 0, quiet: bool = False) -> None:
        """Delete the oldest finished files until the rest and `reserved` bytes (the next file)
        fit in the limit. `quiet`: each deletion is counted, not logged (the caller says it)."""
        finished = self._finished
        limit = self.limit
        while limit and len(finished) > 1 and sum(s for _, s in finished) + reserved > limit:
            path, size = finished.popleft()
            try:
                path.unlink()
            except FileNotFoundError:  # an operator removed it first: its bytes are free
                continue
            except OSError as exc:  # the recording goes on; the cap is not kept for this file
                log.warning("%s: could not delete %s (%s)", self.setting, path, exc)
                continue
            self.files_deleted += 1
            self.bytes_deleted += size
            if not quiet:
                log.info("recording %s deleted (%s)", path, self.setting)
