"""A simulated environment connected to the daemon as a robot: the client declares the
environment's joints, cameras and state as its layout maps them, and the daemon's hello check
says whether the served checkpoint was trained for them. A refusal is one sentence naming what
the environment gives and what the daemon found wrong (the camera or the state size).

The environment's task is the robot's prompt when the policy reads one: the hello goes without
a task first, and again with the environment's task if the daemon says the policy needs one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from controller.errors import ConfigError, ErrorCode, HandshakeRefused, SpecMismatchError
from controller.sim.clocks import CLOCKS
from controller.sim.envs.adapter import EnvLayout
from controller.wire.client import TempoClient
from controller.wire.commands import Command

# What the daemon says to a hello without a task for a policy that reads a prompt
# (controller.daemon.prompts).
NEEDS_TASK = "reads a text prompt"


def connect_env_client(
    endpoint: str,
    layout: EnvLayout,
    robot: str | None = None,
    joints: Sequence[str] | None = None,
    policy: str | None = None,
    handshake_timeout_s: float = 5.0,
    frames_in_place: bool | None = None,
    clock: str = "lockstep",
    on_command: Callable[[Command, str], None] | None = None,
) -> TempoClient:
    """A connected client for `layout` (`joints`: the policy's names for the action values,
    default the layout's). Raises SpecMismatchError (one sentence) when the daemon's policy
    expects other cameras, state or joints, and ConfigError when `clock` is realtime and the
    daemon does not tick at the environment's frame rate. `on_command`: the client's (a
    lockstep episode's FirstAnswers.on_command)."""
    names = list(joints) if joints is not None else list(layout.joints)
    if len(names) != len(layout.joints):
        raise SpecMismatchError(
            f"{len(names)} joint names were given but env {layout.name} takes "
            f"{len(layout.joints)} action values"
        )
    task: str | None = None
    while True:
        client = TempoClient(
            endpoint,
            robot or f"sim-{layout.name}",
            names,
            layout.camera_shapes,
            layout.state_size,
            # A slow simulator (ALOHA on a CPU takes ~0.3 s a step) and a policy's first step on a
            # loaded CPU are quiet for a while: no reconnect before 5 s of silence.
            silence_reconnect_s=max(5.0, 10.0 / layout.fps),
            stale_after_s=max(0.1, 2.0 / layout.fps),
            handshake_timeout_s=handshake_timeout_s,
            task=task,
            policy=policy,
            frames_in_place=frames_in_place,
            on_command=on_command,
            lockstep=clock == "lockstep",
        )
        try:
            client.connect()
        except HandshakeRefused as exc:
            client.close()
            if task is None and layout.task is not None and NEEDS_TASK in str(exc):
                task = layout.task
                continue
            if exc.code == ErrorCode.SPEC_MISMATCH.value:
                detail = str(exc).split("): ", 1)[-1]
                raise SpecMismatchError(
                    f"{layout.describe()}, which the served policy does not fit: {detail}"
                ) from None
            raise
        try:
            check_clock(client, layout, clock)
        except ConfigError:
            client.close()
            raise
        return client


def check_clock(client: TempoClient, layout: EnvLayout, clock: str) -> None:
    """Realtime plays one action of the daemon's per frame, so the daemon must tick at the
    environment's rate (each action of a chunk is one frame's, as in the training data);
    lockstep waits for each action whatever the rate."""
    if clock not in CLOCKS:
        raise ConfigError(f"clock must be one of {', '.join(CLOCKS)}, not {clock!r}")
    hz = client.welcome.control_hz if client.welcome is not None else None
    if clock == "realtime" and hz is not None and abs(hz - layout.fps) > 1e-6:
        raise ConfigError(
            f"env {layout.name} runs at {layout.fps:g} frames a second but the daemon ticks at "
            f"{hz:g} Hz; the realtime clock needs both equal: serve with --set "
            f"control.rate_hz={layout.fps:g}, or use --clock lockstep"
        )
