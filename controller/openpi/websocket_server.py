"""openpi's websocket server side, as `openpi-client` expects it, with Tempo's limits: one asyncio
thread (the `websockets` package) that checks each connection and request and hands the
observations it reads to a backend (the daemon's openpi sessions, controller.daemon).

    on connect   `/healthz` is answered "OK" over plain HTTP; any other path is a websocket.
                 With API keys, `Authorization: Api-Key <key>` must name one (401 / 403
                 otherwise); the backend may refuse the connection (503: full). Each refusal
                 is an HTTP status with one sentence as its body.
    then         a msgpack frame of metadata (the backend's), as openpi's server sends
    per request  one binary frame of msgpack (codec), read into images, state and prompt by
                 the layout (layouts), answered by {"actions": [H, D] float32, "server_timing"}
                 or by a text frame of one sentence (what openpi-client raises on); the
                 connection stays open for the next request.

Limits: a request larger than `max_message_bytes` is refused in one sentence (twice that closes
the connection: websockets stops reading it, code 1009); past `max_requests_per_s` a request is
refused unread; one request at a time per connection (the next waits in its socket); the
answer comes within `request_timeout_s` or the request is refused. No pickle, no traceback on
the wire: a failure of ours is logged here and the client told so in one sentence.

server_timing (milliseconds, measured here on this host's monotonic clock):
    infer_ms        the policy's step for this request, as the inference feed timed it
    server_ms       from this request's frame read to its reply's contents ready (decode,
                    checks, the wait for the inference process, the limits on the chunk; the
                    encode of the reply itself is left out: it cannot time itself)
    prev_total_ms   the previous request's, from its frame read to its reply sent (as openpi)
"""

from __future__ import annotations

import asyncio
import hmac
import http
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from controller.errors import ErrorCode, ProtocolError
from controller.openpi.codec import DecodeLimits, decode, encode
from controller.openpi.layouts import Layout

log = logging.getLogger(__name__)

START_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class OpenpiRequest:
    """One checked observation: the policy's images (H, W, 3) uint8 by camera, its state."""

    images: dict[str, np.ndarray]
    state: np.ndarray
    prompt: str | None
    received_ns: int


@dataclass(frozen=True)
class Answer:
    """What the backend made of a request: a chunk (and the policy's step time) or why not."""

    actions: np.ndarray | None = None
    infer_ns: int = 0
    refused: str | None = None  # one sentence
    code: str = ErrorCode.INTERNAL.value


class Connection(Protocol):
    """One client as the backend keeps it (thread-safe: called from the server's thread)."""

    def submit(self, request: OpenpiRequest, done: Callable[[Answer], None]) -> None:
        """Start serving `request`; `done(answer)` may be called from any thread, and more than
        once: the first answer is the one sent."""
        ...

    def cancel(self) -> None:
        """The request in flight is given up (timed out): its answer, if it comes, is dropped."""
        ...

    def refused(self, code: str) -> None:
        """A request was refused here (code: an ErrorCode value), for the counters."""
        ...

    def finish(self, request: OpenpiRequest, answer: Answer) -> Answer:
        """The answer as it may go to the client (the daemon's limits on the chunk)."""
        ...

    def close(self) -> None: ...


class Backend(Protocol):
    def check_room(self) -> None:
        """ProtocolError (one sentence) when no client can be taken now; changes nothing."""
        ...

    def open(self, peer: str) -> Connection:
        """A connection for a new client; ProtocolError (one sentence) when none is taken."""
        ...

    def metadata(self) -> dict[str, Any]:
        """The frame sent on connect."""
        ...


@dataclass(frozen=True)
class ServerSettings:
    host: str
    port: int
    layout: Layout
    cameras: Mapping[str, tuple[int, int]]  # the policy's camera -> (height, width)
    state_size: int
    api_keys: frozenset[str] | None = None  # None: no key asked
    limits: DecodeLimits = field(default_factory=DecodeLimits)
    max_requests_per_s: float = 50.0
    request_timeout_s: float = 30.0


class RequestBucket:
    """A token bucket: `rate` requests a second, a burst of as many (at least one)."""

    def __init__(self, rate: float, now_ns: int) -> None:
        self.rate = rate
        self.capacity = max(1.0, rate)
        self.tokens = self.capacity
        self.at_ns = now_ns

    def take(self, now_ns: int) -> bool:
        self.tokens = min(self.capacity, self.tokens + (now_ns - self.at_ns) * self.rate / 1e9)
        self.at_ns = now_ns
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


class OpenpiServer:
    """The websocket server on a thread of its own; `start()` binds and returns ws://HOST:PORT."""

    def __init__(self, backend: Backend, settings: ServerSettings) -> None:
        self.backend = backend
        self.settings = settings
        self.endpoint = ""
        self.refused_connections = 0  # at the handshake: no key, a wrong key, full
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    # -- lifetime -------------------------------------------------------------------------------

    def start(self) -> str:
        self._thread = threading.Thread(target=self._run, name="tempo-openpi", daemon=True)
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT_S):
            raise RuntimeError("the openpi websocket server did not start")
        if self._error is not None:
            raise self._error
        return self.endpoint

    def stop(self, timeout: float = 2.0) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # closed meanwhile
                pass
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # bind errors, said by start()
            if not self._ready.is_set():
                self._error = exc
                self._ready.set()
            else:
                log.exception("the openpi websocket server stopped")

    async def _serve(self) -> None:
        from websockets.asyncio.server import serve

        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        settings = self.settings
        try:
            server = await serve(
                self._handle,
                settings.host,
                settings.port,
                process_request=self._check_handshake,
                compression=None,
                # Past twice the limit websockets stops reading (1009); between the two the
                # request is read and refused in one sentence (codec.decode).
                max_size=2 * settings.limits.max_message_bytes,
                max_queue=4,
                close_timeout=CLOSE_TIMEOUT_S,
            )
        except OSError as exc:
            raise ProtocolError(
                ErrorCode.NOT_ALLOWED,
                f"server.openpi.bind {settings.host}:{settings.port} cannot be bound "
                f"({exc.strerror or exc})",
            ) from None
        host, port = server.sockets[0].getsockname()[:2]
        self.endpoint = f"ws://{host}:{port}"
        self._ready.set()
        log.info("openpi clients: listening on %s", self.endpoint)
        async with server:
            await self._stop.wait()
            server.close()

    # -- the handshake --------------------------------------------------------------------------

    def _check_handshake(self, connection: Any, request: Any) -> Any:
        if request.path == "/healthz":
            return connection.respond(http.HTTPStatus.OK, "OK\n")
        keys = self.settings.api_keys
        if keys is not None:
            given = request.headers.get("Authorization")
            if given is None:
                return self._refuse(
                    connection,
                    http.HTTPStatus.UNAUTHORIZED,
                    "this server asks for an API key: pass api_key= to WebsocketClientPolicy "
                    "(the Authorization: Api-Key header)",
                )
            scheme, _, key = given.partition(" ")
            # Every key compared, in constant time each: which one came close is not told.
            matches = [hmac.compare_digest(key.encode(), k.encode()) for k in keys]
            if scheme != "Api-Key" or not any(matches):
                return self._refuse(
                    connection, http.HTTPStatus.FORBIDDEN, "the API key was not accepted"
                )
        # Only a check here: the session is opened by _handle, which websockets calls only
        # for a completed handshake (a plain GET, a bad upgrade or a timeout never reaches it,
        # and a session opened here would never be closed).
        try:
            self.backend.check_room()
        except ProtocolError as exc:
            return self._refuse(connection, http.HTTPStatus.SERVICE_UNAVAILABLE, str(exc))
        return None

    def _refuse(self, connection: Any, status: http.HTTPStatus, sentence: str) -> Any:
        self.refused_connections += 1
        return connection.respond(status, sentence + "\n")

    # -- one connection -------------------------------------------------------------------------

    async def _handle(self, websocket: Any) -> None:
        from websockets.exceptions import ConnectionClosed

        peer = websocket.remote_address
        try:
            client = self.backend.open(f"{peer[0]}:{peer[1]}" if peer else "unknown")
        except ProtocolError as exc:  # filled since the handshake's check: 1013, try again
            self.refused_connections += 1
            await websocket.close(1013, str(exc)[:120])
            return
        try:
            await websocket.send(encode(self.backend.metadata()))
            bucket = RequestBucket(self.settings.max_requests_per_s, time.monotonic_ns())
            previous_total_ns: int | None = None
            while True:
                frame = await websocket.recv()
                received = time.monotonic_ns()
                reply = await self._answer(client, bucket, frame, received, previous_total_ns)
                await websocket.send(reply)
                if isinstance(reply, bytes):
                    previous_total_ns = time.monotonic_ns() - received
        except ConnectionClosed:
            pass
        except Exception:  # a bug of ours: logged here, the client sees the connection end
            log.exception("the openpi connection failed")
            await websocket.close(1011, "the server failed on this connection; see its log")
        finally:
            client.close()

    async def _answer(
        self,
        client: Connection,
        bucket: RequestBucket,
        frame: bytes | str,
        received: int,
        previous_total_ns: int | None,
    ) -> bytes | str:
        """The reply frame to one request: the chunk (bytes) or one sentence (text)."""
        settings = self.settings
        if not bucket.take(received):
            client.refused(ErrorCode.NOT_ALLOWED.value)
            return (
                f"this connection sent more than {settings.max_requests_per_s:g} requests a "
                "second (server.openpi.max_requests_per_s); this one was dropped unread"
            )
        try:
            if isinstance(frame, str):
                raise ProtocolError(
                    ErrorCode.MALFORMED,
                    "a request is one binary websocket frame of msgpack, not text",
                )
            obs = decode(frame, settings.limits)
            images, state, prompt = settings.layout.read(obs, settings.cameras, settings.state_size)
        except ProtocolError as exc:
            client.refused(exc.code.value)
            return str(exc)
        request = OpenpiRequest(images, state, prompt, received)
        answer = client.finish(request, await self._served(client, request))
        if answer.actions is None:
            client.refused(answer.code)
            return answer.refused or "the request was not served"
        timing = {
            "infer_ms": answer.infer_ns / 1e6,
            "server_ms": 0.0,  # set below, after the pack it measures
        }
        if previous_total_ns is not None:
            timing["prev_total_ms"] = previous_total_ns / 1e6
        reply = {"actions": answer.actions, "server_timing": timing}
        timing["server_ms"] = (time.monotonic_ns() - received) / 1e6
        return encode(reply)

    async def _served(self, client: Connection, request: OpenpiRequest) -> Answer:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Answer] = loop.create_future()

        def resolve(answer: Answer) -> None:
            if not future.done():
                future.set_result(answer)

        def done(answer: Answer) -> None:  # from the daemon's loop thread, or the feed's
            try:
                loop.call_soon_threadsafe(resolve, answer)
            except RuntimeError:  # the server's loop closed meanwhile: nobody waits
                pass

        client.submit(request, done)
        timeout = self.settings.request_timeout_s
        try:
            return await asyncio.wait_for(future, timeout)
        except asyncio.TimeoutError:
            client.cancel()
            return Answer(
                refused=f"the request was not answered within {timeout:g} s "
                "(server.openpi.request_timeout_s)",
                code=ErrorCode.INTERNAL.value,
            )
