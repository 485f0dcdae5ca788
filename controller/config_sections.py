"""The sections of the daemon's configuration that configure the daemon itself (`control:`,
`server:`, `execution:`, `security:`, `supervision:`, `logging:`), and `Section`, the base of
every section: one pydantic model each, frozen, unknown fields refused, a working default for
every field.

Apart from controller.config, which assembles them into TempoConfig and loads and dumps the
file, so each section reads on its own. The policy's sections (`policy:`, `robot:`) are in
controller.policy_sections; sections that belong to one component (guards, runner, teleop,
telemetry, metrics) live next to it instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class Section(BaseModel):
    """A config section: frozen, and an unknown field is refused (a typo never passes)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ControlConfig(Section):
    """The fixed-rate loop that sends one action per robot per tick."""

    rate_hz: float = Field(
        default=50.0,
        gt=0,
        le=2000,
        description="Control rate. For chunking policies it must equal the rate of the training "
        "data: one chunk element is one control step.",
    )
    spin_us: int = Field(
        default=100,
        ge=0,
        le=20_000,
        description="Sleep until this long before each deadline, then spin (OS sleep is late by "
        "~0.1-0.2 ms; spinning is accurate to ~1 us when nothing else wants the core). A longer "
        "spin is worse under load: the spinning thread is preempted past its deadline "
        "(scripts/soak/bench_floor.py measures it).",
    )
    realtime_priority: int | None = Field(
        default=None,
        ge=1,
        le=99,
        description="Run the control-loop thread under SCHED_FIFO at this priority (Linux; needs "
        "CAP_SYS_NICE or root). The daemon refuses to start if it cannot. Off by default.",
    )
    action_valid_ticks: float = Field(
        default=2.0,
        gt=0,
        le=100,
        description="An action's deadline, in control periods after the tick that sent it. The "
        "driver must not apply it later.",
    )


class OpenpiConfig(Section):
    """openpi's websocket protocol (`openpi-client`), served beside the ZeroMQ robots by the
    same daemon and inference processes (the `server.openpi` section; off by default)."""

    enabled: bool = Field(default=False, description="Serve openpi clients.")
    bind: str = Field(
        default="127.0.0.1:8000",
        description="HOST:PORT the websocket listens on (openpi's serve_policy uses port 8000). "
        "Beyond localhost only with api_keys.",
    )
    api_keys: Path | None = Field(
        default=None,
        description="A file of API keys, one per line, readable by its owner only: a client "
        "must send `Authorization: Api-Key <key>` with one of them (openpi-client's api_key). "
        "None: no key is asked (localhost only).",
    )
    layout: Literal["aloha", "droid", "libero", "custom"] = Field(
        default="aloha",
        description="Where the client puts cameras, state and prompt: openpi's ALOHA, DROID or "
        "LIBERO example, or custom (cameras and state below name the keys).",
    )
    cameras: dict[str, str] | None = Field(
        default=None,
        description="openpi image key -> the policy's camera, e.g. {images/cam_high: top}. "
        "None: each image to the camera named as its key's last part (cam_high).",
    )
    state: tuple[str, ...] | None = Field(
        default=None,
        description="custom layout only: the keys whose vectors make the state, in order.",
    )
    channels_first: bool = Field(
        default=False, description="custom layout only: images come as (3, H, W)."
    )
    policy: str | None = Field(
        default=None,
        description="Which of `policies` serves openpi clients; None: the default (first).",
    )
    max_connections: int = Field(
        default=4,
        ge=1,
        le=256,
        description="openpi connections at once (each also counts against server.max_robots).",
    )
    max_message_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=1024,
        le=256 * 1024 * 1024,
        description="The largest request; a larger one is refused in one sentence (one over "
        "twice this closes the connection).",
    )
    max_requests_per_s: float = Field(
        default=50.0,
        gt=0,
        le=10_000,
        description="Requests one connection may send per second (a burst of as many is "
        "allowed); more are refused unread, in one sentence each.",
    )
    request_timeout_s: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="A request not answered within this long is refused in one sentence.",
    )

    @field_validator("bind")
    @classmethod
    def _host_port(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError("must be HOST:PORT, e.g. 127.0.0.1:8000 (port 0: any free one)")
        return value

    @model_validator(mode="after")
    def _custom_names_its_keys(self) -> OpenpiConfig:
        custom = self.layout == "custom"
        if custom and (not self.cameras or not self.state):
            raise ValueError(
                "server.openpi.layout custom needs cameras (openpi key -> camera) and state "
                "(the keys of the state vector)"
            )
        if not custom and (self.state is not None or self.channels_first):
            raise ValueError(
                f"server.openpi.state and channels_first are for layout custom; the "
                f"{self.layout} layout fixes them"
            )
        return self


class ServerConfig(Section):
    """Where the daemon listens."""

    bind: str = Field(
        default="tcp://127.0.0.1:5555",
        description="ZeroMQ endpoint: tcp://HOST:PORT or ipc:///path. Localhost by default.",
    )
    max_robots: int = Field(default=8, ge=1, le=256, description="Sessions served at once.")
    status_bind: str = Field(
        default="tcp://127.0.0.1:5556",
        description="Local control socket answering `tempo status`, `tempo swap` and `tempo "
        "mark` (tcp://127.0.0.1:PORT or ipc://). Commands are authorised: on ipc:// by the "
        "peer's uid (the daemon's user, root, or status_group), on tcp:// by the status token.",
    )
    status_readers: Literal["any", "owner"] | None = Field(
        default=None,
        description="Who may read `tempo status`: any (every local user) or owner (whoever may "
        "command: see status_bind). null: any on tcp://, owner on ipc:// (its socket file is "
        "then 0600, or 0660 with status_group; with any, 0666).",
    )
    status_group: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="A group whose members may command the daemon as its own user does: on "
        "ipc:// by the peer's credentials (primary group, or member in the user database), on "
        "tcp:// by reading the status token, made 0640 and owned by this group.",
    )
    status_token: Path | None = Field(
        default=None,
        description="The status token file, which a command on a tcp:// status_bind must hold; "
        "made 0600 at start if missing, refused if others may read it. Default: "
        "$XDG_STATE_HOME/tempo/status.token, else ~/.local/state/tempo/status.token. Without "
        "one (it cannot be made), a tcp:// status socket is read-only.",
    )
    session_timeout_s: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description="A session that sends no observation for this long is closed (teleop or "
        "other messages alone do not keep it).",
    )
    idle_when_full_s: float = Field(
        default=1.0,
        gt=0,
        le=3600,
        description="When every slot is taken, a new driver's hello closes the session that has "
        "sent no observation for longest, if that is at least this long.",
    )
    openpi: OpenpiConfig = Field(
        default_factory=OpenpiConfig,
        description="openpi's websocket protocol for openpi-client (off by default).",
    )

    @field_validator("bind", "status_bind")
    @classmethod
    def _known_transport(cls, value: str) -> str:
        if not (value.startswith("tcp://") or value.startswith("ipc://")):
            raise ValueError("must start with tcp:// or ipc://, e.g. tcp://127.0.0.1:5555")
        return value


class ExecutionConfig(Section):
    """How chunks become one action per tick. A field left out of the config follows the
    policy's checkpoint (LeRobot's n_action_steps and temporal_ensemble_coeff, or the execution
    a Tempo checkpoint records), and the default below when the checkpoint says nothing; a field
    set in the file or with --set always wins (see controller.daemon.execution). Also how many
    robots are served in one step and which are admitted. The `execution:` section; it was
    called `inference:`, which is still read, with a warning (controller.config)."""

    query_period: int = Field(
        default=1, ge=1, le=1000, description="Ask the policy at most every N control steps."
    )
    ensemble: Literal["temporal", "newest"] = Field(
        default="temporal",
        description="temporal: weighted mean of every chunk's prediction for the step (ACT); "
        "newest: play the newest chunk.",
    )
    temporal_k: float = Field(
        default=0.01,
        ge=-10,
        le=10,
        description="Ensembling weight exp(-k*i), i=0 the oldest prediction. 0 is uniform; "
        "negative favours new chunks.",
    )
    batch_sizes: tuple[int, ...] = Field(
        default=(1,),
        min_length=1,
        max_length=8,
        description="Robots served in one step: the batch-size buckets (say [1, 2, 4, 8]). "
        "Requests waiting together run as one step of the smallest bucket that holds them, "
        "padded; each bucket is compiled, captured and checked at start. [1]: one robot a step.",
    )
    batch_window_us: int = Field(
        default=0,
        ge=0,
        le=1_000_000,
        description="How long a request may wait for others to batch with, in microseconds; "
        "never past the point where the earliest waiting robot's chunk would be late (its "
        "period x query_period minus the batch's measured step time). 0: take what is waiting.",
    )
    max_load: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="Admission (say 0.9): a hello is refused when its robot would push the "
        "policy's load (query rate x batches x measured step time, controller.daemon.admission) "
        "past this; the first robot is always taken. null: every robot up to server.max_robots.",
    )

    @model_validator(mode="after")
    def _batch_sizes_valid(self) -> ExecutionConfig:
        sizes = self.batch_sizes
        if sizes[0] != 1 or list(sizes) != sorted(set(sizes)) or sizes[-1] > 64:
            raise ValueError(
                f"execution.batch_sizes {list(sizes)} must start at 1 and grow, each at most 64 "
                "(say [1, 2, 4, 8])"
            )
        return self


class SecurityConfig(BaseModel):
    """CurveZMQ keys for binding beyond localhost (the `security:` section)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    server_secret_key: Path | None = Field(
        default=None,
        description="The daemon's secret key file (NAME.key_secret from `tempo keys generate`). "
        "It must be readable by its owner only (chmod 600). Needed, with authorized_keys, to "
        "bind anything but tcp://127.0.0.1 or ipc://; when set, CURVE is used on any bind.",
    )
    authorized_keys: Path | None = Field(
        default=None,
        description="A directory of the public key files (*.key) of the drivers allowed to "
        "connect: the allowlist. Read at start; a key added later needs a restart.",
    )
    zap_domain: str = Field(
        default="tempo",
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="ZAP domain of the daemon's socket; only needs changing if another ZAP "
        "handler shares the process.",
    )

    @model_validator(mode="after")
    def _both_or_neither(self) -> SecurityConfig:
        if (self.server_secret_key is None) != (self.authorized_keys is None):
            raise ValueError(
                "security.server_secret_key and security.authorized_keys go together: set both "
                "(see `tempo keys generate`) or neither"
            )
        return self

    @property
    def enabled(self) -> bool:
        """True when the daemon has keys: its socket then uses CURVE, whatever it binds."""
        return self.server_secret_key is not None and self.authorized_keys is not None


class SupervisionConfig(Section):
    """Where the policy runs, and how its process is watched (the `supervision:` section)."""

    inference_process: bool = Field(
        default=True,
        description="Run the policy in its own supervised process, so the control loop never "
        "shares an interpreter with torch; a crashed or hung one is restarted while every "
        "robot is held. false: in the daemon's own process (debugging).",
    )
    hang_timeout_s: float = Field(
        default=5.0,
        gt=0,
        le=600,
        description="An inference process silent this long while serving (or 20 times its "
        "slowest tier's step time, when that is longer) is killed and restarted.",
    )
    start_timeout_s: float = Field(
        default=900.0,
        gt=0,
        description="How long the inference process may take to load, compile and check.",
    )
    episode_swap_timeout_s: float = Field(
        default=300.0,
        gt=0,
        description="How long a `tempo swap` at episode starts (without --now) may wait for "
        "the robots still on the old policy to start an episode; then it ends, saying so, and "
        "the old policy serves every robot again (a robot that never starts an episode would "
        "otherwise hold the swap, and every later one, for good).",
    )
    standby: Literal["off", "spare", "hot"] = Field(
        default="spare",
        description="What waits beside the serving inference process. spare: a process with "
        "Python and torch imported (host memory, a few hundred MB; no GPU memory), so a restart "
        "skips those seconds. hot: a second process with the policy built, warmed and checked, "
        "which takes over at once when the serving one dies or hangs (as much GPU and host "
        "memory as the serving process; `tempo status` says how much). off: neither.",
    )
    standby_process: bool | None = Field(
        default=None,
        description="Older name: false is `standby: off`; true leaves `standby` as it is.",
    )
    busy_poll_ms: float = Field(
        default=0.0,
        ge=0,
        le=10_000,
        description="For this long after each request the inference process waits for the "
        "next one without sleeping, so it takes it at once on a core that is still awake "
        "(ACT-ALOHA, same-host driver, back-to-back steps, H100 host: step p50 1.36-1.54 ms "
        "sleeping, 1.26-1.27 ms polling). Above the robots' observation period (say 50 for "
        "30 Hz cameras) it keeps one CPU core busy while they stream. 0: sleep at once.",
    )
    inference_threads: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="CPU threads torch runs the policy's operators on. null: one fewer than "
        "the host's cores (at least 1), so the control loop keeps a core of its own: with as "
        "many as the cores, a policy on a 2-core host took the CPU the loop waited for.",
    )

    @field_validator("standby", mode="before")
    @classmethod
    def _yaml_off(cls, value: Any) -> Any:
        # YAML reads a bare `off` as false (and `on` as true): take them as written.
        return {False: "off", True: "spare"}.get(value, value) if isinstance(value, bool) else value

    @model_validator(mode="after")
    def _older_standby_name(self) -> SupervisionConfig:
        if self.standby_process is False:
            if "standby" in self.model_fields_set and self.standby != "off":
                raise ValueError(
                    f"supervision.standby_process: false contradicts standby: {self.standby}; "
                    "set only supervision.standby"
                )
            object.__setattr__(self, "standby", "off")
        return self


class LoggingConfig(Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
