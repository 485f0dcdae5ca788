"""The state range a policy represents after its normalization: read from the module, carried
in its spec, refused beyond it by the daemon (tests/unit/test_session_rules.py)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from policies.act.preprocess import Normalizer  # noqa: E402
from policies.base import HALF_MAX  # noqa: E402
from policies.demo import make_demo_policy  # noqa: E402
from policies.reach import build_reach_policy  # noqa: E402
from policies.tensor_policy import EagerPolicy, with_state_bounds  # noqa: E402


def test_act_bounds_are_the_normalization_inverted_at_half_precisions_limit() -> None:
    policy = with_state_bounds(make_demo_policy(cameras=(("front", 32, 48),), chunk_size=4))
    module = policy.module
    mean = module.state_norm.mean.double().numpy()
    scale = module.state_norm.std.double().numpy() + module.state_norm.eps
    low, high = policy.spec.state_range()
    np.testing.assert_allclose(low, mean - HALF_MAX * scale, rtol=1e-6)
    np.testing.assert_allclose(high, mean + HALF_MAX * scale, rtol=1e-6)
    # Just inside, the FP32 model is finite; the daemon refuses what lies outside.
    images = {"front": np.zeros((32, 48, 3), np.uint8)}
    inside = (high - np.abs(high) * 1e-3).reshape(1, -1)
    assert np.isfinite(EagerPolicy(policy).predict_chunk(images, inside)).all()


@pytest.mark.parametrize(
    ("mode", "stats"),
    [
        ("mean_std", {"mean": [1.0, -3.0], "std": [0.5, 2.0]}),
        ("min_max", {"min": [0.0, -1.0], "max": [2.0, 1.0]}),
        ("identity", {}),
    ],
)
def test_normalizer_bounds_invert_normalize(mode, stats) -> None:
    norm = Normalizer(mode, (2,), eps=1e-8)
    for name, values in stats.items():
        getattr(norm, name).copy_(torch.tensor(values))
    low, high = norm.input_bounds(100.0)
    edges = torch.stack([low, high]).float()
    np.testing.assert_allclose(
        norm.normalize(edges).numpy(), [[-100.0, -100.0], [100.0, 100.0]], rtol=1e-5
    )


def test_a_policy_that_does_not_normalize_keeps_the_default_bounds() -> None:
    reach = build_reach_policy(("a", "b"), [], chunk_size=4)
    assert with_state_bounds(reach) is reach
    low, high = reach.spec.state_range()
    assert list(high) == [HALF_MAX, HALF_MAX] and list(low) == [-HALF_MAX, -HALF_MAX]
