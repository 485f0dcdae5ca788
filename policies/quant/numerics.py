"""The integer arithmetic of W4A8: how values become integers and how integers multiply.

    weights   signed 4-bit per output channel, q in [-8, 7], w ~ q * weight_scale[out]
              (held as int8 in memory; two per byte in a file: `pack_int4` / `unpack_int4`)
    inputs    signed 8-bit, q in [-127, 127], x ~ q * act_scale (one calibrated scale per layer,
              or one per token when the scale is dynamic)
    product   sum_k qx[m, k] * qw[n, k] is exact in int32 (|term| <= 127 * 8, k < 2**21), then
              one float multiply by act_scale * weight_scale[n]

`int8_matmul` is that product on the device: `torch._int_mm` (cuBLASLt int8 GEMM on CUDA, and
available on the CPU in recent torch), with the shapes padded to what the CUDA kernel accepts.
Nothing here depends on data values: padding is decided by shapes alone, so a compiled graph
holds it as constants.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812

WEIGHT_QMIN, WEIGHT_QMAX = -8, 7
ACT_QMAX = 127
# torch._int_mm on CUDA wants more than 16 rows and multiples of 8 for the other two sizes.
_CUDA_MIN_ROWS = 17
_CUDA_MULTIPLE = 8
_CLIP_RATIOS = (1.0, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7)


def quantize_weight(
    weight: torch.Tensor, clip_search: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """(q int8 in [-8, 7], scale float32 per output row) for `weight` (out, in).

    The scale is max|row| / 7, or with `clip_search` the clipped version of it (ratios 1.0 down
    to 0.7) whose rounding error on that row is smallest: an outlier costs less clipped than it
    costs every other value of the row in resolution."""
    w = weight.detach().double()
    amax = w.abs().amax(dim=1).clamp_min(1e-12)
    ratios = _CLIP_RATIOS if clip_search else (1.0,)
    best_scale = amax / WEIGHT_QMAX
    best_error = torch.full_like(amax, float("inf"))
    for ratio in ratios:
        scale = amax * ratio / WEIGHT_QMAX
        q = torch.clamp(torch.round(w / scale[:, None]), WEIGHT_QMIN, WEIGHT_QMAX)
        error = ((q * scale[:, None] - w) ** 2).sum(dim=1)
        better = error < best_error
        best_scale = torch.where(better, scale, best_scale)
        best_error = torch.where(better, error, best_error)
    q = torch.clamp(torch.round(w / best_scale[:, None]), WEIGHT_QMIN, WEIGHT_QMAX)
    return q.to(torch.int8), best_scale.float()


def quantize_weight_with_scale(weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """int8 codes in [-8, 7] of `weight` (out, in) under the given per-row scales."""
    q = torch.round(weight.detach().double() / scale.double()[:, None])
    return torch.clamp(q, WEIGHT_QMIN, WEIGHT_QMAX).to(torch.int8)


def quantize_activation(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The int8 codes of `x` as floats (round to nearest even, clamp to +-127): the one rounding
    rule every compute path shares, so they all see the same integers."""
    return torch.clamp(torch.round(x / scale), -ACT_QMAX, ACT_QMAX)


def dynamic_scale(x: torch.Tensor) -> torch.Tensor:
    """Per-token (last dimension) symmetric int8 scale, (..., 1)."""
    return (x.abs().amax(dim=-1, keepdim=True) / ACT_QMAX).clamp_min(1e-8)


def int8_matmul(q: torch.Tensor, weight_t: torch.Tensor) -> torch.Tensor:
    """int32 (m, n) = q (m, k) int8 @ weight_t (k, n) int8, exactly.

    On CUDA, `torch._int_mm` needs m > 16 and k, n multiples of 8: q is padded with zero rows up
    to 17 when it has fewer (the extra rows are dropped); the caller keeps k and n multiples of
    8 (QuantLinear pads its weight once, when it is built)."""
    m = q.shape[0]
    if q.device.type == "cuda" and m < _CUDA_MIN_ROWS:
        q = F.pad(q, (0, 0, 0, _CUDA_MIN_ROWS - m))
        return torch._int_mm(q, weight_t)[:m]
    return torch._int_mm(q, weight_t)


def exact_int_matmul(q: torch.Tensor, weight_t: torch.Tensor) -> torch.Tensor:
    """The same product in int64: the exactness reference for `int8_matmul`. Computed on the
    CPU (CUDA has no int64 matmul) and returned on the inputs' device."""
    return (q.cpu().long() @ weight_t.cpu().long()).to(q.device)


def padded(size: int, multiple: int = _CUDA_MULTIPLE) -> int:
    return -(-size // multiple) * multiple


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """int8 codes in [-8, 7], (rows, cols) -> uint8 (rows, ceil(cols / 2)): column 2j in the low
    nibble, 2j + 1 in the high one, two's complement."""
    if q.dtype != torch.int8 or q.dim() != 2:
        raise ValueError(f"pack_int4 takes a 2-D int8 tensor, got {q.dtype} {tuple(q.shape)}")
    if bool(((q < WEIGHT_QMIN) | (q > WEIGHT_QMAX)).any()):
        raise ValueError("pack_int4: codes must lie in [-8, 7]")
    if q.shape[1] % 2:
        q = F.pad(q, (0, 1))
    nibbles = (q.to(torch.int16) & 0xF).to(torch.uint8)
    return nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)


def unpack_int4(packed: torch.Tensor, cols: int) -> torch.Tensor:
    """Inverse of `pack_int4`: uint8 (rows, ceil(cols / 2)) -> int8 (rows, cols)."""
    if packed.dtype != torch.uint8 or packed.dim() != 2 or packed.shape[1] != -(-cols // 2):
        raise ValueError(
            f"unpack_int4: expected uint8 (rows, {-(-cols // 2)}), got {packed.dtype} "
            f"{tuple(packed.shape)}"
        )
    low = (packed & 0xF).to(torch.int16)
    high = (packed >> 4).to(torch.int16)
    both = torch.stack((low, high), dim=2).reshape(packed.shape[0], -1)[:, :cols]
    return torch.where(both > 7, both - 16, both).to(torch.int8)
