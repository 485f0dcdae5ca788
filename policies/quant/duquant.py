"""DuQuant's calibration: smoothing, greedy block rotations and the zigzag permutation, computed
once from activation statistics (Lin et al., "DuQuant: Distributing Outliers via Dual
Transformation Makes Stronger Quantized LLMs", NeurIPS 2024).

In the paper's order, for one linear layer with input x (tokens, in) and weight W (out, in):

1. Smoothing moves part of each input channel's range into the weight:
   s_j = max|x_j|^alpha / max|W_:,j|^(1 - alpha).
2. A block-diagonal rotation R1, built greedily per block: find the channel with the largest
   magnitude, rotate it evenly across the block (an orthogonal matrix whose first row is
   1/sqrt(block) everywhere, after swapping that channel to the front), repeat; keep the
   product after the step that left the smallest peak.
3. The zigzag permutation: channels sorted by their magnitude after R1 are dealt to the blocks
   0, 1, ..., n-1, n-1, ..., 0, 0, 1, ... so that every block gets a similar share of the large
   ones.
4. A second greedy rotation R2 on the permuted channels, which now mixes the outliers that
   step 3 spread into every block.

The statistics are each channel's largest magnitude over the calibration tokens and a few of
the tokens with the largest values (`ActivationStats`); the greedy search runs on those rows
(their peaks are what the 8-bit activation scale must cover). All of it in float64 on the CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from policies.quant.transform import fold_scales, rotate_blocks, transform_columns

_SCORED_WEIGHT_ROWS = 256


@dataclass
class ActivationStats:
    """What calibration keeps of one layer's inputs: per-channel max |x| and the `keep` rows
    with the largest max |x|."""

    channel_max: torch.Tensor  # (in,) float64
    rows: torch.Tensor  # (<= keep, in) float64
    tokens: int = 0


class StatsCollector:
    """Accumulates ActivationStats over calibration batches."""

    def __init__(self, keep: int = 64) -> None:
        self._keep = keep
        self.stats: ActivationStats | None = None

    def update(self, x: torch.Tensor) -> None:
        # Reduced where x lives (the GPU, when calibrating there); only the results move.
        x = x.detach().reshape(-1, x.shape[-1])
        top = x.abs().amax(dim=1).topk(min(self._keep, x.shape[0])).indices
        channel_max = x.abs().amax(dim=0).to("cpu", torch.float64)
        peaks = x[top].to("cpu", torch.float64)
        if self.stats is None:
            self.stats = ActivationStats(channel_max, peaks, x.shape[0])
            return
        rows = torch.cat([self.stats.rows, peaks])
        keep = rows.abs().amax(dim=1).topk(min(self._keep, rows.shape[0])).indices
        self.stats = ActivationStats(
            torch.maximum(self.stats.channel_max, channel_max),
            rows[keep],
            self.stats.tokens + x.shape[0],
        )


@dataclass(frozen=True)
class Plan:
    """One layer's transform T = diag(1/smooth) R1 P R2 (any part None), all float64."""

    in_features: int
    block: int
    smooth: torch.Tensor | None  # (in_padded,)
    rot1: torch.Tensor | None  # (n_blocks, block, block), orthogonal
    perm: torch.Tensor | None  # (in_padded,) int64
    rot2: torch.Tensor | None

    @property
    def width(self) -> int:
        """in_features padded to whole blocks."""
        return math.ceil(self.in_features / self.block) * self.block

    def input_rotation(self) -> torch.Tensor | None:
        """The first step on the input side: diag(1/s) R1."""
        return self._first(-1.0)

    def weight_rotation(self) -> torch.Tensor | None:
        """The first step on the weight side: diag(s) R1."""
        return self._first(1.0)

    def _first(self, power: float) -> torch.Tensor | None:
        if self.smooth is None:
            return self.rot1
        rot1 = self.rot1
        if rot1 is None:
            eye = torch.eye(self.block, dtype=torch.float64)
            rot1 = eye.expand(self.width // self.block, -1, -1).clone()
        return fold_scales(rot1, self.smooth.pow(power))

    def transform_input(self, x: torch.Tensor) -> torch.Tensor:
        """x (m, in) -> x T (m, width)."""
        first = _cast(self.input_rotation(), x)
        return transform_columns(x, first, _index(self.perm, x), _cast(self.rot2, x), self.width)

    def transform_weight(self, weight: torch.Tensor) -> torch.Tensor:
        """W (out, in) -> W T^-T (out, width): y = (x T) (W T^-T)^T equals x W^T."""
        first = _cast(self.weight_rotation(), weight)
        perm, second = _index(self.perm, weight), _cast(self.rot2, weight)
        return transform_columns(weight, first, perm, second, self.width)


def _cast(t: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor | None:
    return None if t is None else t.to(device=like.device, dtype=like.dtype)


def _index(t: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor | None:
    return None if t is None else t.to(like.device)


def identity_plan(in_features: int, block: int) -> Plan:
    """No transform: plain round-to-nearest (RTN) W4A8."""
    return Plan(in_features, block, None, None, None, None)


def duquant_plan(
    weight: torch.Tensor,
    stats: ActivationStats,
    block: int,
    alpha: float | None = 0.5,
    steps: int = 32,
    seed: int = 0,
) -> Plan:
    """Smoothing (none when alpha is None), R1, zigzag permutation and R2 for a layer with
    `weight` (out, in) whose inputs gave `stats`."""
    in_features = weight.shape[1]
    if alpha is not None and not 0.0 <= alpha <= 1.0:
        raise ValueError(f"smoothing alpha must lie in [0, 1], got {alpha}")
    width = math.ceil(in_features / block) * block
    w = weight.detach().to("cpu", torch.float64)
    # A channel that calibration never saw active (a ReLU dead on every calibration token)
    # must not get a near-zero scale: live at serving time, x / s would swamp the layer's
    # int8 range. Floors at 1% of the mean channel.
    x_max = _floored(stats.channel_max.to(torch.float64))
    w_max = _floored(w.abs().amax(dim=0))
    x_max, w_max = _pad(x_max, width, 1.0), _pad(w_max, width, 1.0)
    if alpha is None:
        smooth = torch.ones(width, dtype=torch.float64)
    else:
        smooth = (x_max.pow(alpha) / w_max.pow(1.0 - alpha)).clamp(1e-4, 1e4)
    # The rows the greedy search looks at: the peak tokens, smoothed. (Not the vector of
    # channel maxima: its entries are all positive, so rotating it adds them coherently and
    # says nothing about the peaks of real tokens.)
    rows = _pad_rows(stats.rows.to(torch.float64), width) / smooth
    spread = spreading_rotation(block, seed)
    # W diag(s): the weight's columns in x's basis; every k-th row is enough to score with.
    w_cols = _pad_rows(w[:: max(1, w.shape[0] // _SCORED_WEIGHT_ROWS)], width) * smooth
    rot1 = greedy_block_rotation(rows, block, steps, spread, w_cols)
    rotated, w_rotated = rotate_blocks(rows, rot1), rotate_blocks(w_cols, rot1)
    perm = zigzag_permutation(rotated.abs().amax(dim=0), block)
    rot2 = greedy_block_rotation(rotated[:, perm], block, steps, spread, w_rotated[:, perm])
    return Plan(in_features, block, None if alpha is None else smooth, rot1, perm, rot2)


def spreading_rotation(block: int, seed: int = 0) -> torch.Tensor:
    """An orthogonal (block, block) matrix whose first row is 1/sqrt(block) everywhere: it
    spreads channel 0 evenly over the block. A Householder reflection sending e0 to that row,
    with a fixed random rotation of the other rows so that repeated steps do not cycle."""
    u = torch.full((block,), 1.0 / math.sqrt(block), dtype=torch.float64)
    v = u.clone()
    v[0] -= 1.0
    householder = torch.eye(block, dtype=torch.float64) - 2.0 * torch.outer(v, v) / (v @ v)
    gen = torch.Generator().manual_seed(seed)
    g, _ = torch.linalg.qr(torch.randn(block - 1, block - 1, generator=gen, dtype=torch.float64))
    mix = torch.eye(block, dtype=torch.float64)
    mix[1:, 1:] = g
    return mix @ householder


def greedy_block_rotation(
    rows: torch.Tensor,
    block: int,
    steps: int,
    spread: torch.Tensor,
    weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per block of `rows` (n, n_blocks * block): up to `steps` greedy rotations, each moving the
    block's current largest channel to the front and spreading it with `spread`; returns the
    product (n_blocks, block, block) after the step with the best score (identity if none
    helped). The score is the block's activation peak, times, when `weight` (out, n_blocks *
    block: the weight's columns in the same basis) is given, the mean over output rows of the
    row's largest value in the block: a rotation that flattens the activation but sharpens
    4-bit weight rows (uniform weights turn Gaussian when mixed) is not taken."""
    n_blocks = rows.shape[1] // block
    x = rows.reshape(rows.shape[0], n_blocks, block).transpose(0, 1)  # (n_blocks, n, block)
    w = None
    if weight is not None:
        w = weight.reshape(weight.shape[0], n_blocks, block).transpose(0, 1)  # (n_blocks, out, b)
    eye = torch.eye(block, dtype=torch.float64)
    total = eye.expand(n_blocks, -1, -1).clone()
    best = total.clone()
    best_peak = _score(x, w, total)
    current = x
    for _ in range(steps):
        channel = current.abs().amax(dim=1).argmax(dim=1)  # (n_blocks,)
        step = spread.expand(n_blocks, -1, -1).clone()
        # rows 0 and c swapped = (swap 0 <-> c) @ spread: channel c is what gets spread.
        index = torch.arange(n_blocks)
        step[index, 0], step[index, channel] = spread[channel], spread[0].expand(n_blocks, -1)
        total = total @ step
        current = x @ total
        peak = _score(x, w, total)
        better = peak < best_peak
        best[better] = total[better]
        best_peak = torch.where(better, peak, best_peak)
    return best


def _score(x: torch.Tensor, w: torch.Tensor | None, total: torch.Tensor) -> torch.Tensor:
    peak = (x @ total).abs().flatten(1).amax(dim=1)
    if w is None:
        return peak
    return peak * (w @ total).abs().amax(dim=2).mean(dim=1)


def zigzag_permutation(magnitude: torch.Tensor, block: int) -> torch.Tensor:
    """Channels by descending `magnitude`, dealt to blocks 0..n-1, n-1..0, 0..n-1, ...; returns
    perm (int64) with x[..., perm] the permuted channels, block after block."""
    n_blocks = magnitude.shape[0] // block
    order = torch.argsort(magnitude, descending=True, stable=True).tolist()
    blocks: list[list[int]] = [[] for _ in range(n_blocks)]
    for rank, channel in enumerate(order):
        lap, offset = divmod(rank, n_blocks)
        blocks[offset if lap % 2 == 0 else n_blocks - 1 - offset].append(channel)
    return torch.tensor([c for b in blocks for c in b], dtype=torch.int64)


def _floored(v: torch.Tensor) -> torch.Tensor:
    return v.clamp_min(max(1e-8, 0.01 * float(v.mean())))


def _pad(v: torch.Tensor, width: int, value: float) -> torch.Tensor:
    v = v.to(torch.float64)
    if v.shape[0] == width:
        return v
    return torch.cat([v, torch.full((width - v.shape[0],), value, dtype=torch.float64)])


def _pad_rows(rows: torch.Tensor, width: int) -> torch.Tensor:
    if rows.shape[1] == width:
        return rows
    return torch.nn.functional.pad(rows, (0, width - rows.shape[1]))
