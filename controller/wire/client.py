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
action from before the restart is ever returned. The socket, the handshake and the frame ring
are the client's `connection` (controller.wire.client_connection); the client checks what the
robot sends and keeps what the daemon answers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
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
from controller.wire.curve import load_client_keys
from controller.wire.declared_robot import DeclaredRobot
from controller.wire.header_schema import check_mark_reason


class TempoClient:
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
        on_command: Callable[[Command, str], None] | None = None,
        lockstep: bool = False,
    ) -> None:
        """`frames_in_place`: camera frames through a shared-memory ring instead of the
        socket. None (default): when the endpoint is ipc:// and the daemon offers one; True:
        required (connect raises HandshakeRefused if the daemon offers none); False: never.
        `task`: what the robot is asked to do, for a policy that reads a text prompt (see
        `connect`). `on_command(command, session)`: called with every action and hold of the
        current session as it arrives, on the thread that calls receive (recorders, tests).
        `lockstep`: the robot's world waits for each action (a simulator stepped by its
        driver): every chunk plays from the tick it lands on, first row first, however long
        inference took."""
        if (client_secret_key is None) != (server_public_key is None):
            raise SecurityError(
                "client_secret_key and server_public_key go together; pass both or neither"
            )
        self._declared = DeclaredRobot(joints, cameras, state_size, limits)
        self.stale_after_ns = int(stale_after_s * 1e9)
        self.counters = ClientCounters()
        self._inbox = CommandInbox(self.counters, on_command)
        self.connection = ClientConnection(
            endpoint,
            robot,
            self._declared,
            task=checked_task(task, "hello"),
            policy=policy,
            frames_in_place=frames_in_place,
            lockstep=lockstep,
            # Loaded once: every reconnect makes a fresh socket and must not re-read files.
            keys=(
                load_client_keys(Path(client_secret_key), Path(server_public_key))
                if client_secret_key is not None and server_public_key is not None
                else None
            ),
            context=context or zmq.Context.instance(),
            counters=self.counters,
            inbox=self._inbox,
            handshake_timeout_ns=int(handshake_timeout_s * 1e9),
            silence_reconnect_ns=int(silence_reconnect_s * 1e9),
        )

    # -- the connection --------------------------------------------------------------------

    def connect(self, task: str | None = None) -> Welcome:
        """Handshake, waiting up to the handshake timeout. Raises HandshakeRefused (also when
        the daemon's CurveZMQ security refused this driver's keys, or their absence) or
        DaemonUnavailable. `task` (or the one given before): the robot's task, for a policy
        that reads a text prompt; a reconnection says it again. ValueError, before sending,
        for a blank task or one over 1,000 bytes of UTF-8."""
        return self.connection.connect(task)

    def close(self) -> None:
        """Say bye (best effort) and close the socket."""
        self.connection.close()

    @property
    def connected(self) -> bool:
        return self.connection.connected

    @property
    def welcome(self) -> Welcome | None:
        """The daemon's welcome of this session; None while not connected."""
        return self.connection.welcome

    @property
    def robot(self) -> str:
        return self.connection.robot

    @property
    def spec(self) -> dict[str, Any]:
        """The robot as its hello declares it (joints, cameras, state size, limits)."""
        return self._declared.spec

    @property
    def endpoint(self) -> str:
        return self.connection.endpoint

    @property
    def task(self) -> str | None:
        """The robot's task, as the next hello says it."""
        return self.connection.task

    @property
    def policy(self) -> str | None:
        return self.connection.policy

    @property
    def frames_in_place(self) -> bool | None:
        return self.connection.frames_in_place

    @property
    def context(self) -> zmq.Context:
        return self.connection.context

    @property
    def handshake_timeout_ns(self) -> int:
        return self.connection.handshake_timeout_ns

    @property
    def silence_reconnect_ns(self) -> int:
        return self.connection.silence_reconnect_ns

    # -- frames in place -------------------------------------------------------------------

    @property
    def frames_shared(self) -> bool:
        """Whether this session's frames go through the daemon's shared-memory ring."""
        return self.connection.frames is not None

    def frame_buffers(self) -> dict[str, np.ndarray] | None:
        """Writable views of the next frame slot, one (height, width, 3) uint8 array per
        camera, for a camera to write into; pass them (the same dict) to `send_observation`,
        which then sends only the header. The slot is the daemon's from that send until it
        has finished with the observation: write only into what this returns, before sending.
        None without a ring, or while the daemon holds every slot (send arrays then)."""
        frames = self.connection.frames
        return frames.buffers() if frames is not None else None

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
        ring = self.connection.frames
        in_place = ring is not None and ring.claimed(images)
        arrays: dict[str, np.ndarray] = {} if in_place else dict(images)
        if not in_place:
            self._declared.check_images(arrays)  # checked first, connected or not
        arrays["state"] = self._declared.state(state)
        if teleop is not None:
            arrays["teleop"] = self._declared.teleop(teleop)
        self.connection.keep_alive()
        ring = self.connection.frames  # a reconnect may have closed the ring
        if self.welcome is None:
            self.counters.dropped_observations += 1
            return None
        fields: dict[str, Any] = {"session": self.welcome.session}
        if resume:
            fields["resume"] = True
        if episode_start:
            fields["episode_start"] = True
        if task is not None:
            fields["task"] = task
            self.connection.say_task(task)
        slot = None
        if ring is not None:
            slot = ring.place(arrays, in_place)
            if slot is None:  # the daemon holds every slot: these frames go on the socket
                self.counters.frames_on_socket += 1
            else:
                fields["frame_slot"] = slot
        dropped = self.counters.dropped_observations
        seq = self.connection.send("obs", fields, arrays)
        if slot is not None and ring is not None and dropped != self.counters.dropped_observations:
            ring.unsent(slot["index"], slot["generation"])  # never left: slot free
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
        self.connection.send("teleop", {"session": self.welcome.session, "joints": list(joints)})

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
        self.connection.send("mark", {"session": self.welcome.session, "reason": reason})

    # -- receiving -------------------------------------------------------------------------

    def receive(self, timeout_s: float = 0.0) -> Command:
        """The newest command that may be applied now.

        Waits up to `timeout_s` for a new message, then drains everything queued. Returns the
        newest action if its deadline has not passed, else `hold` (reason `expired`, counted),
        `hold` when no action came for `stale_after_s` (reason `no_action`), or the daemon's own
        `hold`.
        """
        self.connection.pump(int(timeout_s * 1000), raise_refusal=False)
        self.connection.keep_alive()
        now = time.monotonic_ns()
        if self.welcome is None:
            return Command("hold", reason="connecting")
        return self._inbox.current(now, self.stale_after_ns)
