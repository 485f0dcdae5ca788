"""The driver's side: connect a robot to a Tempo daemon in a few lines. Imports no torch.

    client = TempoClient("tcp://127.0.0.1:5555", robot="arm0", joints=[...],
                         cameras={"front": (480, 640)}, state_size=6)
    client.connect()                        # handshake; raises HandshakeRefused on a mismatch
    while running:
        client.send_observation({"front": frame}, joint_positions)
        command = client.receive(timeout_s=0.005)
        if command.kind == "action":
            robot.command(command.action)   # never past its deadline: receive() checks
        else:
            robot.hold()                    # no fresh action: keep the current position

Same host (an ipc:// endpoint): the daemon hands the client a ring of frame slots in shared
memory, and observations travel as a header naming the slot; the frames never cross the
socket. Write a camera straight into the next slot to skip even the one copy:

        frames = client.frame_buffers()         # writable views of the next slot, or None
        camera.read_into(frames["front"])
        client.send_observation(frames, joint_positions)

If the daemon restarts, the client notices (an `unknown_session` error, or silence) and makes a
fresh handshake on a fresh socket by itself; until the new `welcome` it answers `hold`, and no
action from before the restart is ever returned.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from controller.errors import (
    DaemonUnavailable,
    ProtocolError,
    SecurityError,
)
from controller.wire.client_connection import ClientConnection, Welcome, checked_task
from controller.wire.commands import ClientCounters, Command, CommandInbox
from controller.wire.curve import ClientKeys, load_client_keys
from controller.wire.declared_robot import DeclaredRobot
from controller.wire.frame_ring_writer import FrameRingWriter
from controller.wire.handshake_watch import HandshakeWatch
from controller.wire.header_schema import check_mark_reason


class TempoClient(ClientConnection):
    def __init__(
        self,
        endpoint: str,
        robot: str,
        joints: Sequence[str],
        cameras: Mapping[str, tuple[int, int]],
        state_size: int,
        *,
        limits: Mapping[str, tuple[float, float]] | None = None,
        stale_after_s: float = 0.1,
        silence_reconnect_s: float = 1.0,
        handshake_timeout_s: float = 2.0,
        context: zmq.Context | None = None,
        client_secret_key: str | Path | None = None,
        server_public_key: str | Path | None = None,
        frames_in_place: bool | None = None,
        task: str | None = None,
        policy: str | None = None,  # the daemon's policy to be served by (None: its default)
    ) -> None:
        """`frames_in_place`: camera frames through a shared-memory ring instead of the
        socket. None (default): when the endpoint is ipc:// and the daemon offers one; True:
        required (connect raises HandshakeRefused if the daemon offers none); False: never.
        `task`: what the robot is asked to do, for a policy that reads a text prompt (see
        `connect`)."""
        self.task = checked_task(task, "hello")
        self.policy = policy
        self.endpoint = endpoint
        self.frames_in_place = frames_in_place
        self._ask_in_place = frames_in_place is True or (
            frames_in_place is None and endpoint.startswith("ipc://")
        )
        self._frames: FrameRingWriter | None = None  # frames in place, once welcomed
        self.robot = robot
        self._declared = DeclaredRobot(joints, cameras, state_size, limits)
        self.spec = self._declared.spec
        self.stale_after_ns = int(stale_after_s * 1e9)
        self.silence_reconnect_ns = int(silence_reconnect_s * 1e9)
        self.handshake_timeout_ns = int(handshake_timeout_s * 1e9)
        self.context = context or zmq.Context.instance()
        if (client_secret_key is None) != (server_public_key is None):
            raise SecurityError(
                "client_secret_key and server_public_key go together; pass both or neither"
            )
        # Loaded once: every reconnect makes a fresh socket and must not re-read files.
        self._keys: ClientKeys | None = (
            load_client_keys(Path(client_secret_key), Path(server_public_key))
            if client_secret_key is not None and server_public_key is not None
            else None
        )
        self.counters = ClientCounters()
        self._inbox = CommandInbox(self.counters)
        self.welcome: Welcome | None = None
        self._socket: zmq.Socket | None = None
        self._watch: HandshakeWatch | None = None  # why ZeroMQ's own handshake failed, if it did
        self._seq = 0
        self._last_heard_ns = 0
        self._hello_sent_ns = 0

    # -- frames in place -------------------------------------------------------------------

    @property
    def frames_shared(self) -> bool:
        """Whether this session's frames go through the daemon's shared-memory ring."""
        return self._frames is not None

    def frame_buffers(self) -> dict[str, np.ndarray] | None:
        """Writable views of the next frame slot, one (height, width, 3) uint8 array per
        camera, for a camera to write into; pass them (the same dict) to `send_observation`,
        which then sends only the header. The slot is the daemon's from that send until it
        has finished with the observation: write only into what this returns, before sending.
        None without a ring, or while the daemon holds every slot (send arrays then)."""
        return self._frames.buffers() if self._frames is not None else None

    def __enter__(self) -> TempoClient:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sending ---------------------------------------------------------------------------

    def send_observation(
        self,
        images: Mapping[str, np.ndarray],
        state: np.ndarray,
        teleop: np.ndarray | None = None,
        resume: bool = False,
        episode_start: bool = False,
        task: str | None = None,
    ) -> int | None:
        """Send camera frames (uint8, height x width x 3) and the joint state; `teleop` carries
        the operator's values for the joints teleop owns; `resume` releases the daemon's stop
        state when it is configured to need an explicit resume; `episode_start` says a new
        episode begins with this observation (the daemon clears this robot's plan, state
        history and the policy's memory of it; a session's first observation always starts one);
        `task`, with `episode_start` only, changes the robot's task from this episode on (a
        reconnection says the new one). Returns the sequence number, or None if not connected
        (the observation is dropped and counted).

        The arrays are sent without copying: do not write into them until the next call (hand
        over a fresh array per frame, as camera drivers usually do).

        Raises ObservationError, before sending anything, when the observation does not fit
        what this client declared: camera names, frames uint8 (height, width, 3), state and
        teleop lengths, finite values; ValueError for a task without `episode_start`, blank or
        over 1,000 bytes of UTF-8."""
        if task is not None:
            if not episode_start:
                raise ValueError(
                    "send_observation: a task changes only at an episode start; pass "
                    "episode_start=True with it"
                )
            task = checked_task(task, "obs")
        in_place = self._frames is not None and self._frames.claimed(images)
        arrays: dict[str, np.ndarray] = {} if in_place else dict(images)
        if not in_place:
            self._declared.check_images(arrays)  # checked first, connected or not
        arrays["state"] = self._declared.state(state)
        if teleop is not None:
            arrays["teleop"] = self._declared.teleop(teleop)
        self._check_connection()
        if self.welcome is None:
            self.counters.dropped_observations += 1
            return None
        fields: dict[str, Any] = {"session": self.welcome.session}
        if resume:
            fields["resume"] = True
        if episode_start:
            fields["episode_start"] = True
        if task is not None:
            fields["task"] = self.task = task
        slot = None
        if self._frames is not None:
            slot = self._frames.place(arrays, in_place)
            if slot is None:  # the daemon holds every slot: these frames go on the socket
                self.counters.frames_on_socket += 1
            else:
                fields["frame_slot"] = slot
        dropped = self.counters.dropped_observations
        seq = self._send("obs", fields, arrays)
        if (
            slot is not None
            and self._frames is not None
            and dropped != self.counters.dropped_observations
        ):
            self._frames.unsent(slot["index"], slot["generation"])  # never left: slot free
        return seq

    def set_teleop(self, joints: Sequence[str]) -> None:
        """Hand these joints to the operator (all others to the policy); from then on each
        observation must carry their values (`teleop=`), or the daemon holds with reason
        `teleop_no_values`. Raises ValueError, sending nothing, for a joint this robot does
        not have."""
        declared = self.spec["joints"]
        unknown = [j for j in joints if j not in declared]
        if unknown:
            raise ValueError(
                f"set_teleop: {', '.join(map(repr, unknown))} is not a joint of robot "
                f"{self.robot!r}; its joints: {', '.join(declared)}"
            )
        if self.welcome is None:
            raise DaemonUnavailable("not connected; call connect() first")
        self._send("teleop", {"session": self.welcome.session, "joints": list(joints)})

    def mark(self, reason: str) -> None:
        """Ask the daemon's flight recorder to keep this moment (in ring mode: the last seconds
        of this robot's records are written to a file), with a short `reason`. Raises
        ValueError, sending nothing, for a blank reason or one over 200 bytes of UTF-8; the
        daemon refuses more than one mark a second per robot (an `error`)."""
        if not isinstance(reason, str):
            raise ValueError(f"the mark's reason must be a string, not {type(reason).__name__}")
        try:
            check_mark_reason(reason)
        except ProtocolError as exc:
            raise ValueError(str(exc)) from None
        if self.welcome is None:
            raise DaemonUnavailable("not connected; call connect() first")
        self._send("mark", {"session": self.welcome.session, "reason": reason})

    # -- receiving -------------------------------------------------------------------------

    def receive(self, timeout_s: float = 0.0) -> Command:
        """The newest command that may be applied now.

        Waits up to `timeout_s` for a new message, then drains everything queued. Returns the
        newest action if its deadline has not passed, else `hold` (reason `expired`, counted),
        `hold` when no action came for `stale_after_s` (reason `no_action`), or the daemon's own
        `hold`.
        """
        self._pump(int(timeout_s * 1000), raise_refusal=False)
        self._check_connection()
        now = time.monotonic_ns()
        if self.welcome is None:
            return Command("hold", reason="connecting")
        return self._inbox.current(now, self.stale_after_ns)
