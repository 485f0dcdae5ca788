"""The one place a Runner is built and started: the daemon, `tempo profile`, `tempo bench` and
scripts/profile_step.py all come through here, so they serve a policy the same way.

    policy = build_policy(config.policy, config.robot, config.runner)   # ready to serve
    device = resolve_device(config.policy.device)          # auto -> cuda or cpu; cuda checked
    runner = start_runner(tensor_policy, config.runner, device, progress=print)
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from controller.config_sections import PolicyConfig, RobotConfig
from controller.errors import ConfigError
from controller.inference.prior_fallback import PriorFallback
from controller.inference.progress import Progress
from controller.inference.runner import Runner
from controller.runner_config import RunnerConfig
from policies.catalog import build_tensor_policy
from policies.tensor_policy import TensorPolicy

log = logging.getLogger(__name__)


def resolve_device(requested: str, setting: str = "policy.device") -> str:
    """`auto` picks CUDA when present (logged); asking for CUDA without one is refused with a
    ConfigError that names `setting`, the option the user set (`--device` for tempo bench)."""
    import torch

    available = torch.cuda.is_available()
    if requested == "cuda" and not available:
        raise ConfigError(
            f"{setting} is 'cuda' but PyTorch sees no CUDA GPU; install a CUDA build of "
            f"PyTorch, check the driver, or set {setting}=cpu"
        )
    device = "cuda" if requested == "auto" and available else requested
    if device == "auto":
        device = "cpu"
    log.info("policy device: %s (%s=%s)", device, setting, requested)
    return device


def start_runner(
    policy: TensorPolicy,
    config: RunnerConfig,
    device: str,
    progress: Progress | None = None,
) -> Runner:
    """A Runner serving `policy` on `device` (from `resolve_device`), started: every tier built,
    warmed up and checked against the FP32 reference (see controller.inference.runner). Its
    progress messages are logged, and passed to `progress` too when given."""
    runner = Runner(policy, config, device=device)
    runner.start(progress=progress)
    return runner


def build_policy(
    policy: PolicyConfig,
    robot: RobotConfig,
    runner: RunnerConfig,
    progress: Callable[[str], None] | None = None,
) -> Runner | PriorFallback:
    """Load the policy the `policy:` section describes (`robot:` for a built-in one) and make it
    ready to serve as `runner:` says: every tier built, warmed up and checked
    against the FP32 reference (see controller.inference.runner). A TD-MPC2 planner with a
    fallback budget also gets its policy prior ready (controller.inference.prior_fallback).
    The inference process's build; the control process's own only when
    `supervision.inference_process` is off (controller.app)."""
    device = resolve_device(policy.device)
    tensor_policy = build_tensor_policy(policy, robot, device=device)
    served = start_runner(tensor_policy, runner, device, progress)
    planner = policy.planner
    if planner.fallback_budget_ms is None:
        return served
    from policies.tdmpc2.serving import with_mode

    prior = start_runner(with_mode(tensor_policy, "prior"), runner, device, progress)
    budget_s = planner.fallback_budget_ms / 1e3
    return PriorFallback(served, prior, budget_s, planner.fallback_k, planner.fallback_n)
