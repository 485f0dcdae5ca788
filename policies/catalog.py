"""Every policy Tempo can serve, by name: the one place a TensorPolicy is built from settings.

    build_tensor_policy(config.policy, config.robot)   # the `policy:` section: reach, checkpoint
    describe_source(config.policy)                     # "checkpoint DIR", "built-in reach"
    build_benchmark_policy("act-aloha")                # `tempo bench`'s own: tiny, act-aloha

It reads the config sections it is given and nothing else (the robot section only for a built-in
policy such as `reach`, which takes its joints and cameras from it), typed by the protocols of
policies.settings, and finds each family's part in policies.registry. The result is FP32, in
eval mode; a checkpoint is loaded onto `device`, everything else is built on the CPU (the runner
moves it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from controller.errors import ConfigError
from policies.registry import FallbackPolicy, ProfilePhases, families, get_family
from policies.tensor_policy import TensorPolicy, with_state_bounds

if TYPE_CHECKING:
    import torch
    from torch import nn

    from policies.settings import PolicySettings, RobotSettings

BenchmarkPolicy = Literal["tiny", "act-demo", "act-aloha"]


def build_tensor_policy(
    policy: PolicySettings,
    robot: RobotSettings | None = None,
    *,
    device: str | torch.device = "cpu",
) -> TensorPolicy:
    """The policy the `policy:` section describes. `robot` is needed for `reach` (its joints and
    cameras); a bad reach target or a bad checkpoint is refused with one sentence."""
    if policy.kind != "checkpoint":
        family = get_family(policy.kind)
        if family.build is None:
            raise ConfigError(
                f"policy.kind {policy.kind!r} is not a built-in policy; its policies come from "
                "checkpoints (policy.kind: checkpoint)"
            )
        return family.build(policy, robot)
    from policies.checkpoints.load import load_checkpoint

    if policy.path is None:  # the config validator makes this unreachable; say why anyway
        raise ConfigError("policy.kind 'checkpoint' needs policy.path")
    # The daemon refuses states the checkpoint's normalization cannot represent (PolicySpec).
    loaded = with_state_bounds(
        load_checkpoint(policy.path, device=device, joint_names=policy.joint_names)
    )
    # Each family serves it with the settings it owns, or refuses them for another's policy.
    for family in families():
        if family.serve_settings is not None:
            loaded = family.serve_settings(loaded, policy)
    return loaded


def fallback_policy(served: TensorPolicy, policy: PolicySettings) -> FallbackPolicy | None:
    """What a family serves instead of `served` when it overruns its deadline, as the `policy:`
    settings ask (TD-MPC2: its policy prior, with policy.tdmpc2.fallback_budget_ms set); None
    when no family's settings ask for one."""
    for family in families():
        if family.fallback is not None:
            fallback = family.fallback(served, policy)
            if fallback is not None:
                return fallback
    return None


def profile_phases(module: nn.Module) -> ProfilePhases | None:
    """How `tempo profile` times `module` phase by phase, if its family says (None: per
    submodule)."""
    for family in families():
        if family.profile_phases is not None:
            phases = family.profile_phases()
            if phases.applies(module):
                return phases
    return None


def describe_source(policy: PolicySettings) -> str:
    """Where the configured policy comes from, in a few words."""
    if policy.kind == "checkpoint":
        return f"checkpoint {policy.path}"
    return f"built-in {policy.kind}"


def build_benchmark_policy(name: BenchmarkPolicy) -> tuple[TensorPolicy, str]:
    """(policy, description) of a benchmark policy with random weights, on the CPU, from the
    family that declares it: tiny (the tiny conv+MLP test policy, seconds to compile), act-demo
    (the small ACT `tempo demo` serves), act-aloha (ACT at LeRobot's ALOHA defaults: 3 cameras
    480x640, 14 joints, chunk 100)."""
    known = {key: bench for f in families() for key, bench in f.benchmarks.items()}
    if name not in known:
        raise ValueError(f"unknown benchmark policy {name!r}; known: {', '.join(known)}")
    return known[name].make(), known[name].description
