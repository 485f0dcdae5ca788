"""The one place a served policy is built: the daemon, `tempo profile`, `tempo compare`,
`tempo bench` and every script come through `build_policy`, so they serve a policy the same way
(the prior fallback included).

    policy = build_policy(config.policy, config.robot, config.runner)   # ready to serve
    policy = build_policy(PolicyConfig(device="cuda"), RobotConfig(), runner_config,
                          model=my_tensor_policy)                        # a model made in code
    runner = planner_runner(policy)          # the Runner of the model configured (profiling)
    runner = build_runner(my_tensor_policy, runner_config, "cuda")   # the same, shorter
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from controller.errors import ConfigError
from controller.inference.artefact_folders import with_built_artefacts
from controller.inference.prior_fallback import PriorFallback
from controller.inference.progress import Progress
from controller.inference.read_ahead import READ_AHEAD
from controller.inference.runner import Runner
from controller.inference.threads import apply_inference_threads  # noqa: F401 - for app.py
from controller.policy_sections import PolicyConfig, RobotConfig
from controller.runner_config import RunnerConfig
from policies.catalog import build_tensor_policy, fallback_policy
from policies.tensor_policy import TensorPolicy

log = logging.getLogger(__name__)

BatchSettings = Sequence[int]  # execution.batch_sizes


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


def _start_runner(
    policy: TensorPolicy,
    config: RunnerConfig,
    device: str,
    progress: Progress | None,
    batching: BatchSettings = (1,),
    window_us: int = 0,
) -> Runner:
    runner = Runner(policy, config, device=device, batch_sizes=batching, batch_window_us=window_us)
    runner.start(progress=progress)
    return runner


def build_policy(
    policy: PolicyConfig,
    robot: RobotConfig,
    runner: RunnerConfig,
    progress: Callable[[str], None] | None = None,
    model: TensorPolicy | None = None,
    batch_sizes: BatchSettings = (1,),
    batch_window_us: int = 0,
) -> Runner | PriorFallback:
    """Load the policy the `policy:` section describes (`robot:` for a built-in one), or take
    `model` (made in code: tests, benchmarks), and make it ready to serve as `runner:` says:
    every tier built, warmed up and checked against the FP32 reference (see
    controller.inference.runner); progress is logged, and passed to `progress` too. A policy
    whose family declares a fallback for it (TD-MPC2's policy prior, when its section sets
    a budget) gets that ready too (controller.inference.prior_fallback). `batch_sizes` and
    `batch_window_us`: the `execution:` section's, robots served in one step (a prior
    fallback serves one a step).
    The inference process's build; the control process's own only when
    `supervision.inference_process` is off (controller.app)."""
    device = resolve_device(policy.device)
    runner = with_built_artefacts(runner, policy)
    if model is None:
        load_to = _read_onto(device, runner)
        tensor_policy = READ_AHEAD.take((policy, robot, load_to))  # a spare's, while it waited
        if tensor_policy is None:
            started = time.perf_counter()
            tensor_policy = build_tensor_policy(policy, robot, device=load_to)
            log.info("policy read in %.1f s (onto %s)", time.perf_counter() - started, load_to)
        else:
            log.info("policy read ahead while standing by (onto %s)", load_to)
    else:
        tensor_policy = model
    fallback = fallback_policy(tensor_policy, policy)
    if fallback is None:
        return _start_runner(tensor_policy, runner, device, progress, batch_sizes, batch_window_us)
    served = _start_runner(tensor_policy, runner, device, progress)
    prior = _start_runner(fallback.policy, runner, device, progress)
    return PriorFallback(served, prior, fallback.budget_s, fallback.k, fallback.n)


def _read_onto(device: str, runner: RunnerConfig) -> str:
    """Where a checkpoint is read. With the reference's weights on the host, there: the runner
    keeps its matmul weights on the host anyway, and loading it onto the GPU first uploaded the
    whole FP32 model only to copy most of it back (pi0: 9 s of a 31 s start, H200)."""
    return "cpu" if runner.reference_weights == "host" else device


def read_policy_ahead(policy: PolicyConfig, robot: RobotConfig, runner: RunnerConfig) -> bool:
    """Read the policy as `build_policy` would and keep it for that build (READ_AHEAD), when
    it would be read onto the host: a spare inference process's wait (on the GPU it holds
    nothing, so a policy read onto the GPU is left to the build). Whether it was read."""
    load_to = _read_onto(resolve_device(policy.device), with_built_artefacts(runner, policy))
    if load_to != "cpu":
        return False
    started = time.perf_counter()
    READ_AHEAD.keep((policy, robot, load_to), build_tensor_policy(policy, robot, device=load_to))
    log.info("policy read ahead in %.1f s, for the build", time.perf_counter() - started)
    return True


def planner_runner(policy: Runner | PriorFallback) -> Runner:
    """The Runner of the model as configured: `policy` itself, or the planner a prior fallback
    guards (what `tempo profile` and the benchmarks time)."""
    runner = policy.planner if isinstance(policy, PriorFallback) else policy
    if not isinstance(runner, Runner):  # build_policy makes both of the fallback's Runners
        raise TypeError(f"expected a Runner, got {type(runner).__name__}")
    return runner


def build_runner(
    model: TensorPolicy,
    runner: RunnerConfig,
    device: str,
    progress: Callable[[str], None] | None = None,
) -> Runner:
    """`build_policy` for a model made in code (benchmarks, tests), with default `policy:` and
    `robot:` sections but `device` (auto, cpu or cuda): its Runner, started."""
    policy = PolicyConfig.model_validate({"device": device})
    return planner_runner(build_policy(policy, RobotConfig(), runner, progress, model))
