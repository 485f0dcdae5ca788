"""The planner's weights in an inference layout: fewer, larger matmuls per horizon step.

Why: a plan runs the dynamics and the reward head on the same input [z, a] at every horizon
step of every MPPI iteration (48 times for horizon 3 and 8 iterations), and on a GPU each small
matmul is one kernel whose launch and tail cost more than its arithmetic. Here the two heads'
first layers are one matrix (out 2 * mlp_dim), their second layers one batched matmul over
stacked weights, and the first layer's z and action columns are apart: the actions of every
step of an iteration are known before its rollout, so W_a a is one matmul over all of them
(`first_a`), and each step adds W_z z (`first_z`; once per plan at the first step, where every
sample shares the start latent). The reward head's last layer runs once per iteration over
every step's hidden state.

`model.py` keeps the paper's layout and the checkpoints' parameter names; this module only
derives tensors from it. They are non-persistent buffers (never saved, moved by `.to()` like
the parameters) rebuilt by `refresh`, which runs after every `load_state_dict` of the world
model (a hook); after editing parameters in place any other way, call `refresh` yourself.
With `dtype` set (the planner's pre-cast half precision) the policy prior and the Q-ensemble
are held here too, cast once instead of by autocast on every call, and on a GPU the step's Mish
norms up to 1024 wide and its LayerNorm + SimNorm run as Triton kernels
(`policies.tdmpc2.norm_kernels`).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from policies.tdmpc2.model import NormedLinear, StackedLinear, WorldModel, two_hot_inv
from policies.tdmpc2.norm_kernels import norm_act

Layer = tuple[torch.Tensor, ...]  # weight, bias[, ln weight, ln bias]
ALIGN = 8  # elements: 16 bytes of BF16, 32 of FP32


def _pad_columns(weight: torch.Tensor, extra: int) -> torch.Tensor:
    return F.pad(weight, (0, extra))


def _pad_rows(tensor: torch.Tensor, extra: int, bias: bool = False) -> torch.Tensor:
    """Zero outputs after a weight's (..., out, in) rows, or a bias's (..., out) entries."""
    return F.pad(tensor, (0, extra) if bias else (0, 0, 0, extra))


def normed(x: torch.Tensor, layer: Layer) -> torch.Tensor:
    """Linear -> LayerNorm -> Mish, from a layer's tensors."""
    w, b, ln_w, ln_b = layer
    h = F.linear(x, w, b)
    return F.mish(F.layer_norm(h, h.shape[-1:], ln_w, ln_b))


def _layers(seq: nn.Sequential) -> list[Layer]:
    out: list[Layer] = []
    for layer in seq:
        if isinstance(layer, NormedLinear):
            out.append((layer.weight, layer.bias, layer.ln.weight, layer.ln.bias))
        elif isinstance(layer, nn.Linear):
            out.append((layer.weight, layer.bias))
    return out


class PlannerWeights(nn.Module):
    """Tensors derived from a WorldModel for the planner's inner loop (see the module doc)."""

    # The one buffer read as an attribute (the planner takes the layout's dtype from it),
    # declared so that type checkers see a tensor; the others are read by name through `t`.
    first_z_w: torch.Tensor

    def __init__(self, model: WorldModel, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.dtype = dtype  # None: the model's own dtype (FP32)
        c = model.config
        self.latent_dim, self.action_dim, self.num_bins = c.latent_dim, c.action_dim, c.num_bins
        # Zero columns after the action and zero rows after the bins, to multiples of 8: cuBLAS
        # runs slower unaligned kernels when a matrix's leading dimension is not 16-byte aligned
        # (an [z, a] input of 512 + 21 columns, 101 two-hot logits). Zeros add exact zeros.
        self.action_pad, self.bins_pad = -c.action_dim % ALIGN, -c.num_bins % ALIGN
        self.simnorm_group = model.config.simnorm_dim
        self.refresh(model)
        # The model keeps only a weak reference: planners rebuilt on one model (another mode,
        # another compute) must not keep every earlier copy of the weights alive through it.
        ref = weakref.ref(self)

        def after_load(loaded: nn.Module, _incompatible: Any) -> None:
            weights = ref()
            if weights is not None:
                weights.refresh(loaded)  # type: ignore[arg-type]

        handle = model.register_load_state_dict_post_hook(after_load)
        weakref.finalize(self, handle.remove)

    def _put(self, name: str, tensor: torch.Tensor) -> None:
        tensor = tensor.detach()
        if self.dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(self.dtype)
        old = self._buffers.get(name)
        if (
            old is not None
            and old.shape == tensor.shape
            and old.dtype == tensor.dtype
            and (old.device == tensor.device)
        ):
            old.copy_(tensor)  # in place, like load_state_dict: a captured graph sees it too
        else:
            self.register_buffer(name, tensor.contiguous().clone(), persistent=False)

    @torch.no_grad()
    def refresh(self, model: WorldModel) -> None:
        """Re-derive every tensor from the model's current parameters."""
        dyn, rew = _layers(model.dynamics), _layers(model.reward)
        (d1, d2, d3), (r1, r2, r3) = dyn, rew
        # First layers side by side: rows [0, mlp) dynamics, [mlp, 2 mlp) reward.
        first = _pad_columns(torch.cat([d1[0], r1[0]]), self.action_pad)
        # Its z and action columns apart, each contiguous (a strided slice can cost a copy per
        # call in a compiled graph).
        self._put("first_z_w", first[:, : self.latent_dim])
        self._put("first_a_w", first[:, self.latent_dim :])
        self._put("first_b", torch.cat([d1[1], r1[1]]))
        self._put("first_ln_w", torch.stack([d1[2], r1[2]]).unsqueeze(1))  # (2, 1, mlp)
        self._put("first_ln_b", torch.stack([d1[3], r1[3]]).unsqueeze(1))
        # Second layers stacked for one bmm, transposed: (2, in, out).
        self._put("second_wt", torch.stack([d2[0].t(), r2[0].t()]))
        self._put("second_b", torch.stack([d2[1], r2[1]]).unsqueeze(1))  # (2, 1, mlp)
        self._put("second_ln_w", torch.stack([d2[2], r2[2]]).unsqueeze(1))
        self._put("second_ln_b", torch.stack([d2[3], r2[3]]).unsqueeze(1))
        for name, tensor in zip(("w", "b", "ln_w", "ln_b"), d3, strict=True):
            self._put(f"dyn_out_{name}", tensor)
        self._put("rew_out_w", _pad_rows(r3[0], self.bins_pad))
        self._put("rew_out_b", _pad_rows(r3[1], self.bins_pad, bias=True))
        last = len(model.qs.layers) - 1
        for i, stacked in enumerate(model.qs.layers):
            if not isinstance(stacked, StackedLinear):  # a ModuleList's items are typed Module
                raise TypeError(f"the Q-ensemble's layer {i} is not a StackedLinear")
            weight: torch.Tensor = stacked.weight  # may become a padded copy below
            bias: torch.Tensor = stacked.bias
            if i == 0:
                weight = _pad_columns(weight, self.action_pad)
            if i == last:
                weight = _pad_rows(weight, self.bins_pad)
                bias = _pad_rows(bias, self.bins_pad, bias=True)
            self._put(f"q{i}_w", weight)
            self._put(f"q{i}_b", bias)
            if stacked.ln is not None:
                self._put(f"q{i}_ln_w", stacked.ln.weight)
                self._put(f"q{i}_ln_b", stacked.ln.bias)
        if self.dtype is None:
            return
        for prefix, seq in (("pi", model.pi), ("term", model.termination)):
            if seq is None:
                continue
            for i, layer in enumerate(_layers(seq)):
                for name, tensor in zip(("w", "b", "ln_w", "ln_b"), layer, strict=False):
                    self._put(f"{prefix}{i}_{name}", tensor)

    def t(self, name: str) -> torch.Tensor:
        tensor: torch.Tensor = getattr(self, name)
        return tensor

    def pad_actions(self, a: torch.Tensor) -> torch.Tensor:
        """Actions (..., action) -> (..., action + action_pad), zeros after: the layout's input."""
        return F.pad(a, (0, self.action_pad)) if self.action_pad else a

    # ---- Dynamics and reward, fused ----------------------------------------------------------

    def first_z(self, z: torch.Tensor) -> torch.Tensor:
        """The z part of both first layers, bias included: (..., latent) -> (..., 2 mlp)."""
        return F.linear(z, self.t("first_z_w"), self.t("first_b"))

    def first_a(self, a: torch.Tensor) -> torch.Tensor:
        """The action part of both first layers, no bias: (..., padded action) -> (..., 2 mlp)."""
        return F.linear(a, self.t("first_a_w"))

    def step(self, z_part: torch.Tensor, a_part: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Both heads after their first matmul, whose z and action parts are added here: z_part
        (B, 1 or N, 2 mlp) (`first_z`, bias included), a_part (B, N, 2 mlp) (`first_a`) ->
        (next latent (B, N, latent), the reward head's last hidden state (B, N, mlp))."""
        batch, n, width = a_part.shape
        split = (batch, n, 2, width // 2)  # (B, N, 2 mlp) seen as (2, B, N, mlp): heads first
        h = norm_act(
            a_part.view(split).permute(2, 0, 1, 3),
            z_part.expand(batch, n, width).view(split).permute(2, 0, 1, 3),
            self.t("first_ln_w"),
            self.t("first_ln_b"),
        )  # (2, B N, mlp), head-major: what the batched matmul reads
        # The bias is added in the norm: baddbmm would first copy it, broadcast, into its
        # output (one more kernel, 2.8 us at 5M and 5 us at 48M on an H100).
        h = torch.bmm(h, self.t("second_wt")).unsqueeze(1)  # (2, 1, B N, mlp)
        bias = self.t("second_b").unsqueeze(1)  # (2, 1, 1, mlp)
        h = norm_act(h, bias, self.t("second_ln_w"), self.t("second_ln_b"))
        z = F.linear(h[0], self.t("dyn_out_w"), self.t("dyn_out_b"))
        z = norm_act(
            z[None, None],
            None,
            self.t("dyn_out_ln_w").unsqueeze(0),
            self.t("dyn_out_ln_b").unsqueeze(0),
            simnorm=self.simnorm_group,
        )
        return z.reshape(batch, n, -1), h[1].reshape(batch, n, -1)

    def rewards(self, hidden: torch.Tensor, bins: torch.Tensor) -> torch.Tensor:
        """The reward head's last layer and two-hot decode for every step at once:
        hidden (..., mlp) -> rewards (..., 1), FP32."""
        logits = F.linear(hidden, self.t("rew_out_w"), self.t("rew_out_b"))
        return two_hot_inv(logits[..., : self.num_bins].float(), bins)

    # ---- Q-ensemble; policy prior and termination pre-cast (only with `dtype` set) ---------

    def pi_sample(
        self,
        z: torch.Tensor,
        eps: torch.Tensor,
        log_std_min: torch.Tensor,
        log_std_dif: torch.Tensor,
    ) -> torch.Tensor:
        """WorldModel.pi_sample on the pre-cast weights; the squashing in FP32."""
        h = normed(z, self._layer("pi0"))
        h = normed(h, self._layer("pi1"))
        mean, log_std = F.linear(h, self.t("pi2_w"), self.t("pi2_b")).float().chunk(2, dim=-1)
        log_std = log_std_min + 0.5 * log_std_dif * (torch.tanh(log_std) + 1)
        return torch.tanh(mean + eps * log_std.exp())

    def q_avg(
        self, z: torch.Tensor, a: torch.Tensor, heads: torch.Tensor, bins: torch.Tensor
    ) -> torch.Tensor:
        """WorldModel.q_avg on the layout's (padded, maybe pre-cast) weights, for actions `a`
        (unpadded); the two-hot decode in FP32."""
        h = torch.cat([z, self.pad_actions(a.to(z.dtype))], dim=-1).unsqueeze(1)  # (B, 1, N, in)
        for i in range(3):
            w, b = self.t(f"q{i}_w")[heads], self.t(f"q{i}_b")[heads].unsqueeze(2)
            h = torch.matmul(h, w.transpose(-1, -2)) + b
            if i < 2:
                h = F.layer_norm(h, h.shape[-1:])
                ln_w, ln_b = self.t(f"q{i}_ln_w")[heads], self.t(f"q{i}_ln_b")[heads]
                h = F.mish(h * ln_w.unsqueeze(2) + ln_b.unsqueeze(2))
        return two_hot_inv(h[..., : self.num_bins].float(), bins).mean(dim=1)

    def terminated(self, z: torch.Tensor) -> torch.Tensor:
        """WorldModel.terminated on the pre-cast weights."""
        h = normed(z, self._layer("term0"))
        h = normed(h, self._layer("term1"))
        logit = F.linear(h, self.t("term2_w"), self.t("term2_b")).float()
        return (torch.sigmoid(logit) > 0.5).float()

    def _layer(self, prefix: str) -> Layer:
        return tuple(self.t(f"{prefix}_{n}") for n in ("w", "b", "ln_w", "ln_b"))
