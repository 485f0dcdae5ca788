"""The status socket's token: a secret file that proves, on a tcp:// status bind (which every
local user can reach), that a command comes from the daemon's own user (or its status group).

    token = ensure_token(path, group_gid)   # the daemon, at start: made 0600 if missing
    token = read_token(path)                # `tempo swap` / `tempo mark`, same user

The daemon creates it (64 hex characters from os.urandom, mode 0600, or 0640 and owned by the
status group when server.status_group is set) and refuses one that another user owns, that others
may read, or that is not a regular file: anyone who could read it could command the daemon.

Standard library only: `tempo status` and friends import this on a driver's install.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from controller.errors import SecurityError

TOKEN_BYTES = 32  # 256 bits, written as 64 hex characters
MAX_TOKEN_FILE_BYTES = 256


def default_token_path() -> Path:
    """`$XDG_STATE_HOME/tempo/status.token`, else `~/.local/state/tempo/status.token` (a
    relative XDG_STATE_HOME is ignored, as the XDG spec says)."""
    base = os.environ.get("XDG_STATE_HOME", "")
    if base and os.path.isabs(base):
        return Path(base) / "tempo" / "status.token"
    return Path("~/.local/state/tempo/status.token").expanduser()


def token_path(configured: Path | str | None) -> Path:
    """server.status_token, else the default path."""
    return Path(configured).expanduser() if configured else default_token_path()


def ensure_token(path: Path, group_gid: int | None = None) -> bytes:
    """The daemon's token at `path`, made there (and its folder, 0700) if missing. Raises
    SecurityError with one sentence when it cannot be made or must not be trusted."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            _create(path, group_gid)
        except FileExistsError:
            pass  # made earlier (a previous run): checked below like any other
    except OSError as exc:
        raise SecurityError(
            f"cannot create the status token {path} ({exc.strerror or exc}); set "
            "server.status_token to a path the daemon's user can write"
        ) from None
    return _load(path, group_gid, for_daemon=True)


def read_token(path: Path) -> bytes | None:
    """The token at `path` for a client (the CLI), or None when this user cannot read it."""
    try:
        return _load(path, None, for_daemon=False)
    except SecurityError:
        return None


def _create(path: Path, group_gid: int | None) -> None:
    """Write a new token with O_EXCL (never over an existing file, never through a link)."""
    mode = 0o640 if group_gid is not None else 0o600
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        os.fchmod(fd, mode)  # whatever the umask
        if group_gid is not None:
            os.fchown(fd, -1, group_gid)
        os.write(fd, secrets.token_hex(TOKEN_BYTES).encode("ascii") + b"\n")
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    os.close(fd)


def _load(path: Path, group_gid: int | None, *, for_daemon: bool) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise SecurityError(f"cannot read the status token {path} ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if for_daemon:
            _check_trusted(path, info, group_gid)
        elif not stat.S_ISREG(info.st_mode):
            raise SecurityError(f"the status token {path} is not a regular file")
        data = os.read(fd, MAX_TOKEN_FILE_BYTES + 1)
    finally:
        os.close(fd)
    token = data.strip()
    if len(data) > MAX_TOKEN_FILE_BYTES or len(token) < TOKEN_BYTES:
        raise SecurityError(
            f"the status token {path} does not hold a token (delete it: the daemon makes a "
            "new one at start)"
        )
    return token


def _check_trusted(path: Path, info: os.stat_result, group_gid: int | None) -> None:
    """Only the daemon's user may write it, and only it (and its status group) may read it."""
    if not stat.S_ISREG(info.st_mode):
        raise SecurityError(f"the status token {path} is not a regular file; remove it")
    if info.st_uid != os.geteuid():
        raise SecurityError(
            f"the status token {path} belongs to uid {info.st_uid}, not to the daemon's user "
            f"(uid {os.geteuid()}); remove it, the daemon makes a new one"
        )
    allowed = 0o640 if group_gid is not None and info.st_gid == group_gid else 0o600
    if stat.S_IMODE(info.st_mode) & ~allowed:
        raise SecurityError(
            f"the status token {path} has mode {stat.S_IMODE(info.st_mode):o}, so other users "
            f"may read or change it; remove it (the daemon makes a new one) or chmod "
            f"{allowed:o} it"
        )
