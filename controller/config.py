"""The daemon's configuration: pydantic models with a working default for every field.

`tempo serve` with no file is a working daemon. A YAML file and `--set section.field=value`
overrides are layered on the defaults; anything invalid is refused at start with a sentence that
names the file, the field and what is allowed. Nothing is read from environment variables.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from controller.action.guards_config import GuardsConfig
from controller.action.teleop import TeleopConfig
from controller.errors import ConfigError
from controller.inference.runner_config import RunnerConfig
from controller.observe.metrics_http import MetricsConfig
from controller.observe.telemetry import TelemetryConfig
from policies.base import Execution, PolicySpec
from policies.flow.config import RTCConfig


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ControlConfig(_Section):
    """The fixed-rate loop that sends one action per robot per tick."""

    rate_hz: float = Field(
        default=50.0,
        gt=0,
        le=2000,
        description="Control rate. For chunking policies it must equal the rate of the training "
        "data: one chunk element is one control step.",
    )
    spin_us: int = Field(
        default=1000,
        ge=0,
        le=20_000,
        description="Sleep until this long before each deadline, then spin (OS sleep is late by "
        "~0.2 ms; spinning is accurate to ~1 us).",
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


class ServerConfig(_Section):
    """Where the daemon listens."""

    bind: str = Field(
        default="tcp://127.0.0.1:5555",
        description="ZeroMQ endpoint: tcp://HOST:PORT or ipc:///path. Localhost by default.",
    )
    max_robots: int = Field(default=8, ge=1, le=256, description="Sessions served at once.")
    status_bind: str = Field(
        default="tcp://127.0.0.1:5556",
        description="Local control socket answering `tempo status` (tcp://127.0.0.1:PORT or ipc://).",
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

    @field_validator("bind", "status_bind")
    @classmethod
    def _known_transport(cls, value: str) -> str:
        if not (value.startswith("tcp://") or value.startswith("ipc://")):
            raise ValueError("must start with tcp:// or ipc://, e.g. tcp://127.0.0.1:5555")
        return value


class CameraConfig(_Section):
    name: str = Field(min_length=1, max_length=64)
    height: int = Field(gt=0, le=4096)
    width: int = Field(gt=0, le=4096)


class RobotConfig(_Section):
    """Robot defaults, used by policies that do not fix their own spec (the built-in `reach`)."""

    joints: tuple[str, ...] = Field(
        default=tuple(f"joint_{i}" for i in range(6)), min_length=1, max_length=256
    )
    cameras: tuple[CameraConfig, ...] = Field(
        default=(CameraConfig(name="front", height=96, width=128),), max_length=16
    )


class PlannerConfig(_Section):
    """How a TD-MPC2 checkpoint is served (the `policy.planner:` section)."""

    mode: Literal["checkpoint", "plan", "prior"] = Field(
        default="checkpoint",
        description="plan: MPPI planning; prior: fast mode (the policy prior's mean, no "
        "planning); checkpoint: what the checkpoint's config says.",
    )
    compute: Literal["checkpoint", "fp32", "tf32", "bf16"] = Field(
        default="checkpoint",
        description="fp32: every tier plans in FP32 (elementwise start-up parity). tf32 or bf16: "
        "the graph, compiled and eager_half tiers plan with TF32 matmuls or pre-cast BF16 "
        "weights (faster on a GPU), eager FP32 stays FP32, and start-up parity is the value "
        "regret of their plans under the FP32 model. checkpoint: what the checkpoint says.",
    )
    prior_steps: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="Fast mode (and the fallback's prior): how many of the chunk's actions the "
        "prior rolls out through the dynamics, the last one held after; 1 is the official "
        "fast mode (encode and one prior mean, the least GPU work). null: the checkpoint's "
        "(1 unless it says otherwise).",
    )
    fallback_budget_ms: float | None = Field(
        default=None,
        gt=0,
        le=10_000,
        description="When planning overruns this budget fallback_k times in the last "
        "fallback_n plans, serve the policy prior for the next fallback_n steps (logged and "
        "counted in status). null: always plan.",
    )
    fallback_k: int = Field(default=3, ge=1, le=1000, description="Overruns that switch ...")
    fallback_n: int = Field(
        default=20, ge=1, le=1000, description="... within the last n plans; prior steps after."
    )

    @model_validator(mode="after")
    def _k_within_n(self) -> PlannerConfig:
        if self.fallback_k > self.fallback_n:
            raise ValueError(
                f"fallback_k ({self.fallback_k}) must be at most fallback_n ({self.fallback_n})"
            )
        return self


class PolicyConfig(_Section):
    """Which policy the daemon serves."""

    kind: Literal["reach", "checkpoint"] = Field(
        default="reach",
        description="reach: the built-in scripted policy (moves smoothly toward `target`); "
        "checkpoint: load the directory at `path`.",
    )
    path: Path | None = Field(default=None, description="Checkpoint directory (kind: checkpoint).")
    device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto",
        description="auto: cuda if present, else cpu (the choice is logged). cuda without a GPU "
        "is refused.",
    )
    joint_names: tuple[str, ...] | None = Field(
        default=None,
        min_length=1,
        description="checkpoint: names of the action entries, in order, for a LeRobot "
        "directory (whose config has none; else taken from the dataset's meta/info.json next to "
        "it, else joint_0..). A Tempo checkpoint records its own; these must then agree.",
    )
    chunk_size: int = Field(default=20, ge=1, le=1000, description="reach: steps per chunk.")
    target: tuple[float, ...] | None = Field(
        default=None, description="reach: target pose, one value per joint (default: 0.5 rad each)."
    )
    time_constant_steps: float = Field(
        default=25.0, gt=0, description="reach: steps to cover ~63% of the way to the target."
    )
    rtc: RTCConfig = Field(
        default=RTCConfig(),
        description="Real-time chunking for a flow policy (mode off|exact|stop_grad|inpaint, "
        "beta, schedule); the execution horizon is inference.query_period, and the robot plays "
        "the old chunk until the new one lands (needs inference.ensemble: newest).",
    )
    planner: PlannerConfig = Field(
        default=PlannerConfig(), description="TD-MPC2 checkpoints: planning, fast mode, fallback."
    )

    @model_validator(mode="after")
    def _path_for_checkpoint(self) -> PolicyConfig:
        if self.kind == "checkpoint" and self.path is None:
            raise ValueError("policy.kind 'checkpoint' needs policy.path set to a directory")
        return self


class InferenceConfig(_Section):
    """How chunks become one action per tick. A field left out of the config follows the
    policy's checkpoint (LeRobot's n_action_steps and temporal_ensemble_coeff, or the execution
    a Tempo checkpoint records), and the default below when the checkpoint says nothing; a field
    set in the file or with --set always wins (see `resolve_execution`)."""

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


# Where each inference setting in effect came from (resolve_execution).
FROM_CONFIG = "config"
FROM_DEFAULT = "default"


def resolve_execution(inference: InferenceConfig, spec: PolicySpec) -> tuple[InferenceConfig, str]:
    """The inference settings in effect for a policy: each field the config sets explicitly,
    else what the policy's checkpoint records (`spec.execution`), else the field's default.
    Returns them with one line saying what is in effect and where each part came from."""
    hint = spec.execution
    explicit = inference.model_fields_set
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for name in ("query_period", "ensemble", "temporal_k"):
        hinted = getattr(hint, name) if hint is not None else None
        if name in explicit:
            values[name], origins[name] = getattr(inference, name), FROM_CONFIG
        elif hinted is not None:
            values[name], origins[name] = hinted, "checkpoint"
        else:
            values[name], origins[name] = getattr(inference, name), FROM_DEFAULT
    resolved = InferenceConfig.model_validate(values)
    if resolved.query_period > spec.chunk_size:
        raise ConfigError(
            f"inference.query_period {resolved.query_period} ({origins['query_period']}) exceeds "
            f"the policy's chunk_size {spec.chunk_size}: steps between chunks would have no "
            "action; set inference.query_period to at most the chunk size"
        )
    return resolved, describe_execution(resolved, origins, hint)


def describe_execution(
    inference: InferenceConfig, origins: Mapping[str, str], hint: Execution | None
) -> str:
    """One line: 'query every 100 steps, play the newest chunk (query_period from the
    checkpoint (LeRobot config.json: ...), ensemble from the checkpoint)'."""
    if inference.ensemble == "temporal":
        how = f"temporal ensembling k={inference.temporal_k:g}"
    else:
        how = "play the newest chunk"
    parts = [f"{name} from {origins[name]}" for name in ("query_period", "ensemble")]
    if inference.ensemble == "temporal":
        parts.append(f"temporal_k from {origins['temporal_k']}")
    where = ", ".join(parts)
    if hint is not None and hint.source and "checkpoint" in origins.values():
        where += f"; checkpoint: {hint.source}"
    return f"query every {inference.query_period} step(s), {how} ({where})"


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


class SupervisionConfig(_Section):
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
    standby_process: bool = Field(
        default=True,
        description="Keep a spare inference process waiting with Python and torch imported, so "
        "a restart skips those seconds; it uses host memory (a few hundred MB), no GPU memory.",
    )


class LoggingConfig(_Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"


class TempoConfig(_Section):
    """Everything the daemon needs."""

    control: ControlConfig = ControlConfig()
    server: ServerConfig = ServerConfig()
    robot: RobotConfig = RobotConfig()
    policy: PolicyConfig = PolicyConfig()
    inference: InferenceConfig = InferenceConfig()
    runner: RunnerConfig = RunnerConfig()
    guards: GuardsConfig = GuardsConfig()
    teleop: TeleopConfig = TeleopConfig()
    security: SecurityConfig = SecurityConfig()
    telemetry: TelemetryConfig = TelemetryConfig()
    metrics: MetricsConfig = MetricsConfig()
    supervision: SupervisionConfig = SupervisionConfig()
    logging: LoggingConfig = LoggingConfig()

    @model_validator(mode="after")
    def _rtc_plays_the_newest_chunk(self) -> TempoConfig:
        if self.policy.rtc.mode != "off" and self.inference.ensemble == "temporal":
            raise ValueError(
                "policy.rtc needs inference.ensemble: newest (real-time chunking plays the old "
                "chunk's first d actions, then the new chunk, without averaging)"
            )
        return self


def _describe(error: ValidationError, source: str) -> str:
    lines = []
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "unknown field (check the spelling; `tempo config show` lists every field)"
        lines.append(f"{source}: {field}: {message}")
    return "invalid configuration:\n  " + "\n  ".join(lines)


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any, source: str) -> None:
    parts = dotted.split(".")
    node = tree
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{source}: {dotted}: '{part}' is a value, not a section")
        node = child
    node[parts[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """`section.field=value`, the value read as YAML (so 200, true, [1, 2] and names all work)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {text!r}: expected section.field=value, e.g. control.rate_hz=200")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {text!r}: the value is not valid YAML ({exc})") from None
    return key.strip(), value


def with_policy_path(overrides: Iterable[str], args: Any) -> list[str]:
    """The overrides a command's --policy.path DIR stands for (policy.kind=checkpoint,
    policy.path=DIR), before the user's own --set; `args` is the parsed command line."""
    path = getattr(args, "policy_path", None)
    if path is None:
        return list(overrides)
    return ["policy.kind=checkpoint", f"policy.path={path}", *overrides]


def load_config(path: Path | None = None, overrides: Iterable[str] = ()) -> TempoConfig:
    """Defaults, then the YAML file, then each override; validated once at the end."""
    tree: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        source = str(path)
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, Mapping):
            raise ConfigError(f"{path}: the top level must be a mapping of sections")
        # `control:` with nothing under it is an empty section, not an error.
        tree = {key: ({} if value is None else value) for key, value in loaded.items()}
    override_list = list(overrides)
    for text in override_list:
        key, value = parse_override(text)
        _set_dotted(tree, key, value, "--set")
    if override_list:
        source = f"{source} + --set" if path is not None else "--set"
    try:
        return TempoConfig.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source)) from None


def dump_config(config: TempoConfig) -> str:
    """The effective config as YAML that `load_config` reads back unchanged. Inference fields
    the config does not set are left out, so a file written from it still lets the checkpoint
    decide them (see `resolve_execution`)."""
    tree = config.model_dump(mode="json")
    tree["inference"] = config.inference.model_dump(mode="json", exclude_unset=True)
    return yaml.safe_dump(tree, sort_keys=False)
