"""CurveZMQ key files: writing a key pair, reading and checking keys and the allowlist.

Files use pyzmq's `zmq.auth` format (`name.key` public, `name.key_secret` both keys), so keys
made by `zmq.auth.create_certificates` or czmq work too. Every problem is a SecurityError naming
the file: a secret key readable by others, an allowlist writable by others, keys that do not
belong together, text that is not a 40-character Z85 key.

Imports nothing heavy (no torch): drivers load their keys through `controller.wire.client`.
"""

from __future__ import annotations

import datetime
import logging
import os
import re
import stat
from pathlib import Path

import zmq
from zmq.utils import z85

from controller.errors import SecurityError

PUBLIC_SUFFIX = ".key"
SECRET_SUFFIX = ".key_secret"
KEY_GENERATE = "tempo keys generate --dir DIR --name NAME"
MAX_KEY_FILE_BYTES = 64 * 1024  # a key file is a few hundred bytes

log = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


# -- key files --------------------------------------------------------------------------------


def _key_from_file(raw: bytes | None, path: Path, what: str) -> bytes:
    """A z85 key as read from a file, checked: 40 characters that decode to 32 bytes."""
    if raw is None:
        raise SecurityError(f"{path} has no {what}; give a key file made by `{KEY_GENERATE}`")
    try:
        valid = len(raw) == 40 and len(z85.decode(raw)) == 32
    except Exception:  # whatever z85.decode raises on bad input: the key is invalid
        valid = False
    if not valid:
        raise SecurityError(
            f"{path}: the {what} is not a 40-character Z85 CurveZMQ key; give a key file made by "
            f"`{KEY_GENERATE}`"
        )
    return bytes(raw)


def _read_key_file(path: Path) -> tuple[bytes | None, bytes | None]:
    """(public, secret) z85 keys from a zmq.auth key file, either possibly None."""
    try:
        info = path.stat()
    except OSError as exc:
        raise SecurityError(f"cannot read key file {path}: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise SecurityError(f"key file {path} is not a regular file; give the path of a key file")
    if info.st_size > MAX_KEY_FILE_BYTES:
        raise SecurityError(f"{path} is {info.st_size} bytes, too large for a key file")
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise SecurityError(f"cannot read key file {path}: {exc.strerror}") from None
    public = secret = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(b"#"):
            continue
        # The same parsing as zmq.auth.load_certificate, on bytes already read and size-checked.
        if line.startswith(b"public-key") and b"=" in line:
            public = line.split(b"=", 1)[1].strip(b" \t'\"")
        elif line.startswith(b"secret-key") and b"=" in line:
            secret = line.split(b"=", 1)[1].strip(b" \t'\"")
    return public, secret


def _check_private(path: Path) -> None:
    """A secret key readable or writable by anyone but its owner is refused (like ssh)."""
    if os.name != "posix":
        return
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise SecurityError(
            f"secret key file {path} is accessible by other users (mode {mode:04o}); run "
            f"`chmod 600 {path}`"
        )


def _check_not_writable_by_others(path: Path) -> None:
    if os.name != "posix":
        return
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o022:
        raise SecurityError(
            f"{path} is writable by other users (mode {mode:04o}), who could add their own key; "
            f"run `chmod go-w {path}`"
        )


def load_secret_key_pair(path: Path) -> tuple[bytes, bytes]:
    """(public, secret) z85 keys from a NAME.key_secret file, checked to belong together."""
    path = Path(path)
    public_raw, secret_raw = _read_key_file(path)
    if secret_raw is None:
        raise SecurityError(
            f"{path} holds no secret key (is it a public .key file?); give the "
            f"{SECRET_SUFFIX} file made by `{KEY_GENERATE}`"
        )
    _check_private(path)
    secret = _key_from_file(secret_raw, path, "secret key")
    public = _key_from_file(public_raw, path, "public key")
    if zmq.curve_public(secret) != public:
        raise SecurityError(
            f"{path}: its public and secret keys do not belong together; generate a new key pair "
            f"with `{KEY_GENERATE}`"
        )
    return public, secret


def load_public_key(path: Path) -> bytes:
    """A z85 public key from a NAME.key file; a file that also holds a secret key is refused
    (the secret key has left the machine it belongs to)."""
    path = Path(path)
    public_raw, secret_raw = _read_key_file(path)
    if secret_raw is not None:
        raise SecurityError(
            f"{path} contains a secret key; use the public {PUBLIC_SUFFIX} file instead and keep "
            f"the {SECRET_SUFFIX} file only on the machine it belongs to"
        )
    return _key_from_file(public_raw, path, "public key")


def load_server_keys(path: Path) -> tuple[bytes, bytes]:
    """The daemon's (public, secret) z85 keys from `security.server_secret_key`."""
    return load_secret_key_pair(path)


def load_authorized_keys(directory: Path) -> frozenset[bytes]:
    """The z85 public keys of every *.key file in `directory` (the allowlist). An empty or
    unreadable directory, or any bad key file in it, is refused."""
    directory = Path(directory)
    if not directory.is_dir():
        raise SecurityError(
            f"security.authorized_keys {directory} is not a directory; create it and copy each "
            f"driver's public {PUBLIC_SUFFIX} file into it"
        )
    _check_not_writable_by_others(directory)
    try:
        entries = sorted(directory.iterdir())
    except OSError as exc:
        raise SecurityError(
            f"cannot list security.authorized_keys {directory}: {exc.strerror}"
        ) from None
    keys = set()
    for path in entries:
        if path.name.endswith(SECRET_SUFFIX):
            log.warning(
                "%s is a secret key in the allowlist directory; it is ignored, and a driver's "
                "secret key belongs only on that driver's machine",
                path,
            )
        if path.suffix != PUBLIC_SUFFIX:
            continue
        _check_not_writable_by_others(path)
        keys.add(load_public_key(path))
    if not keys:
        raise SecurityError(
            f"security.authorized_keys {directory} has no {PUBLIC_SUFFIX} files, so no driver "
            f"could connect; copy each driver's public key file into it"
        )
    return frozenset(keys)


def _write_new(path: Path, text: str, mode: int) -> None:
    """Create `path` with `mode` from the first byte (no window where a secret is readable)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w", encoding="ascii") as file:
        file.write(text)
    os.chmod(path, mode)  # exactly `mode`, whatever the umask


def _key_file_text(public: bytes, secret: bytes | None) -> str:
    now = datetime.datetime.now().isoformat(timespec="seconds")
    if secret is None:
        banner = (
            f"#   ****  Generated on {now} by tempo keys generate  ****\n"
            "#   ZeroMQ CURVE Public Certificate\n"
            "#   Public: may be copied. Verify its contents after copying it.\n"
        )
    else:
        banner = (
            f"#   ****  Generated on {now} by tempo keys generate  ****\n"
            "#   ZeroMQ CURVE **Secret** Certificate\n"
            "#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.\n"
        )
    lines = [banner, "metadata", "curve", f'    public-key = "{public.decode("ascii")}"']
    if secret is not None:
        lines.append(f'    secret-key = "{secret.decode("ascii")}"')
    return "\n".join(lines) + "\n"


def generate_keys(directory: Path, name: str) -> tuple[Path, Path]:
    """Write a new CurveZMQ key pair: (DIR/NAME.key, DIR/NAME.key_secret), the secret file with
    mode 0600. Existing files are never overwritten (SecurityError)."""
    if not _NAME.match(name):
        raise SecurityError(
            f"key name {name!r} is not allowed; use 1-64 letters, digits, '_', '-' or '.', "
            f"starting with a letter or digit (e.g. daemon, arm0)"
        )
    directory = Path(directory)
    public_path = directory / f"{name}{PUBLIC_SUFFIX}"
    secret_path = directory / f"{name}{SECRET_SUFFIX}"
    for path in (public_path, secret_path):
        if path.exists() or path.is_symlink():
            raise SecurityError(
                f"{path} already exists and is not overwritten; choose another --name or --dir, "
                f"or remove the old key files first"
            )
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise SecurityError(f"cannot create key directory {directory}: {exc.strerror}") from None
    public, secret = zmq.curve_keypair()
    try:
        _write_new(secret_path, _key_file_text(public, secret), 0o600)
    except FileExistsError:
        raise SecurityError(
            f"{secret_path} appeared while writing; nothing was overwritten"
        ) from None
    except OSError as exc:
        raise SecurityError(f"cannot write {secret_path}: {exc.strerror}") from None
    try:
        _write_new(public_path, _key_file_text(public, None), 0o644)
    except OSError as exc:
        secret_path.unlink()  # only ours: created with O_EXCL above
        if isinstance(exc, FileExistsError):
            raise SecurityError(
                f"{public_path} appeared while writing; nothing was overwritten"
            ) from None
        raise SecurityError(f"cannot write {public_path}: {exc.strerror}") from None
    return public_path, secret_path


def cmd_keys_generate(directory: Path, name: str, role: str | None = None) -> str:
    """`tempo keys generate --dir DIR --name NAME [--role daemon|driver]`: write a key pair,
    return what to do with it. Without --role, a pair named `daemon` is the daemon's and any
    other name a driver's (the text says so, and how to ask for the other)."""
    chosen = ""
    if role is None:
        role = "daemon" if name == "daemon" else "driver"
        other = {"daemon": "a driver's", "driver": "the daemon's"}[role]
        chosen = (
            f" (from its name; --role {'driver' if role == 'daemon' else 'daemon'} for {other})"
        )
    if role not in ("daemon", "driver"):
        raise SecurityError(f"--role must be daemon or driver, not {role!r}")
    public_path, secret_path = generate_keys(directory, name)
    lines = [
        f"wrote {public_path} (public: may be copied)",
        f"wrote {secret_path} (SECRET: mode 0600, never copy it to another machine)",
        "",
    ]
    if role == "daemon":
        lines += [
            f"This is the daemon's key pair{chosen}. On the robot PC:",
            f"  security.server_secret_key: {secret_path}",
            f"  copy {public_path} to each driver and pass it as server_public_key",
        ]
    else:
        lines += [
            f"This is a driver's key pair{chosen}. On the driver's machine:",
            f"  pass {secret_path} as the driver's client_secret_key",
            f"  copy {public_path} into the daemon's security.authorized_keys directory, "
            "then restart the daemon",
        ]
    return "\n".join(lines)
