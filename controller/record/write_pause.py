"""The recorder paused by a write error (a full disk, a folder it may no longer write, its file
process gone): said once in the log, without a traceback, and in status; writes are tried
again, at most every RETRY_S, once a probe write into record.dir succeeds."""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from controller.record.file_client import FileProcessError
from controller.record.private_files import make_private_dir

log = logging.getLogger(__name__)

# What pauses the recorder (anything else is a bug of ours: it stops, with its traceback).
WRITE_ERRORS = (FileProcessError, OSError)
RETRY_S = 1.0  # the most often a paused recorder tries record.dir again
PROBE_BYTES = 1 << 20  # written and removed: room for at least this much, now


def why(exc: BaseException) -> str:
    """One sentence of what failed: an OSError's reason and path, or what the file process said."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror}{where}"
    return str(exc) or type(exc).__name__


def probe_write(directory: Path) -> str | None:
    """None when PROBE_BYTES can be written into `directory` now (then removed), else why not."""
    try:
        make_private_dir(directory)
        fd, name = tempfile.mkstemp(prefix=".tempo-probe-", dir=directory)
        try:
            view = memoryview(bytes(PROBE_BYTES))
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
            os.unlink(name)
    except OSError as exc:
        return why(exc)
    return None


class WritePause:
    """Whether the recorder is paused, and why (status reads `reason` from another thread)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.reason: str | None = None
        self.pauses = 0  # times a write error paused it
        # The reason last said: a write that fails again the same way after a resume (the probe
        # passed but the file does not) is not said again, nor its resume, so nothing floods.
        self._said: str | None = None
        self._say_resume = False

    def pause(self, exc: BaseException) -> None:
        """A write failed: paused (said once; a failure while paused changes nothing)."""
        if self.reason is not None:
            return
        self.reason = why(exc)
        self.pauses += 1
        if self.reason == self._said:
            return
        self._said, self._say_resume = self.reason, True
        log.warning(
            "recording paused: %s; records are dropped (counted in status) until a write into "
            "%s succeeds again, tried every %.0f s",
            self.reason, self.directory, RETRY_S,
        )  # fmt: skip

    def try_resume(self) -> bool:
        """True (and said) when a probe write into the folder succeeds now."""
        if probe_write(self.directory) is not None:
            return False
        if self._say_resume:
            log.info("recording resumed: %s can be written again (paused by: %s)",
                     self.directory, self.reason)  # fmt: skip
            self._say_resume = False
        self.reason = None
        return True
