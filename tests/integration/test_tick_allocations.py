"""The control tick's allocations, measured with tracemalloc on a real socket.

What "allocates nothing" means here, honestly: a steady tick (no chunk landing, no request
handed to the worker) leaves no net allocation behind (so it never feeds the garbage collector,
whose pauses are what a real-time loop must avoid), and what it allocates and frees within the
tick is bounded by a few Python ints and numpy scalars (TRANSIENT_BYTES), not by anything that
grows with messages or robots. Before the tick's headers were packed once (tick_messages), each
tick built a msgpack Packer: 256 KiB allocated and freed per robot per tick.

With telemetry on (the daemon's default) the tick also records into preallocated histograms,
whose rings hold the recorded ints until a fold every 128-255 records turns them into counts:
a few KiB of numpy temporaries on those ticks, and no growth over a run.
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import zmq

from controller.daemon.control import build_control
from controller.daemon.execution import resolve_execution
from controller.daemon.service import (
    limits_for,
    open_transport,
    pipeline_factory,
    unopened_transport,
)
from controller.feed.in_process_feed import InProcessFeed
from controller.observe.telemetry import Telemetry
from controller.wire.protocol import decode, encode
from policies.base import CameraSpec, PolicySpec, Prediction
from tests.conftest import ipc_config

TRANSIENT_BYTES = 2048  # a steady tick's peak above where it started (measured: ~1.4 KiB)
# What all the steady ticks of a run may leave behind together: an int that grew a digit, a
# counter's dict slot (measured: under 100 bytes). A list kept per tick leaves over 10 KiB.
NET_BYTES = 512
FOLD_BYTES = 16 * 1024  # telemetry on: a tick on which a histogram folds its ring
JOINTS = ["j0", "j1", "j2", "j3", "j4", "j5"]
IMAGE = np.zeros((48, 64, 3), np.uint8)


class Hold:
    """Plans to stay where the robot is."""

    spec = PolicySpec(
        cameras=(CameraSpec(name="front", height=48, width=64),),
        state_size=6,
        joint_names=tuple(JOINTS),
        chunk_size=20,
    )

    def predict(self, images: Any, context: Any) -> Prediction:
        return Prediction(np.tile(context.state, (20, 1)).astype(np.float32))


class DeferredWorker(InProcessFeed):
    """Takes requests on the tick and runs them between ticks (outside the measurement), so
    the measured tick is the loop's own work."""

    def submit(self, session: Any, request: Any) -> None:
        self.queued.append((session, request))

    def run_queued(self) -> int:
        done = len(self.queued)
        while self.queued:
            self._infer(*self.queued.pop())
        return done


class Rig:
    """A dispatcher and loop on a real ROUTER socket, one DEALER driver, ticks run by hand."""

    def __init__(self, tmp_path: Any, telemetry: Telemetry | None = None) -> None:
        self.timed = telemetry is not None and telemetry.enabled
        config = ipc_config(tmp_path)
        policy = Hold()
        self.context = zmq.Context()
        limits = limits_for(policy.spec)
        self.transport = open_transport(config, unopened_transport(config, self.context, limits))
        self.worker = DeferredWorker(policy)
        self.worker.queued = []
        self.step = 0
        control = build_control(
            policy.spec,
            self.worker,
            self.transport.send,
            lambda: self.step,
            pipeline_factory(policy.spec, config),
            control_hz=100.0,
            period_ns=10_000_000,
            valid_ticks=config.control.action_valid_ticks,
            server=config.server.model_copy(update={"session_timeout_s": 60.0}),
            execution=resolve_execution(config.execution, policy.spec)[0],
            limits=limits,
            send_prepared=self.transport.send_prepared,
            telemetry=telemetry,
        )
        self.registry, self.dispatcher, self.loop = (
            control.registry,
            control.dispatcher,
            control.loop,
        )
        self.transport.on_peer_gone = self.registry.peer_gone
        self.driver = self.context.socket(zmq.DEALER)
        self.driver.connect(self.transport.endpoint)
        self.seq = 0
        self.session = ""
        self.received: list[str] = []
        self._send("hello", spec={"joints": JOINTS, "cameras": [
            {"name": "front", "height": 48, "width": 64}], "state_size": 6})  # fmt: skip
        deadline = time.monotonic() + 5
        while not self.session and time.monotonic() < deadline:
            self.drain(wait_ms=20)

    def _send(self, kind: str, arrays: Any = None, **fields: Any) -> None:
        self.seq += 1
        if kind != "hello":
            fields["session"] = self.session
        frames = encode(kind, robot="r", seq=self.seq, time_ns=time.monotonic_ns(),
                        fields=fields, arrays=arrays or {})  # fmt: skip
        self.driver.send_multipart(frames)
        # Until it has been handled (receive_until returns at the deadline: keep it short).
        deadline = time.monotonic_ns() + 2_000_000_000
        handled = self.dispatcher.messages
        while self.dispatcher.messages == handled and time.monotonic_ns() < deadline:
            self.transport.receive_until(time.monotonic_ns() + 5_000_000, self.dispatcher.handle)

    def observe(self) -> None:
        self._send("obs", arrays={"front": IMAGE, "state": np.zeros(6, np.float32)})

    def drain(self, wait_ms: int = 0) -> None:
        while self.driver.poll(wait_ms):
            message = decode(self.driver.recv_multipart())
            if message.kind == "welcome":
                self.session = message.header["session"]
            self.received.append(message.kind)
            wait_ms = 0

    def tick(self) -> None:
        self.step += 1
        now = time.monotonic_ns()
        self.loop.tick(self.step, now, now)

    def close(self) -> None:
        self.driver.close(0)
        self.transport.close()
        self.context.term()


def measure(
    rig: Rig, ticks: int, tick: Callable[[], None]
) -> tuple[list[tuple[int, int]], list[bool]]:
    """Run `ticks` ticks, each with an observation every 5th tick and the worker's requests
    answered between ticks; returns (net, transient) bytes per tick and whether each was
    steady (no chunk landed, no request submitted)."""
    sizes: list[tuple[int, int]] = []
    steady: list[bool] = []
    tracemalloc.start()
    gc.disable()  # a collection in the middle would free unrelated garbage: noise
    try:
        for i in range(ticks):
            if i % 5 == 0:
                rig.observe()
            landing = rig.worker.run_queued() > 0
            requests = len(rig.worker.queued)
            pending = bool(rig.registry.live[0].pending)
            start = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            tick()
            current, peak = tracemalloc.get_traced_memory()
            sizes.append((current - start, peak - start))
            steady.append(not landing and not pending and len(rig.worker.queued) == requests)
            rig.drain()
    finally:
        gc.enable()
        tracemalloc.stop()
    return sizes, steady


@pytest.fixture(params=["telemetry off", "telemetry on"])
def rig(tmp_path: Any, request: Any) -> Any:
    # On: the daemon's default (every section of the tick timed into its histogram).
    rig = Rig(tmp_path, Telemetry() if request.param == "telemetry on" else None)
    assert rig.session, "no welcome"
    for _ in range(300):  # warm-up: chunks, holds, counters, headers, telemetry rings filled
        rig.observe()
        rig.worker.run_queued()
        rig.tick()
        rig.drain()
    yield rig
    rig.close()


def test_a_steady_tick_leaves_nothing_behind_and_allocates_a_bounded_few_bytes(rig) -> None:
    before = len(rig.received)
    sizes, steady = measure(rig, 600, rig.tick)
    time.sleep(0.05)
    rig.drain()
    sent = rig.received[before:]
    assert sent.count("action") >= 500, sent[-10:]  # the tick did its job meanwhile
    quiet = [size for size, is_steady in zip(sizes, steady, strict=True) if is_steady]
    assert len(quiet) >= 300
    transients = sorted(transient for _, transient in quiet)
    # Every tick, chunk landings and requests included: no growth over the run.
    assert sum(net for net, _ in sizes) < 4 * NET_BYTES
    if not rig.timed:
        assert sum(net for net, _ in quiet) <= NET_BYTES, [net for net, _ in quiet if net]
        assert transients[-1] <= TRANSIENT_BYTES, transients[-5:]
        return
    # Telemetry on: each section's histogram folds its ring into counts every 128-255
    # records, a few numpy temporaries (measured: under 8 KiB) on those ticks only, and the
    # ints a ring holds between folds are freed by the fold (the whole-run check above).
    within = sum(t <= TRANSIENT_BYTES for t in transients)
    assert within >= 0.95 * len(transients), transients[-20:]
    assert transients[-1] <= FOLD_BYTES, transients[-5:]


def test_the_measurement_catches_a_tick_that_keeps_or_builds_a_list(rig) -> None:
    if rig.timed:
        pytest.skip("shown with telemetry off, where a steady tick's bounds are the tightest")
    kept: list[list[int]] = []

    def leaking() -> None:
        rig.tick()
        kept.append([1, 2, 3])

    sizes, steady = measure(rig, 100, leaking)
    assert sum(net for (net, _), s in zip(sizes, steady, strict=True) if s) > NET_BYTES

    def building() -> None:
        rig.tick()
        list(range(300))

    sizes, steady = measure(rig, 50, building)
    assert max(t for (_, t), s in zip(sizes, steady, strict=True) if s) > TRANSIENT_BYTES
