"""The benchmark's reference for TD-MPC2: an eager FP32 planner written the way the official
`TDMPC2.act` / `_plan` runs (nicklashansen/tdmpc2 at e9f5932), structure included, on Tempo's
world-model weights (`tempo bench --tdmpc2`, controller.tools.bench_tdmpc2, times Tempo's
planner against it). The family's own: it is TD-MPC2's planning, written another way."""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F

from policies.tdmpc2.config import TDMPC2Config
from policies.tdmpc2.model import StackedLinear, WorldModel


class OfficialStylePlanner:
    """Plans the way the official agent does, on Tempo's world-model weights (eager FP32)."""

    def __init__(self, model: WorldModel, config: TDMPC2Config, device: torch.device) -> None:
        self.m = model
        self.c = config
        self.device = device
        self.prev_mean = torch.zeros(config.horizon, config.action_dim, device=device)

    def two_hot_inv(self, x: torch.Tensor) -> torch.Tensor:
        bins = torch.linspace(self.c.vmin, self.c.vmax, self.c.num_bins, device=x.device)
        x = torch.sum(F.softmax(x, dim=-1) * bins, dim=-1, keepdim=True)
        return torch.sign(x) * (torch.exp(torch.abs(x)) - 1)

    def pi(self, z: torch.Tensor) -> torch.Tensor:
        mean, log_std = self.m.pi(z).chunk(2, dim=-1)
        log_std = self.m.log_std_min + 0.5 * self.m.log_std_dif * (torch.tanh(log_std) + 1)
        eps = torch.randn_like(mean)
        log_prob = (-0.5 * eps.pow(2) - log_std - 0.9189385175704956).sum(-1, keepdim=True)
        scaled = log_prob * eps.shape[-1]
        action = mean + eps * log_std.exp()
        mean, action = torch.tanh(mean), torch.tanh(action)
        log_prob = log_prob - torch.log(F.relu(1 - action.pow(2)) + 1e-6).sum(-1, keepdim=True)
        _entropy = scaled / (log_prob + 1e-8)  # the official pi builds its info dict too
        return action

    def q_avg(self, z: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        h = torch.cat([z, a], dim=-1).unsqueeze(0)  # every head, as the vmapped ensemble does
        layers = cast(list[StackedLinear], list(self.m.qs.layers))
        for layer in layers:
            h = torch.baddbmm(
                layer.bias.unsqueeze(1), h.expand(layer.weight.shape[0], -1, -1),
                layer.weight.transpose(1, 2),
            )  # fmt: skip
            if layer.ln is not None:
                h = F.layer_norm(h, h.shape[-1:])
                h = F.mish(h * layer.ln.weight.unsqueeze(1) + layer.ln.bias.unsqueeze(1))
        heads = torch.randperm(self.c.num_q, device=h.device)[:2]
        return self.two_hot_inv(h[heads]).sum(0) / 2

    def estimate_value(self, z: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        g: torch.Tensor | float = 0.0
        discount = 1.0
        termination = torch.zeros(self.c.num_samples, 1, device=z.device)
        for t in range(self.c.horizon):
            za = torch.cat([z, actions[t]], dim=-1)
            reward = self.two_hot_inv(self.m.reward(za))
            z = self.m.dynamics(za)
            g = g + discount * (1 - termination) * reward
            discount = discount * self.c.discount
        action = self.pi(z)
        return g + discount * (1 - termination) * self.q_avg(z, action)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, t0: bool = False) -> torch.Tensor:
        c, dev = self.c, self.device
        obs = obs.to(dev, non_blocking=True).unsqueeze(0)
        z = self.m.encoder(obs)
        pi_actions = torch.empty(c.horizon, c.num_pi_trajs, c.action_dim, device=dev)
        _z = z.repeat(c.num_pi_trajs, 1)
        for t in range(c.horizon - 1):
            pi_actions[t] = self.pi(_z)
            _z = self.m.dynamics(torch.cat([_z, pi_actions[t]], dim=-1))
        pi_actions[-1] = self.pi(_z)
        z = z.repeat(c.num_samples, 1)
        mean = torch.zeros(c.horizon, c.action_dim, device=dev)
        std = torch.full((c.horizon, c.action_dim), c.max_std, dtype=torch.float, device=dev)
        if not t0:
            mean[:-1] = self.prev_mean[1:]
        actions = torch.empty(c.horizon, c.num_samples, c.action_dim, device=dev)
        actions[:, : c.num_pi_trajs] = pi_actions
        for _ in range(c.planning_iterations):
            r = torch.randn(c.horizon, c.num_samples - c.num_pi_trajs, c.action_dim, device=dev)
            actions[:, c.num_pi_trajs :] = (mean.unsqueeze(1) + std.unsqueeze(1) * r).clamp(-1, 1)
            value = self.estimate_value(z, actions).nan_to_num(0)
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
        logits = score.squeeze(1).log()
        gumbels = -torch.empty_like(logits).exponential_().log()
        rand_idx = (logits + gumbels).softmax(0).argmax(-1)
        chosen = torch.index_select(elite_actions, 1, rand_idx).squeeze(1)
        self.prev_mean.copy_(mean)
        return chosen[0].clamp(-1, 1).cpu()
