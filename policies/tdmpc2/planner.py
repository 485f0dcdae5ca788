"""TD-MPC2's planner as one torch module: MPPI in the latent space of the world model, exactly as
the official `TDMPC2._plan` does it, with every shape fixed so one CUDA graph holds a whole plan.

    module(frames, obs, prev_mean, episode_start, fixed_noise) -> (actions, mean)

        frames         uint8 (B, 0, 1, 1, 3)         no cameras (the runner's empty frame tensor)
        obs            float32 (B, obs_dim)          the state observation
        prev_mean      float32 (B, horizon, action)  this robot's previous plan mean (memory)
        episode_start  float32 (B, 1)                1: no warm start (a new episode)
        fixed_noise    float32 (B, 1)                1: plan with the fixed noise bank
        actions        float32 (B, horizon, action)  the chosen plan, in robot units
        mean           float32 (B, horizon, action)  the final MPPI mean, in [-1, 1]: the robot's
                                                     next warm start

One plan (`mode: plan`):
1. z = h(obs). 24 trajectories are rolled out by the policy prior (sampled actions).
2. The mean starts at the previous mean shifted one step earlier (zero for the last step, and
   zero everywhere at an episode start); the std at max_std.
3. Each iteration samples 488 action sequences around (mean, std), clamped to [-1, 1], next to
   the 24 prior trajectories; scores each by its discounted predicted rewards plus the discounted
   mean of two randomly chosen Q heads at the horizon (for an action sampled from the prior);
   takes the 64 best; refits mean and std to them weighted by exp(temperature * (value - max)),
   std clamped to [min_std, max_std].
4. One elite sequence is drawn by a Gumbel-max draw over the final scores; with `explore` the
   final std times standard-normal noise is added; clamped to [-1, 1]; mapped to robot units.

Numerics (`compute`): the module turns the runner's autocast off. With `fp32` every tier plans
in FP32 and makes the reference's elite choices (parity is elementwise). MPPI's elite choices are
discontinuous in the predicted values, so reduced precision flips some of them against FP32 and
elementwise parity is meaningless there: with `tf32` (TF32 matmuls, through the policy's
`precision_scope`, entered by the runner around its reduced-precision tiers only) or `bf16`
(weights pre-cast once in `PlannerWeights`, FP32 decodes and MPPI statistics) the reduced tiers
(those the runner runs under autocast) plan in that precision, eager FP32 stays true FP32, and
parity is the value regret of `policies.tdmpc2.parity`. The prior's trajectories and the inner
loop run on `policies.tdmpc2.fused` (dynamics and reward fused, padded for aligned matmuls);
with fixed noise in FP32 it equals the plain reference planner of the tests to 1e-5. Fast mode
runs the model itself: FP32 (TF32 matmuls under `tf32`; `bf16` does not change it).

The whole sequence is returned, not only its first action: played newest-first
(`execution.ensemble: newest`), a plan that lands every step gives the robot the official
receding-horizon action, and when a plan is late the robot follows the rest of the last one
instead of holding.

Randomness: the noise of one plan (normals and uniforms, laid out by `NoiseBank`) is drawn in
forward from the device's default generator, inside the captured graph, so every replay draws
afresh. Where `fixed_noise` is 1 the module's fixed noise bank (seeded from `noise_seed`) is used
instead: the plan is then a deterministic function of the inputs, which is what the start-up
parity check compares across tiers and what the tests compare with a reference planner. Flags are
tensors combined arithmetically: no Python branch depends on data, nothing calls `.item()`.

`mode: prior` (fast mode) skips planning: the policy prior's mean action, rolled out through
the dynamics for `prior_steps` actions, the last one held for the rest of the chunk. The default
1 is the official fast mode's work (encode and one prior mean); null rolls the prior out over
the whole horizon.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import NamedTuple

import torch

from policies.model_hooks import ServedModule
from policies.tdmpc2.config import TDMPC2Config
from policies.tdmpc2.fused import PlannerWeights
from policies.tdmpc2.model import WorldModel


class NoiseBank(NamedTuple):
    """The noise one plan consumes, by role (shapes without the batch dimension)."""

    pi_eps: torch.Tensor  # (horizon, num_pi_trajs, action) normal: prior trajectories
    sample_eps: torch.Tensor  # (iterations, horizon, num_samples - num_pi_trajs, action) normal
    value_eps: torch.Tensor  # (iterations, num_samples, action) normal: prior action at horizon
    explore_eps: torch.Tensor  # (horizon, action) normal: exploration noise
    head_keys: torch.Tensor  # (iterations, num_q) uniform: the two largest pick the Q heads
    elite_uniform: torch.Tensor  # (num_elites,) uniform: Gumbel noise -log(-log(u))


def noise_shapes(c: TDMPC2Config) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """Shapes of the normal and the uniform parts of NoiseBank, in field order."""
    h, a, n, p, i = c.horizon, c.action_dim, c.num_samples, c.num_pi_trajs, c.planning_iterations
    normal = [(h, p, a), (i, h, n - p, a), (i, n, a), (h, a)]
    uniform = [(i, c.num_q), (c.num_elites,)]
    return normal, uniform


def _numel(shapes: list[tuple[int, ...]]) -> int:
    total = 0
    for shape in shapes:
        count = 1
        for size in shape:
            count *= size
        total += count
    return total


def split_noise(c: TDMPC2Config, normal: torch.Tensor, uniform: torch.Tensor) -> NoiseBank:
    """Flat noise (..., n_normal) and (..., n_uniform) -> NoiseBank views (leading dims kept)."""
    normal_shapes, uniform_shapes = noise_shapes(c)
    parts: list[torch.Tensor] = []
    for flat, shapes in ((normal, normal_shapes), (uniform, uniform_shapes)):
        lead = flat.shape[:-1]
        offset = 0
        for shape in shapes:
            size = _numel([shape])
            parts.append(flat[..., offset : offset + size].reshape(*lead, *shape))
            offset += size
    return NoiseBank(*parts)


class TDMPC2Policy(ServedModule):
    """The served TD-MPC2 step: plan (MPPI) or prior (fast mode), robot units out."""

    action_low: torch.Tensor
    action_span: torch.Tensor
    bank_normal: torch.Tensor
    bank_uniform: torch.Tensor
    explore: torch.Tensor

    def __init__(self, config: TDMPC2Config, model: WorldModel | None = None) -> None:
        super().__init__()
        self.config = config
        self.model = model if model is not None else WorldModel(config)
        low, high = config.bounds
        self.register_buffer("action_low", torch.tensor(low), persistent=False)
        self.register_buffer(
            "action_span", torch.tensor(high) - torch.tensor(low), persistent=False
        )
        self.register_buffer("explore", torch.tensor(float(config.explore)), persistent=False)
        normal_shapes, uniform_shapes = noise_shapes(config)
        self.n_normal, self.n_uniform = _numel(normal_shapes), _numel(uniform_shapes)
        generator = torch.Generator().manual_seed(config.noise_seed)
        bank_normal = torch.randn(self.n_normal, generator=generator)
        bank_uniform = torch.rand(self.n_uniform, generator=generator).clamp(1e-6, 1 - 1e-6)
        self.register_buffer("bank_normal", bank_normal, persistent=False)
        self.register_buffer("bank_uniform", bank_uniform, persistent=False)
        # The dynamics and reward heads fused for the inner loop (FP32), and with `bf16` every
        # planning weight pre-cast: derived from the model, never saved (see fused.py).
        planning = config.mode == "plan"  # fast mode runs the model's own layers
        self.fused = PlannerWeights(self.model) if planning else None
        self.fused_half = (
            PlannerWeights(self.model, torch.bfloat16)
            if planning and config.compute == "bf16"
            else None
        )

    @property
    def policy_type(self) -> str:
        return "tdmpc2"

    def extra_repr(self) -> str:
        # In repr, hence in the runner's compile-cache key: the settings that change the graph.
        c = self.config
        text = f"mode={c.mode}, compute={c.compute}, horizon={c.horizon}, samples={c.num_samples}"
        return text if c.prior_steps is None else f"{text}, prior_steps={c.prior_steps}"

    def noise_bank(self) -> NoiseBank:
        """The fixed noise a plan uses where `fixed_noise` is 1."""
        return split_noise(self.config, self.bank_normal, self.bank_uniform)

    def forward(
        self,
        frames: torch.Tensor,
        obs: torch.Tensor,
        prev_mean: torch.Tensor,
        episode_start: torch.Tensor,
        fixed_noise: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # The runner runs its reduced-precision tiers under autocast: the cue for `bf16` to plan
        # on its pre-cast weights (a trace-time constant under torch.compile, no data branch).
        reduced = torch.is_autocast_enabled(obs.device.type) and self.fused_half is not None
        weights = self.fused_half if reduced and self.fused_half is not None else self.fused
        with torch.autocast(obs.device.type, enabled=False):
            actions, mean = self._step(obs, prev_mean, episode_start, fixed_noise, weights)
        return actions.float(), mean.float()

    def compile_options(self) -> dict[str, object]:
        """Inductor settings for the runner's compiled tiers. A plan's layer norms reduce rows of
        up to mlp_dim (1792 for 48M); inductor makes a row wider than 1024 a looped reduction,
        which reads the row twice, unless `multi_kernel` lets it also build the one-pass
        (persistent) form and keep whichever runs faster at the first call. Measured on an
        H100, bf16 plans, GPU time per plan: 5M 1.500 -> 1.385 ms, 48M 2.863 -> 2.684 ms. That
        choice is made per process and was seen to go wrong (norm_kernels' module doc); the
        step's norms now mostly run as Triton kernels, so this serves the other reductions."""
        return {"triton.multi_kernel": 1} if self.config.mode == "plan" else {}

    def precision_scope(self) -> contextlib.AbstractContextManager[object]:
        """What the runner enters around its reduced-precision tiers (build, capture, run) and
        never around eager FP32: TF32 matmuls for `compute: tf32`, nothing otherwise. The flag is
        process-wide and torch.compile guards on it, so it is set only there, and restored."""
        if self.config.compute != "tf32":
            return contextlib.nullcontext()
        return tf32_matmuls()

    def _step(
        self,
        obs: torch.Tensor,
        prev_mean: torch.Tensor,
        episode_start: torch.Tensor,
        fixed_noise: torch.Tensor,
        weights: PlannerWeights | None,  # None in fast mode, which has no inference layout
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.config.mode == "prior":
            plan = self.prior_rollout(obs)
            return self.to_robot(plan), plan
        batch = obs.shape[0]
        fixed = fixed_noise.reshape(batch, 1) > 0.5
        # Fresh noise from the device's generator; the bank where a caller asked for it.
        normal = torch.randn(batch, self.n_normal, device=obs.device, dtype=torch.float32)
        uniform = torch.rand(batch, self.n_uniform, device=obs.device, dtype=torch.float32)
        normal = torch.where(fixed, self.bank_normal, normal)
        uniform = torch.where(fixed, self.bank_uniform, uniform.clamp(1e-6, 1 - 1e-6))
        noise = split_noise(self.config, normal, uniform)
        actions, mean = self.plan(obs, prev_mean, episode_start, noise, weights)
        return self.to_robot(actions), mean

    def to_robot(self, actions: torch.Tensor) -> torch.Tensor:
        """Actions in [-1, 1] -> robot units (action -1 -> action_low, +1 -> action_high)."""
        return self.action_low + (actions.clamp(-1, 1) + 1) * 0.5 * self.action_span

    # ---- Fast mode ---------------------------------------------------------------------------

    def prior_rollout(self, obs: torch.Tensor) -> torch.Tensor:
        """The policy prior's mean actions along its own latent rollout for `prior_steps`
        steps (all `horizon` when unset), the last one repeated to fill the chunk:
        (B, horizon, action)."""
        horizon = self.config.horizon
        steps = self.config.prior_steps or horizon
        z = self.model.encode(obs)
        actions = []
        for t in range(steps):
            a = self.model.pi_mean(z)
            actions.append(a)
            if t + 1 < steps:
                z = self.model.next(z, a)
        actions.extend(actions[-1:] * (horizon - steps))  # held: no dynamics to run for them
        return torch.stack(actions, dim=1)

    # ---- MPPI --------------------------------------------------------------------------------

    def plan(
        self,
        obs: torch.Tensor,
        prev_mean: torch.Tensor,
        episode_start: torch.Tensor,
        noise: NoiseBank,
        weights: PlannerWeights | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One MPPI plan for noise `noise` (batched NoiseBank): (chosen actions, final mean),
        both (B, horizon, action) in [-1, 1]. `weights`: the inference layout to plan on (the
        FP32 one by default)."""
        w = weights if weights is not None else self.fused
        if w is None:  # a planner built for fast mode (mode: prior) has no inference layout
            raise RuntimeError("this TD-MPC2 module was built for fast mode (mode: prior)")
        c, m = self.config, self.model
        batch, horizon, p = obs.shape[0], c.horizon, c.num_pi_trajs
        z = m.encode(obs)  # (B, latent)
        dtype = w.first_z_w.dtype
        # Every sample starts from the same z: its part of the first layers, once per plan.
        z_first = w.first_z(z.to(dtype)).unsqueeze(1)  # (B, 1, 2 mlp)

        # Trajectories of the policy prior, on the planner's layout (and precision).
        z_pi = z.to(dtype).unsqueeze(1).expand(batch, p, z.shape[-1])
        pi_actions = []
        for t in range(horizon):
            a = self._pi_sample(z_pi, noise.pi_eps[:, t], w)
            pi_actions.append(a)
            if t + 1 < horizon:
                first = z_first if t == 0 else w.first_z(z_pi)
                z_pi, _ = w.step(first, w.first_a(w.pad_actions(a.to(dtype))))
        prior = torch.stack(pi_actions, dim=1)  # (B, H, P, A)

        # Warm start: the previous mean, one step on; nothing at an episode start.
        warm = (1.0 - episode_start.reshape(batch, 1, 1)) * prev_mean
        mean = torch.cat([warm[:, 1:], torch.zeros_like(warm[:, :1])], dim=1)
        std = torch.full_like(mean, c.max_std)

        heads = torch.topk(noise.head_keys, 2, dim=-1).indices  # (B, iterations, 2), at once
        score = elite_actions = None
        for i in range(c.planning_iterations):
            sampled = mean.unsqueeze(2) + std.unsqueeze(2) * noise.sample_eps[:, i]
            actions = torch.cat([prior, sampled.clamp(-1, 1)], dim=2)  # (B, H, N, A)
            # Every step's action part of the first layers in one matmul (see fused.py).
            actions_first = w.first_a(w.pad_actions(actions).to(dtype))  # (B, H, N, 2 mlp)
            value = self.estimate_value(
                z_first, actions_first, noise.value_eps[:, i], heads[:, i], w
            )
            value = value.nan_to_num(0.0)  # (B, N)
            # The elites, best first: one sort of the row is one kernel on a GPU, where topk
            # takes two (a selection, then a sort of what it selected).
            ranked_value, ranked_index = torch.sort(value, dim=1, descending=True)
            elite_value = ranked_value[:, : c.num_elites]  # (B, E)
            elite_index = ranked_index[:, : c.num_elites]
            index = elite_index[:, None, :, None].expand(batch, horizon, c.num_elites, c.action_dim)
            elite_actions = torch.gather(actions, 2, index)  # (B, H, E, A)
            max_value = elite_value.max(dim=1, keepdim=True).values
            score = torch.exp(c.temperature * (elite_value - max_value))
            score = score / score.sum(dim=1, keepdim=True)  # (B, E)
            weight = score[:, None, :, None]
            total = score.sum(dim=1)[:, None, None] + 1e-9
            mean = (weight * elite_actions).sum(dim=2) / total
            spread = (weight * (elite_actions - mean.unsqueeze(2)) ** 2).sum(dim=2) / total
            std = spread.sqrt().clamp(c.min_std, c.max_std)
        if score is None or elite_actions is None:  # unreachable: the config has iterations >= 1
            raise RuntimeError("the planner ran no iteration")

        # One elite by a Gumbel-max draw over the final scores.
        gumbel = -torch.log(-torch.log(noise.elite_uniform))
        choice = torch.argmax(score.log() + gumbel, dim=1)  # (B,)
        index = choice[:, None, None, None].expand(batch, horizon, 1, c.action_dim)
        chosen = torch.gather(elite_actions, 2, index).squeeze(2)  # (B, H, A)
        chosen = chosen + self.explore * std * noise.explore_eps
        return chosen.clamp(-1, 1), mean

    def estimate_value(
        self,
        z_first: torch.Tensor,
        actions_first: torch.Tensor,
        pi_eps: torch.Tensor,
        heads: torch.Tensor,
        w: PlannerWeights,
    ) -> torch.Tensor:
        """Discounted predicted rewards of each action sequence, plus the discounted mean of the
        chosen Q heads at the horizon: z_first (B, 1, 2 mlp) (the shared start latent's part of
        the first layers), actions_first (B, H, N, 2 mlp) (each step's action part,
        `PlannerWeights.first_a`) -> (B, N)."""
        c, m = self.config, self.model
        z, h = w.step(z_first, actions_first[:, 0])
        hidden, alive = [h], [torch.ones_like(actions_first[:, 0, :, :1], dtype=torch.float32)]
        for t in range(c.horizon):
            if m.termination is not None:  # a property of the model, not of the data
                ended = m.terminated(z.float()) if w.dtype is None else w.terminated(z)
                alive.append(alive[-1] * (1.0 - ended))
            if t + 1 < c.horizon:
                z, h = w.step(w.first_z(z), actions_first[:, t + 1])
                hidden.append(h)
        rewards = w.rewards(torch.stack(hidden), self.model.bins)  # (H, B, N, 1), one matmul
        ret = torch.zeros_like(alive[0])
        discount = 1.0
        for t in range(c.horizon):
            live = alive[min(t, len(alive) - 1)]  # not ended before step t (always, not episodic)
            ret = ret + discount * live * rewards[t]
            discount *= c.discount
        final = self._pi_sample(z, pi_eps, w)
        q = w.q_avg(z, final, heads, m.bins)
        return (ret + discount * alive[-1] * q).squeeze(-1)

    def _pi_sample(self, z: torch.Tensor, eps: torch.Tensor, w: PlannerWeights) -> torch.Tensor:
        """The policy prior's sampled action (FP32) for latents on the planner's layout: the
        model's own layers in FP32, the pre-cast ones otherwise."""
        m = self.model
        if w.dtype is None:
            return m.pi_sample(z, eps)
        return w.pi_sample(z, eps, m.log_std_min, m.log_std_dif)


@contextlib.contextmanager
def tf32_matmuls() -> Iterator[None]:
    """TF32 for FP32 matmuls (cuBLAS and cuDNN) inside the block; the previous flags after."""
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = matmul
        torch.backends.cudnn.allow_tf32 = cudnn
