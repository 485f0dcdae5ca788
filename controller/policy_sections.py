"""The sections that say which policy the daemon serves and what it builds it from
(`policy:`, with the sections its families own, and `robot:`): the inference process builds
the policy from these alone.

`policy.kind` names `checkpoint` or a family that builds its policy itself, and every other
section under `policy:` is a family's (policies.registry.FamilySettings: `policy.rtc`,
`policy.prompt`, `policy.reach`, ...), validated by the family's own model. A
family registered at run time brings its kind and its sections with it.

The sections of the daemon itself (control loop, server, security, inference, supervision,
logging) and the `Section` base are in controller.config_sections.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
    SerializeAsAny,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from controller.config_sections import Section
from policies.registry import FamilySettings, built_in_kinds, settings_sections

log = logging.getLogger(__name__)

# Old spellings already said to be old in this process (each is said once).
_said_old: set[str] = set()


class CameraConfig(Section):
    name: str = Field(min_length=1, max_length=64)
    height: int = Field(gt=0, le=4096)
    width: int = Field(gt=0, le=4096)


class RobotConfig(Section):
    """Robot defaults, used by policies that do not fix their own spec (the built-in `reach`)."""

    joints: tuple[str, ...] = Field(
        default=tuple(f"joint_{i}" for i in range(6)), min_length=1, max_length=256
    )
    cameras: tuple[CameraConfig, ...] = Field(
        default=(CameraConfig(name="front", height=96, width=128),), max_length=16
    )


class RemoteConfig(Section):
    """An inference server on another host (`tempo infer-server`) instead of a local process."""

    address: str = Field(
        min_length=7, max_length=256, description="The server's endpoint, tcp://HOST:PORT."
    )
    server_key: Path = Field(description="The server's public key file (its .key).")
    client_key: Path = Field(
        description="This daemon's secret key pair (NAME.key_secret); its public key must be "
        "in the server's security.authorized_keys."
    )
    timeout_s: float = Field(
        default=2.0,
        gt=0,
        le=60,
        description="A server silent this long is taken as gone: robots hold, the link is "
        "reopened.",
    )


class PolicyConfig(Section):
    """Which policy the daemon serves, and the sections its families own."""

    kind: str = Field(
        default="reach",
        description="checkpoint: load the directory at `path`; or a family that builds its "
        "policy from the config (reach: the built-in scripted policy, moving smoothly toward "
        "`policy.reach.target`).",
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
    remote: RemoteConfig | None = Field(
        default=None,
        description="Serve through an inference server on another host (torch-free here).",
    )
    # The families' sections by name, each its family's model; written and read as
    # `policy.<name>:` (see _family_sections and _flat), never as `sections:`.
    sections: Mapping[str, SerializeAsAny[BaseModel]] = Field(default_factory=dict)

    def section(self, name: str) -> Any:
        """The section `name` (`rtc`, `reach`, ...), as its family's model; at its defaults for
        a family registered after this config was made (a default config is made at import)."""
        found = self.sections.get(name)
        if found is not None:
            return found
        owned = settings_sections().get(name)
        if owned is None:
            raise KeyError(f"policy.{name} is no registered family's section")
        return owned.model()()

    def with_section(self, name: str, value: BaseModel) -> PolicyConfig:
        """This config with section `name` replaced by `value`."""
        return self.model_copy(update={"sections": {**self.sections, name: value}})

    def __hash__(self) -> int:  # frozen as every section; the sections' mapping by its items
        fields = (self.kind, self.path, self.device, self.joint_names, self.remote)
        return hash((fields, tuple(self.sections.items())))

    @model_validator(mode="before")
    @classmethod
    def _family_sections(cls, data: Any) -> Any:
        """Each family's section validated by its model (a default one where unset), old
        spellings moved to where they are now."""
        if not isinstance(data, dict):
            return data
        if "sections" in data:
            raise _section_error("sections", "unknown field (each section is policy.<name>)")
        data = dict(data)
        owned = settings_sections()
        for section in owned.values():
            _move_old_spellings(data, section)
        sections = {}
        for name, section in owned.items():
            sections[name] = _validated(name, section, data.pop(name, None))
        return {**data, "sections": sections}

    @model_serializer(mode="wrap")
    def _flat(self, handler: Any) -> dict[str, Any]:
        dumped = dict(handler(self))
        sections = dumped.pop("sections", {})
        return {**dumped, **sections}

    @model_validator(mode="before")
    @classmethod
    def _a_path_means_a_checkpoint(cls, data: Any) -> Any:
        """`policy.path` alone serves that checkpoint, never the scripted reach policy."""
        if isinstance(data, dict) and data.get("path") is not None and "kind" not in data:
            return {**data, "kind": "checkpoint"}
        return data

    @field_validator("kind")
    @classmethod
    def _a_known_kind(cls, kind: str) -> str:
        """`checkpoint` or a family that builds its policy itself (the registry's, so a family
        registered at run time is a kind too)."""
        kinds = built_in_kinds()
        if kind not in kinds:
            raise PydanticCustomError(
                "policy_kind",
                "'{kind}' is not a kind of policy; known: {known}",
                {"kind": kind, "known": ", ".join(repr(k) for k in kinds)},
            )
        return kind

    @model_validator(mode="after")
    def _path_for_checkpoint(self) -> PolicyConfig:
        if self.kind == "checkpoint" and self.path is None:
            raise ValueError("policy.kind 'checkpoint' needs policy.path set to a directory")
        if self.kind != "checkpoint" and self.path is not None:
            raise ValueError(
                f"policy.path is set but policy.kind is {self.kind!r} (a built-in policy, which "
                "reads no checkpoint): set policy.kind to 'checkpoint', or remove policy.path"
            )
        return self


def _say_old(old: str, new: str) -> None:
    if old not in _said_old:
        _said_old.add(old)
        log.warning("config: %s is the old spelling of %s (read as it; please rename)", old, new)


def _move_old_spellings(data: dict[str, Any], section: FamilySettings) -> None:
    """`policy.<old_section>` and the section's fields once directly under `policy:`, moved
    into `policy.<section>`; the old and the new spelling both set is refused."""
    name = section.section
    if section.old_section is not None and section.old_section in data:
        old = data.pop(section.old_section)
        if name in data:
            old_name = section.old_section
            raise _section_error(
                name, f"set policy.{name} or its old spelling policy.{old_name}, not both"
            )
        data[name] = old
        _say_old(f"policy.{section.old_section}", f"policy.{name}")
    for field in section.old_fields:
        if field not in data:
            continue
        moved = data.get(name) or {}
        if not isinstance(moved, dict) or field in moved:
            raise _section_error(
                f"{name}.{field}",
                f"set policy.{name}.{field} or its old spelling policy.{field}, not both",
            )
        data[name] = {**moved, field: data.pop(field)}
        _say_old(f"policy.{field}", f"policy.{name}.{field}")


def _validated(name: str, section: FamilySettings, raw: Any) -> BaseModel:
    """`raw` (a mapping, a model, or None for the defaults) as section `name`'s model; a bad
    field is one sentence naming it."""
    model = section.model()
    if isinstance(raw, model):
        return raw
    try:
        return model.model_validate({} if raw is None else raw)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in (name, *error["loc"]))
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown field (check the spelling; `tempo config show` lists every field)"
        raise _section_error(where, message) from None


def _section_error(where: str, message: str) -> PydanticCustomError:
    """An error in a family's section, `where` under `policy:` (controller.config's
    description of a bad config puts it after the section's own place)."""
    return PydanticCustomError(
        "family_section", "{where}: {message}", {"where": where, "message": message}
    )
