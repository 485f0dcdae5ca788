"""Real-time chunking's math: the soft mask, the guidance weights, the exact VJP, and what the
guided sampler must do at its limits (no mask: unguided; large beta: the prefix is kept)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from policies.flow.config import FlowConfig
from policies.flow.model import FlowMatchingPolicy
from policies.flow.rtc import RealTimeChunking, guidance_weights, soft_mask
from policies.flow.settings import RTCConfig

H, A = 10, 3


def tiny_flow(dtype: torch.dtype = torch.float32, seed: int = 0) -> FlowMatchingPolicy:
    config = FlowConfig(
        n_cameras=1,
        image_height=32,
        image_width=32,
        state_dim=A,
        action_dim=A,
        chunk_size=H,
        n_steps=10,
        dim_model=16,
        n_heads=2,
        dim_feedforward=32,
        n_context_layers=1,
        n_expert_layers=2,
    )
    torch.manual_seed(seed)
    flow = FlowMatchingPolicy(config).eval().to(dtype)
    with torch.no_grad():  # non-trivial statistics, so normalization is exercised
        flow.action_norm.mean.copy_(torch.linspace(-0.5, 0.5, A))
        flow.action_norm.std.copy_(torch.linspace(0.2, 0.4, A))
    return flow


def inputs(seed: int = 0, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (1, 1, 32, 32, 3), dtype=torch.uint8, generator=gen)
    state = torch.randn(1, 1, A, generator=gen, dtype=dtype)
    noise = torch.randn(1, H, A, generator=gen, dtype=dtype)
    prefix = torch.randn(1, H, A, generator=gen, dtype=dtype)
    return images, state, noise, prefix


def mask_of(d: int, end: int, schedule: str = "exp") -> np.ndarray:
    positions = torch.arange(H, dtype=torch.float32)
    return soft_mask(torch.tensor([d]), torch.tensor([end]), positions, schedule)[0].numpy()  # type: ignore[arg-type]


# ---- mask and weights ----------------------------------------------------------------------------


def test_exp_mask_matches_the_paper_for_d2_end6_h10() -> None:
    expected = [1, 1, 0.571, 0.287, 0.114, 0.026, 0, 0, 0, 0]
    np.testing.assert_allclose(mask_of(2, 6), expected, atol=5e-4)


def test_other_schedules_and_limits() -> None:
    np.testing.assert_allclose(mask_of(2, 6, "linear"), [1, 1, 0.8, 0.6, 0.4, 0.2, 0, 0, 0, 0])
    np.testing.assert_allclose(mask_of(2, 6, "ones"), [1] * 6 + [0] * 4)
    np.testing.assert_allclose(mask_of(2, 6, "zeros"), [1, 1] + [0] * 8)
    np.testing.assert_allclose(mask_of(0, 0), [0] * H)  # no previous plan: unguided
    np.testing.assert_allclose(mask_of(9, 4, "zeros"), [1] * 4 + [0] * 6)  # d clamped to end
    assert mask_of(0, 6)[0] < 1.0  # d = 0: nothing is frozen, the overlap still guides


def test_one_mask_per_robot_from_device_tensors() -> None:
    positions = torch.arange(H, dtype=torch.float32)
    masks = soft_mask(torch.tensor([1, 3]), torch.tensor([5, 8]), positions, "exp")
    np.testing.assert_allclose(masks[0].numpy(), mask_of(1, 5))
    np.testing.assert_allclose(masks[1].numpy(), mask_of(3, 8))


def test_guidance_weights_per_step() -> None:
    # min(beta, (1 - t)/t * (t^2 + (1 - t)^2)/(1 - t)^2) at t = 0, 0.1, ..., 0.9
    expected = [5, 5, 4.25, 2.7619, 2.1667, 2.0, 2.1667, 2.7619, 4.25, 5]
    np.testing.assert_allclose(guidance_weights(10, 5.0).numpy(), expected, atol=1e-4)
    unclipped = guidance_weights(10, 1e4).numpy()
    assert unclipped[0] == 1e4  # t = 0: infinite, clipped
    np.testing.assert_allclose(unclipped[1], 0.82 / 0.09, rtol=1e-5)


# ---- the guided sampler --------------------------------------------------------------------------


def test_exact_correction_is_the_gradient_of_the_weighted_error() -> None:
    """g = (W (Y - A1))^T dA1/dA^t equals the gradient of -1/2 sum W (Y - A1)^2 (central
    differences, float64)."""
    flow = tiny_flow(torch.float64)
    rtc = RealTimeChunking(flow, RTCConfig(mode="exact"))
    images, state, noise, prefix = inputs(dtype=torch.float64)
    step = 3
    t = flow.times[step]
    with torch.no_grad():
        context = flow.encode(images, state)
        target, mask = rtc.guidance_targets(prefix, torch.tensor([7]), torch.tensor([2]))
        mask = mask.to(torch.float64)
        actions = noise * 0.7 + 0.1
        correction, velocity = rtc.correction_exact(actions, step, context, target, mask)

        def objective(a: torch.Tensor) -> float:
            predicted = a + (1 - t) * flow.velocity(a, step, context)
            return float(-0.5 * (mask * (target - predicted) ** 2).sum())

        np.testing.assert_allclose(velocity, flow.velocity(actions, step, context))
        eps = 1e-6
        for index in [(0, 0, 0), (0, 2, 1), (0, 4, 2), (0, 6, 0), (0, 9, 1)]:
            plus, minus = actions.clone(), actions.clone()
            plus[index] += eps
            minus[index] -= eps
            numeric = (objective(plus) - objective(minus)) / (2 * eps)
            assert correction[index].item() == pytest.approx(numeric, rel=1e-5, abs=1e-8)
    # The Jacobian is not the identity: the exact correction differs from the weighted error.
    stop_grad = mask * (target - (actions + (1 - t) * velocity))
    assert not torch.allclose(correction, stop_grad, atol=1e-4)


@pytest.mark.parametrize("mode", ["exact", "stop_grad", "inpaint"])
def test_zero_mask_gives_the_unguided_chunk(mode: str) -> None:
    flow = tiny_flow()
    rtc = RealTimeChunking(flow, RTCConfig(mode=mode))
    images, state, noise, prefix = inputs()
    with torch.no_grad():
        unguided = flow(images, state, noise)
        guided = rtc(images, state, noise, prefix, torch.tensor([0]), torch.tensor([3]))
        moved = rtc(images, state, noise, prefix, torch.tensor([8]), torch.tensor([3]))
    torch.testing.assert_close(guided, unguided, rtol=1e-5, atol=1e-5)
    assert (moved - unguided).abs().max() > 0.1  # with a mask, guidance does change the chunk


@pytest.mark.parametrize("mode", ["exact", "stop_grad", "inpaint"])
def test_large_beta_keeps_the_first_d_actions_on_the_prefix(mode: str) -> None:
    flow = tiny_flow()
    rtc = RealTimeChunking(flow, RTCConfig(mode=mode, beta=10.0))
    images, state, noise, prefix = inputs(seed=1)
    d = 3
    with torch.no_grad():
        unguided = flow(images, state, noise)
        guided = rtc(images, state, noise, prefix, torch.tensor([8]), torch.tensor([d]))
    before = (unguided[0, :d] - prefix[0, :d]).abs().max().item()
    after = (guided[0, :d] - prefix[0, :d]).abs().max().item()
    assert before > 0.3
    assert after < 0.01 * before, (before, after)
    # The overlap is pulled toward the prefix too, less and less; past it nothing is asked.
    assert (guided[0, d:6] - prefix[0, d:6]).abs().mean() < (
        unguided[0, d:6] - prefix[0, d:6]
    ).abs().mean()


def test_off_mode_is_the_flow_policy_itself() -> None:
    flow = tiny_flow()
    rtc = RealTimeChunking(flow, RTCConfig(mode="off"))
    images, state, noise, prefix = inputs()
    with torch.no_grad():
        torch.testing.assert_close(
            rtc(images, state, noise, prefix, torch.tensor([8]), torch.tensor([2])),
            flow(images, state, noise),
        )


def test_exact_guidance_runs_under_no_grad_and_leaves_no_graph() -> None:
    flow = tiny_flow()
    rtc = RealTimeChunking(flow, RTCConfig(mode="exact"))
    images, state, noise, prefix = inputs()
    with torch.no_grad():
        out = rtc(images, state, noise, prefix, torch.tensor([8]), torch.tensor([2]))
    assert not out.requires_grad
    assert all(p.grad is None for p in flow.parameters())


def test_exact_guidance_under_inference_mode_is_the_no_grad_result() -> None:
    """torch.func.vjp under torch.inference_mode returns zeros in torch builds older than the
    fix of pytorch#177318 (2026-03): an eager caller in inference mode (EagerPolicy, the FP32
    reference, used to be one) got unguided chunks from `exact`. The module leaves inference
    mode for its whole sampling (encoding included: its tensors reach the VJP), and the result
    is the no_grad one."""
    flow = tiny_flow()
    rtc = RealTimeChunking(flow, RTCConfig(mode="exact"))
    images, state, noise, prefix = inputs(seed=2)
    modes_seen: list[bool] = []
    encode = flow.encode

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        modes_seen.append(torch.is_inference_mode_enabled())
        return encode(*args, **kwargs)

    with torch.no_grad():
        expected = rtc(images, state, noise, prefix, torch.tensor([8]), torch.tensor([2]))
        unguided = flow(images, state, noise)
    flow.encode = spy  # type: ignore[method-assign]
    with torch.inference_mode():
        got = rtc(images, state, noise, prefix, torch.tensor([8]), torch.tensor([2]))
    assert modes_seen and not any(modes_seen)
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    assert (expected - unguided).abs().max() > 0.1  # the guidance acts, so equality means it


@pytest.mark.parametrize("mode", ["stop_grad", "inpaint"])  # exact always unrolls
def test_the_compiled_region_path_samples_what_the_unrolled_loop_does(mode: str) -> None:
    """regional_compile feeds the step as a tensor and the context as contiguous copies into
    one region function; eagerly that must be the same sampler as the plain loop."""
    flow = tiny_flow()
    images, state, noise, prefix = inputs(seed=3)
    args = (images, state, noise, prefix, torch.tensor([8]), torch.tensor([2]))
    with torch.no_grad():
        region = RealTimeChunking(flow, RTCConfig(mode=mode))(*args)
        loop = RealTimeChunking(flow, RTCConfig(mode=mode, regional_compile=False))(*args)
    torch.testing.assert_close(region, loop, rtol=1e-6, atol=1e-6)
