"""`runner.freezing: true` really freezes: inductor folds the weights into the compiled graph.

Passed only in torch.compile's options, the setting reached inductor but not dynamo, which makes
parameters constants only when inductor's global setting is on as it traces; nothing was frozen
and nothing said so (the freezing pass ran, and found no parameter to fold). The spy below counts
the inputs the pass turned into constants.
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
freezing_module = pytest.importorskip("torch._inductor.freezing")

from controller.inference.runner import Runner  # noqa: E402
from controller.runner_config import RunnerConfig  # noqa: E402
from policies.tiny import build_tiny_policy  # noqa: E402


@pytest.fixture
def folded_inputs(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    folded: list[int] = []
    real = freezing_module.freeze

    def spy(dynamo_gm, aot_gm, example_inputs):  # type: ignore[no-untyped-def]
        frozen, kept = real(dynamo_gm, aot_gm, example_inputs)
        folded.append(len(example_inputs) - len(kept))
        return frozen, kept

    monkeypatch.setattr(freezing_module, "freeze", spy)
    saved = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    torch._dynamo.reset()  # trace again: dynamo's compiled code is shared by every runner
    yield folded
    torch._dynamo.reset()
    if saved is None:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    else:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = saved


@pytest.mark.parametrize("freezing", [True, False])
def test_the_freezing_setting_decides_whether_inductor_freezes(
    folded_inputs, tmp_path, freezing: bool
) -> None:  # type: ignore[no-untyped-def]
    config = RunnerConfig(
        cache_dir=tmp_path,
        top_tier="compiled",
        step_budget_ms=None,
        freezing=freezing,
        serve_slower_tiers=True,
    )
    runner = Runner(build_tiny_policy(seed=0), config, device="cpu")
    runner.start()
    assert runner.tier == "compiled"
    # Frozen: the tiny policy's weights (a dozen tensors) are constants, not inputs.
    assert (sum(folded_inputs) >= 8) is freezing
    assert torch._inductor.config.freezing is False  # the process-wide setting is put back
