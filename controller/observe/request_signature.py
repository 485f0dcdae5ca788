"""Signed status requests: the status token proves a request's sender without leaving the
client. A request carries {"auth": {"time", "nonce", "mac"}}, the mac an HMAC-SHA256 under the
token of the request's other fields, the status port, the time and the nonce.

    request = sign(token, port, {"kind": "swap", ...})      # the CLI
    why = checker.refusal(request, port)                     # the daemon: None when valid

So a process that takes the status port while the daemon is down, or another user's daemon
that a CLI asks, learns one signed request for that port and a minute, not the token; and the
daemon refuses a request seen before (its nonce), so a copy cannot be sent again.

Standard library only (the CLI imports it on a driver's install).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import threading
import time
from typing import Any

WINDOW_S = 60.0  # a signed request is good this long either side of the daemon's clock
MAX_REMEMBERED = 100_000  # nonces of valid requests within the window (only the owner makes them)


def sign(token: bytes, port: int, request: dict[str, Any]) -> dict[str, Any]:
    """`request` with its "auth" for the status socket on `port`."""
    stamp, nonce = time.time(), secrets.token_hex(16)
    mac = _mac(token, port, stamp, nonce, request)
    return {**request, "auth": {"time": stamp, "nonce": nonce, "mac": mac}}


def endpoint_port(endpoint: str) -> int:
    """The port of tcp://HOST:PORT (0 when there is none)."""
    tail = endpoint.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _mac(token: bytes, port: int, stamp: float, nonce: str, request: dict[str, Any]) -> str:
    fields = {key: value for key, value in request.items() if key != "auth"}
    body = json.dumps(fields, sort_keys=True, separators=(",", ":"), allow_nan=False)
    message = f"tempo-status-v1\n{port}\n{stamp!r}\n{nonce}\n{body}".encode()
    return hmac.new(token, message, hashlib.sha256).hexdigest()


class SignatureChecker:
    """The daemon's side: valid signatures, each accepted once."""

    def __init__(self, token: bytes) -> None:
        self.token = token
        self._seen: dict[str, float] = {}  # nonce -> its time
        self._lock = threading.Lock()

    def refusal(self, request: dict[Any, Any], port: int) -> str | None:
        """None when `request` is signed with the token for `port`, now, and new; else what
        is wrong with it, as the end of a sentence."""
        auth = request.get("auth")
        if auth is None:
            return "came without one"
        if not isinstance(auth, dict):
            return "holds no valid signature"
        stamp, nonce, mac = auth.get("time"), auth.get("nonce"), auth.get("mac")
        if not (
            isinstance(stamp, float)
            and isinstance(nonce, str)
            and 0 < len(nonce) <= 64
            and isinstance(mac, str)
        ):
            return "holds no valid signature"
        try:
            expected = _mac(self.token, port, stamp, nonce, request)
        except (TypeError, ValueError):  # keys json cannot sort, NaN: nobody signed that
            return "holds no valid signature"
        if not hmac.compare_digest(expected.encode(), mac.encode("ascii", "replace")):
            return "holds a wrong one"
        now = time.time()
        if abs(now - stamp) > WINDOW_S:
            return f"was signed more than {WINDOW_S:.0f} s from now (a copy sent again?)"
        with self._lock:
            self._forget_before(now - WINDOW_S)
            if nonce in self._seen:
                return "was answered once already (a copy sent again?)"
            if len(self._seen) >= MAX_REMEMBERED:
                return "came when too many were answered within a minute; try again"
            self._seen[nonce] = stamp
        return None

    def _forget_before(self, oldest: float) -> None:
        stale = [nonce for nonce, stamp in self._seen.items() if stamp < oldest]
        for nonce in stale:
            del self._seen[nonce]
