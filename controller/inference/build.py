"""The one place a Runner is built and started: the daemon, `tempo profile`, `tempo bench` and
scripts/profile_step.py all come through here, so they serve a policy the same way.

    device = resolve_device(config.policy.device)          # auto -> cuda or cpu; cuda checked
    runner = start_runner(tensor_policy, config.runner, device, progress=print)
"""

from __future__ import annotations

import logging

from controller.errors import ConfigError
from controller.inference.ladder import Progress
from controller.inference.runner import Runner
from controller.runner_config import RunnerConfig
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
