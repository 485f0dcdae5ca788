"""The planner's inference layout (policies.tdmpc2.fused): derived from the world model's
parameters, never saved, and following every way the weights change."""

from __future__ import annotations

import torch

from policies.tdmpc2.planner import TDMPC2Policy
from tests.unit.test_tdmpc2_planner import run, small_config


def plan(policy: TDMPC2Policy) -> tuple[torch.Tensor, torch.Tensor]:
    c = policy.config
    gen = torch.Generator().manual_seed(3)
    obs = torch.randn(c.obs_dim, generator=gen)
    prev = torch.rand(c.horizon, c.action_dim, generator=gen) * 2 - 1
    return run(policy, obs, prev, 0.0)


def test_fused_weights_are_not_saved_and_follow_load_state_dict() -> None:
    torch.manual_seed(0)
    policy = TDMPC2Policy(small_config(episodic=True)).eval()
    torch.manual_seed(1)
    other = TDMPC2Policy(small_config(episodic=True)).eval()
    assert not any("fused" in key for key in policy.state_dict())  # checkpoint names unchanged
    before = plan(policy)
    policy.model.load_state_dict(other.model.state_dict())  # the world model's own load
    for x, y in zip(plan(policy), plan(other), strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    assert not torch.equal(before[1], plan(policy)[1])
    torch.manual_seed(2)
    third = TDMPC2Policy(small_config(episodic=True)).eval()
    policy.load_state_dict(third.state_dict())  # the planner's load reaches the model's hook
    for x, y in zip(plan(policy), plan(third), strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_fused_weights_follow_dtype_and_refresh_in_place() -> None:
    policy = TDMPC2Policy(small_config(compute="bf16")).eval()
    dyn_first = policy.model.dynamics[0].weight
    latent, rows, cols = policy.config.latent_dim, dyn_first.shape[0], dyn_first.shape[1]
    first_z, first_a = policy.fused.first_z_w, policy.fused.first_a_w
    torch.testing.assert_close(first_z[:rows], dyn_first[:, :latent], rtol=0, atol=0)
    torch.testing.assert_close(
        first_a[:rows, : cols - latent], dyn_first[:, latent:], rtol=0, atol=0
    )
    assert first_a.shape[1] % 8 == 0 and not first_a[:, cols - latent :].any()  # aligned K
    assert policy.fused_half is not None and policy.fused_half.first_z_w.dtype == torch.bfloat16
    with torch.no_grad():
        dyn_first.add_(1.0)  # an in-place edit: refresh() is the documented way to follow it
    policy.fused.refresh(policy.model)
    assert policy.fused.first_z_w is first_z  # same storage: a captured CUDA graph sees it
    torch.testing.assert_close(first_z[:rows], dyn_first[:, :latent])
    policy.double()
    assert policy.fused.first_z_w.dtype == torch.float64  # buffers convert with the parameters
    torch.testing.assert_close(
        policy.fused.first_a_w[:rows, : cols - latent],
        policy.model.dynamics[0].weight[:, latent:],
        rtol=0,
        atol=0,
    )


def test_planners_rebuilt_on_one_model_do_not_stay_alive_through_its_load_hook() -> None:
    """with_mode / with_compute build new planners on the same world model: the ones they
    replace must be freed, weights and hook included."""
    import gc
    import weakref

    first = TDMPC2Policy(small_config(compute="bf16")).eval()
    model = first.model
    gone = [weakref.ref(first.fused), weakref.ref(first.fused_half)]
    for _ in range(3):
        TDMPC2Policy(small_config(compute="bf16"), model)  # built and dropped
    del first
    gc.collect()
    assert all(ref() is None for ref in gone)
    kept = TDMPC2Policy(small_config(), model)
    gc.collect()
    assert len(model._load_state_dict_post_hooks) == 1  # only the live planner's
    assert kept.fused is not None
    prior = TDMPC2Policy(small_config(mode="prior"), model)
    assert prior.fused is None and prior.fused_half is None  # fast mode keeps no fused copy


def test_the_planner_asks_its_compiled_tiers_for_multi_kernel_and_the_cache_key_shows_it() -> None:
    """A plan's wide layer norms want inductor's multi_kernel (the module's compile_options);
    fast mode asks for nothing; what a module asks for is part of the compile cache's key."""
    from controller.inference.compile_cache import cache_key
    from controller.inference.tiers import compile_options
    from controller.runner_config import RunnerConfig
    from policies.tdmpc2.serving import random_tdmpc2_policy

    plan = TDMPC2Policy(small_config()).eval()
    assert compile_options(plan) == {"triton.multi_kernel": 1}
    assert compile_options(TDMPC2Policy(small_config(mode="prior"))) == {}
    spec = random_tdmpc2_policy(small_config()).spec
    config, cpu = RunnerConfig(), torch.device("cpu")
    before = cache_key(spec, plan, config, cpu)
    plan.compile_options = lambda: {"triton.multi_kernel": 0}  # type: ignore[method-assign]
    assert cache_key(spec, plan, config, cpu) != before
