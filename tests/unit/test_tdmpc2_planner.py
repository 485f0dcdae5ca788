"""TD-MPC2's planner against a plain reference planner written here from the algorithm (the
official `_plan` / `_estimate_value`, one robot, Python loops, every Q head evaluated), with the
module's fixed noise, in FP32."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from policies.tdmpc2.config import TDMPC2Config
from policies.tdmpc2.planner import NoiseBank, TDMPC2Policy

NO_FRAMES = torch.zeros(1, 0, 1, 1, 3, dtype=torch.uint8)  # the runner's frames without cameras


def small_config(**overrides: object) -> TDMPC2Config:
    values: dict[str, object] = dict(
        obs_dim=5, action_dim=3, model_size=1, num_samples=48, num_pi_trajs=6, num_elites=8,
        horizon=3, iterations=3,
    )  # fmt: skip
    values.update(overrides)
    return TDMPC2Config.model_validate(values)


# ---- The reference: the algorithm, plainly --------------------------------------------------


def ref_two_hot_inv(logits: torch.Tensor, c: TDMPC2Config) -> torch.Tensor:
    bins = torch.linspace(c.vmin, c.vmax, c.num_bins)
    x = (F.softmax(logits, dim=-1) * bins).sum(-1, keepdim=True)
    return torch.sign(x) * (torch.exp(torch.abs(x)) - 1)


def ref_pi(policy: TDMPC2Policy, z: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    c = policy.config
    mu, log_std = policy.model.pi(z).chunk(2, dim=-1)
    log_std = c.log_std_min + 0.5 * (c.log_std_max - c.log_std_min) * (torch.tanh(log_std) + 1)
    return torch.tanh(mu + eps * log_std.exp())


def ref_q_all(policy: TDMPC2Policy, z: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Every head, one at a time, as separate MLPs: (num_q, N, bins)."""
    x = torch.cat([z, a], dim=-1)
    outs = []
    for q in range(policy.config.num_q):
        h = x
        for index, layer in enumerate(policy.model.qs.layers):
            h = F.linear(h, layer.weight[q], layer.bias[q])
            if index < 2:
                h = F.mish(F.layer_norm(h, h.shape[-1:], layer.ln.weight[q], layer.ln.bias[q]))
        outs.append(h)
    return torch.stack(outs)


def ref_estimate_value(policy, z, actions, pi_eps, heads):
    c, m = policy.config, policy.model
    g, discount = 0, 1.0
    termination = torch.zeros(z.shape[0], 1)
    for t in range(c.horizon):
        za = torch.cat([z, actions[t]], dim=-1)
        reward = ref_two_hot_inv(m.reward(za), c)
        z = m.dynamics(za)
        g = g + discount * (1 - termination) * reward
        discount = discount * c.discount
        if c.episodic:
            hit = (torch.sigmoid(m.termination(z)) > 0.5).float()
            termination = torch.clip(termination + hit, max=1.0)
    action = ref_pi(policy, z, pi_eps)
    q = ref_two_hot_inv(ref_q_all(policy, z, action)[heads], c)
    return g + discount * (1 - termination) * q.sum(0) / 2


def ref_plan(policy, obs, prev_mean, t0, noise: NoiseBank, explore=False):
    c, m = policy.config, policy.model
    horizon, n, p, a_dim = c.horizon, c.num_samples, c.num_pi_trajs, c.action_dim
    z = m.encoder(obs.unsqueeze(0))
    pi_actions = torch.empty(horizon, p, a_dim)
    _z = z.repeat(p, 1)
    for t in range(horizon - 1):
        pi_actions[t] = ref_pi(policy, _z, noise.pi_eps[t])
        _z = m.dynamics(torch.cat([_z, pi_actions[t]], dim=-1))
    pi_actions[-1] = ref_pi(policy, _z, noise.pi_eps[horizon - 1])

    z = z.repeat(n, 1)
    mean = torch.zeros(horizon, a_dim)
    std = torch.full((horizon, a_dim), c.max_std)
    if not t0:
        mean[:-1] = prev_mean[1:]
    actions = torch.empty(horizon, n, a_dim)
    actions[:, :p] = pi_actions
    for i in range(c.planning_iterations):
        r = noise.sample_eps[i]
        actions[:, p:] = (mean.unsqueeze(1) + std.unsqueeze(1) * r).clamp(-1, 1)
        heads = torch.topk(noise.head_keys[i], 2).indices
        value = ref_estimate_value(policy, z, actions, noise.value_eps[i], heads).nan_to_num(0)
        elite_idxs = torch.topk(value.squeeze(1), c.num_elites, dim=0).indices
        elite_value, elite_actions = value[elite_idxs], actions[:, elite_idxs]
        max_value = elite_value.max(0).values
        score = torch.exp(c.temperature * (elite_value - max_value))
        score = score / score.sum(0)
        mean = (score.unsqueeze(0) * elite_actions).sum(dim=1) / (score.sum(0) + 1e-9)
        std = (
            (score.unsqueeze(0) * (elite_actions - mean.unsqueeze(1)) ** 2).sum(dim=1)
            / (score.sum(0) + 1e-9)
        ).sqrt()
        std = std.clamp(c.min_std, c.max_std)
    gumbel = -torch.log(-torch.log(noise.elite_uniform))
    rand_idx = torch.argmax(score.squeeze(1).log() + gumbel)
    chosen = elite_actions[:, rand_idx]
    if explore:
        chosen = chosen + std * noise.explore_eps
    return chosen.clamp(-1, 1), mean


# ---- Tests -----------------------------------------------------------------------------------


def run(policy: TDMPC2Policy, obs, prev_mean, episode_start: float, fixed: float = 1.0):
    with torch.no_grad():
        return policy(
            NO_FRAMES,
            obs.unsqueeze(0),
            prev_mean.unsqueeze(0),
            torch.tensor([[episode_start]]),
            torch.tensor([[fixed]]),
        )


@pytest.mark.parametrize(
    "overrides",
    [{}, {"episodic": True}, {"explore": True}, {"model_size": 5, "num_samples": 32}],
    ids=["default", "episodic", "explore", "size5"],
)
def test_planner_with_fixed_noise_equals_the_reference(overrides: dict) -> None:
    torch.manual_seed(0)
    policy = TDMPC2Policy(small_config(**overrides)).eval()
    c = policy.config
    for seed in range(3):
        gen = torch.Generator().manual_seed(seed)
        obs = torch.randn(c.obs_dim, generator=gen)
        prev = torch.rand(c.horizon, c.action_dim, generator=gen) * 2 - 1
        for t0 in (True, False):
            actions, mean = run(policy, obs, prev, float(t0))
            with torch.no_grad():
                ref_actions, ref_mean = ref_plan(
                    policy, obs, prev, t0, policy.noise_bank(), c.explore
                )
            torch.testing.assert_close(mean[0], ref_mean, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(actions[0], ref_actions, rtol=1e-5, atol=1e-5)


def test_episode_start_means_no_warm_start() -> None:
    policy = TDMPC2Policy(small_config()).eval()
    c = policy.config
    obs = torch.randn(c.obs_dim)
    zero = torch.zeros(c.horizon, c.action_dim)
    other = torch.full((c.horizon, c.action_dim), 0.9)
    start_a = run(policy, obs, other, 1.0)
    start_b = run(policy, obs, zero, 1.0)
    warm = run(policy, obs, other, 0.0)
    for x, y in zip(start_a, start_b, strict=True):
        torch.testing.assert_close(x, y)  # at an episode start the previous mean is ignored
    assert not torch.allclose(warm[1], start_a[1])  # otherwise it shifts into the start


def test_shapes_bounds_and_fresh_noise() -> None:
    low, high = (-0.5, 0.0, 1.0), (0.5, 2.0, 3.0)
    policy = TDMPC2Policy(small_config(action_low=low, action_high=high)).eval()
    c = policy.config
    batch = 2
    obs = torch.randn(batch, c.obs_dim)
    prev = torch.zeros(batch, c.horizon, c.action_dim)
    ones = torch.ones(batch, 1)
    frames = torch.zeros(batch, 0, 1, 1, 3, dtype=torch.uint8)
    with torch.no_grad():
        actions, mean = policy(frames, obs, prev, ones, torch.zeros(batch, 1))
        again, _ = policy(frames, obs, prev, ones, torch.zeros(batch, 1))
        fixed, _ = policy(frames, obs, prev, ones, ones)
        fixed_again, _ = policy(frames, obs, prev, ones, ones)
    assert actions.shape == mean.shape == (batch, c.horizon, c.action_dim)
    assert actions.dtype == mean.dtype == torch.float32
    assert (actions >= torch.tensor(low)).all() and (actions <= torch.tensor(high)).all()
    assert (mean.abs() <= 1).all()
    assert not torch.equal(actions, again)  # fresh noise: two plans differ
    torch.testing.assert_close(fixed, fixed_again)  # the bank: reproducible


def test_fast_mode_over_the_whole_horizon_is_the_prior_mean_rollout() -> None:
    torch.manual_seed(1)
    planner = TDMPC2Policy(small_config()).eval()
    whole = small_config(mode="prior", prior_steps=None)
    prior = TDMPC2Policy(whole, model=planner.model).eval()
    c = planner.config
    obs = torch.randn(1, c.obs_dim)
    actions, mean = run(prior, obs[0], torch.zeros(c.horizon, c.action_dim), 0.0)
    with torch.no_grad():
        z = planner.model.encoder(obs)
        expected = []
        for _ in range(c.horizon):
            a = torch.tanh(planner.model.pi(z).chunk(2, dim=-1)[0])
            expected.append(a)
            z = planner.model.dynamics(torch.cat([z, a], dim=-1))
    torch.testing.assert_close(mean[0], torch.cat(expected))
    torch.testing.assert_close(actions, mean)  # bounds default to [-1, 1]


@pytest.mark.parametrize("steps", [1, 2])
def test_fast_mode_prior_steps_rolls_out_that_far_then_holds(steps: int) -> None:
    torch.manual_seed(2)
    full = TDMPC2Policy(small_config(mode="prior", horizon=4, prior_steps=None)).eval()
    short = TDMPC2Policy(small_config(mode="prior", horizon=4, prior_steps=steps), full.model)
    c = full.config
    obs, prev = torch.randn(c.obs_dim), torch.zeros(c.horizon, c.action_dim)
    whole, _ = run(full, obs, prev, 0.0)
    actions, mean = run(short.eval(), obs, prev, 0.0)
    assert actions.shape == whole.shape == (1, 4, c.action_dim)
    torch.testing.assert_close(actions[:, :steps], whole[:, :steps])  # the same rollout
    for t in range(steps, 4):  # then the last rolled-out action, held
        torch.testing.assert_close(actions[:, t], whole[:, steps - 1])
    torch.testing.assert_close(actions, mean)
    assert "prior_steps=" in repr(short) and "prior_steps" not in repr(full)  # cache keys


def test_prior_steps_beyond_the_horizon_is_refused() -> None:
    with pytest.raises(ValueError, match="prior_steps \\(4\\) must be at most horizon \\(3\\)"):
        small_config(mode="prior", horizon=3, prior_steps=4)


def test_fp32_compute_ignores_the_runners_autocast() -> None:
    policy = TDMPC2Policy(small_config()).eval()
    c = policy.config
    obs, prev = torch.randn(c.obs_dim), torch.rand(c.horizon, c.action_dim)
    plain = run(policy, obs, prev, 0.0)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # what the half tiers wrap a step in
        under_autocast = run(policy, obs, prev, 0.0)
    for x, y in zip(plain, under_autocast, strict=True):
        assert y.dtype == torch.float32
        torch.testing.assert_close(x, y, rtol=0, atol=0)
