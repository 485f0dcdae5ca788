"""The daemon's configuration: the sections (controller.config_sections,
controller.policy_sections and the components' own) assembled into TempoConfig, loaded from
YAML and `--set`, and dumped back.

`tempo serve` with no file is a working daemon. A YAML file and `--set section.field=value`
overrides are layered on the defaults; anything invalid is refused at start with a sentence that
names the file, the field and what is allowed. Nothing is read from environment variables but
XDG_CACHE_HOME, for runner.cache_dir's default (as for the demo's checkpoint). The file is
read with limits (controller.bounded_file): a regular file of UTF-8 YAML, at most 1 MiB,
nested at most 64 levels, without anchors or aliases (controller.bounded_yaml).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, model_validator

from controller.action.guards_config import GuardsConfig
from controller.action.teleop import TeleopConfig
from controller.bounded_file import MAX_CONFIG_BYTES, read_text
from controller.bounded_yaml import load_yaml
from controller.config_sections import (
    ControlConfig,
    ExecutionConfig,
    LoggingConfig,
    Section,
    SecurityConfig,
    ServerConfig,
    SupervisionConfig,
)
from controller.errors import ConfigError
from controller.observe.metrics_http import MetricsConfig
from controller.observe.telemetry import TelemetryConfig
from controller.policy_sections import PolicyConfig, RobotConfig
from controller.record_config import RecordConfig
from controller.runner_config import RunnerConfig

log = logging.getLogger(__name__)

# Sections under a new name: the old one is still read, and a warning names the new one.
RENAMED_SECTIONS = {"inference": "execution"}
# The one policy of a config without `policies:` (what a hello that names none gets).
DEFAULT_POLICY_NAME = "default"
# The sections a named policy may set for itself; the top-level ones apply where it does not.
OWN_SECTIONS = ("runner", "execution", "supervision", "robot", "guards", "teleop")


class NamedPolicyConfig(Section):
    """One entry of `policies:`: a policy served by name, with its own inference process (so
    its own device and tiers); a section it leaves out is the top-level one."""

    name: str = Field(
        pattern=r"^[A-Za-z0-9_.-]{1,64}$",
        description="What a driver's hello names (`policy`); ASCII letters, digits, '_-.'.",
    )
    policy: PolicyConfig = PolicyConfig()
    runner: RunnerConfig | None = None
    execution: ExecutionConfig | None = None
    supervision: SupervisionConfig | None = None
    robot: RobotConfig | None = None
    guards: GuardsConfig | None = None
    teleop: TeleopConfig | None = None


class TempoConfig(Section):
    """Everything the daemon needs."""

    control: ControlConfig = ControlConfig()
    server: ServerConfig = ServerConfig()
    robot: RobotConfig = RobotConfig()
    policy: PolicyConfig = PolicyConfig()
    execution: ExecutionConfig = ExecutionConfig()
    runner: RunnerConfig = Field(default_factory=RunnerConfig)  # cache_dir reads the environment
    guards: GuardsConfig = GuardsConfig()
    teleop: TeleopConfig = TeleopConfig()
    security: SecurityConfig = SecurityConfig()
    telemetry: TelemetryConfig = TelemetryConfig()
    metrics: MetricsConfig = MetricsConfig()
    supervision: SupervisionConfig = SupervisionConfig()
    logging: LoggingConfig = LoggingConfig()
    record: RecordConfig = RecordConfig()
    # Several policies in one daemon, by name; the first is the default (a hello naming none).
    policies: tuple[NamedPolicyConfig, ...] = Field(default=(), max_length=16)

    @model_validator(mode="after")
    def _policies_named_once(self) -> TempoConfig:
        if self.policies and "policy" in self.model_fields_set:
            raise ValueError(
                "set either policy: (one policy) or policies: (a list of named policies), not both"
            )
        names = [entry.name for entry in self.policies]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"policies: each policy needs its own name; {twice} come twice")
        return self

    @model_validator(mode="after")
    def _rtc_plays_the_newest_chunk(self) -> TempoConfig:
        for name, view in policy_views(self):
            if view.policy.section("rtc").mode != "off" and view.execution.ensemble == "temporal":
                where = "" if name == DEFAULT_POLICY_NAME else f" (policy {name!r})"
                raise ValueError(
                    f"policy.rtc needs execution.ensemble: newest{where} (real-time chunking "
                    "plays the old chunk's first d actions, then the new chunk, without averaging)"
                )
        return self


def policy_views(config: TempoConfig) -> list[tuple[str, TempoConfig]]:
    """Each served policy's name and its config as a one-policy daemon's: the top level with
    the policy's own sections in place (what its inference process and its robots' pipelines
    are built from). A config without `policies:` is one policy named "default"."""
    if not config.policies:
        return [(DEFAULT_POLICY_NAME, config)]
    views = []
    for entry in config.policies:
        update: dict[str, Any] = {"policy": entry.policy, "policies": ()}
        for section in OWN_SECTIONS:
            value = getattr(entry, section)
            if value is not None:
                update[section] = value
        views.append((entry.name, config.model_copy(update=update)))
    return views


def _describe(error: ValidationError, source: str) -> str:
    lines = []
    for item in error.errors():
        loc = [str(part) for part in item["loc"]]
        message = item["msg"]
        if item["type"] == "family_section":  # a family's section says where under `policy:`
            loc.append(item["ctx"]["where"])
            message = item["ctx"]["message"]
        field = ".".join(loc) or "(top level)"
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
    value = load_yaml(raw, f"--set {text!r}", ConfigError) if raw.strip() else ""
    return key.strip(), value


def with_policy_path(overrides: Iterable[str], args: Any) -> list[str]:
    """The overrides a command's --policy.path DIR stands for (policy.kind=checkpoint,
    policy.path=DIR), before the user's own --set; `args` is the parsed command line."""
    path = getattr(args, "policy_path", None)
    if path is None:
        return list(overrides)
    return ["policy.kind=checkpoint", f"policy.path={path}", *overrides]


def _read_renamed_sections(tree: dict[str, Any], source: str) -> None:
    """A file's sections under an old name (RENAMED_SECTIONS) read under the new one, at the
    top level and in each entry of `policies:`; both names in one place are refused."""
    entries = tree.get("policies")
    places = [("", tree)]
    if isinstance(entries, list):
        places += [(f"policies[{i}].", e) for i, e in enumerate(entries) if isinstance(e, dict)]
    for where, sections in places:
        for old, new in RENAMED_SECTIONS.items():
            if old not in sections:
                continue
            if new in sections:
                raise ConfigError(
                    f"{source}: {where}{old}: is the old name of {where}{new}:; set only {new}:"
                )
            sections[new] = sections.pop(old)
            log.warning("%s: %s%s: is now called %s: (read as it; rename it)",
                        source, where, old, new)  # fmt: skip


def _renamed_key(dotted: str) -> str:
    """`--set inference.x=...` read as `--set execution.x=...` (RENAMED_SECTIONS), with a
    warning naming the new spelling."""
    head, dot, rest = dotted.partition(".")
    new = RENAMED_SECTIONS.get(head)
    if new is None:
        return dotted
    log.warning("--set %s: %s is now called %s (read as it; rename it)", dotted, head, new)
    return new + dot + rest


def load_config(path: Path | None = None, overrides: Iterable[str] = ()) -> TempoConfig:
    """Defaults, then the YAML file, then each override; validated once at the end."""
    tree: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        source = str(path)
        text = read_text(Path(path), MAX_CONFIG_BYTES, ConfigError, "config file")
        loaded = load_yaml(text, str(path), ConfigError)
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, Mapping):
            raise ConfigError(f"{path}: the top level must be a mapping of sections")
        # `control:` with nothing under it is an empty section, not an error.
        tree = {key: ({} if value is None else value) for key, value in loaded.items()}
    _read_renamed_sections(tree, source)
    override_list = list(overrides)
    for text in override_list:
        key, value = parse_override(text)
        _set_dotted(tree, _renamed_key(key), value, "--set")
    if override_list:
        source = f"{source} + --set" if path is not None else "--set"
    try:
        return TempoConfig.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source)) from None


def dump_config(config: TempoConfig) -> str:
    """The effective config as YAML that `load_config` reads back unchanged. Execution fields
    the config does not set are left out, so a file written from it still lets the checkpoint
    decide them (see controller.daemon.execution)."""
    tree = config.model_dump(mode="json")
    tree["execution"] = config.execution.model_dump(mode="json", exclude_unset=True)
    for entry, dumped in zip(config.policies, tree["policies"], strict=True):
        if entry.execution is not None:
            dumped["execution"] = entry.execution.model_dump(mode="json", exclude_unset=True)
    if config.policies:
        del tree["policy"]  # the policies' own sections say it; both would be refused
    return yaml.safe_dump(tree, sort_keys=False)
