"""Shared test helpers: configs on private ipc endpoints, in-process and subprocess daemons."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgpack
import pytest

from controller.config import TempoConfig, load_config
from controller.daemon.transport import daemon_frames
from controller.wire.header_schema import PROTOCOL_VERSION
from controller.wire.protocol import decode


@pytest.fixture(autouse=True)
def _empty_hub_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: Any) -> None:
    """An empty Hugging Face cache for every test: a developer's own (PaliGemma's tokenizer in
    it, say) must not change what a checkpoint without a tokenizer reads."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path_factory.mktemp("hub-cache")))


def ipc_config(tmp_path: Path, *overrides: str) -> TempoConfig:
    """A config whose endpoints are private ipc:// paths (no fixed ports in tests)."""
    return load_config(
        None,
        [
            f"server.bind=ipc://{tmp_path}/tempo.sock",
            f"server.status_bind=ipc://{tmp_path}/status.sock",
            *overrides,
        ],
    )


def wait_for(predicate: Callable[[], Any], timeout: float = 5.0, interval: float = 0.005) -> Any:
    """Poll `predicate` until it returns something truthy; fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    name = getattr(predicate, "__name__", predicate)
    pytest.fail(f"condition not met within {timeout} s: {name}")


@contextmanager
def running_daemon(config: TempoConfig, policy: Any = None) -> Iterator[Any]:
    """A daemon in this process (threads), stopped on exit."""
    from controller.daemon.service import Daemon
    from controller.inference.build import build_policy

    daemon = Daemon(config, policy or build_policy(config.policy, config.robot, config.runner))
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop()


@contextmanager
def daemon_process(tmp_path: Path, *overrides: str) -> Iterator[subprocess.Popen[str]]:
    """`tempo serve` as a child process, ready (status answers) before yielding."""
    from controller.observe.status_server import request_status

    args = [
        sys.executable,
        "-m",
        "controller.cli",
        "serve",
        "--log-level",
        "INFO",
        "--set",
        f"server.bind=ipc://{tmp_path}/tempo.sock",
        "--set",
        f"server.status_bind=ipc://{tmp_path}/status.sock",
    ]
    for override in overrides:
        args += ["--set", override]
    log = open(tmp_path / f"daemon-{time.monotonic_ns()}.log", "w")
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(
            lambda: (
                process.poll() is not None or request_status(f"ipc://{tmp_path}/status.sock", 0.2)
            ),
            timeout=180,  # a checkpoint's start-up checks on a loaded 2-core machine
        )
        if process.poll() is not None:
            pytest.fail(f"daemon exited at start: {Path(log.name).read_text()}")
        yield process
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(5)
        log.close()


# -- a driver that records every command (tests/integration/test_hostile.py, test_faults.py) ----


class Record:
    """One action or hold as it reached a driver (before `receive` picks the newest)."""

    __slots__ = ("received_ns", "kind", "step", "reason", "session", "finite", "obs_seq")

    def __init__(
        self,
        received_ns: int,
        kind: str,
        step: int,
        reason: str,
        session: Any,
        finite: bool,
        obs_seq: int = -1,
    ) -> None:
        self.received_ns = received_ns
        self.kind = kind
        self.step = step
        self.reason = reason
        self.session = session
        self.finite = finite
        self.obs_seq = obs_seq  # an action's: the observation its chunk came from

    def __repr__(self) -> str:
        return f"{self.kind}@{self.step}{'/' + self.reason if self.reason else ''}"


def recording_client(endpoint: str, robot: str = "good", **kwargs: Any) -> Any:
    """A TempoClient for the default reach robot (6 joints, camera `front` 96x128) that appends
    a `Record` to `.records` for every action and hold of its current session, in arrival
    order, with the session id of the message it came from."""
    import numpy as np

    from controller.wire.client import TempoClient

    class RecordingClient(TempoClient):
        def __init__(self) -> None:
            self.records: list[Record] = []
            self.origin: dict[int, Any] = {}  # id(Command) -> session of its message
            self._kept: list[Any] = []  # keeps those ids valid
            super().__init__(
                endpoint,
                robot,
                [f"joint_{i}" for i in range(6)],
                {"front": (96, 128)},
                6,
                on_command=self.record,
                **kwargs,
            )

        def record(self, command: Any, session: str) -> None:
            finite = command.action is None or bool(np.isfinite(command.action).all())
            self.records.append(
                Record(
                    time.monotonic_ns(),
                    command.kind,
                    command.step,
                    command.reason,
                    session,
                    finite,
                    command.obs_seq,
                )
            )
            self.origin[id(command)] = session
            self._kept.append(command)

    return RecordingClient()


class StreamingDriver:
    """A good driver on its own thread: observations every `obs_period_s`, every command
    recorded (`client.records`). `returned` lists what `receive()` handed to the robot, as
    (monotonic_ns, Command, welcome session then), each distinct command once."""

    def __init__(
        self, endpoint: str, obs_period_s: float = 0.015, robot: str = "good", **kwargs: Any
    ) -> None:
        import threading

        import numpy as np

        self.client = recording_client(endpoint, robot, **kwargs)
        self.obs_period_s = obs_period_s
        self.images = {"front": np.zeros((96, 128, 3), np.uint8)}
        self.state = np.zeros(6, np.float32)
        self.returned: list[Any] = []
        self.sent_ns: list[int] = []  # when each observation went out (a stalled driver shows)
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="good-driver", daemon=True)

    @property
    def records(self) -> list[Record]:
        return self.client.records

    def start(self) -> StreamingDriver:
        self.client.connect()
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            next_obs = time.monotonic()
            while not self._stop.is_set():
                now = time.monotonic()
                if now >= next_obs:
                    dropped = self.client.counters.dropped_observations
                    seq = self.client.send_observation(self.images, self.state)
                    # Only an observation that went out ends a silence (one the client dropped,
                    # unconnected or its send queue full, leaves the gap showing).
                    if seq is not None and self.client.counters.dropped_observations == dropped:
                        self.sent_ns.append(time.monotonic_ns())
                    next_obs = max(next_obs + self.obs_period_s, now)
                command = self.client.receive(timeout_s=0.005)
                if not self.returned or self.returned[-1][1] is not command:
                    welcome = self.client.welcome
                    self.returned.append(
                        (time.monotonic_ns(), command, welcome.session if welcome else None)
                    )
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.client.close()
        if self.error is not None:
            raise self.error


# -- a daemon without sockets or threads: the dispatcher and the loop, driven by hand ---------


def sync_worker(policy: Any) -> Any:
    """The real inference worker, run synchronously on submit (no thread, no timing)."""
    from controller.feed.in_process_feed import InProcessFeed

    class SyncWorker(InProcessFeed):
        def submit(self, session: Any, request: Any) -> None:
            self._infer(session, request)

    return SyncWorker(policy)


class Recorder:
    """The dispatcher's `send`, encoding as the transport does (so encodability is tested)."""

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, str, dict[str, Any], Any]] = []
        self.versions: list[int] = []  # the header's version of each message sent

    def __call__(
        self,
        identity: bytes,
        kind: str,
        *,
        seq: int,
        fields: dict[str, Any],
        arrays: dict[str, Any] | None = None,
        version: int = PROTOCOL_VERSION,
    ) -> bool:
        frames = daemon_frames(kind, seq=seq, fields=fields, arrays=arrays, version=version)
        if version == PROTOCOL_VERSION:
            action = decode(frames).arrays.get("action")
        else:  # an error to a driver of an older version: today's decoder refuses it
            action = None
        self.versions.append(msgpack.unpackb(frames[0])["version"])
        self.sent.append((identity, kind, fields, action))
        return True

    def send_prepared(self, identity: bytes, header: Any, array: Any = None) -> bool:
        """The tick's send of a packed header (controller.daemon.tick_messages), recorded with
        the fields it carries, as `__call__` records them."""
        frames = [bytes(header)] if array is None else [bytes(header), array.copy()]
        message = decode(frames)
        common = {"version", "kind", "robot", "seq", "time_ns", "arrays"}
        fields = {k: v for k, v in message.header.items() if k not in common}
        self.versions.append(message.header["version"])
        self.sent.append((identity, message.kind, fields, message.arrays.get("action")))
        return True


def offline_daemon(
    config: Any, policy: Any, worker: Any = None, flight: Any = None
) -> tuple[Any, Any, Recorder, list[int]]:
    """The dispatcher and the loop of a daemon, without sockets or threads; inference runs at
    once on submit unless another `worker` is given; `flight`: the robots' flight recording
    (a controller.record.queue.PolicyRecording; None: record.mode off). The rest of its
    objects are the dispatcher's (`dispatcher.registry`, `dispatcher.requests.feed`)."""
    from controller.daemon.control import build_control
    from controller.daemon.execution import resolve_execution
    from controller.daemon.service import limits_for, pipeline_factory

    recorder = Recorder()
    step = [0]
    control = build_control(
        policy.spec,
        worker or sync_worker(policy),
        recorder,
        lambda: step[0],
        pipeline_factory(policy.spec, config),
        control_hz=config.control.rate_hz,
        period_ns=10_000_000,
        valid_ticks=config.control.action_valid_ticks,
        server=config.server,
        execution=resolve_execution(config.execution, policy.spec)[0],
        limits=limits_for(policy.spec),
        send_prepared=recorder.send_prepared,
        recorder=flight,
    )
    dispatcher, loop = control.dispatcher, control.loop
    return dispatcher, loop, recorder, step
