"""runner.reference_weights: host is refused in one sentence where it cannot work (no CUDA
device; a model whose half tiers would compute from the host weights). The GPU behaviour is
tests/gpu/test_host_weights_gpu.py."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from controller.errors import PolicyError
from controller.inference import tiers
from controller.inference.host_weights import check_host_weights
from controller.inference.runner import Runner
from controller.runner_config import RunnerConfig
from policies.model_hooks import ServedModule
from policies.tiny import build_tiny_policy, tiny_spec


def test_host_weights_on_a_cpu_runner_are_refused_in_one_sentence() -> None:
    config = RunnerConfig(reference_weights="host", top_tier="eager_fp32")
    runner = Runner(build_tiny_policy(tiny_spec()), config, device="cpu")
    with pytest.raises(PolicyError, match="reference_weights: host") as raised:
        runner.start()
    assert "\n" not in str(raised.value)


def test_host_weights_need_a_model_that_keeps_a_half_copy() -> None:
    class NoCopy(ServedModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(2, 2)

    class WithCopy(NoCopy):
        precast_half_weights = True

    with pytest.raises(PolicyError, match="precast_half_weights"):
        check_host_weights(NoCopy(), torch.device("cuda"))
    check_host_weights(WithCopy(), torch.device("cuda"))  # only inspects: no CUDA needed


def test_weights_off_the_device_are_compiled_whole_not_by_region() -> None:
    """Fusing host-kept weights for a regional compile would make host copies the compiled
    blocks cannot use: such a module (the FP32 reference, when no half copy could be made)
    compiles whole."""
    from controller.inference.tiers import CompiledStep

    class Blocks(ServedModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(4, 4)
            self.regions = 0

        def compile_regions(self, compile_fn):  # type: ignore[no-untyped-def]
            self.regions += 1
            return True

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layer(x)

    class Staging:
        tensors = [torch.randn(2, 4)]
        device = torch.device("meta")  # the weights stay on the CPU, "off the device"

    module = Blocks()
    step = CompiledStep(module, None, Staging(), RunnerConfig(compile_backend="eager"))  # type: ignore[arg-type]
    with torch.no_grad():
        step.warm(1)
    assert step.compiled.module is module  # type: ignore[union-attr]


def test_a_failed_half_copy_leaves_the_reference_nothing_to_read(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A half copy that fails part-way (out of GPU memory) serves with autocast instead, and
    the tensors it had made are not handed to the reference, which would keep them held."""
    module = nn.Linear(2, 2)

    def fails_part_way(module, half, device, exact):  # type: ignore[no-untyped-def]
        exact[id(module.weight)] = torch.zeros(2, 2)
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(tiers, "half_tier_module", fails_part_way)
    exact: dict[int, torch.Tensor] = {}
    config = RunnerConfig(reference_weights="host")
    got = tiers.half_tier_weights(["eager_half"], module, config, torch.device("cuda"), exact)
    assert got is module and exact == {}
