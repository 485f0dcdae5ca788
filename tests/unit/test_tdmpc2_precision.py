"""TD-MPC2 in reduced precision: only the runner's reduced tiers plan in it (eager FP32 stays
FP32), TF32 is scoped to those tiers, and start-up parity is the value regret, which passes an
honest BF16 planner and fails garbage."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from controller.errors import PolicyError
from controller.inference.faults import FaultPlan
from controller.inference.runner import Runner
from controller.inference.tiers import EagerTier
from controller.runner_config import RunnerConfig
from policies.base import RobotContext
from policies.model_hooks import ServedModule
from policies.tdmpc2.parity import ValueRegret
from policies.tdmpc2.planner import TDMPC2Policy
from policies.tdmpc2.serving import TDMPC2Codec, random_tdmpc2_policy
from tests.unit.test_tdmpc2_planner import small_config

PLANNER = dict(num_samples=128, num_pi_trajs=8, num_elites=16, iterations=4)


def step(module: TDMPC2Policy, context: RobotContext, half: bool = False) -> list[np.ndarray]:
    codec = TDMPC2Codec(random_tdmpc2_policy(module.config).spec, module.config)
    host = [np.empty(i.shape, dtype=i.dtype) for i in codec.inputs]
    codec.encode(context, host)
    tensors = [torch.zeros(1, 0, 1, 1, 3, dtype=torch.uint8)]
    tensors += [torch.from_numpy(h).unsqueeze(0) for h in host]
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=half):
        actions, mean = module(*tensors)
    assert actions.dtype == mean.dtype == torch.float32
    return [actions[0].numpy(), mean[0].numpy()]


def test_bf16_plans_in_bf16_only_under_the_reduced_tiers_autocast() -> None:
    fp32 = random_tdmpc2_policy(small_config(**PLANNER)).module
    bf16 = TDMPC2Policy(small_config(compute="bf16", **PLANNER), model=fp32.model).eval()
    codec = TDMPC2Codec(random_tdmpc2_policy(fp32.config).spec, fp32.config)
    differs = False
    for seed in range(3):
        context = codec.example(seed)
        reference = step(fp32, context)
        for x, y in zip(step(bf16, context), reference, strict=True):
            np.testing.assert_array_equal(x, y)  # no autocast (eager FP32): true FP32
        half = step(bf16, context, half=True)
        differs |= not np.array_equal(half[1], reference[1])
    assert differs  # under autocast it planned on the BF16 weights


class Recorder(ServedModule):
    """Records the TF32 flag its forward sees; its precision scope is TD-MPC2's for tf32."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[bool] = []
        self.policy = TDMPC2Policy(small_config(compute="tf32"))

    def precision_scope(self) -> Any:  # the declared hook (policies.model_hooks)
        return self.policy.precision_scope()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(torch.backends.cuda.matmul.allow_tf32)
        return x


def test_tf32_is_set_only_around_the_reduced_tiers() -> None:
    before = torch.backends.cuda.matmul.allow_tf32
    module = Recorder()
    inputs: Any = SimpleNamespace(device=torch.device("cpu"), tensors=(torch.ones(1, 2),))
    EagerTier("eager_fp32", module, inputs, None).run()
    EagerTier("eager_half", module, inputs, torch.bfloat16).run()
    EagerTier("eager_fp32", module, inputs, None).run()
    assert module.seen == [before, True, before]
    assert torch.backends.cuda.matmul.allow_tf32 == before  # restored
    assert TDMPC2Policy(small_config()).precision_scope().__enter__() is None  # fp32: no-op


def test_value_regret_passes_honest_bf16_and_fails_garbage() -> None:
    policy = random_tdmpc2_policy(small_config(compute="bf16", **PLANNER))
    module = policy.module
    measure = policy.parity
    assert isinstance(measure, ValueRegret) and measure.tolerance == 0.15
    codec = policy.inputs
    torch.manual_seed(1)
    broken = TDMPC2Policy(module.config).eval()  # another (untrained) model: a wrong planner
    for seed in range(3):
        context = codec.example(seed)
        reference = step(module, context)
        assert measure.error(context, reference, reference) == 0.0
        assert measure.error(context, step(module, context, half=True), reference) <= 0.15
        rng = np.random.default_rng(seed)
        garbage = [rng.uniform(-1, 1, r.shape).astype(np.float32) for r in reference]
        assert measure.error(context, garbage, reference) > 0.5
        assert measure.error(context, step(broken, context), reference) > 0.5


def test_runner_checks_reduced_precision_with_the_policys_measure() -> None:
    policy = random_tdmpc2_policy(small_config(compute="bf16", **PLANNER))
    config = RunnerConfig(top_tier="eager_fp32", cache_dir=None, step_budget_ms=None)
    runner = Runner(policy, config, device="cpu")
    runner.start()
    assert runner.status()["tiers"][-1]["parity_error"] == 0.0  # type: ignore[index]
    mirrored = {"eager_fp32": FaultPlan(start_error=-2.0)}  # every plan negated at start-up
    refused = r"value regret .* exceeds parity_regret \(in the checkpoint's config.json\) 0.15"
    with pytest.raises(PolicyError, match=refused):
        Runner(policy, config, device="cpu", faults=mirrored).start()


def test_policy_planner_section_selects_the_compute(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from controller.errors import ConfigError
    from controller.policy_sections import PolicyConfig
    from policies.catalog import build_tensor_policy
    from policies.demo import make_demo_checkpoint, make_demo_tdmpc2_checkpoint

    path = make_demo_tdmpc2_checkpoint(tmp_path / "tdmpc2")
    section = PolicyConfig(kind="checkpoint", path=path, tdmpc2={"compute": "tf32"})
    policy = build_tensor_policy(section)
    assert policy.module.config.compute == "tf32" and isinstance(policy.parity, ValueRegret)
    plain = build_tensor_policy(PolicyConfig(kind="checkpoint", path=path))
    assert plain.module.config.compute == "fp32" and plain.parity is None
    act = make_demo_checkpoint(tmp_path / "act")
    with pytest.raises(ConfigError, match="TD-MPC2 checkpoints"):
        build_tensor_policy(PolicyConfig(kind="checkpoint", path=act, tdmpc2={"compute": "bf16"}))
