"""A daemon that survives hostile input.

One real daemon (in this process, 100 Hz, the default reach policy) serves a good driver that
streams for the whole module while an attacker sends bad input on raw DEALER sockets. For every
case: the attacker gets an `error` with the expected code (or is disconnected where noted), the
daemon keeps running (loop thread alive, status answers), its error counters grow by exactly the
expected codes, and the good driver misses no tick: the commands it received during the attack
are one action per step with no gap, none a hold.

The bottom of the file drives the dispatcher and the loop directly (no sockets) with hypothesis:
whatever a driver with a valid session sends, the answer is an error with a protocol code (never
`internal`) or normal service, and the next tick neither raises nor sends a non-finite action.
The codec itself has its property tests in tests/unit/test_protocol.py.
"""

from __future__ import annotations

import collections
import functools
import itertools
import math
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from zmq.utils.monitor import recv_monitor_message

from controller.action.guards_config import GuardsConfig
from controller.daemon.session import Session
from controller.errors import ErrorCode
from controller.observe.histogram import window
from controller.observe.status_server import StatusServer, request_status
from controller.observe.telemetry import RECEIVE, TICK_LATENESS
from controller.wire.protocol import decode, encode
from tests.conftest import (
    StreamingDriver,
    ipc_config,
    offline_daemon,
    running_daemon,
    wait_for,
)

RATE_HZ = 100
PERIOD_MS = 1000 / RATE_HZ
HOLD_AFTER_MS = GuardsConfig().hold_after_ms  # the arena's daemon runs the default watchdog
JOINTS = [f"joint_{i}" for i in range(6)]
SPEC = {
    "joints": JOINTS,
    "cameras": [{"name": "front", "height": 96, "width": 128}],
    "state_size": 6,
}
IMAGE = np.zeros((96, 128, 3), np.uint8)
STATE = np.zeros(6, np.float32)
SETTLE_RECORDS = 8  # commands the good driver must receive after an attack before judging it


# -- the daemon, the good driver, and the judge -----------------------------------------------


@dataclass
class Mark:
    index: int
    missed: int
    lost: int
    duplicated: int
    reconnects: int
    errors: collections.Counter[str]
    session: str
    lateness: dict[str, Any]  # tick-lateness histogram snapshot, with buckets
    receive: dict[str, Any]  # message-handling histogram snapshot, with buckets
    sent: int  # observations the good driver had sent
    observations: collections.Counter[str]  # the good session's observation counters
    transits: int  # observations the daemon had taken (Arena.transits)


# The good session's counters that say what became of its observations (daemon/dispatch.py).
OBSERVATION_COUNTERS = (
    "observations",
    "observations_superseded",
    "stale_observations",
    "frame_slot_refused",
)


class Arena:
    """The daemon under attack and the good driver; judges each attack."""

    def __init__(
        self,
        config: Any,
        daemon: Any,
        driver: StreamingDriver,
        transits: list[tuple[str, int, int]] | None = None,
    ) -> None:
        self.config = config
        self.daemon = daemon
        self.driver = driver
        # (session, driver's send time, daemon's receive time) of every observation taken: one
        # process, one monotonic clock, so the difference is the time it spent in the sockets.
        self.transits = transits if transits is not None else []
        self.endpoint = config.server.bind
        self.lateness = daemon.telemetry.section(TICK_LATENESS)
        self.receive = daemon.telemetry.section(RECEIVE)

    @property
    def good_session(self) -> str:
        return self.driver.client.welcome.session

    def ready(self) -> None:
        """Only the good driver is connected, and it is in steady service: its last
        `SETTLE_RECORDS` commands are actions for consecutive steps, the last one just now."""
        sessions = self.daemon.lanes.default.control.registry.sessions
        wait_for(lambda: list(sessions) == [self.good_session], timeout=3)
        now = time.monotonic_ns()
        wait_for(lambda: self._steady(now), timeout=5)

    def _steady(self, since_ns: int) -> bool:
        tail = self.driver.records[-SETTLE_RECORDS:]
        return (
            len(tail) == SETTLE_RECORDS
            and tail[-1].received_ns > since_ns
            and all(r.kind == "action" for r in tail)
            and tail[-1].step - tail[0].step == SETTLE_RECORDS - 1
        )

    def mark(self) -> Mark:
        counters = self.driver.client.counters
        return Mark(
            index=len(self.driver.records),
            missed=self.daemon.pacer.missed_ticks,
            lost=counters.lost,
            duplicated=counters.duplicated,
            reconnects=counters.reconnects,
            errors=collections.Counter(self.daemon.lanes.default.control.dispatcher.errors),
            session=self.good_session,
            lateness=self.lateness.snapshot(buckets=True),
            receive=self.receive.snapshot(buckets=True),
            sent=len(self.driver.sent_ns),
            transits=len(self.transits),
            observations=self.observation_counters(),
        )

    def observation_counters(self) -> collections.Counter[str]:
        """What the daemon did with the good driver's observations so far, and what its client
        could not send (dropped) or sent with frames on the socket."""
        session = self.daemon.lanes.default.control.registry.sessions.get(self.good_session)
        counts = session.counters if session is not None else collections.Counter()
        client = self.driver.client.counters
        return collections.Counter(
            {name: counts[name] for name in OBSERVATION_COUNTERS}
            | {
                "dropped_by_client": client.dropped_observations,
                "frames_on_socket": client.frames_on_socket,
            }
        )

    def observations_since(self, mark: Mark) -> str:
        """`sent` and the counters' growth since `mark` (zeros left out), for the evidence: an
        observation sent but superseded or refused is no silence of the driver's."""
        grown = self.observation_counters()
        grown.subtract(mark.observations)
        sent = len(self.driver.sent_ns) - mark.sent
        return ", ".join([f"sent {sent}"] + [f"{k} {v}" for k, v in grown.items() if v])

    def driver_stall_ms_since(self, mark: Mark) -> float:
        """The good driver's longest silence since `mark`: its own thread, starved on a loaded
        machine, can go quiet long enough for the watchdog to hold it."""
        sent = self.driver.sent_ns[max(mark.sent - 1, 0) :] + [time.monotonic_ns()]
        return max((b - a for a, b in itertools.pairwise(sent)), default=0) / 1e6

    def transit_ms_since(self, mark: Mark) -> float:
        """The longest a good driver's observation taken since `mark` spent between its send
        and the daemon's read: in the sockets' queues and I/O threads, which a loaded machine
        can starve while the control loop itself keeps time."""
        session = mark.session
        late = [r - s for who, s, r in self.transits[mark.transits :] if who == session]
        return max(late, default=0) / 1e6

    def receive_ms_since(self, mark: Mark) -> float:
        """The longest the loop spent handling one message since `mark` (decode and route)."""
        worst = window(mark.receive, self.receive.snapshot(buckets=True))["max_s"]
        return 0.0 if worst is None else worst * 1e3

    def lateness_ms_since(self, mark: Mark) -> float:
        """The worst tick lateness since `mark` (from the daemon's tick-lateness histogram)."""
        worst = window(mark.lateness, self.lateness.snapshot(buckets=True))["max_s"]
        return 0.0 if worst is None else worst * 1e3

    def judge(
        self, mark: Mark, expected_errors: collections.Counter[str], strict: bool = False
    ) -> None:
        """Everything a hostile message must not do, checked after the attack. A tick the
        pacer skipped while no message took the loop long is the machine's doing and is
        tolerated, unless `strict` (for attacks whose cost is outside message handling: such a
        test reruns on a stall instead, see rerun_on_stall)."""
        # Let a few ticks pass after the attack, so that a stalled loop shows as a gap.
        after = len(self.driver.records)
        wait_for(lambda: len(self.driver.records) >= after + SETTLE_RECORDS, timeout=5)
        daemon = self.daemon
        assert daemon.running, "the control loop thread died"
        status = request_status(self.config.server.status_bind, timeout_s=2)
        assert status is not None, "the status socket stopped answering"
        assert any(r["session"] == mark.session for r in status["robots"]), (
            f"the good driver's session is gone: {status['robots']}"
        )

        errors = collections.Counter(daemon.lanes.default.control.dispatcher.errors)
        errors.subtract(mark.errors)
        assert +errors == expected_errors, "the dispatcher's errors grew by other codes"

        window = self.driver.records[mark.index :]
        counters = self.driver.client.counters
        missed = daemon.pacer.missed_ticks - mark.missed
        evidence = (
            f"pacer missed {missed} ticks, client lost {counters.lost - mark.lost} messages, "
            f"worst tick lateness {self.lateness_ms_since(mark):.1f} ms; window: {window}"
        )
        gaps = [(a.step, b.step) for a, b in itertools.pairwise(window) if b.step != a.step + 1]
        holds = [r for r in window if r.kind != "action"]
        assert all(r.finite for r in window)
        handled_ms = self.receive_ms_since(mark)
        silent_ms = self.driver_stall_ms_since(mark)
        evidence += (
            f"; slowest message handled in {handled_ms:.2f} ms; the good driver was silent for "
            f"up to {silent_ms:.0f} ms; its observations: {self.observations_since(mark)}"
        )
        transit_ms = self.transit_ms_since(mark)
        evidence += f"; the longest an observation spent in the sockets: {transit_ms:.0f} ms"
        if not strict and handled_ms < PERIOD_MS and silent_ms + transit_ms >= HOLD_AFTER_MS * 0.9:
            # The good driver's own thread went quiet, or its observations sat in the sockets,
            # past the watchdog (starved, not attacked: the loop handled every message within a
            # period, and the watchdog waits 20): it is held, as it should be, for want of fresh
            # observations; steps stay whole. (A CI run held it 21 ticks with its observations
            # 385 ms in the sockets and no message handled in over 4.4 ms.)
            holds = [r for r in holds if r.reason not in ("stale_observation", "no_action")]
        if strict or missed == 0 or handled_ms >= PERIOD_MS / 4:
            assert not gaps, f"the good driver missed ticks {gaps}; {evidence}"
            assert not holds, f"the good driver got holds {holds}; {evidence}"
            assert missed == 0, evidence
        else:
            # The pacer skipped ticks while no message took the loop long: the whole process
            # was descheduled (a loaded machine), not stalled by the attack. Only the ticks the
            # pacer skipped may be missing, and only holds for want of a fresh action.
            gap_steps = sum(b - a - 1 for a, b in gaps)
            assert gap_steps <= missed, f"the good driver missed ticks {gaps}; {evidence}"
            assert len(holds) <= missed and all(
                r.reason in ("no_action", "stale_observation") for r in holds
            ), f"the good driver got holds {holds}; {evidence}"
        assert counters.lost == mark.lost and counters.duplicated == mark.duplicated, evidence
        assert counters.reconnects == mark.reconnects
        assert self.good_session == mark.session


@pytest.fixture(scope="module")
def arena(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Arena]:
    tmp = tmp_path_factory.mktemp("hostile")
    config = ipc_config(tmp, f"control.rate_hz={RATE_HZ}")
    transits: list[tuple[str, int, int]] = []
    take = Session.take_observation

    def recorded(session: Session, obs_seq: int, sent_ns: int, received_ns: int, *a, **k):  # type: ignore[no-untyped-def]
        transits.append((session.id, sent_ns, received_ns))
        return take(session, obs_seq, sent_ns, received_ns, *a, **k)

    with pytest.MonkeyPatch.context() as patch, running_daemon(config) as daemon:
        patch.setattr(Session, "take_observation", recorded)
        status = StatusServer(daemon.context, config.server.status_bind, daemon.status)
        status.start()
        driver = StreamingDriver(config.server.bind, obs_period_s=0.015).start()
        try:
            yield Arena(config, daemon, driver, transits)
        finally:
            driver.stop()
            status.stop()


# -- the attacker --------------------------------------------------------------------------------


class Attacker:
    """A raw DEALER socket: sends whatever frames it is given, reads the daemon's errors."""

    def __init__(self, endpoint: str) -> None:
        self.socket = zmq.Context.instance().socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.monitor = self.socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        self.socket.connect(endpoint)
        self.session: str | None = None
        self.seq = 0

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def send(self, frames: list[Any]) -> None:
        self.socket.send_multipart(frames, copy=False)

    def _next(self, kinds: tuple[str, ...], timeout_s: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout_s
        while True:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0 or not self.socket.poll(remaining_ms):
                return None
            message = decode(self.socket.recv_multipart(copy=False))
            if message.kind in kinds:
                return message.header

    def hello(self) -> str:
        self.send(
            encode("hello", robot="evil", seq=self.next_seq(), time_ns=0, fields={"spec": SPEC})
        )
        reply = self._next(("welcome", "error"), 3.0)
        assert reply is not None and reply["kind"] == "welcome", reply
        self.session = reply["session"]
        return self.session

    def error(self, timeout_s: float = 2.0) -> dict[str, Any] | None:
        """The next `error` (actions and holds for the attacker's own session are skipped)."""
        return self._next(("error",), timeout_s)

    def disconnected(self, timeout_s: float) -> bool:
        if not self.monitor.poll(int(timeout_s * 1000)):
            return False
        return recv_monitor_message(self.monitor)["event"] == zmq.EVENT_DISCONNECTED

    def close(self) -> None:
        if self.session is not None:
            self.send(
                encode(
                    "bye",
                    robot="evil",
                    seq=self.next_seq(),
                    time_ns=0,
                    fields={"session": self.session},
                )
            )
        self.socket.disable_monitor()
        self.monitor.close(0)
        self.socket.close(linger=200)  # long enough for the bye to leave


@contextmanager
def attacker_for(arena: Arena, with_session: bool) -> Iterator[Attacker]:
    arena.ready()
    attacker = Attacker(arena.endpoint)
    try:
        if with_session:
            attacker.hello()
        yield attacker
    finally:
        attacker.close()


# -- building bad messages ---------------------------------------------------------------------


def header(kind: str = "obs", seq: int = 1, **fields: Any) -> dict[str, Any]:
    h = {"version": 2, "kind": kind, "robot": "evil", "seq": seq, "time_ns": 0, "arrays": []}
    h.update(fields)
    return h


def pack(h: Any) -> bytes:
    return msgpack.packb(h, use_bin_type=True)


def obs(
    session: str | None,
    seq: int,
    state: np.ndarray = STATE,
    edit: Callable[[dict[str, Any]], None] | None = None,
    extra: dict[str, np.ndarray] | None = None,
    **header_fields: Any,
) -> list[Any]:
    """A valid observation (made with protocol.encode), then `edit` applied to its header."""
    arrays = {"front": IMAGE, "state": state, **(extra or {})}
    frames = encode(
        "obs",
        robot="evil",
        seq=seq,
        time_ns=time.monotonic_ns(),
        fields={"session": session or uuid.uuid4().hex},
        arrays=arrays,
    )
    h = msgpack.unpackb(frames[0])
    h.update(header_fields)
    if edit is not None:
        edit(h)
    return [pack(h), *frames[1:]]


def state_as(dtype: Any, data: bytes, shape: list[int] | None = None) -> Callable[[dict], None]:
    """Edit: describe the state frame with another dtype (and shape); `data` replaces it."""

    def edit(h: dict[str, Any]) -> None:
        h["arrays"][1]["dtype"] = dtype
        if shape is not None:
            h["arrays"][1]["shape"] = shape

    edit.data = data  # type: ignore[attr-defined]
    return edit


def with_state_frame(session: str, seq: int, edit: Callable[[dict], None]) -> list[Any]:
    frames = obs(session, seq, edit=edit)
    frames[2] = edit.data  # type: ignore[attr-defined]
    return frames


def hello_as(robot: str, **spec: Any) -> list[Any]:
    return encode("hello", robot=robot, seq=1, time_ns=1, fields={"spec": dict(SPEC, **spec)})


def repeated_key(raw: bytes, key: str, value: Any) -> bytes:
    """The msgpack map `raw` with one more entry for `key`, which it already has."""
    assert raw[0] & 0xF0 == 0x80, "a fixmap"
    return bytes([raw[0] + 1]) + raw[1:] + pack(key) + pack(value)


def with_array(frames: list[Any]) -> list[Any]:
    """The message with a float32 array declared and attached (its kind carries none)."""
    h = msgpack.unpackb(bytes(memoryview(frames[0])))
    h["arrays"] = [{"name": "state", "dtype": "float32", "shape": [6]}]
    return [pack(h), STATE.tobytes()]


@dataclass(frozen=True)
class Case:
    """Messages to send, each with the error code it must get (None: it must be accepted)."""

    build: Callable[[Attacker, Arena], list[tuple[list[Any], str | None]]]
    session: bool = False  # the attacker says hello first


def raw(frames: list[Any] | Callable[[], list[Any]], code: str) -> Case:
    return Case(lambda a, arena: [((frames() if callable(frames) else frames), code)])


def on_session(make: Callable[[str, int], list[Any]], code: str) -> Case:
    return Case(lambda a, arena: [(make(a.session, a.next_seq()), code)], session=True)


MALFORMED, NOT_ALLOWED, SHAPE = "malformed", "not_allowed", "shape"
VALID_HEADER = pack(header(session="0" * 32))
DEEP = b"\x91" * 10_000 + b"\xc0"  # 10,000 nested one-element arrays


def filled_header(size: int, item: Any, per_list: int = 1000) -> bytes:
    """A header of about `size` bytes (never more), padded with lists of `item`."""
    base = len(pack(header(session="0" * 32, junk=[])))
    one = len(pack([item] * per_list))
    lists = max((size - base) // one, 0)
    junk = [[item] * per_list for _ in range(lists)]
    rest = size - len(pack(header(session="0" * 32, junk=junk))) - 8
    if rest > 0:
        junk.append([item] * (rest // len(pack(item))))
    return pack(header(session="0" * 32, junk=junk))


CASES: dict[str, Case] = {
    # -- undecodable or refused before any field is read
    "truncated_msgpack": raw([VALID_HEADER[: len(VALID_HEADER) // 2]], MALFORMED),
    "trailing_bytes_after_the_map": raw([VALID_HEADER + b"\x00\xc3"], MALFORMED),
    "not_msgpack": raw([b"\xc1\xc1\xc1"], MALFORMED),
    "empty_frame": raw([b""], MALFORMED),
    "header_is_a_list": raw([pack([1, "obs"])], MALFORMED),
    "integer_map_key": raw([pack({1: 2})], MALFORMED),
    "str_declaring_2_31_bytes": raw([b"\x81\xa4kind\xdb\x80\x00\x00\x00" + b"x" * 64], MALFORMED),
    "array_declaring_2_31_elements": raw([b"\x81\xa6arrays\xdd\x80\x00\x00\x00"], MALFORMED),
    "map_declaring_2_31_entries": raw([b"\xdf\x80\x00\x00\x00"], MALFORMED),
    "bin_declaring_2_31_bytes": raw([b"\xc6\x80\x00\x00\x00"], MALFORMED),
    "nesting_10000_deep": raw([DEEP], MALFORMED),
    "nesting_10000_deep_inside_a_field": raw(
        [pack(header(session="0" * 32, junk=None))[:-1] + DEEP], MALFORMED
    ),
    "unknown_ext_type": raw([pack(header(junk=msgpack.ExtType(42, b"boom")))], NOT_ALLOWED),
    "timestamp_ext": raw([pack(header(time_ns=msgpack.Timestamp(1, 2)))], NOT_ALLOWED),
    "bin_in_header": raw([pack(header(session=b"\x00" * 32))], NOT_ALLOWED),
    # Over the header limit, under MAXMSGSIZE (limit + the largest array): refused unparsed.
    "header_over_the_limit": Case(
        lambda a, arena: [
            (
                [filled_header(arena.daemon.limits.max_header_bytes + 2048, "x" * 1000, 4)],
                NOT_ALLOWED,
            )
        ]
    ),
    "wrong_protocol_version": raw([pack(header(version=3, session="s"))], "version"),
    "unknown_kind": raw([pack(header(kind="reboot"))], NOT_ALLOWED),
    "negative_seq": raw([pack(header(seq=-1, session="s"))], MALFORMED),
    "driver_sends_welcome": raw(
        lambda: encode(
            "welcome",
            robot="evil",
            seq=1,
            time_ns=0,
            fields={"session": "0" * 32, "control_hz": 1e4, "spec": SPEC},
        ),
        NOT_ALLOWED,
    ),
    "hello_spec_not_a_map": raw([pack(header(kind="hello", spec=[]))], MALFORMED),
    "hello_spec_joints_not_a_list": raw(
        lambda: encode(
            "hello", robot="evil", seq=1, time_ns=0, fields={"spec": dict(SPEC, joints="joint_0")}
        ),
        MALFORMED,
    ),
    "hello_spec_camera_without_height": raw(
        lambda: encode(
            "hello",
            robot="evil",
            seq=1,
            time_ns=0,
            fields={"spec": dict(SPEC, cameras=[{"name": "front", "width": 128}])},
        ),
        MALFORMED,
    ),
    "obs_before_hello": raw(lambda: obs(None, 1), "unknown_session"),
    "frames_past_the_limit": raw(
        lambda: obs(None, 1, extra={"teleop": STATE, "more": STATE}), NOT_ALLOWED
    ),
    "array_declaring_2_31_elements_in_shape": raw(
        lambda: obs(None, 1, edit=lambda h: h["arrays"][1].update(shape=[2**31])), SHAPE
    ),
    "array_declaring_3_6_GB": raw(
        lambda: obs(None, 1, edit=lambda h: h["arrays"][1].update(shape=[30_000, 30_000])),
        NOT_ALLOWED,
    ),
    "fewer_frames_than_declared": raw(lambda: obs(None, 1)[:2], MALFORMED),
    # -- hostile input on a valid session of the attacker's own
    "object_dtype": on_session(
        lambda s, q: with_state_frame(s, q, state_as("object", b"\x00" * 48)), NOT_ALLOWED
    ),
    "object_dtype_numpy_code": on_session(
        lambda s, q: with_state_frame(s, q, state_as("O", b"\x00" * 48)), NOT_ALLOWED
    ),
    "structured_dtype": on_session(
        lambda s, q: with_state_frame(s, q, state_as([["x", "<f4"], ["y", "<f4"]], b"\0" * 48)),
        NOT_ALLOWED,
    ),
    "structured_dtype_string": on_session(
        lambda s, q: with_state_frame(s, q, state_as("[('x', '<f4')]", b"\0" * 24)), NOT_ALLOWED
    ),
    "big_endian_float32": on_session(
        lambda s, q: with_state_frame(s, q, state_as(">f4", np.zeros(6, ">f4").tobytes())),
        NOT_ALLOWED,
    ),
    "shape_disagrees_with_bytes": on_session(
        lambda s, q: with_state_frame(s, q, state_as("float32", b"\0" * 20)), SHAPE
    ),
    "state_of_7_joints": on_session(lambda s, q: obs(s, q, np.zeros(7, np.float32)), SHAPE),
    "state_as_int32": on_session(lambda s, q: obs(s, q, np.zeros(6, np.int32)), SHAPE),
    "camera_as_float32": on_session(
        lambda s, q: obs(s, q, extra={"front": np.zeros((96, 128, 3), np.float32)[:8, :8]}),
        SHAPE,
    ),
    "camera_missing": on_session(
        lambda s, q: encode(
            "obs", robot="evil", seq=q, time_ns=0, fields={"session": s}, arrays={"state": STATE}
        ),
        SHAPE,
    ),
    "nan_in_state": on_session(
        lambda s, q: obs(s, q, np.array([0, 0, np.nan, 0, 0, 0])), "non_finite"
    ),
    "inf_in_state": on_session(
        lambda s, q: obs(s, q, np.array([0, -np.inf, 0, 0, 0, 0], np.float32)), "non_finite"
    ),
    "nan_in_teleop": on_session(
        lambda s, q: obs(s, q, extra={"teleop": np.full(6, np.nan, np.float32)}), "non_finite"
    ),
    "teleop_for_an_unknown_joint": on_session(
        lambda s, q: encode(
            "teleop", robot="evil", seq=q, time_ns=0, fields={"session": s, "joints": ["joint_99"]}
        ),
        NOT_ALLOWED,
    ),
    "driver_sends_action": on_session(
        lambda s, q: encode(
            "action",
            robot="evil",
            seq=q,
            time_ns=0,
            fields={"session": s, "step": 0, "obs_seq": 0, "deadline_ns": 2**63},
            arrays={"action": np.full(6, 3.0, np.float32)},
        ),
        NOT_ALLOWED,
    ),
    "replayed_sequence_number": Case(
        lambda a, arena: [(obs(a.session, 5), None), (obs(a.session, 5), "stale")], session=True
    ),
    # Finite in float64, infinite once the daemon converts the state to float32.
    "state_beyond_float32_range": on_session(
        lambda s, q: obs(s, q, np.array([1e300, 0, 0, 0, 0, 0])), "non_finite"
    ),
    # The driver's clock in the header at the edge of what msgpack carries.
    "time_ns_max_uint64": on_session(lambda s, q: obs(s, q, time_ns=2**64 - 1), MALFORMED),
    "time_ns_min_int64": on_session(lambda s, q: obs(s, q, time_ns=-(2**63)), MALFORMED),
    # -- round two: each of these was accepted, or answered with the wrong code
    "robot_name_with_a_newline": raw(lambda: hello_as("evil\n2026-01-01 INFO forged"), NOT_ALLOWED),
    "robot_name_with_ansi_escapes": raw(lambda: hello_as("\x1b[31mred\x1b[0m"), NOT_ALLOWED),
    "robot_name_of_4000_bytes": raw(lambda: hello_as("r" * 4000), NOT_ALLOWED),
    "robot_name_empty": raw(lambda: hello_as(""), NOT_ALLOWED),
    "hello_limits_infinite": raw(
        lambda: hello_as("evil", limits={"joint_0": [-math.inf, math.inf]}), NOT_ALLOWED
    ),
    "hello_limits_nan": raw(
        lambda: hello_as("evil", limits={"joint_0": [math.nan, 1.0]}), NOT_ALLOWED
    ),
    "repeated_kind_key_obs_then_bye": on_session(
        lambda s, q: [repeated_key(obs(s, q)[0], "kind", "bye"), *obs(s, q)[1:]], MALFORMED
    ),
    "driver_sends_hold_without_its_fields": raw([pack(header(kind="hold"))], NOT_ALLOWED),
    "driver_sends_welcome_without_its_fields": raw([pack(header(kind="welcome"))], NOT_ALLOWED),
    "arrays_on_hello": raw(lambda: with_array(hello_as("evil")), MALFORMED),
    "arrays_on_teleop": on_session(
        lambda s, q: with_array(
            encode("teleop", robot="evil", seq=q, time_ns=1, fields={"session": s, "joints": []})
        ),
        MALFORMED,
    ),
    "arrays_on_bye": on_session(
        lambda s, q: with_array(
            encode("bye", robot="evil", seq=q, time_ns=1, fields={"session": s})
        ),
        MALFORMED,
    ),
    "two_hundred_frames": raw(lambda: [VALID_HEADER] + [b""] * 199, NOT_ALLOWED),
    "obs_time_ns_zero": on_session(lambda s, q: obs(s, q, time_ns=0), "clock"),
    "obs_clock_goes_backwards": Case(
        lambda a, arena: [
            (obs(a.session, 5, time_ns=10**12), None),
            (obs(a.session, 6, time_ns=10**12 - 1), "clock"),
        ],
        session=True,
    ),
    "obs_resume_nil": on_session(lambda s, q: obs(s, q, resume=None), None),
    # Finite in float32, but beyond what the model represents after normalization (half
    # precision's range for the reach policy, which does not normalize).
    "state_of_1e19": on_session(
        lambda s, q: obs(s, q, np.array([0, 0, 1e19, 0, 0, 0], np.float32)), "out_of_range"
    ),
    "teleop_of_3_4e38": on_session(
        lambda s, q: obs(s, q, extra={"teleop": np.full(6, 3.4e38, np.float32)}), "out_of_range"
    ),
}

# Where the right answer is a judgement call: the codes the daemon may answer with (None: it
# may also accept the message and serve the attacker normally). Never `internal`.
ALTERNATIVES: dict[str, set[str | None]] = {
    # 10 KB: refused as too deep, or as too big under a header limit below that.
    "nesting_10000_deep": {MALFORMED, NOT_ALLOWED},
    "nesting_10000_deep_inside_a_field": {MALFORMED, NOT_ALLOWED},
    "time_ns_max_uint64": {MALFORMED, NOT_ALLOWED, None},
    "time_ns_min_int64": {MALFORMED, NOT_ALLOWED, None},
    "state_beyond_float32_range": {"non_finite", NOT_ALLOWED},
}


STALL_RETRIES = 3


def rerun_on_stall(test: Callable[..., None]) -> Callable[..., None]:
    """A stall of the whole test process (the pacer itself skipped a tick: garbage collection
    of pytest's objects, or the OS descheduling us on a loaded 2-core machine) is not the
    message's doing. A test whose verdict shows one is run again, up to STALL_RETRIES times;
    a message that really costs a tick costs it every time and fails on the last run."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        for attempt in range(STALL_RETRIES + 1):
            try:
                test(*args, **kwargs)
                return
            except AssertionError as failure:
                text = str(failure)
                stalled = "pacer missed" in text and "pacer missed 0 ticks" not in text
                if not stalled or attempt == STALL_RETRIES:
                    raise

    return run


@pytest.mark.parametrize("name", list(CASES))
@rerun_on_stall
def test_hostile_message(arena: Arena, name: str) -> None:
    attack_and_judge(arena, name)


def attack_and_judge(arena: Arena, name: str) -> None:
    case = CASES[name]
    with attacker_for(arena, case.session) as attacker:
        messages = case.build(attacker, arena)
        mark = arena.mark()
        for frames, _ in messages:
            attacker.send(frames)
        expected = [code for _, code in messages if code is not None]
        replies = [attacker.error() for _ in expected]
        got = [reply and reply["code"] for reply in replies]
        allowed = ALTERNATIVES.get(name)
        if allowed is not None and len(got) == 1 and got[0] in allowed:
            expected = [code for code in got if code is not None]  # an acceptable answer
            replies = [reply for reply in replies if reply is not None]
        else:
            assert got == expected, f"replies: {replies}"
        for reply in replies:
            assert 0 < len(reply["message"]) <= 1000 and "Traceback" not in reply["message"]
        assert attacker.error(timeout_s=0.05) is None, "more errors than bad messages"
        arena.judge(mark, collections.Counter(expected))


@rerun_on_stall
def test_header_at_the_size_limit_costs_the_loop_no_tick(arena: Arena) -> None:
    """Legal in size (just under the header limit: 64 KiB today), but filled with empty maps,
    one byte each (63,000 today) for the decoder to build and walk on the loop thread. Besides
    the usual checks, answering it must cost the loop thread well under a control period of
    CPU time (otherwise every robot's tick waits). CPU time, read from the loop thread's own
    clock, is what the message costs; wall time also counts how long a loaded machine kept the
    thread off a core (a one-byte message's round trip measures that, and is shown)."""
    period_s = 1 / RATE_HZ
    plenty = filled_header(arena.daemon.limits.max_header_bytes - 64, {})
    (loop,) = [t for t in threading.enumerate() if t.name == "tempo-loop"]
    assert loop.ident is not None
    loop_cpu = time.pthread_getcpuclockid(loop.ident)
    with attacker_for(arena, with_session=False) as attacker:
        mark = arena.mark()
        codes: collections.Counter[str] = collections.Counter()

        def best_answer_s(frames: list[bytes]) -> tuple[float, float]:
            """Best of ten answers (send, error back): the loop thread's CPU time and the
            round trip's wall time; scheduling noise only adds to either."""
            cpu, wall = [], []
            for _ in range(10):
                started, cpu_started = time.monotonic(), time.clock_gettime(loop_cpu)
                attacker.send(frames)
                reply = attacker.error()
                cpu.append(time.clock_gettime(loop_cpu) - cpu_started)
                wall.append(time.monotonic() - started)
                assert reply is not None and reply["code"] in (MALFORMED, NOT_ALLOWED), reply
                codes[reply["code"]] += 1
            return min(cpu), min(wall)

        # The control, in the same run: a one-byte bad message costs the loop nothing, so its
        # answer is what the loop spends anyway meanwhile (ticks) and what the transport costs.
        control_cpu, control_wall = best_answer_s([b"\xc1"])
        answer_cpu, answer_wall = best_answer_s([plenty])
        arena.judge(mark, codes)
        assert answer_cpu - control_cpu < period_s / 2, (
            f"answering one {len(plenty)}-byte header took the loop thread "
            f"{answer_cpu * 1e3:.1f} ms of CPU, {(answer_cpu - control_cpu) * 1e3:.1f} ms more "
            f"than a one-byte message (round trips {answer_wall * 1e3:.1f} and "
            f"{control_wall * 1e3:.1f} ms); the period is {period_s * 1e3:.0f} ms"
        )


@rerun_on_stall
def test_oversize_frame_drops_the_connection(arena: Arena) -> None:
    """A frame bigger than any legal one: ZeroMQ's MAXMSGSIZE drops the connection before Python
    sees it (an `error` reply, if some layer answers instead, must say not_allowed)."""
    largest = arena.daemon.limits.max_array_bytes + arena.daemon.limits.max_header_bytes
    with attacker_for(arena, with_session=True) as attacker:
        mark = arena.mark()
        attacker.send(
            obs(
                attacker.session,
                attacker.next_seq(),
                extra={"front": np.zeros(largest + 1, np.uint8)},
            )
        )
        if attacker.disconnected(timeout_s=2.0):
            expected: collections.Counter[str] = collections.Counter()
        else:
            reply = attacker.error()
            assert reply is not None and reply["code"] == NOT_ALLOWED, reply
            expected = collections.Counter([NOT_ALLOWED])
        # The attacker's session goes with its connection (the next send to it fails).
        sessions = arena.daemon.lanes.default.control.registry.sessions
        wait_for(lambda: attacker.session not in sessions, timeout=3)
        attacker.session = None
        arena.judge(mark, expected)


# An attacker in its own process (so that building and sending a huge message does not take the
# GIL from the daemon in this one): connects, waits for a line on stdin, sends, prints the code.
REMOTE_ATTACKER = """
import sys, msgpack, zmq
socket = zmq.Context().socket(zmq.DEALER)
socket.setsockopt(zmq.LINGER, 0)
socket.connect(sys.argv[1])
frames = [bytes.fromhex(sys.argv[2])] + [b""] * int(sys.argv[3])
print("ready", flush=True)
sys.stdin.readline()
socket.send_multipart(frames)
code = msgpack.unpackb(socket.recv_multipart()[0])["code"] if socket.poll(5000) else None
print(code, flush=True)
"""


@rerun_on_stall
def test_100000_frames_in_one_message(arena: Arena) -> None:
    """ZeroMQ has no limit on the parts of one message, and all of them are received before
    decode counts them: 100,000 empty frames must not cost the loop a tick."""
    arena.ready()
    attacker = subprocess.Popen(
        [sys.executable, "-c", REMOTE_ATTACKER, arena.endpoint, VALID_HEADER.hex(), "100000"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert attacker.stdout.readline().strip() == "ready"
        mark = arena.mark()
        attacker.stdin.write("go\n")
        attacker.stdin.flush()
        assert attacker.stdout.readline().strip() == NOT_ALLOWED
        # Receiving 100,000 parts happens before message handling: judged strictly.
        arena.judge(mark, collections.Counter([NOT_ALLOWED]), strict=True)
    finally:
        attacker.kill()
        attacker.wait(5)


@rerun_on_stall
def test_hijacking_another_drivers_session_is_refused(arena: Arena) -> None:
    victim = arena.good_session
    with attacker_for(arena, with_session=False) as attacker:
        mark = arena.mark()
        attacker.send(obs(victim, 10**9, np.full(6, 3.0, np.float32)))
        attacker.send(
            encode(
                "teleop",
                robot="evil",
                seq=attacker.next_seq(),
                time_ns=0,
                fields={"session": victim, "joints": JOINTS},
            )
        )
        attacker.send(
            encode(
                "bye", robot="evil", seq=attacker.next_seq(), time_ns=0, fields={"session": victim}
            )
        )
        replies = [attacker.error() for _ in range(3)]
        assert [r and r["code"] for r in replies] == ["unknown_session"] * 3, replies
        arena.judge(mark, collections.Counter({"unknown_session": 3}))
    session = arena.daemon.lanes.default.control.registry.sessions[victim]
    assert session.robot == "good" and session.pipeline.teleop.owned == ()
    # The attacker's observation (seq 10**9) never counted for the victim.
    assert session.last_obs_seq < 10**9


@rerun_on_stall
def test_flood_of_10000_messages_in_about_a_second(arena: Arena) -> None:
    n = 10_000
    with attacker_for(arena, with_session=False) as attacker:
        attacker.socket.setsockopt(zmq.SNDTIMEO, 2000)
        mark = arena.mark()
        before = arena.daemon.status()
        dispatcher = arena.daemon.lanes.default.control.dispatcher
        handled = dispatcher.messages
        started = time.monotonic()
        for i in range(n):
            attacker.send([b"\xc1" if i % 2 else VALID_HEADER[:7]])
        sent_s = time.monotonic() - started
        wait_for(lambda: dispatcher.messages - handled >= n, timeout=10)
        reply = attacker.error()
        assert reply is not None and reply["code"] == MALFORMED
        # The first refusals are answered; past its budgets (so many messages a tick, 100
        # refusals a second) the rest are dropped unread, cheaply (daemon/connection_budget.py).
        refused = dispatcher.errors["malformed"] - mark.errors["malformed"]
        after = arena.daemon.status()
        budgets = ("muted_messages_dropped", "over_rate_messages_dropped", "greetings_dropped",
                   "hellos_dropped")  # fmt: skip
        dropped = sum(after[k] - before[k] for k in budgets)
        assert 0 < refused <= dispatcher.budget.max_refusals + 1 and dropped > 0
        assert refused + dropped == n  # each answered or dropped unread, none handled twice
        arena.judge(mark, collections.Counter({MALFORMED: refused}))
        # Every send went through within SNDTIMEO (else zmq.Again): the daemon kept draining.
        print(f"the daemon took {n} bad messages in {sent_s:.2f} s")


@pytest.mark.parametrize("socket_type", ["DEALER", "REQ"])
@rerun_on_stall
def test_status_answers_after_any_request(arena: Arena, socket_type: str) -> None:
    """A request of several parts (it killed the old REP-based status thread for good), an
    empty one, and an oversize one; then `tempo status` still answers, and the good driver
    noticed nothing."""
    arena.ready()
    mark = arena.mark()
    context = zmq.Context.instance()
    for parts in ([b"status", b"and more"], [b""], [b"x" * 10_000], [b"a"] * 50):
        socket = context.socket(getattr(zmq, socket_type))
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect(arena.config.server.status_bind)
        socket.send_multipart(parts)
        socket.poll(500)  # an answer, or none (the oversize part drops the connection)
        socket.close(0)
    status = request_status(arena.config.server.status_bind, timeout_s=2)
    assert status is not None and status["robots"], "status stopped answering"
    arena.judge(mark, collections.Counter())


# -- property: whatever a session's driver sends, no internal error and no bad action ----------


@pytest.fixture(scope="module")
def reach_policy(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from controller.inference.build import build_policy

    config = ipc_config(tmp_path_factory.mktemp("policy"))
    return build_policy(config.policy, config.robot, config.runner)


int64s = st.integers(-(2**63), 2**63 - 1)
extreme_ints = (
    st.sampled_from([0, 1, -1, 2**31, 2**53 + 1, 2**63 - 1, -(2**63), 2**64 - 1]) | int64s
)
extreme_floats = st.sampled_from(
    [0.0, -0.0, 1e-45, 0.5, -3.0, 3.4e38, 3.5e38, -3.5e38, 1e300, math.inf, -math.inf, math.nan]
) | st.floats(-4.0, 4.0)
vectors = st.lists(extreme_floats, min_size=6, max_size=6)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    messages=st.lists(
        st.fixed_dictionaries(
            {
                "seq": extreme_ints.filter(lambda s: 0 <= s < 2**64),
                "time_ns": extreme_ints,
                "state": vectors,
                "state_dtype": st.sampled_from(["float32", "float64"]),
                "teleop": st.none() | vectors,
                "teleop_joints": st.none() | st.lists(st.sampled_from(JOINTS), unique=True),
            }
        ),
        min_size=1,
        max_size=6,
    )
)
@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_any_observation_from_a_session_is_served_or_refused_cleanly(
    tmp_path: Any, reach_policy: Any, messages: list[dict[str, Any]]
) -> None:
    config = ipc_config(tmp_path, f"control.rate_hz={RATE_HZ}")
    dispatcher, loop, recorder, step = offline_daemon(config, reach_policy)
    identity = b"driver"
    dispatcher.handle(
        identity,
        encode("hello", robot="r", seq=1, time_ns=0, fields={"spec": SPEC}),
        time.monotonic_ns(),
    )
    ((_, kind, fields, _),) = recorder.sent
    assert kind == "welcome"
    session = fields["session"]
    for i, m in enumerate(messages):
        if m["teleop_joints"] is not None:
            dispatcher.handle(
                identity,
                encode(
                    "teleop",
                    robot="r",
                    seq=2,
                    time_ns=0,
                    fields={"session": session, "joints": m["teleop_joints"]},
                ),
                time.monotonic_ns(),
            )
        arrays = {"front": IMAGE, "state": np.array(m["state"], dtype=m["state_dtype"])}
        if m["teleop"] is not None:
            arrays["teleop"] = np.array(m["teleop"], np.float32)
        frames = encode(
            "obs",
            robot="r",
            seq=m["seq"],
            time_ns=m["time_ns"],
            fields={"session": session},
            arrays=arrays,
        )
        now = time.monotonic_ns()
        dispatcher.handle(identity, frames, now)
        step[0] = i
        loop.tick(i, now, now)  # must not raise, whatever the observation held
    errors = [fields for _, kind, fields, _ in recorder.sent if kind == "error"]
    assert dispatcher.errors[ErrorCode.INTERNAL.value] == 0, errors
    for _, kind, fields, action in recorder.sent:
        if kind == "action":
            assert np.isfinite(action).all(), fields


# -- floods at full speed: the daemon in its own process, so that an abort is a failure ---------

# A flooder in its own process: `junk` sends one-byte junk from a DEALER with the ZMTP heartbeat
# options the protocol document used to recommend, reconnecting every half second (each close
# of a connection whose queue is full is what libzmq 4.3.5 stumbled on); `obs` says hello and
# then sends valid observations of its own session without reading. Prints the count it sent.
FLOODER = """
import sys, time, numpy as np, zmq
from controller.wire.protocol import encode
endpoint, mode, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
spec = {"joints": [f"joint_{i}" for i in range(6)],
        "cameras": [{"name": "front", "height": 96, "width": 128}], "state_size": 6}
context = zmq.Context()
def socket():
    s = context.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.HEARTBEAT_IVL, 100)
    s.setsockopt(zmq.HEARTBEAT_TIMEOUT, 300)
    s.setsockopt(zmq.HEARTBEAT_TTL, 300)
    s.connect(endpoint)
    return s
sent, seq = 0, 0
print("ready", flush=True)
sys.stdin.readline()
deadline = time.monotonic() + seconds
while time.monotonic() < deadline:
    s = socket()
    if mode == "obs":
        s.send_multipart(encode("hello", robot="flood", seq=1, time_ns=time.monotonic_ns(),
                                fields={"spec": spec}))
        session = None
        while session is None and s.poll(2000):
            reply = s.recv_multipart()
            import msgpack
            header = msgpack.unpackb(reply[0])
            if header["kind"] == "welcome":
                session = header["session"]
        arrays = {"front": np.zeros((96, 128, 3), np.uint8), "state": np.zeros(6, np.float32)}
    reconnect = time.monotonic() + (seconds if mode == "obs" else 0.5)
    while time.monotonic() < min(deadline, reconnect):
        if mode == "obs":
            seq += 1
            frames = encode("obs", robot="flood", seq=seq, time_ns=time.monotonic_ns(),
                            fields={"session": session}, arrays=arrays)
        else:
            frames = [b"\\xc1"]
        try:
            s.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
            sent += 1
        except zmq.Again:
            pass
    s.close(0)
print(sent, flush=True)
"""


def resident_mb(pid: int) -> str:
    """The process's resident memory (Linux), for the printed figures only."""
    try:
        with open(f"/proc/{pid}/status") as status:
            kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    except (OSError, StopIteration, ValueError):
        return "?"
    return str(kb // 1024)


def test_floods_at_full_speed_cannot_kill_the_daemon(tmp_path: Any) -> None:
    """Three rounds of a few seconds each, while a good driver streams: one heartbeat-enabled
    DEALER sends junk as fast as it can and two sessions send valid observations as fast as
    they can. After each round the daemon's process is alive and answers status, the good
    driver kept its session, received no NaN, and every gap in its steps is a tick the daemon's
    pacer itself missed (the machine was busy), none a command the attack made it lose."""
    from controller.observe.status_server import request_status
    from tests.conftest import daemon_process

    rounds, seconds = 3, 3.0
    with daemon_process(tmp_path, f"control.rate_hz={RATE_HZ}") as process:
        endpoint = f"ipc://{tmp_path}/tempo.sock"
        status_endpoint = f"ipc://{tmp_path}/status.sock"
        good = StreamingDriver(endpoint, obs_period_s=0.015).start()
        try:
            wait_for(lambda: len(good.records) > 20, timeout=10)
            session = good.client.welcome.session
            reconnects = good.client.counters.reconnects
            for round_ in range(rounds):
                before = request_status(status_endpoint, timeout_s=2)
                assert before is not None
                since = len(good.records)
                flooders = [
                    subprocess.Popen(
                        [sys.executable, "-c", FLOODER, endpoint, mode, str(seconds)],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        text=True,
                    )
                    for mode in ("junk", "obs", "obs")
                ]
                try:
                    for flooder in flooders:
                        assert flooder.stdout.readline().strip() == "ready"
                    for flooder in flooders:
                        flooder.stdin.write("go\n")
                        flooder.stdin.flush()
                    sent = [int(f.stdout.readline()) for f in flooders]
                finally:
                    for flooder in flooders:
                        flooder.kill()
                        flooder.wait(5)
                assert process.poll() is None, f"the daemon died (exit {process.returncode})"
                after = len(good.records)
                wait_for(lambda n=after: len(good.records) >= n + SETTLE_RECORDS, timeout=10)
                status = request_status(status_endpoint, timeout_s=5)
                assert status is not None, "the status socket stopped answering"
                window = good.records[since:]
                missed = status["missed_ticks"] - before["missed_ticks"]
                gaps = [
                    (a.step, b.step) for a, b in itertools.pairwise(window) if b.step != a.step + 1
                ]
                skipped = sum(b - a - 1 for a, b in gaps)
                holds = collections.Counter(r.reason for r in window if r.kind == "hold")
                print(
                    f"round {round_ + 1}: sent junk {sent[0]}, observations {sent[1]} + "
                    f"{sent[2]}; good driver: {len(window)} commands, gaps {gaps} "
                    f"({skipped} steps), pacer missed {missed}, holds {dict(holds)}; daemon "
                    f"handled {status['messages'] - before['messages']} messages, "
                    f"resident memory {resident_mb(process.pid)} MB"
                )
                assert good.client.welcome.session == session, "the good driver lost its session"
                assert good.client.counters.reconnects == reconnects
                assert any(r["session"] == session for r in status["robots"])
                assert all(r.finite for r in window)
                assert skipped <= missed, (
                    f"the good driver missed {skipped} steps {gaps} but the daemon's pacer only "
                    f"{missed}: the attack cost it commands"
                )
        finally:
            good.stop()
        assert process.poll() is None
