"""runner.reference_weights: host on a GPU: a tiny pi0 served with its FP32 reference's matmul
weights in pinned host memory gives the same reference and serving outputs as with them on the
device, and holds less device memory; stored in BF16, its reference reads the half copy and
pins nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from controller.inference.examples import random_observation  # noqa: E402
from controller.inference.runner import Runner  # noqa: E402
from controller.runner_config import RunnerConfig  # noqa: E402
from policies.checkpoints.load import load_checkpoint  # noqa: E402

pytestmark = pytest.mark.gpu

DATA = Path(__file__).resolve().parents[1] / "data" / "pi0_lerobot_tiny"


def started(cache_dir: Path, weights: str, in_bf16: bool = False) -> tuple[Runner, int]:
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()
    config = RunnerConfig(
        cache_dir=cache_dir, parity_observations=2, step_budget_ms=None,
        reference_weights=weights, top_tier="eager_half", precision="bf16" if in_bf16 else "fp16",
    )  # fmt: skip
    policy = load_checkpoint(DATA)
    if in_bf16:  # as a checkpoint stored in BF16 loads: FP32 parameters holding BF16 values
        with torch.no_grad():
            for param in policy.module.parameters():
                param.copy_(param.bfloat16().float())
    runner = Runner(policy, config, device="cuda")
    runner.start()
    return runner, torch.cuda.memory_allocated() - before


def assert_serve_the_same(on_device: Runner, on_host: Runner) -> None:
    """Both runners' reference and half tiers give the same chunks on two observations."""
    for seed in (1, 2):
        images, state = random_observation(on_device.spec, seed)
        for tier in ("eager_fp32", "eager_half"):
            on_device.use_tier(tier)
            on_host.use_tier(tier)
            expected = on_device.predict_chunk(images, state)
            got = on_host.predict_chunk(images, state)
            np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


def test_host_reference_weights_serve_the_same_with_less_device_memory(
    gpu_cache_dir: Path,
) -> None:
    on_device, device_bytes = started(gpu_cache_dir, "device")
    on_host, host_bytes = started(gpu_cache_dir, "host")
    assert on_host.ready_tiers == ["eager_half", "eager_fp32"]
    linear = next(m for m in on_host.module.modules() if isinstance(m, torch.nn.Linear))
    assert linear.weight.device.type == "cpu" and linear.weight.is_pinned()
    assert_serve_the_same(on_device, on_host)
    assert linear.weight.device.type == "cpu"  # dropped from the device after each call
    assert host_bytes < device_bytes


def test_weights_stored_in_bf16_are_read_from_the_half_copy(gpu_cache_dir: Path) -> None:
    on_device, _ = started(gpu_cache_dir, "device", in_bf16=True)
    on_host, _ = started(gpu_cache_dir, "host", in_bf16=True)
    linears = [m for m in on_host.module.modules() if isinstance(m, torch.nn.Linear)]
    assert all(m.weight.device.type == "cpu" and not m.weight.is_pinned() for m in linears)
    assert_serve_the_same(on_device, on_host)
    assert all(m.weight.device.type == "cpu" for m in linears)


def test_placing_keeps_matmul_weights_and_self_placed_tables_on_the_host() -> None:
    """A module that decides where it lives (pi0's HostTable: the 257,152-row token table)
    stays on the host, with the matmul weights; the rest goes to the device."""
    from controller.inference.host_weights import place_with_host_weights
    from policies.pi0.gemma import HostTable

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    model.table = HostTable(8, 4)
    place_with_host_weights(model, torch.device("cuda", torch.cuda.current_device()))
    assert model[0].weight.device.type == "cpu"
    assert model[1].weight.device.type == "cuda"
    assert model.table.weight.device.type == "cpu"
