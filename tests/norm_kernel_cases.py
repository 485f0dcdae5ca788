"""Cases for the planner's Triton norms (policies/tdmpc2/norm_kernels.py), shared by the GPU test
(bf16 and fp16 on CUDA) and the CPU test (fp32 and fp16 under Triton's interpreter): every layout
the planner passes, each result compared element by element with the same arithmetic in FP32
torch ops on the same inputs."""

from __future__ import annotations

import torch

from policies.tdmpc2 import norm_kernels

TOLERANCE = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2}  # atol and rtol


def _affine(heads: int, width: int, dtype: torch.dtype, device: str, shift: float = 0.0):  # type: ignore[no-untyped-def]
    weight = (1 + 0.2 * torch.randn(heads, width)).to(device, dtype)
    return weight, (shift + 0.3 * torch.randn(heads, width)).to(device, dtype)


def _check(x, add, weight, bias, simnorm: int) -> None:  # type: ignore[no-untyped-def]
    got = torch.ops.tempo_tdmpc2.norm_act(x, add, weight, bias, simnorm)
    up = add.float() if add is not None else None
    want = norm_kernels.torch_norm_act(x.float(), up, weight.float(), bias.float(), simnorm)
    tol = TOLERANCE[x.dtype]
    assert got.shape == want.shape and got.is_contiguous() and got.dtype == x.dtype
    torch.testing.assert_close(got.float(), want, atol=tol, rtol=tol)


def first_layer(device: str, dtype: torch.dtype, batch: int, samples: int, width: int) -> None:
    """Both heads interleaved in each row of one horizon step's action part, a slice of every
    step's (batch stride: horizon x samples rows), plus the z part broadcast over the samples
    (the plan's first step) or one per sample (later steps)."""
    horizon = 3
    every_step = (3 * torch.randn(batch, horizon, samples, 2 * width) + 1).to(device, dtype)
    a_part = every_step[:, 1]
    split = (batch, samples, 2, width)
    x = a_part.view(split).permute(2, 0, 1, 3)
    weight, bias = _affine(2, width, dtype, device)
    for z_rows in (1, samples):
        z_part = torch.randn(batch, z_rows, 2 * width).to(device, dtype)
        add = z_part.expand(batch, samples, 2 * width).view(split).permute(2, 0, 1, 3)
        _check(x, add, weight, bias, 0)


def second_layer(device: str, dtype: torch.dtype, rows: int, width: int) -> None:
    """The batched matmul's output, head-major, plus each head's bias broadcast over the rows;
    one case with outputs past 20, where Mish is the identity."""
    x = (2 * torch.randn(2, 1, rows, width)).to(device, dtype)
    for shift in (0.0, 25.0):
        bias_add = torch.randn(2, 1, 1, width).to(device, dtype).expand_as(x)
        weight, bias = _affine(2, width, dtype, device, shift)
        _check(x, bias_add, weight, bias, 0)


def simnorm(device: str, dtype: torch.dtype, rows: int, width: int, group: int = 8) -> None:
    """The dynamics' output: one head, LayerNorm then a softmax over each group."""
    z = (4 * torch.randn(rows, width)).to(device, dtype)[None, None]
    weight, bias = _affine(1, width, dtype, device)
    _check(z, None, weight, bias, group)
    try:
        torch.ops.tempo_tdmpc2.norm_act(z.expand(2, 1, rows, width), None, *_affine(
            2, width, dtype, device), group)  # fmt: skip
    except (ValueError, RuntimeError) as exc:
        assert "one head" in str(exc)
    else:
        raise AssertionError("SimNorm over two heads was not refused")


def check_all(device: str, dtype: torch.dtype, widths: tuple[int, ...], samples: int) -> None:
    torch.manual_seed(0)
    for width in widths:
        for batch in (1, 3):
            first_layer(device, dtype, batch, samples, width)
        second_layer(device, dtype, 2 * samples + 1, width)
        simnorm(device, dtype, samples, width)
