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

Key files and their checks live in `controller.wire.keys`. The allowlist is read at start: adding or
removing a driver's key takes a daemon restart.

The driver's side (client keys, which endpoints are local) is `controller.wire.curve`; this module
is the daemon's side. Its config section, `SecurityConfig`, is in `controller.config_sections`.
"""

from __future__ import annotations

import grp
import logging
import threading

import zmq
from zmq.auth.thread import ThreadAuthenticator

from controller.config_sections import SecurityConfig, ServerConfig
from controller.errors import SecurityError
from controller.observe.log_safety import shown
from controller.observe.status_access import StatusAccess
from controller.observe.status_token import ensure_token, token_path
from controller.wire.curve import is_local_endpoint
from controller.wire.keys import (
    KEY_GENERATE,
    load_authorized_keys,
    load_server_keys,
)

log = logging.getLogger(__name__)

# Each refused key is logged once, up to this many: a flood of new keys cannot fill the log.
MAX_LOGGED_DENIED_KEYS = 256


def check_local_only(endpoint: str, field: str) -> None:
    """Refuse a non-local endpoint for a socket that has no CURVE (the status socket)."""
    if not is_local_endpoint(endpoint):
        raise SecurityError(
            f"{field} {endpoint} is reachable from other machines but this socket has no "
            f"authentication; bind it to tcp://127.0.0.1:PORT or ipc:///path"
        )


def status_access(server: ServerConfig) -> StatusAccess:
    """Who may ask what on the status socket, from `server:` (controller.observe.status_access).
    On tcp:// the token is made or loaded now; if that fails the socket is read-only, said once
    in the log. An unknown status_group is refused (SecurityError)."""
    gid: int | None = None
    if server.status_group is not None:
        try:
            gid = grp.getgrnam(server.status_group).gr_gid
        except KeyError:
            raise SecurityError(
                f"server.status_group {shown(server.status_group)} is not a group on this host"
            ) from None
    if server.status_bind.startswith("ipc://"):
        return StatusAccess.ipc(server.status_readers or "owner", gid)
    try:
        token = ensure_token(token_path(server.status_token), gid)
    except SecurityError as exc:
        log.warning("the status socket %s is read-only: %s", server.status_bind, exc)
        return StatusAccess.tcp(server.status_readers or "any", None, str(exc))
    return StatusAccess.tcp(server.status_readers or "any", token)


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
                shown(key.decode("ascii", "replace")),
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
