"""The openpi endpoint of a daemon (`server.openpi`): its checks at start (the websockets package,
the bind, the API keys), the layout for the served policy, the sessions on the policy's lane
(controller.daemon.openpi_sessions) and the websocket server (controller.openpi), and its part
of `tempo status`.

    endpoint = build_openpi(config, lanes, current_step)   # None when server.openpi is off
    endpoint.start()        # binds; returns ws://HOST:PORT
    endpoint.side           # what the loop's thread services while it waits
    endpoint.stop()
"""

from __future__ import annotations

import importlib.util
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controller.action.chunk_limits import ChunkLimits
from controller.bounded_file import read_text
from controller.config import TempoConfig
from controller.config_sections import OpenpiConfig
from controller.daemon.lanes import Lane, Lanes
from controller.daemon.openpi_sessions import OpenpiConnection, OpenpiSessions
from controller.errors import ConfigError, ProtocolError, SecurityError
from controller.link.serving_watch import serving_watch
from controller.observe.log_safety import shown
from controller.openpi.codec import DecodeLimits
from controller.openpi.layouts import Layout, preset
from controller.openpi.websocket_server import OpenpiServer, ServerSettings
from controller.wire.curve import is_local_endpoint
from policies.base import PolicySpec

MAX_KEYS_BYTES = 64 * 1024
MIN_KEY_CHARS = 16


def check_openpi_available() -> None:
    if importlib.util.find_spec("websockets") is None:
        raise ConfigError(
            "server.openpi needs the websockets package: pip install 'tempo-controller[openpi]'"
        )


def read_api_keys(path: Path) -> frozenset[str]:
    """The keys of server.openpi.api_keys: one a line (blank lines and # comments skipped), in
    a file its owner alone may read."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise ConfigError(
            f"server.openpi.api_keys {path} cannot be read ({exc.strerror})"
        ) from None
    if stat.S_IMODE(mode) & 0o077:
        raise SecurityError(
            f"server.openpi.api_keys {path} may be read by others (mode "
            f"{stat.S_IMODE(mode):o}); chmod 600 it"
        )
    text = read_text(path, MAX_KEYS_BYTES, ConfigError, "server.openpi.api_keys")
    keys = [line.strip() for line in text.splitlines()]
    keys = [key for key in keys if key and not key.startswith("#")]
    if not keys:
        raise ConfigError(f"server.openpi.api_keys {path} holds no key")
    for key in keys:
        if len(key) < MIN_KEY_CHARS or not key.isascii() or not key.isprintable() or " " in key:
            raise ConfigError(
                f"server.openpi.api_keys {path}: every key must be {MIN_KEY_CHARS} or more "
                "printable ASCII characters without spaces (`openssl rand -hex 24` makes one)"
            )
    return frozenset(keys)


def check_openpi_bind(openpi: OpenpiConfig) -> None:
    """Beyond localhost only with API keys (SecurityError), as the ZeroMQ socket needs CURVE."""
    if openpi.api_keys is None and not is_local_endpoint(f"tcp://{openpi.bind}"):
        raise SecurityError(
            f"refusing to serve openpi clients on {openpi.bind}: beyond localhost a client must "
            "send an API key, so set server.openpi.api_keys, or bind 127.0.0.1:PORT"
        )


def check_openpi(openpi: OpenpiConfig) -> None:
    """What can be said of server.openpi before a policy is loaded (the composition root asks
    first, so that these come before a long compile): the package, the bind, the keys."""
    if openpi.enabled:
        check_openpi_available()
        check_openpi_bind(openpi)
        openpi_layout(openpi)
        if openpi.api_keys is not None:
            read_api_keys(openpi.api_keys)


def openpi_layout(openpi: OpenpiConfig) -> Layout:
    if openpi.layout == "custom":
        cameras = dict(openpi.cameras or {})
        return Layout(
            "custom", tuple(cameras), openpi.channels_first, tuple(openpi.state or ()), cameras
        )
    try:
        return preset(openpi.layout, openpi.cameras)
    except ValueError as exc:
        raise ConfigError(f"server.openpi.cameras: {exc}") from None


def check_layout_fits(layout: Layout, spec: PolicySpec) -> None:
    """Every camera of the policy is one image of the layout (else no request could be read)."""
    mapped = set(layout.cameras.values())
    missing = [camera.name for camera in spec.cameras if camera.name not in mapped]
    if missing:
        images = ", ".join(layout.images)
        raise ConfigError(
            f"server.openpi: the policy's camera {missing[0]!r} is mapped to no image of the "
            f"{layout.name} layout ({images}); say which in server.openpi.cameras, e.g. "
            f"{{{layout.images[0]}: {missing[0]}}}"
        )
    unknown = sorted(set(mapped) - {camera.name for camera in spec.cameras})
    if unknown:
        raise ConfigError(
            f"server.openpi.cameras names camera {unknown[0]!r}, which the policy does not have "
            f"(it has {', '.join(c.name for c in spec.cameras)})"
        )


class OpenpiEndpoint:
    def __init__(self, lane: Lane, sessions: OpenpiSessions, server: OpenpiServer) -> None:
        self.lane = lane
        self.sessions = sessions
        self.server = server
        self.side = sessions

    def start(self) -> str:
        try:
            return self.server.start()
        except ProtocolError as exc:  # the bind
            raise ConfigError(str(exc)) from None

    def stop(self) -> None:
        self.server.stop()
        self.sessions.close()

    def clients(self, lane_name: str) -> int:
        return self.sessions.count if lane_name == self.lane.name else 0

    def robots(self, now_ns: int) -> list[dict[str, Any]]:
        """The clients as `tempo status` lists robots (and /metrics exports them)."""
        return [_client_status(self.lane.name, c, now_ns) for c in self.sessions.connections]

    def status(self) -> dict[str, Any]:
        sessions = self.sessions
        return {
            "endpoint": self.server.endpoint,
            "policy": self.lane.name,
            "layout": self.server.settings.layout.name,
            "clients": len(sessions.connections),
            "chunks_served": sessions.served,
            "refused": dict(sessions.refusals),
            "connections_refused": self.server.refused_connections,
        }


def _client_status(policy: str, client: OpenpiConnection, now_ns: int) -> dict[str, Any]:
    seen = client.last_request_ns
    return {
        "robot": client.robot,
        "client": "openpi",
        "peer": shown(client.peer, 64),
        "policy": policy,
        "session": client.id,
        "last_observation_age_ms": (now_ns - seen) / 1e6 if seen else None,
        "guard_state": "ok",
        "guards": dict(client.guards),
        "teleop_joints": [],
        "episode": client.context.episode,
        "task": shown(client.task, 80) if client.task is not None else None,
        "inference_delay_steps": client.context.inference_delay,
        "counters": dict(client.counters),
        "sent": client.sent,
    }


def build_openpi(
    config: TempoConfig, lanes: Lanes, current_step: Callable[[], int]
) -> OpenpiEndpoint | None:
    """The endpoint for `server.openpi`, not started; None when it is off. ConfigError or
    SecurityError (one sentence) for what cannot serve."""
    openpi = config.server.openpi
    if not openpi.enabled:
        return None
    check_openpi_available()
    check_openpi_bind(openpi)
    keys = read_api_keys(openpi.api_keys) if openpi.api_keys is not None else None
    lane = lanes.default
    if openpi.policy is not None:
        named = [one for one in lanes.all if one.name == openpi.policy]
        if not named:
            served = ", ".join(one.name for one in lanes.all)
            raise ConfigError(
                f"server.openpi.policy names {openpi.policy!r}, which this daemon does not "
                f"serve (it serves {served})"
            )
        lane = named[0]
    spec = lane.policy.spec
    layout = openpi_layout(openpi)
    check_layout_fits(layout, spec)
    view = lane.config
    try:
        limits = ChunkLimits(spec, view.guards, view.control.rate_hz)
    except ValueError as exc:
        raise ConfigError(f"{exc} (the policy's joints come from its checkpoint)") from None
    capacity = lane.capacity
    period_ns = int(round(1e9 / view.control.rate_hz))
    metadata = {
        "server": "tempo",
        "policy": lane.name,
        "layout": layout.name,
        "action_horizon": spec.chunk_size,
        "action_dim": spec.action_dim,
        "joint_names": list(spec.joint_names),
        "control_hz": view.control.rate_hz,
        "cameras": {c.name: [c.height, c.width] for c in spec.cameras},
        "state_size": spec.state_size,
        "reads_prompt": spec.prompt is not None,
    }
    sessions = OpenpiSessions(
        lane.name,
        spec,
        lane.feed,
        limits,
        serving=serving_watch(lane.policy),
        current_step=current_step,
        admit=lambda clients: capacity.admit(clients + lane.robots),
        occupied=lanes.occupied,
        max_robots=view.server.max_robots,
        max_connections=openpi.max_connections,
        budget_ns=period_ns * lane.execution_settings.query_period,
        recorder=lane.control.registry.recorder,
        metadata=metadata,
    )
    host, _, port = openpi.bind.rpartition(":")
    settings = ServerSettings(
        host=host.strip("[]"),
        port=int(port),
        layout=layout,
        cameras={c.name: (c.height, c.width) for c in spec.cameras},
        state_size=spec.state_size,
        api_keys=keys,
        # One array may be as large as the whole request (an image the policy does not read
        # is still checked present); the count is the layout's arrays and a few more.
        limits=DecodeLimits(
            max_message_bytes=openpi.max_message_bytes,
            max_array_bytes=openpi.max_message_bytes,
            max_arrays=len(layout.images) + len(layout.state) + 4,
        ),
        max_requests_per_s=openpi.max_requests_per_s,
        request_timeout_s=openpi.request_timeout_s,
    )
    return OpenpiEndpoint(lane, sessions, OpenpiServer(sessions, settings))
