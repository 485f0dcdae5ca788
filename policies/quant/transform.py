"""The input transform of a DuQuant layer, shared by calibration and every compute path.

DuQuant (Lin et al., NeurIPS 2024) rewrites y = x W^T as y = (x T)(W T^-T)^T with

    T = diag(1/s) R1 P R2

s the smoothing scales, R1 and R2 block-diagonal rotations and P a permutation. Every factor
but diag(1/s) is orthogonal, so T^-T = diag(s) R1 P R2: the weight's columns go through the same
steps as the input, with s in place of 1/s. Folding the smoothing into the first rotation keeps
the transform at three steps on either side:

    columns(x) = blocks(blocks(x, A)[..., perm], B)     A = diag(1/s) R1 (input) or diag(s) R1
                                                        (weight), B = R2

`blocks(x, R)` multiplies each run of `block` consecutive channels by its own (block, block)
matrix. Any step may be absent (RTN has none). Inputs whose width is not a multiple of the
block size are padded with zero channels (the weight with zero columns), which changes nothing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812


def rotate_blocks(x: torch.Tensor, rotations: torch.Tensor) -> torch.Tensor:
    """x (m, n_blocks * block) @ blockdiag(rotations (n_blocks, block, block))."""
    n_blocks, block, _ = rotations.shape
    m = x.shape[0]
    out = torch.bmm(x.reshape(m, n_blocks, block).transpose(0, 1), rotations)
    return out.transpose(0, 1).reshape(m, n_blocks * block)


def transform_columns(
    x: torch.Tensor,
    first: torch.Tensor | None,
    perm: torch.Tensor | None,
    second: torch.Tensor | None,
    width: int,
) -> torch.Tensor:
    """The columns of x (m, in_features) through (first, perm, second), padded to `width`."""
    if x.shape[1] < width:
        x = F.pad(x, (0, width - x.shape[1]))
    if first is not None:
        x = rotate_blocks(x, first)
    if perm is not None:
        x = x.index_select(1, perm)
    if second is not None:
        x = rotate_blocks(x, second)
    return x


def fold_scales(rotations: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """diag(scales) @ blockdiag(rotations), still block-diagonal: row i of block b scaled."""
    n_blocks, block, _ = rotations.shape
    return rotations * scales.reshape(n_blocks, block, 1).to(rotations.dtype)
