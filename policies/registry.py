"""Every policy family Tempo serves, by name: the one list the checkpoint format, the catalog,
the CLI's import commands, `tempo demo` and `tempo bench` look families up in.

A family is one folder under policies/ (act, flow, tdmpc2, reach, tiny) whose `family.py` holds
`FAMILY = PolicyFamily(...)`. It is served once that module is named in BUILT_IN below (one
line), or, without editing any file, once `register(FAMILY)` has run (a test, a plugin).

    get_family("flow").checkpoint()    # how flow checkpoints are parsed, built, described
    families()                         # built-in ones first, then those registered at run time

This module and every family.py import only the standard library (and controller.errors): the
`tempo` parser lists the families' import commands and demos on a driver's install, without
pydantic or torch. What needs them is reached through the functions a family declares, which
import it when called.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from controller.errors import ConfigError

if TYPE_CHECKING:  # types only: importing them would load pydantic and torch
    from pydantic import BaseModel
    from torch import Tensor, nn

    from policies.base import PolicySpec
    from policies.settings import PolicySettings, RobotSettings
    from policies.tensor_policy import TensorPolicy

# The families that ship with Tempo, one module each (a module defining FAMILY).
BUILT_IN = (
    "policies.act.family",
    "policies.flow.family",
    "policies.tdmpc2.family",
    "policies.reach.family",
    "policies.tiny.family",
    "policies.pi0.family",
    "policies.pi05.family",
    "policies.diffusion.family",
    "policies.cube_expert.family",
    "policies.smolvla.family",
)
# Checkpoint variants (a module defining VARIANT each): sections some checkpoints carry.
VARIANTS = ("policies.quant.checkpoint", "policies.pi0.quantized", "policies.pi0.quantized_pi05")


class ConvertedPolicy(Protocol):
    """What a reader of another format returns: the policy, and what the conversion noticed."""

    @property
    def policy(self) -> TensorPolicy: ...
    @property
    def layout(self) -> str: ...
    @property
    def notes(self) -> list[str]: ...


@dataclass(frozen=True)
class CheckpointFamily:
    """How a family's policies are stored in Tempo's checkpoint format and read back (see
    policies.checkpoints.tempo_format), and which other formats it reads."""

    config_model: type[BaseModel]  # parses config.json's "model" section
    module_type: type[nn.Module]  # built as module_type(config); save_checkpoint writes these
    spec_problems: Callable[[PolicySpec, Any], list[str]]  # where spec and model config disagree
    describe: Callable[[PolicySpec, Any], list[str]]  # `tempo checkpoint inspect`'s lines
    to_policy: Callable[[nn.Module, PolicySpec], TensorPolicy] | None = None  # None: plain
    upgrade_spec: Callable[[PolicySpec, Any, str], PolicySpec] | None = None  # older files
    lerobot_type: str | None = None  # LeRobot config.json's "type" that read_lerobot reads
    read_lerobot: Callable[[Path, Sequence[str] | None], ConvertedPolicy] | None = None
    # Reads an openpi PyTorch checkpoint (policies.checkpoints.files.detect_format: "openpi");
    # the first family declaring one reads them all.
    read_openpi: Callable[[Path, Sequence[str] | None], ConvertedPolicy] | None = None
    # `tempo checkpoint inspect` of a LeRobot or openpi directory, from its files alone (no
    # model built): for families whose real size takes gigabytes to read.
    describe_directory: Callable[[Path], list[str]] | None = None
    # Which modules of module_type are this family's, where families share one (pi0's and
    # pi0.5's Pi0Step); None: all of them.
    holds: Callable[[nn.Module], bool] | None = None


@dataclass(frozen=True, eq=False)
class CheckpointVariant:
    """Checkpoints of family `family` that carry one more config.json section, `section`
    (parsed by `section_model`), and are read by `read` instead of the family's own reader:
    quantized ACT (policies.quant.checkpoint). Its module needs pydantic and torch: only the
    checkpoint format loads it."""

    family: str
    section: str
    section_model: type[BaseModel]
    read: Callable[[Path, dict[str, Any]], TensorPolicy]
    describe: Callable[[Any], list[str]]  # `tempo checkpoint inspect`'s lines about the section


@dataclass(frozen=True)
class ImportCommand:
    """`tempo checkpoint NAME ...`: converts another format into a Tempo checkpoint."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class DemoPolicy:
    """What `tempo demo --policy NAME` serves: `settings(cache)` makes what it needs under the
    cache directory (first run only) and returns the config settings, "key=value" each."""

    help: str
    settings: Callable[[Path], list[str]]


@dataclass(frozen=True)
class BenchmarkPolicy:
    """A policy with random weights that `tempo bench` times, and its description."""

    description: str
    make: Callable[[], TensorPolicy]


@dataclass(frozen=True)
class FamilySettings:
    """A section of `policy:` that a family owns, `policy.<section>:`, parsed by `model()` (a
    pydantic model, frozen, every field with a default; its module imports no torch: the
    control process validates the config). Families serving one kind of setting share the
    section (flow, pi0 and pi0.5 share `rtc`) and must name the same model.

    `old_section`: the section's earlier name (`policy.planner` for `policy.tdmpc2`);
    `old_fields`: fields that sat directly under `policy:` before (`policy.target` is now
    `policy.reach.target`). Both are still read, and said to be old once per process."""

    section: str
    model: Callable[[], type[BaseModel]]
    old_section: str | None = None
    old_fields: tuple[str, ...] = ()


@dataclass(frozen=True)
class FallbackPolicy:
    """What a family serves instead of its policy when planning overruns `budget_s` in `k` of
    the last `n` steps (TD-MPC2's policy prior): the inference process starts a second runner
    for `policy` (controller.inference.prior_fallback)."""

    policy: TensorPolicy
    budget_s: float
    k: int
    n: int


@dataclass(frozen=True)
class ProfilePhases:
    """How `tempo profile` times a family's policy phase by phase (controller.tools.phase_timing
    runs the rounds, on the eager module in the serving precision, over the runner's inputs).
    `applies(module)`: whether a served module is one this family times by phase (instead of
    per submodule); `measure(module, inputs, time)`: one round, each phase's seconds by its
    label, the first the whole (the others are shown as its shares); `time(work)` gives the
    seconds of one call (CUDA events on a GPU, wall clock on a CPU)."""

    applies: Callable[[nn.Module], bool]
    measure: Callable[
        [nn.Module, Sequence[Tensor], Callable[[Callable[[], object]], float]], Mapping[str, float]
    ]


@dataclass(frozen=True, eq=False)  # compared and hashed by identity (a family is one object)
class PolicyFamily:
    """One kind of policy. `name` is its checkpoints' policy_type (and `policy.kind` for a
    built-in one); every other part is optional."""

    name: str
    title: str  # how messages name it: "ACT", "TD-MPC2"
    summary: str  # one line: what it is
    checkpoint: Callable[[], CheckpointFamily] | None = None
    # A built-in policy made from the `policy:` and `robot:` sections (policy.kind: NAME).
    build: Callable[[PolicySettings, RobotSettings | None], TensorPolicy] | None = None
    # Applied to every policy loaded from a checkpoint: serves it with the `policy:` settings
    # this family owns (TD-MPC2's planner, flow's rtc), refusing them for another family's.
    serve_settings: Callable[[TensorPolicy, PolicySettings], TensorPolicy] | None = None
    # The `policy.<section>:` sections this family reads (serve_settings, build, fallback).
    settings: tuple[FamilySettings, ...] = ()
    # The policy served when the loaded one overruns its deadline, if its settings ask for one.
    fallback: Callable[[TensorPolicy, PolicySettings], FallbackPolicy | None] | None = None
    import_commands: tuple[ImportCommand, ...] = ()
    # How `tempo profile` times its policies phase by phase (imported when called).
    profile_phases: Callable[[], ProfilePhases] | None = None
    demo: DemoPolicy | None = None
    benchmarks: Mapping[str, BenchmarkPolicy] = field(default_factory=dict)


_built_in: list[PolicyFamily] = []
_registered: list[PolicyFamily] = []
_variants: list[CheckpointVariant] = []


def families() -> tuple[PolicyFamily, ...]:
    """Every family: the built-in ones in BUILT_IN's order, then those registered at run time."""
    if not _built_in:
        loaded = [_load(module) for module in BUILT_IN]  # all or none: no family left out
        _built_in.extend(loaded)
    return (*_built_in, *_registered)


def _load(module_name: str) -> PolicyFamily:
    family = getattr(importlib.import_module(module_name), "FAMILY", None)
    if not isinstance(family, PolicyFamily):
        raise TypeError(f"{module_name} defines no FAMILY = PolicyFamily(...)")
    return family


def register(family: PolicyFamily) -> PolicyFamily:
    """Add a family at run time (a test, a plugin); returns it. A name already taken by another
    family is refused."""
    known = find_family(family.name)
    if known is family:
        return family
    if known is not None:
        raise ConfigError(f"a policy family named {family.name!r} is already registered")
    _registered.append(family)
    return family


def unregister(name: str) -> None:
    """Remove a family added with `register` (built-in ones stay)."""
    _registered[:] = [f for f in _registered if f.name != name]


def find_family(name: str) -> PolicyFamily | None:
    """The family called `name`, or None."""
    return next((f for f in families() if f.name == name), None)


def get_family(name: str) -> PolicyFamily:
    """The family called `name`; an unknown name is refused with the known ones listed."""
    family = find_family(name)
    if family is None:
        raise ConfigError(
            f"unknown policy family {name!r}; known: {', '.join(f.name for f in families())}"
        )
    return family


def built_in_kinds() -> tuple[str, ...]:
    """What `policy.kind` may name: `checkpoint`, then every family that builds a policy from
    the config itself (reach)."""
    return ("checkpoint", *(f.name for f in families() if f.build is not None))


def settings_sections() -> dict[str, FamilySettings]:
    """Every family's `policy:` sections by name; two families naming one section with
    different models is refused (a family's mistake, found when the config is first read)."""
    sections: dict[str, FamilySettings] = {}
    for family in families():
        for owned in family.settings:
            known = sections.setdefault(owned.section, owned)
            if known is not owned and known.model() is not owned.model():
                raise TypeError(
                    f"policy.{owned.section} is declared by two families with different models"
                )
    return sections


def variants(family: str) -> tuple[CheckpointVariant, ...]:
    """The checkpoint variants of the family called `family`."""
    if not _variants:
        _variants.extend(_load_variant(module) for module in VARIANTS)
    return tuple(v for v in _variants if v.family == family)


def _load_variant(module_name: str) -> CheckpointVariant:
    variant = getattr(importlib.import_module(module_name), "VARIANT", None)
    if not isinstance(variant, CheckpointVariant):
        raise TypeError(f"{module_name} defines no VARIANT = CheckpointVariant(...)")
    return variant


def checkpoint_families() -> tuple[tuple[PolicyFamily, CheckpointFamily], ...]:
    """(family, its checkpoint part) for every family stored in Tempo's checkpoint format."""
    return tuple((f, f.checkpoint()) for f in families() if f.checkpoint is not None)


def checkpoint_families_from(first: object) -> Iterator[tuple[PolicyFamily, CheckpointFamily]]:
    """`checkpoint_families` one at a time, the family named `first` (if any) first: a search
    that stops at its match imports no other family's checkpoint part (TD-MPC2's imports
    torch's compiler on a GPU, seconds of a start)."""
    ordered = sorted(families(), key=lambda f: f.name != first)
    yield from ((f, f.checkpoint()) for f in ordered if f.checkpoint is not None)


def and_list(names: Sequence[str]) -> str:
    """'ACT, flow and TD-MPC2': names for a sentence."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
