"""The TD-MPC2 world model (Hansen, Su, Wang; ICLR 2024), as the official implementation
(nicklashansen/tdmpc2) defines it, for inference.

Five learned components share one latent space z:

    encoder      z = h(s)                state -> latent, ends in SimNorm
    dynamics     z' = d(z, a)            latent transition, ends in SimNorm
    reward       r = R(z, a)             101-bin two-hot logits in symlog space over [-10, 10]
    termination  p = T(z)                optional (episodic tasks), logit
    policy prior a ~ p(z)                Gaussian with bounded log-std, tanh-squashed
    Q-ensemble   q_i = Q_i(z, a)         num_q heads with stacked parameters, two-hot logits

Every hidden layer is Linear -> LayerNorm -> Mish; the encoder and dynamics end in Linear ->
LayerNorm -> SimNorm (softmax over groups of 8). Parameter names follow the official layout
(`<i>.weight`, `<i>.ln.weight`, ...), under `encoder.`, `dynamics.`, `reward.`, `termination.`,
`pi.` and `qs.` (whose tensors carry the head as their first dimension).

Randomness is never drawn here: the policy prior takes its standard-normal noise `eps` as an
argument and the Q-ensemble the indices of the heads to average, so the planner decides where
noise comes from (see `policies.tdmpc2.planner`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from policies.tdmpc2.config import TDMPC2Config

# ---- Building blocks ---------------------------------------------------------------------------


class SimNorm(nn.Module):
    """Simplicial normalization: a softmax over each group of `group` consecutive entries."""

    def __init__(self, group: int) -> None:
        super().__init__()
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        return F.softmax(x.reshape(*shape[:-1], -1, self.group), dim=-1).reshape(shape)


class NormedLinear(nn.Linear):
    """Linear -> LayerNorm -> activation (Mish unless given)."""

    def __init__(self, in_dim: int, out_dim: int, act: nn.Module | None = None) -> None:
        super().__init__(in_dim, out_dim)
        self.ln = nn.LayerNorm(out_dim)
        self.act = act if act is not None else nn.Mish()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.ln(super().forward(x)))


def mlp(
    in_dim: int, hidden: list[int], out_dim: int, out_act: nn.Module | None = None
) -> nn.Sequential:
    """Hidden NormedLinear layers, then a plain Linear (or a NormedLinear ending in `out_act`)."""
    dims = [in_dim, *hidden]
    layers: list[nn.Module] = [NormedLinear(a, b) for a, b in zip(dims[:-1], dims[1:], strict=True)]
    if out_act is None:
        layers.append(nn.Linear(dims[-1], out_dim))
    else:
        layers.append(NormedLinear(dims[-1], out_dim, act=out_act))
    return nn.Sequential(*layers)


class StackedNorm(nn.Module):
    """LayerNorm affine parameters of every head: (num_q, dim) each."""

    def __init__(self, num_q: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(num_q, dim))
        self.bias = nn.Parameter(torch.zeros(num_q, dim))


class StackedLinear(nn.Module):
    """One layer of every head: weight (num_q, out, in), bias (num_q, out), and for hidden
    layers a LayerNorm and Mish after it."""

    def __init__(self, num_q: int, fan_in: int, fan_out: int, hidden: bool) -> None:
        super().__init__()
        bound = 1.0 / fan_in**0.5  # nn.Linear's own initialisation, per head
        self.weight = nn.Parameter(torch.empty(num_q, fan_out, fan_in).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(num_q, fan_out).uniform_(-bound, bound))
        self.ln = StackedNorm(num_q, fan_out) if hidden else None

    def forward(self, h: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
        """h (B, 1 or k, N, in), heads (B, k) -> (B, k, N, out) for the chosen heads."""
        h = torch.matmul(h, self.weight[heads].transpose(-1, -2)) + self.bias[heads].unsqueeze(2)
        if self.ln is None:
            return h
        h = F.layer_norm(h, h.shape[-1:])
        h = h * self.ln.weight[heads].unsqueeze(2) + self.ln.bias[heads].unsqueeze(2)
        return F.mish(h)


class QEnsemble(nn.Module):
    """num_q MLPs of identical shape (NormedLinear, NormedLinear, Linear) with stacked
    parameters: `layers.<i>.weight` is (num_q, out, in). `forward` evaluates only the chosen
    heads, in one batched matmul per layer."""

    def __init__(self, num_q: int, in_dim: int, hidden: int, out_dim: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [
                StackedLinear(num_q, in_dim, hidden, hidden=True),
                StackedLinear(num_q, hidden, hidden, hidden=True),
                StackedLinear(num_q, hidden, out_dim, hidden=False),
            ]
        )

    def forward(self, x: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
        """x (B, N, in), heads (B, k) int64 -> logits (B, k, N, out) of the chosen heads."""
        h = x.unsqueeze(1)  # (B, 1, N, in): broadcast over the k heads
        for layer in self.layers:
            h = layer(h, heads)
        return h


# ---- Two-hot regression ------------------------------------------------------------------------


def symexp(x: torch.Tensor) -> torch.Tensor:
    return torch.sign(x) * (torch.exp(torch.abs(x)) - 1)


def two_hot_inv(logits: torch.Tensor, bins: torch.Tensor) -> torch.Tensor:
    """Logits over the bins (..., num_bins) -> the scalar they encode (..., 1): the expected bin
    centre under the softmax, mapped back from symlog space."""
    expected = torch.sum(F.softmax(logits, dim=-1) * bins, dim=-1, keepdim=True)
    return symexp(expected)


# ---- The world model ---------------------------------------------------------------------------


class WorldModel(nn.Module):
    """TD-MPC2's implicit world model (single task, state observations)."""

    bins: torch.Tensor
    log_std_min: torch.Tensor
    log_std_dif: torch.Tensor

    def __init__(self, config: TDMPC2Config) -> None:
        super().__init__()
        c = config
        self.config = c
        simnorm = SimNorm(c.simnorm_dim)
        za = c.latent_dim + c.action_dim
        self.encoder = mlp(
            c.obs_dim, [c.enc_dim] * max(c.num_enc_layers - 1, 1), c.latent_dim, simnorm
        )
        self.dynamics = mlp(za, [c.mlp_dim, c.mlp_dim], c.latent_dim, simnorm)
        self.reward = mlp(za, [c.mlp_dim, c.mlp_dim], c.num_bins)
        self.termination = mlp(c.latent_dim, [c.mlp_dim, c.mlp_dim], 1) if c.episodic else None
        self.pi = mlp(c.latent_dim, [c.mlp_dim, c.mlp_dim], 2 * c.action_dim)
        self.qs = QEnsemble(c.num_q, za, c.mlp_dim, c.num_bins)
        # Weights keep PyTorch's default initialisation: a random model then predicts rewards
        # and values that differ between actions, so planning with it does real work.
        self.register_buffer("log_std_min", torch.tensor(c.log_std_min))
        self.register_buffer("log_std_dif", torch.tensor(c.log_std_max - c.log_std_min))
        self.register_buffer("bins", torch.linspace(c.vmin, c.vmax, c.num_bins), persistent=False)

    def encode(self, obs: torch.Tensor) -> torch.Tensor:
        """h: observation (..., obs_dim) -> latent (..., latent_dim)."""
        return self.encoder(obs)

    def next(self, z: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """d: the latent one step later."""
        return self.dynamics(torch.cat([z, a], dim=-1))

    def reward_value(self, z: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """R: the predicted reward, decoded from its two-hot logits (..., 1)."""
        return two_hot_inv(self.reward(torch.cat([z, a], dim=-1)), self.bins)

    def terminated(self, z: torch.Tensor) -> torch.Tensor:
        """T: 1.0 where the model predicts termination (probability > 0.5), else 0.0."""
        if self.termination is None:
            raise RuntimeError("this model has no termination head (config.episodic is false)")
        return (torch.sigmoid(self.termination(z)) > 0.5).float()

    def pi_mean(self, z: torch.Tensor) -> torch.Tensor:
        """The policy prior's mean action, tanh-squashed (fast mode)."""
        mean, _ = self.pi(z).chunk(2, dim=-1)
        return torch.tanh(mean)

    def pi_sample(self, z: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
        """An action from the policy prior for standard-normal noise `eps`: the Gaussian's mean
        plus eps times its std (log-std squashed into [log_std_min, log_std_max]), then tanh."""
        mean, log_std = self.pi(z).chunk(2, dim=-1)
        log_std = self.log_std_min + 0.5 * self.log_std_dif * (torch.tanh(log_std) + 1)
        return torch.tanh(mean + eps * log_std.exp())

    def q_avg(self, z: torch.Tensor, a: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
        """The mean of the chosen Q heads' values. z (B, N, latent), a (B, N, action),
        heads (B, k) -> (B, N, 1)."""
        logits = self.qs(torch.cat([z, a], dim=-1), heads)  # (B, k, N, bins)
        return two_hot_inv(logits, self.bins).mean(dim=1)
