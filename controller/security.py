"""CurveZMQ for the daemon's socket: localhost by default, keys and an allowlist beyond it.

    daemon (robot PC)                         driver (each robot)
    security.server_secret_key  daemon.key_secret   (never leaves the robot PC)
                                daemon.key  ───────▶  server_public_key
    security.authorized_keys/   driver.key  ◀───────  driver.key_secret  (client_secret_key)

The default bind (tcp://127.0.0.1 or ipc://) needs nothing. Binding any other address is refused
unless the daemon has its key pair and a directory of allowed client public keys
(`check_bind_allowed`); then every connection is encrypted and authenticated by CurveZMQ, and
only a client whose public key is in the directory gets through (`CurveServer`).

Failing closed: the daemon's socket sets ZAP_ENFORCE_DOMAIN, so a handshake for which no ZAP
handler answers (the authenticator was never started, or has stopped) is refused by libzmq
itself. Without that option libzmq lets every CURVE client in when no handler is running.

Key files use pyzmq's `zmq.auth` format (`name.key` public, `name.key_secret` both keys), so
keys made by `zmq.auth.create_certificates` or czmq work too. The allowlist is read at start:
adding or removing a driver's key takes a daemon restart.

This module imports nothing heavy (no torch): drivers import it through `controller.client`.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import re
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path

import zmq
from pydantic import BaseModel, ConfigDict, Field, model_validator
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85

from controller.errors import SecurityError

log = logging.getLogger(__name__)

PUBLIC_SUFFIX = ".key"
SECRET_SUFFIX = ".key_secret"
KEY_GENERATE = "tempo keys generate --dir DIR --name NAME"
MAX_KEY_FILE_BYTES = 64 * 1024  # a key file is a few hundred bytes
# Each refused key is logged once, up to this many: a flood of new keys cannot fill the log.
MAX_LOGGED_DENIED_KEYS = 256

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_LOCAL_TRANSPORTS = ("ipc://", "inproc://")


class SecurityConfig(BaseModel):
    """CurveZMQ keys for binding beyond localhost (the `security:` section)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    server_secret_key: Path | None = Field(
        default=None,
        description="The daemon's secret key file (NAME.key_secret from `tempo keys generate`). "
        "It must be readable by its owner only (chmod 600). Needed, with authorized_keys, to "
        "bind anything but tcp://127.0.0.1 or ipc://; when set, CURVE is used on any bind.",
    )
    authorized_keys: Path | None = Field(
        default=None,
        description="A directory of the public key files (*.key) of the drivers allowed to "
        "connect: the allowlist. Read at start; a key added later needs a restart.",
    )
    zap_domain: str = Field(
        default="tempo",
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="ZAP domain of the daemon's socket; only needs changing if another ZAP "
        "handler shares the process.",
    )

    @model_validator(mode="after")
    def _both_or_neither(self) -> SecurityConfig:
        if (self.server_secret_key is None) != (self.authorized_keys is None):
            raise ValueError(
                "security.server_secret_key and security.authorized_keys go together: set both "
                "(see `tempo keys generate`) or neither"
            )
        return self

    @property
    def enabled(self) -> bool:
        """True when the daemon has keys: its socket then uses CURVE, whatever it binds."""
        return self.server_secret_key is not None and self.authorized_keys is not None


# -- endpoints --------------------------------------------------------------------------------


def _is_loopback_host(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False  # '*', an interface name (eth0) or a host name: not provably local
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def is_local_endpoint(endpoint: str) -> bool:
    """True if only this machine can reach `endpoint`: ipc://, inproc://, or tcp:// on a
    loopback address (127.0.0.0/8, ::1, localhost). Anything else, including tcp://*,
    tcp://0.0.0.0, an interface name and anything unparsable, is not local."""
    endpoint = endpoint.strip()
    if endpoint.startswith(_LOCAL_TRANSPORTS):
        return True
    if not endpoint.startswith("tcp://"):
        return False
    address = endpoint[len("tcp://") :]
    if ";" in address:  # source;destination (connect syntax): not a plain local bind
        return False
    if address.startswith("["):
        host, bracket, rest = address[1:].partition("]")
        if not bracket or not rest.startswith(":"):
            return False
    else:
        host, colon, _ = address.rpartition(":")  # tcp://::1:5555 (unbracketed IPv6) too
        if not colon:
            return False
    return bool(host) and _is_loopback_host(host)


def check_local_only(endpoint: str, field: str) -> None:
    """Refuse a non-local endpoint for a socket that has no CURVE (the status socket)."""
    if not is_local_endpoint(endpoint):
        raise SecurityError(
            f"{field} {endpoint} is reachable from other machines but this socket has no "
            f"authentication; bind it to tcp://127.0.0.1:PORT or ipc:///path"
        )


def check_bind_allowed(endpoint: str, security: SecurityConfig) -> None:
    """Refuse to bind beyond localhost without CurveZMQ keys; when keys are configured, check
    that every key file loads (whatever the endpoint). Raises SecurityError."""
    secret_key, authorized = security.server_secret_key, security.authorized_keys
    if secret_key is not None and authorized is not None:
        load_server_keys(secret_key)
        load_authorized_keys(authorized)
        return
    if not is_local_endpoint(endpoint):
        raise SecurityError(
            f"refusing to bind {endpoint}: binding beyond localhost needs CurveZMQ keys, so set "
            f"security.server_secret_key and security.authorized_keys (create them with "
            f"`{KEY_GENERATE}`), or bind tcp://127.0.0.1:PORT"
        )


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


def cmd_keys_generate(directory: Path, name: str) -> str:
    """`tempo keys generate --dir DIR --name NAME`: write a key pair, return what to print."""
    public_path, secret_path = generate_keys(directory, name)
    return "\n".join(
        [
            f"wrote {public_path} (public: may be copied)",
            f"wrote {secret_path} (SECRET: mode 0600, never copy it to another machine)",
            "",
            "For the daemon's key pair (on the robot PC):",
            f"  security.server_secret_key: {secret_path}",
            f"  copy {public_path} to each driver and pass it as server_public_key",
            "For a driver's key pair (on the driver's machine):",
            f"  pass {secret_path} as the driver's client_secret_key",
            f"  copy {public_path} into the daemon's security.authorized_keys directory, "
            "then restart the daemon",
        ]
    )


# -- the daemon's side ------------------------------------------------------------------------


class _Allowlist:
    """ZAP credentials provider: allows exactly the loaded public keys (run by the auth thread)."""

    def __init__(self, keys: frozenset[bytes]) -> None:
        self.keys = keys
        self.denied = 0
        self._logged: set[bytes] = set()
        self._lock = threading.Lock()

    def callback(self, domain: str, key: bytes) -> bool:
        if key in self.keys:
            return True
        with self._lock:
            self.denied += 1
            first = key not in self._logged and len(self._logged) < MAX_LOGGED_DENIED_KEYS
            if first:
                self._logged.add(key)
        if first:
            log.warning(
                "refused a connection with client key %s: not in security.authorized_keys "
                "(logged once per key)",
                key.decode("ascii", "replace"),
            )
        return False


class CurveServer:
    """The daemon's CurveZMQ setup: a ZAP authenticator with the allowlist, and the options
    that make a socket a CURVE server that fails closed.

        curve = CurveServer(context, config.security)
        curve.start()              # loads the keys, starts the authenticator
        curve.secure(socket)       # before socket.bind(...)
        ...
        socket.close(); curve.stop()
    """

    def __init__(self, context: zmq.Context, security: SecurityConfig) -> None:
        self.context = context
        self.security = security
        self._public: bytes | None = None
        self._secret: bytes | None = None
        self._allowlist: _Allowlist | None = None
        self._auth: ThreadAuthenticator | None = None

    def start(self) -> None:
        """Load the keys and start the authenticator. Raises SecurityError."""
        if self._auth is not None:
            return
        security = self.security
        if security.server_secret_key is None or security.authorized_keys is None:
            raise SecurityError(
                "CurveZMQ needs security.server_secret_key and security.authorized_keys; create "
                f"them with `{KEY_GENERATE}`"
            )
        if not zmq.has("curve"):
            raise SecurityError(
                "this libzmq was built without CURVE support; install pyzmq from its wheels, "
                "which include it"
            )
        public, secret = load_server_keys(security.server_secret_key)
        allowlist = _Allowlist(load_authorized_keys(security.authorized_keys))
        auth = ThreadAuthenticator(self.context, log=logging.getLogger(f"{__name__}.zap"))
        auth.configure_curve_callback(domain=security.zap_domain, credentials_provider=allowlist)
        try:
            auth.start()
        except (zmq.ZMQError, RuntimeError) as exc:
            auth.stop()
            raise SecurityError(
                f"cannot start the ZeroMQ authenticator ({exc}); another one may already run in "
                "this process's ZeroMQ context, so give the daemon its own context"
            ) from None
        self._public, self._secret = public, secret
        self._allowlist = allowlist
        self._auth = auth
        log.info(
            "CurveZMQ on: %d authorized client key(s) from %s",
            len(allowlist.keys),
            security.authorized_keys,
        )

    def secure(self, socket: zmq.Socket) -> None:
        """Make `socket` a CURVE server that only authenticated clients reach. Call it after
        start() and before bind (options set later do not apply to a bound endpoint)."""
        if self._auth is None or self._secret is None or self._public is None:
            raise SecurityError(
                "CurveServer.secure() was called before start() (or after stop()); start it first"
            )
        if socket.getsockopt(zmq.LAST_ENDPOINT):
            raise SecurityError(
                "CurveServer.secure() was called on a socket already bound or connected; "
                "call it before bind"
            )
        try:
            socket.setsockopt(zmq.ZAP_DOMAIN, self.security.zap_domain.encode("ascii"))
            # Without this, libzmq admits every CURVE client when no ZAP handler answers.
            socket.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)
            socket.setsockopt(zmq.CURVE_SECRETKEY, self._secret)
            socket.setsockopt(zmq.CURVE_PUBLICKEY, self._public)
            socket.setsockopt(zmq.CURVE_SERVER, 1)
            enforced = socket.getsockopt(zmq.ZAP_ENFORCE_DOMAIN)
            server = socket.getsockopt(zmq.CURVE_SERVER)
        except zmq.ZMQError as exc:
            raise SecurityError(
                f"cannot make the socket a CurveZMQ server ({exc}); this libzmq lacks "
                "ZAP_ENFORCE_DOMAIN or CURVE, so install pyzmq from its wheels"
            ) from None
        if enforced != 1 or server != 1:
            raise SecurityError(
                "libzmq did not keep CURVE_SERVER and ZAP_ENFORCE_DOMAIN on the socket; "
                "install pyzmq from its wheels"
            )

    @property
    def running(self) -> bool:
        """True while the authenticator thread runs (if it stops, new clients are refused)."""
        return self._auth is not None and self._auth.is_alive()

    @property
    def denied(self) -> int:
        """Connections refused because the client key is not in the allowlist."""
        return self._allowlist.denied if self._allowlist is not None else 0

    @property
    def public_key(self) -> bytes | None:
        """The daemon's z85 public key (what drivers give as server_public_key)."""
        return self._public

    def stop(self) -> None:
        """Stop the authenticator. New handshakes are refused from then on; connections
        already authenticated stay up until their socket closes, so close sockets first."""
        auth, self._auth = self._auth, None
        self._secret = None
        if auth is not None:
            auth.stop()


# -- the driver's side ------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientKeys:
    """A driver's key pair and the daemon's public key, loaded once and applied to each new
    socket (the client opens a fresh socket on every reconnect)."""

    public: bytes
    server: bytes
    secret: bytes = field(repr=False)  # never printed

    def apply(self, socket: zmq.Socket) -> None:
        """Make `socket` a CURVE client of the daemon; call before connect."""
        if socket.getsockopt(zmq.LAST_ENDPOINT):
            raise SecurityError(
                "client keys were applied to a socket already connected; apply them before connect"
            )
        socket.setsockopt(zmq.CURVE_SERVERKEY, self.server)
        socket.setsockopt(zmq.CURVE_PUBLICKEY, self.public)
        socket.setsockopt(zmq.CURVE_SECRETKEY, self.secret)


def load_client_keys(client_secret_key: Path, server_public_key: Path) -> ClientKeys:
    """Load a driver's NAME.key_secret and the daemon's public .key. Raises SecurityError."""
    public, secret = load_secret_key_pair(Path(client_secret_key))
    server = load_public_key(Path(server_public_key))
    if server == public:
        raise SecurityError(
            f"{client_secret_key} is the daemon's own key pair; generate a separate key pair for "
            f"each driver with `{KEY_GENERATE}`"
        )
    return ClientKeys(public=public, secret=secret, server=server)


def secure_client(socket: zmq.Socket, client_secret_key: Path, server_public_key: Path) -> None:
    """Make `socket` a CURVE client: set CURVE_SERVERKEY/PUBLICKEY/SECRETKEY before connect."""
    load_client_keys(client_secret_key, server_public_key).apply(socket)
