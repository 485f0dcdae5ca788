"""The inference process's side: serve a started Runner to the control process.

    code = serve_control_process(build_runner, channel_fd, busy_poll_s)   # the exit code

It says `standby` once imported and waits for `build` (the control process keeps a spare process
waiting so that a restart skips the imports; a spare uses the wait to read the policy ahead,
then says `prepared`), then builds the runner (load, warm up, parity: the
same start as in one process; a failure is sent as `failed_start` with its sentence), says
`hello` (the spec, the runner's status, the memory it holds), waits (a hot standby waits here,
built, until the serving process fails: `standbys`), attaches the observation slots the control
process hands over (their memory's descriptor comes with the message, as a driver ring's does), pins
them for DMA on a GPU, says `ready`, then answers `infer` requests one by one, or the
requests of one batch in one step (process_requests). The loop beats the heartbeat in the
slots' header while it waits and after every request: a request that hangs stops the beat,
and the control process restarts this process. For `busy_poll_s` after each request it waits
for the next one without sleeping (supervision.busy_poll_ms).

What is whose fault: a malformed observation or a slot that was overwritten while it was read
is that robot's (`refused`); a slot whose data no longer matches the checksum the control
process wrote (another process wrote into the memory) is `failed`, never served, as is a
policy failure the runner's ladder could not absorb; a CUDA context that no longer works (an
illegal memory access, a device-side assert poison every later call) is `fatal`: this process
exits and the control process starts a fresh one.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import time
from collections.abc import Callable

import torch

from controller.errors import InputFault, TempoError
from controller.inference.local_policy import LocalPolicy
from controller.inference.process_requests import rest_of_batch, serve_requests
from controller.inference.progress import first_line
from controller.process_protocol.frame_slots import FrameSlots
from controller.process_protocol.message_codec import unpack_map
from controller.process_protocol.parent_death import control_pid, die_with_parent, parent_alive
from controller.process_protocol.process_channel import ChannelError, ProcessChannel
from controller.process_protocol.process_messages import (
    AttachRing,
    AttachSlots,
    Build,
    ChunkReply,
    DetachRing,
    FailedStart,
    FailureCause,
    Hello,
    Infer,
    Message,
    MessageError,
    Prepared,
    Ready,
    RequestFailed,
    RingReady,
    Standby,
    Stop,
    decode,
    decode_map,
    encode,
)

log = logging.getLogger(__name__)


IDLE_POLL_MS = 50  # the heartbeat period while no request comes
BUILD_AT_ONCE_MS = 500  # `build` within this of `standby`: a start, not a spare
SEND_TIMEOUT_S = 10.0  # a control process that takes no message for this long is stuck
STATUS_EVERY_S = 0.5  # the runner's status rides on a chunk at most this often
EXIT_FATAL = 3


def device_poisoned(runner: LocalPolicy) -> bool:
    """Whether the CUDA context is unusable: after an illegal access or a device-side assert,
    every CUDA call fails, synchronize included."""
    if runner.status().get("device", "").startswith("cpu"):
        return False
    try:
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - any CUDA error here means the context is gone
        return True
    return False


class _Pinned:
    """The slots' mapping registered with CUDA (page-locked), so uploads from it are one DMA
    each (the runner's staging is told where it lies)."""

    def __init__(self, slots: FrameSlots, runner: LocalPolicy) -> None:
        self._pointer = slots.buffer.ctypes.data
        self._size = slots.size
        self._runner = runner
        error = torch.cuda.cudart().cudaHostRegister(self._pointer, slots.size, 0)
        self.ok = int(error) == 0
        if self.ok:
            runner.add_pinned_region(self._pointer, slots.size)
        else:
            log.warning("could not pin the observation slots for DMA (CUDA error %s)", error)

    @classmethod
    def maybe(cls, slots: FrameSlots, runner: LocalPolicy) -> _Pinned | None:
        """Pinned when the policy runs on a GPU; None on the CPU."""
        if torch.cuda.is_available() and not str(runner.status().get("device")).startswith("cpu"):
            return cls(slots, runner)
        return None

    def release(self) -> None:
        if self.ok:
            self._runner.remove_pinned_region(self._pointer, self._size)
            torch.cuda.cudart().cudaHostUnregister(self._pointer)
            self.ok = False


MAX_RINGS = 64  # driver frame rings attached at once (the control process keeps to it too)


class DriverRings:
    """Same-host drivers' frame rings this process reads in place (frames_in_place), each
    attached and pinned on the control process's first request for it, until it says detach."""

    def __init__(self, runner: LocalPolicy) -> None:
        self._runner = runner
        self._rings: dict[int, tuple[FrameSlots, _Pinned | None]] = {}

    def attach(self, ring_id: int, fd: int | None, count: int, name: str) -> bool:
        """Attach (and on a GPU pin) the ring passed as `fd` (taken); returns whether it is
        pinned."""
        if fd is None:
            raise ValueError(f"the frame ring {name} came without its shared memory")
        if len(self._rings) >= MAX_RINGS:
            os.close(fd)
            raise ValueError(f"{MAX_RINGS} frame rings are attached already")
        ring = FrameSlots.attach_fd(fd, self._runner.spec, count, name)
        pinned = _Pinned.maybe(ring, self._runner)
        self._rings[ring_id] = (ring, pinned)
        return bool(pinned and pinned.ok)

    def get(self, ring_id: int) -> FrameSlots:
        entry = self._rings.get(ring_id)
        if entry is None:
            raise MessageError(f"no frame ring {ring_id} is attached")
        return entry[0]

    def detach(self, ring_id: int) -> None:
        entry = self._rings.pop(ring_id, None)
        if entry is not None:
            ring, pinned = entry
            if pinned is not None:
                pinned.release()
            ring.close()

    def close(self) -> None:
        for ring_id in list(self._rings):
            self.detach(ring_id)


def own_memory() -> dict[str, int | None]:
    """What this process holds once built, for `tempo status` (a hot standby costs as much):
    the device memory torch reserved (None when CUDA was never started) and its resident host
    memory."""
    gpu = torch.cuda.memory_reserved() if torch.cuda.is_initialized() else None
    host = None
    try:
        with open("/proc/self/statm") as statm:
            host = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    return {"gpu_reserved_bytes": gpu, "host_resident_bytes": host}


def serve_control_process(
    build_runner: Callable[[], LocalPolicy],
    channel_fd: int,
    busy_poll_s: float = 0.0,
    while_standing_by: Callable[[], bool] = lambda: False,
    checkpoint: str | None = None,
) -> int:
    """Serve requests from the control process on the channel it passed as file descriptor
    `channel_fd`, until `stop`, its end of the channel, or a fatal error. `while_standing_by`
    runs when `build` has not come right after `standby`: this process is a spare; it returns
    whether it read the policy ahead (said in `prepared`). `checkpoint`: the policy.path it
    builds, named in its `hello` (the recorder's chunks say which checkpoint served them,
    across a swap)."""
    # The control process decides when this one ends (it sends `stop`): a SIGTERM to the whole
    # group (systemd, Ctrl-C in a terminal) must not end it first, or the control process
    # would count a crash and start another while it shuts down.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    die_with_parent()  # again: a test or tool may call this without the CLI
    parent = control_pid()
    if not parent_alive(parent):
        return 0  # the control process died while this one started
    link = ProcessChannel.inherited(channel_fd)
    try:
        return _stand_by_and_serve(
            build_runner, link, parent, busy_poll_s, while_standing_by, checkpoint
        )
    except ChannelError:
        return 0  # the control process closed the channel: it is gone or has replaced us
    finally:
        link.close()


def _next_message(link: ProcessChannel, parent: int) -> Message | None:
    """The control process's next message; None when it has gone (its end of the channel, or
    its pid). Waits as long as it takes."""
    while True:
        data = link.receive(timeout_ms=IDLE_POLL_MS)
        if data is not None:
            return decode(data)
        if link.closed or not parent_alive(parent):
            return None


def _send(link: ProcessChannel, message: Message) -> None:
    link.send(encode(message), timeout_s=SEND_TIMEOUT_S)


def _stand_by_and_serve(
    build_runner: Callable[[], LocalPolicy],
    link: ProcessChannel,
    parent: int,
    busy_poll_s: float,
    while_standing_by: Callable[[], bool],
    checkpoint: str | None = None,
) -> int:
    # Stand by, imports done, until the control process says `build`: it keeps one process
    # waiting like this, so a restart does not wait for Python and torch to import again. A
    # start answers `standby` with `build` at once; a spare hears nothing for a while, and
    # uses the wait (while_standing_by).
    _send(link, Standby())
    first = link.receive(timeout_ms=BUILD_AT_ONCE_MS)
    if first is None:
        if not link.closed and parent_alive(parent):
            read_ahead = False
            try:
                read_ahead = while_standing_by()
            except TempoError as exc:  # the build will say it again, to the control process
                log.warning("the standby could not read the policy ahead: %s", exc)
            except Exception:  # noqa: BLE001 - only saves a restart time: build without it
                log.exception("the standby's work while waiting failed")
            _send(link, Prepared(read_ahead))  # the control process's status says so
        build = _next_message(link, parent)
    else:
        build = decode(first)
    if not isinstance(build, Build):
        return 0  # `stop` (or gone): the control process ends without needing this one
    try:
        runner = build_runner()
    except Exception as exc:  # noqa: BLE001 - the control process shows the sentence
        text = str(exc) if isinstance(exc, TempoError) else first_line(exc)
        _send(link, FailedStart(text))
        return 2
    # Everything built so far lives as long as the process: keep it out of every collection
    # (a full collection over torch's objects takes milliseconds, in the middle of a step).
    gc.collect()
    gc.freeze()
    spec = runner.spec
    status = {**runner.status(), "memory": own_memory(), "checkpoint": checkpoint}
    _send(link, Hello(spec, tuple(runner.outputs), status))
    attach = _next_message(link, parent)
    if not isinstance(attach, AttachSlots):
        return 0  # `stop` (or gone) before serving began
    fd = link.take_fd()
    try:
        if fd is None:
            raise ValueError("the observation slots came without their shared memory")
        slots = FrameSlots.attach_fd(fd, spec, attach.count, attach.path)
    except (OSError, ValueError) as exc:
        _send(link, FailedStart(f"cannot attach the observation slots: {exc}"))
        return 2
    pinned: _Pinned | None = None
    rings = DriverRings(runner)
    try:
        pinned = _Pinned.maybe(slots, runner)
        _send(link, Ready(pinned=bool(pinned and pinned.ok)))
        return _serve(runner, link, slots, rings, parent, busy_poll_s)
    finally:
        rings.close()
        if pinned is not None:
            pinned.release()
        slots.close()


def _serve(
    runner: LocalPolicy,
    link: ProcessChannel,
    slots: FrameSlots,
    rings: DriverRings,
    parent: int,
    busy_poll_s: float,
) -> int:
    last_status = 0.0
    busy_until = 0.0  # monotonic: poll without sleeping until then
    while True:
        slots.beat()
        # A process that slept between requests takes tens of microseconds to wake, and runs
        # the next step slower than one kept busy (ACT-ALOHA on an H100 host: 1.16-1.23 ms
        # against 1.03-1.05 ms): while robots stream, the wait may stay awake.
        spin_s = max(0.0, busy_until - time.monotonic())
        data = link.receive(timeout_ms=IDLE_POLL_MS, spin_s=spin_s)
        if data is None:
            if link.closed or not parent_alive(parent):  # nobody to serve
                log.error("the control process is gone; the inference process exits")
                return 0
            continue
        received_ns = time.monotonic_ns()
        busy_until = received_ns / 1e9 + busy_poll_s
        message = _received(link, data)
        if isinstance(message, Stop):
            return 0
        if isinstance(message, AttachRing):
            try:
                pinned = rings.attach(message.id, link.take_fd(), message.count, message.path)
            except (OSError, ValueError) as exc:
                _send(link, RequestFailed(message.id, "failed", str(exc)))
            else:
                _send(link, RingReady(message.id, pinned))
            continue
        if isinstance(message, DetachRing):
            rings.detach(message.ring)
            continue
        if not isinstance(message, Infer):
            if message is not None:
                log.warning("unexpected message %r from the control process; ignored", message.kind)
            continue
        batch, others = rest_of_batch(message, lambda s: _next_now(link, s))
        for request, outcome in serve_requests(runner, slots, rings, batch):
            if isinstance(outcome, Exception):
                cause = reply_kind(outcome)
                if cause == "failed" and device_poisoned(runner):
                    cause = "fatal"
                text = str(outcome) if cause in ("refused", "input_fault") else first_line(outcome)
                _send(link, RequestFailed(request.id, cause, text))
                if cause == "fatal":
                    return EXIT_FATAL
                continue
            # The step as this process saw it (request taken -> chunk in host memory): the
            # control side tells it apart from the trips between the processes.
            step_ns = time.monotonic_ns() - received_ns
            status = None
            now = time.monotonic()
            if now - last_status >= STATUS_EVERY_S:
                status = runner.status()
                last_status = now
            # received_ns: CLOCK_MONOTONIC, the control side's clock too.
            actions, memory = outcome
            _send(link, ChunkReply(request.id, actions, memory, step_ns, received_ns, status))
        for other in others:
            log.warning("message %r came inside a batch of requests; ignored", other.kind)


def _next_now(link: ProcessChannel, timeout_s: float) -> Message | None:
    """The next message within `timeout_s` (the rest of a batch, written right after)."""
    data = link.receive(timeout_ms=int(timeout_s * 1000) + 1, spin_s=min(timeout_s, 0.001))
    return _received(link, data) if data is not None else None


def _received(link: ProcessChannel, data: bytes) -> Message | None:
    """The message `data` holds. A malformed one is our bug: a request among them is answered
    `failed` (its robot goes on), anything else is logged and ignored (None). Undecodable bytes
    (a corrupt channel) raise MessageError and end the process."""
    raw = unpack_map(data)
    try:
        return decode_map(raw)
    except MessageError as exc:
        if raw["kind"] in (AttachSlots.KIND, AttachRing.KIND):  # its descriptor is not the next's
            fd = link.take_fd()
            if fd is not None:
                os.close(fd)
        request_id = raw.get("id") if raw["kind"] == "infer" else None
        if isinstance(request_id, int) and not isinstance(request_id, bool):
            _send(link, RequestFailed(request_id, "failed", str(exc)))
        else:
            log.warning("a malformed message from the control process was ignored: %s", exc)
        return None


def reply_kind(exc: BaseException) -> FailureCause:
    """Whose fault a failed request is: the robot's observation (`refused`: malformed;
    `input_fault`: the reference fails on it too), or the policy's or ours (`failed`; a torn
    slot is the control side's bug, never the robot's)."""
    if isinstance(exc, InputFault):
        return "input_fault"
    if isinstance(exc, ValueError) and not isinstance(exc, MessageError):
        return "refused"
    return "failed"
