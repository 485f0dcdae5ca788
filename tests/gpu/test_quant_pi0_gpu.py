"""The seed's crash cases on a quantized pi0: torch.compile's mutation error and the CUDA graph
overwrite error, which the public pi0 DuQuant port worked around by cloning and by turning CUDA
graphs off. Here a W4A8 tiny pi0 is captured in the graph tier as it is and replayed 1,000
times with different observations, each chunk equal to the eager FP32 fake-quant reference's."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from controller.inference.examples import random_example  # noqa: E402
from controller.inference.parity import relative_error  # noqa: E402
from controller.inference.runner import Runner  # noqa: E402
from controller.runner_config import RunnerConfig  # noqa: E402
from controller.tools.quantize import quantize_checkpoint  # noqa: E402
from policies.checkpoints.load import load_checkpoint  # noqa: E402
from policies.quant.config import QuantSettings  # noqa: E402
from policies.quant.layer import QuantLinear  # noqa: E402
from policies.tensor_policy import EagerPolicy  # noqa: E402

pytestmark = pytest.mark.gpu

DATA = Path(__file__).resolve().parents[1] / "data"
REPLAYS = 1000
# Half-precision activations through the tiny pi0's W4A8 layers and ten Euler steps, against
# the FP32 fake-quant reference: the runner's start-up parity bound. A replay that returned a
# stale or overwritten chunk (another observation's) is off by order 1.
PARITY_RTOL = 5e-2


@pytest.mark.parametrize("compiled_path", ["int8", "fused", "dequant"])
def test_a_quantized_pi0_captured_replays_1000_observations_equal_to_eager_fake_quant(
    tmp_path, gpu_cache_dir, compiled_path
):
    torch._dynamo.reset()
    settings = QuantSettings(block_size=16, compiled_path=compiled_path)  # type: ignore[arg-type]
    quantize_checkpoint(
        DATA / "pi0_lerobot_tiny",
        tmp_path / "w4a8",
        3,
        settings,
        reference_observations=2,
        task="pick up the red cube",
    )
    policy = load_checkpoint(tmp_path / "w4a8")
    assert any(isinstance(m, QuantLinear) for m in policy.module.modules())
    reference = load_checkpoint(tmp_path / "w4a8")  # its own module: eager FP32 fake-quant
    eager = EagerPolicy(reference, "cuda")
    config = RunnerConfig(
        cache_dir=gpu_cache_dir,
        step_budget_ms=None,
        parity_observations=2,
        parity_rtol=PARITY_RTOL,
        reference_parity_rtol=0.5,
    )
    runner = Runner(policy, config, device="cuda")
    runner.start()
    assert runner.tier == "graph", runner.status()

    codec = reference.inputs
    previous = None
    for i in range(REPLAYS):
        images, context = random_example(policy.spec, codec, 10_000 + i)
        served = runner.predict(images, context).actions
        expected = eager.predict(images, context).actions
        error = relative_error(served, expected)
        assert error <= PARITY_RTOL, f"replay {i}: {error:.2e} from the eager fake-quant chunk"
        if previous is not None:  # a stale output (the last replay's) would be nearer that one
            assert error < relative_error(served, previous), f"replay {i}: stale output?"
        previous = expected
    assert runner.tier == "graph" and runner.demotions == []
