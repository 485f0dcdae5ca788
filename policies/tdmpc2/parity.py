"""Parity of a reduced-precision planner: the value its plan gives up, judged by the FP32 model.

MPPI keeps the 64 best of 512 sampled plans and draws one of them; a half-precision or TF32
matmul moves predicted values by a little, which is enough to swap samples near the elite
boundary or the draw, so the chosen plan can differ entirely from FP32's while being as good.
Elementwise comparison then measures luck, not correctness. What matters is whether the plan is
as good, so with the noise fixed (the codec's examples plan with the fixed bank) each plan is
scored by one deterministic FP32 value:

    J(plan) = sum_t discount^t R(z_t, a_t) + discount^H mean_i Q_i(z_H, pi_mean(z_H))

(z_0 = h(obs), z_{t+1} = d(z_t, a_t), every Q head, the prior's mean action, termination as the
planner applies it), and the error of a tier on one observation is its regret

    max over the chosen plan and the new mean of (J(reference's) - J(tier's)) / gain

where gain is what the reference's chosen plan gains over the average of a fixed set of
uniformly random plans (at least their standard deviation, for a model under which planning
gains little): the fraction of planning's gain a tier gives up. A planner that returns random
plans scores about 1; corrupted weights or a broken planner, a good part of 1; an honest
reduced-precision planner a few hundredths, or below 0 when its plan happens to be better
(measured on random 1M and 5M humanoid agents on a CPU, 6 observations each: BF16 up to
0.05, weights perturbed by 5% of their std up to 0.06, random plans or the prior's rollout
1.0 to 1.4).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from policies.base import RobotContext
from policies.tdmpc2.model import WorldModel
from policies.tdmpc2.planner import TDMPC2Policy


@torch.no_grad()
def plan_values(model: WorldModel, obs: torch.Tensor, plans: torch.Tensor) -> torch.Tensor:
    """J of each plan, in FP32 on the model's device: obs (obs_dim,), plans (K, H, A) in [-1, 1]
    -> (K,) float64."""
    c = model.config
    k, horizon = plans.shape[0], plans.shape[1]
    z = model.encode(obs.reshape(1, -1)).expand(k, -1)
    value = torch.zeros(k, 1, dtype=torch.float64, device=obs.device)
    alive = torch.ones_like(value)
    discount = 1.0
    for t in range(horizon):
        value = value + discount * alive * model.reward_value(z, plans[:, t]).double()
        z = model.next(z, plans[:, t])
        discount *= c.discount
        if model.termination is not None:
            alive = alive * (1.0 - model.terminated(z).double())
    every_head = torch.arange(c.num_q, device=obs.device).reshape(1, -1)
    q = model.q_avg(z.unsqueeze(0), model.pi_mean(z).unsqueeze(0), every_head)[0]
    return (value + discount * alive * q.double()).squeeze(-1)


class ValueRegret:
    """The ParityMeasure (policies.tensor_policy) of a TD-MPC2 planner: see the module doc."""

    name = "value regret"
    setting = "parity_regret (in the checkpoint's config.json)"  # named when a tier is refused

    def __init__(self, module: TDMPC2Policy, tolerance: float, random_plans: int = 256) -> None:
        self.module = module
        self.tolerance = tolerance
        c = module.config
        generator = torch.Generator().manual_seed(c.noise_seed + 1)
        shape = (random_plans, c.horizon, c.action_dim)
        self._random = torch.rand(shape, generator=generator) * 2 - 1
        low, high = c.bounds
        self._low, self._span = np.array(low), np.array(high) - np.array(low)

    def unit(self, actions: np.ndarray) -> np.ndarray:
        """Robot units -> [-1, 1] (the inverse of TDMPC2Policy.to_robot)."""
        return np.asarray((actions - self._low) / self._span * 2 - 1, dtype=np.float32)

    def error(
        self, context: RobotContext, outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray]
    ) -> float:
        """Regret of the tier's chosen plan and new mean against the reference's, in spreads."""
        model = self.module.model
        device = model.bins.device
        plans = np.stack(
            [
                self.unit(np.asarray(outputs[0])),
                self.unit(np.asarray(reference[0])),
                np.asarray(outputs[1], dtype=np.float32),
                np.asarray(reference[1], dtype=np.float32),
            ]
        )
        candidates = torch.cat([torch.from_numpy(plans), self._random]).to(device)
        obs = torch.from_numpy(np.asarray(context.state, dtype=np.float32)).to(device)
        with torch.autocast(device.type, enabled=False):
            values = plan_values(model, obs, candidates.clamp(-1, 1)).cpu().numpy()
        random = values[4:]
        gain = max(float(values[1] - random.mean()), float(random.std())) or 1.0
        chosen = (values[1] - values[0]) / gain
        mean = (values[3] - values[2]) / gain
        return float(max(chosen, mean))
