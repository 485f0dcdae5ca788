"""The daemon's ZeroMQ ROUTER socket: options, receiving with a deadline, non-blocking sends.

Only the loop thread touches the socket (ZeroMQ sockets are not thread-safe): it receives in the
slack before each tick and sends actions at the tick. Before the loop exists (the socket is bound
before the policy loads, which can take minutes), `discarding()` lends it to a thread that reads
and drops every message, so nothing queues without bound meanwhile.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import zmq

from controller.daemon.security import CurveServer
from controller.feed.inference_feed import Pollable, SideChannel
from controller.wire.binding import bind as bind_endpoint
from controller.wire.header_schema import PROTOCOL_VERSION
from controller.wire.protocol import DEFAULT_LIMITS, Limits, encode
from controller.wire.sockets import configure_common

log = logging.getLogger(__name__)

_MORE = zmq.SNDMORE | zmq.NOBLOCK
REBIND_WAIT_S = 1.0  # for the old listener to close when the socket is bound again (narrow)
# Pollers kept for the sets of inference channels polled beside the socket (several policies:
# each set of those awaiting a reply); forgotten all at once past this many (restarts).
MAX_SIDE_POLLERS = 16
# Messages taken in a row before the side channel is serviced again (a few hundred
# microseconds of handling at most: each connection's budget, connection_budget.py).
DRAIN_BATCH = 32


def daemon_frames(
    kind: str,
    *,
    seq: int,
    fields: dict[str, Any],
    arrays: dict[str, Any] | None = None,
    version: int = PROTOCOL_VERSION,
) -> list[Any]:
    """The frames of one message from the daemon (sender "tempo", stamped now)."""
    return encode(
        kind,
        robot="tempo",
        seq=seq,
        time_ns=time.monotonic_ns(),
        fields=fields,
        arrays=arrays,
        version=version,
    )


class RouterTransport:
    """Receives (identity, frames) and sends messages to identities without ever blocking."""

    def __init__(
        self,
        context: zmq.Context,
        bind: str,
        limits: Limits = DEFAULT_LIMITS,
        curve: CurveServer | None = None,
    ) -> None:
        self.bind = bind
        self.endpoint = ""
        self.limits = limits
        self.socket = context.socket(zmq.ROUTER)
        configure_common(self.socket, limits)
        # No receive high-water mark on the daemon's side. With one, a peer that floods fills
        # its queue, libzmq stops reading that connection, and if the peer then closes it while
        # a PING of its own is still unread, libzmq 4.3.5 aborts the process when it answers
        # that PING (see controller/wire/sockets.py). Without one, reading never stops; a flood
        # costs memory until the loop has drained it (the drain keeps to each tick's slack).
        self.socket.setsockopt(zmq.RCVHWM, 0)
        # Sending to a peer that is gone raises instead of vanishing silently.
        self.socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self._poller = zmq.Poller()
        # The robots' socket and the side channel's (see receive_until), for the current one.
        self._side_poller = zmq.Poller()
        self._side: Pollable | None = None  # the side channel registered in _side_poller
        self._side_filenos: list[int] = []  # its descriptors
        self._side_pollers: dict[tuple[int, ...], zmq.Poller] = {}  # by descriptors polled
        self._longest: tuple[str, int] = ("", 0)  # see take_longest
        self.sent = 0
        self.send_dropped = 0
        self.on_peer_gone: Callable[[bytes], None] | None = None
        self._discarding = False  # inside a message with too many parts: drop its remaining parts
        self.parts_discarded = 0
        self.curve = curve
        self.dropped_while_loading = 0

    def open(self) -> str:
        """Bind (BindError, one sentence, when that fails); returns the bound endpoint."""
        if self.curve is not None:
            self.curve.secure(self.socket)  # CURVE server + ZAP_ENFORCE_DOMAIN, before bind
        self.endpoint = bind_endpoint(self.socket, self.bind, "server.bind")
        self._poller.register(self.socket, zmq.POLLIN)
        log.info("listening on %s", self.endpoint)
        return self.endpoint

    def narrow(self, limits: Limits) -> None:
        """Apply tighter limits to the bound socket: the daemon binds before its policy is
        loaded, and only the policy's spec gives the frame size limit. ZeroMQ copies
        MAXMSGSIZE into the listener at bind, so the endpoint is bound again, once the old
        listener is closed (for ipc, closing it unlinks the path: it must not unlink the new
        one). A driver that connected during the load reconnects by itself."""
        self.limits = limits
        size = limits.max_array_bytes + limits.max_header_bytes
        if size == self.socket.getsockopt(zmq.MAXMSGSIZE):
            return
        self.socket.setsockopt(zmq.MAXMSGSIZE, size)
        monitor = self.socket.get_monitor_socket(zmq.EVENT_CLOSED)
        try:
            self.socket.unbind(self.endpoint)
            if not monitor.poll(int(REBIND_WAIT_S * 1000)):
                log.warning("the listener on %s took long to close", self.endpoint)
        finally:
            self.socket.disable_monitor()
            monitor.close(0)
        self.endpoint = bind_endpoint(self.socket, self.endpoint, "server.bind")

    def receive_until(
        self,
        until_ns: int,
        handle: Callable[[bytes, list[Any], int], None],
        side: SideChannel | None = None,
    ) -> None:
        """Hand every message that arrives before `until_ns` to `handle(identity, frames, now)`.
        `side`, the inference process's channel when the policy runs in one, is serviced
        between messages and polled beside the robots' socket (see `SideChannel`)."""
        while True:
            if side is not None:
                began = time.monotonic_ns()
                side.service(until_ns)
                self._note("service", time.monotonic_ns() - began)
            timeout_ms = (until_ns - time.monotonic_ns()) // 1_000_000
            if timeout_ms < 0:
                return
            began = time.monotonic_ns()
            robots, other = self._wait(timeout_ms, side)
            if other:
                continue  # a reply: serviced at the top
            if not robots:
                # How late the wait returned: the OS's (or ZeroMQ's) timer, or the GIL after it.
                self._note("wait", time.monotonic_ns() - began - timeout_ms * 1_000_000)
                if timeout_ms == 0:
                    # Under a millisecond left, which poll cannot express: sleep it off.
                    remaining = until_ns - time.monotonic_ns()
                    if remaining > 0:
                        time.sleep(remaining / 1e9)
                        self._note("wait", time.monotonic_ns() - until_ns)
                    return
                continue
            # Drain what is queued, checking the clock so a flood cannot delay the tick, and
            # back to the top every DRAIN_BATCH messages: under a flood the queue is never
            # empty, and the side channel (the policy's replies and the next requests) would
            # otherwise wait for the next tick.
            for _ in range(DRAIN_BATCH):
                if time.monotonic_ns() >= until_ns:
                    break
                if self._discarding:
                    self._discard_parts(until_ns)
                    continue
                try:
                    identity, frames = self._receive_message()
                except zmq.Again:
                    break
                began = time.monotonic_ns()
                handle(identity, frames, began)
                self._note("handle", time.monotonic_ns() - began)

    def _note(self, step: str, duration_ns: int) -> None:
        """Keep the longest step of the idle work since `take_longest` (see late_ticks)."""
        if duration_ns > self._longest[1]:
            self._longest = (step, duration_ns)

    def take_longest(self) -> tuple[str, int]:
        """The longest step of the idle work since the last call ("wait": how late a poll or
        sleep returned; "handle": one message's handling; "service": the side channel's)."""
        longest, self._longest = self._longest, ("", 0)
        return longest

    def _wait(self, timeout_ms: int, side: SideChannel | None) -> tuple[bool, bool]:
        """Poll for up to `timeout_ms`: (a robot's message is waiting, the side's is)."""
        if side is None:
            return bool(self._poller.poll(timeout_ms)), False
        with side.polled() as other:
            if other is None:
                return bool(self._poller.poll(timeout_ms)), False
            if other is not self._side:  # another channel, or another set of them
                self.poller_for(other)
            ready = dict(self._side_poller.poll(timeout_ms))
            return self.socket in ready, any(f in ready for f in self._side_filenos)

    def poller_for(self, side: Pollable) -> zmq.Poller:
        """The poller the next waits use: the socket beside `side`'s descriptors, the one made
        for those descriptors before (several policies' processes come and go from the polled
        set as their requests do; a poller is built only for a set not seen yet, or after
        restarts)."""
        filenos = tuple(side.filenos())
        poller = self._side_pollers.get(filenos)
        if poller is None:
            if len(self._side_pollers) >= MAX_SIDE_POLLERS:  # restarts made new descriptors
                self._side_pollers.clear()
            poller = zmq.Poller()
            poller.register(self.socket, zmq.POLLIN)
            for fileno in filenos:
                poller.register(fileno, zmq.POLLIN)
            self._side_pollers[filenos] = poller
        self._side, self._side_filenos, self._side_poller = side, list(filenos), poller
        return poller

    def _receive_message(self) -> tuple[bytes, list[Any]]:
        """One message, part by part: ZeroMQ bounds the size of a part but not their number,
        and recv_multipart would take all of a 100,000-part message in one go (half a second).
        Past the frame limit the parts are left queued and dropped in later idle slices
        (`_discard_parts`); the frames handed on are over the limit, so decoding refuses them
        and the sender gets an error."""
        identity = self.socket.recv(zmq.NOBLOCK, copy=False)
        frames: list[Any] = []
        more = identity.more
        while more:
            if len(frames) > self.limits.max_frames:
                self._discarding = True
                self.parts_discarded += 1
                break
            frame = self.socket.recv(copy=False)  # parts of one message arrive together
            frames.append(frame)
            more = frame.more
        return identity.bytes, frames

    def _discard_parts(self, until_ns: int) -> None:
        """Drop the rest of an over-long message, a slice at a time, until `until_ns`."""
        while self._discarding:
            for _ in range(256):
                frame = self.socket.recv(copy=False)
                self.parts_discarded += 1
                if not frame.more:
                    self._discarding = False
                    return
            if time.monotonic_ns() >= until_ns:
                return

    def send(
        self,
        identity: bytes,
        kind: str,
        *,
        seq: int,
        fields: dict[str, Any],
        arrays: dict[str, Any] | None = None,
        version: int = PROTOCOL_VERSION,
    ) -> bool:
        """Send one message; False if the peer is gone or its queue is full (counted)."""
        frames = daemon_frames(kind, seq=seq, fields=fields, arrays=arrays, version=version)
        try:
            self.socket.send_multipart([identity, *frames], flags=zmq.NOBLOCK, copy=False)
        except zmq.ZMQError as exc:
            return self._refused(identity, exc)
        self.sent += 1
        return True

    def _refused(self, identity: bytes, exc: zmq.ZMQError) -> bool:
        """A send the socket refused, counted; always False. Again: the peer's queue is full (it
        is not reading): dropped, never blocked on. EHOSTUNREACH: ZeroMQ dropped the connection
        (the driver closed it or was killed; a frozen driver is closed by the session timeout),
        visible through ROUTER_MANDATORY: the session goes."""
        self.send_dropped += 1
        if exc.errno == zmq.EHOSTUNREACH and self.on_peer_gone is not None:
            self.on_peer_gone(identity)
        return False

    @contextlib.contextmanager
    def discarding(self) -> Iterator[None]:
        """While the policy loads: read and drop every message (the socket has no receive
        limit, so a driver that streams meanwhile would otherwise fill memory). Drivers get no
        answer and retry their hello. The socket is the loop's again when this returns."""
        stop = threading.Event()

        def drain() -> None:
            while not stop.is_set():
                if not self.socket.poll(50):
                    continue
                while True:  # ZeroMQ delivers whole messages: Again never comes mid-message
                    try:
                        self.socket.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    if not self.socket.getsockopt(zmq.RCVMORE):
                        self.dropped_while_loading += 1

        thread = threading.Thread(target=drain, name="tempo-startup-drain", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()  # also the memory barrier that hands the socket back
            if self.dropped_while_loading:
                log.info(
                    "dropped %d messages that came while the policy loaded",
                    self.dropped_while_loading,
                )

    def send_prepared(self, identity: bytes, header: Any, array: Any = None) -> bool:
        """The tick's send: a header frame packed beforehand (controller.daemon.tick_messages)
        and at most one array, each copied into ZeroMQ's message as it is sent (the caller
        rewrites both next tick), with no Python objects built per call. False as `send`."""
        socket = self.socket
        try:
            # A ROUTER refuses a message (full queue, gone peer) on its first part, or never.
            socket.send(identity, _MORE)
            if array is None:
                socket.send(header, zmq.NOBLOCK)
            else:
                socket.send(header, _MORE)
                socket.send(array, zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            return self._refused(identity, exc)
        self.sent += 1
        return True

    def close(self, linger_ms: int = 0) -> None:
        self.socket.close(linger=linger_ms)
