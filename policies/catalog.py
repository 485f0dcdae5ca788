"""Every policy Tempo can serve, by name: the one place a TensorPolicy is built from settings.

    build_tensor_policy(config.policy, config.robot)   # the `policy:` section: reach, checkpoint
    describe_source(config.policy)                     # "checkpoint DIR", "built-in reach"
    build_benchmark_policy("act-aloha")                # `tempo bench`'s own: tiny, act-aloha

It reads the config sections it is given and nothing else (the robot section only for `reach`,
which takes its joints and cameras from it). The result is FP32, in eval mode; a checkpoint is
loaded onto `device`, everything else is built on the CPU (the runner moves it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import ValidationError

from controller.errors import ConfigError
from policies.base import CameraSpec
from policies.tensor_policy import TensorPolicy, with_state_bounds

if TYPE_CHECKING:  # the config sections only type the arguments; policies never import them
    import torch

    from controller.config_sections import PolicyConfig, RobotConfig

BenchmarkPolicy = Literal["tiny", "act-demo", "act-aloha"]


def build_tensor_policy(
    policy: PolicyConfig,
    robot: RobotConfig | None = None,
    *,
    device: str | torch.device = "cpu",
) -> TensorPolicy:
    """The policy the `policy:` section describes. `robot` is needed for `reach` (its joints and
    cameras); a bad reach target or a bad checkpoint is refused with one sentence."""
    if policy.kind == "reach":
        from policies.reach import build_reach_policy

        if policy.rtc.mode != "off":
            raise ConfigError("policy.rtc needs a flow policy checkpoint; reach has no flow")
        if robot is None:
            raise ConfigError("policy.kind 'reach' needs the robot section (joints, cameras)")
        cameras = [CameraSpec(name=c.name, height=c.height, width=c.width) for c in robot.cameras]
        try:
            return build_reach_policy(
                robot.joints,
                cameras,
                chunk_size=policy.chunk_size,
                target=policy.target,
                time_constant_steps=policy.time_constant_steps,
            )
        except ValueError as exc:
            raise ConfigError(f"policy.target: {exc}") from None
    from policies.checkpoints.load import load_checkpoint

    if policy.path is None:  # the config validator makes this unreachable; say why anyway
        raise ConfigError("policy.kind 'checkpoint' needs policy.path")
    # The daemon refuses states the checkpoint's normalization cannot represent (PolicySpec).
    loaded = with_state_bounds(
        load_checkpoint(policy.path, device=device, joint_names=policy.joint_names)
    )
    planner = policy.planner
    changed = planner.mode != "checkpoint" or planner.compute != "checkpoint"
    changed = changed or planner.prior_steps is not None
    if changed or planner.fallback_budget_ms is not None:
        from policies.tdmpc2.serving import with_compute, with_mode, with_prior_steps

        try:
            if planner.compute != "checkpoint":
                loaded = with_compute(loaded, planner.compute)
            if planner.prior_steps is not None:
                loaded = with_prior_steps(loaded, planner.prior_steps)
            if planner.mode != "checkpoint":
                loaded = with_mode(loaded, planner.mode)
            elif planner.fallback_budget_ms is not None:
                with_mode(loaded, "prior")  # refuse a fallback for a policy without a prior
        except ValidationError as exc:  # the agent's config refuses a setting (prior_steps)
            raise ConfigError(f"policy.planner: {exc.errors()[0]['msg']}") from None
        except ValueError:
            raise ConfigError(
                f"policy.planner applies to TD-MPC2 checkpoints; {policy.path} holds another "
                "policy (leave policy.planner at its defaults)"
            ) from None
    if policy.rtc.mode == "off":
        return loaded
    from policies.flow.rtc import serve_with_rtc

    try:
        return serve_with_rtc(loaded, policy.rtc)
    except ValueError as exc:
        raise ConfigError(f"policy.rtc: {exc}") from None


def describe_source(policy: PolicyConfig) -> str:
    """Where the configured policy comes from, in a few words."""
    if policy.kind == "checkpoint":
        return f"checkpoint {policy.path}"
    return f"built-in {policy.kind}"


def build_benchmark_policy(name: BenchmarkPolicy) -> tuple[TensorPolicy, str]:
    """(policy, description) of a benchmark policy with random weights, on the CPU.

    tiny: the tiny conv+MLP test policy (seconds to compile). act-demo: the small ACT `tempo
    demo` serves (random weights). act-aloha: ACT at LeRobot's ALOHA
    defaults (3 cameras 480x640, 14 joints, chunk 100)."""
    from policies.tiny import build_tiny_policy

    if name == "tiny":
        return build_tiny_policy(), "tiny conv+MLP test policy"
    if name == "act-demo":
        from policies.demo import make_demo_policy

        return make_demo_policy(), "the demo's small ACT (one 96x128 camera, 6 joints)"
    if name != "act-aloha":
        raise ValueError(f"unknown benchmark policy {name!r}; known: tiny, act-demo, act-aloha")
    from policies.demo import make_aloha_policy

    return make_aloha_policy(), "ACT, LeRobot ALOHA defaults, random weights"
