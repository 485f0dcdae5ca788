"""Names read from a recording (robots, cameras) checked before anything uses them: an export
makes folder and file names of them, a replay prints them, so a name from a file must be one
path component Tempo itself would write.

    camera = checked_name(name, "camera", path)      # RecordingError unless it is one
"""

from __future__ import annotations

import re
from pathlib import Path

from controller.errors import TempoError

# A robot's name as the daemon's handshake takes it (never a path: a topic's part).
_ROBOT = re.compile(r"[A-Za-z0-9_.-]{1,64}")
# One path component: no separator, not `.` or `..`, no leading dot, printable ASCII only.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


class RecordingError(TempoError):
    """A recording that cannot be read at all."""


def is_safe_name(name: str) -> bool:
    return _NAME.fullmatch(name) is not None


class UnsafeNameError(RecordingError):
    """A recording naming a robot or camera with what no Tempo recorder writes (a path)."""


def checked_robot(name: str, path: Path | str) -> str:
    """`name` when the daemon could have taken it as a robot's name, else RecordingError."""
    if _ROBOT.fullmatch(name) is None:
        raise UnsafeNameError(
            f"{path} names a robot {name[:80]!r}, which is not a robot name the daemon takes "
            "(letters, digits, '_', '.', '-', at most 64); the file is refused"
        )
    return name


def checked_name(name: str, what: str, path: Path | str) -> str:
    """`name` when it is one safe path component, else RecordingError saying why."""
    if not is_safe_name(name):
        raise UnsafeNameError(
            f"{path} names a {what} {name[:80]!r}, which is not a name Tempo records (letters, "
            "digits, '_', '.', '-', at most 64, not starting with '.'); the file is refused"
        )
    return name
