"""W4A8's product in two Triton kernels, for QuantLinear's `fused` compute path on CUDA.

    codes, scale = transform_quantize(x, rot_in, perm, rot_mix, act_scale, width, block)
    y = w4a8_matmul(codes, weights, packed, scale, weight_scale, out_dtype)

The `int8` path runs the same arithmetic in torch ops: the transform as two batched GEMMs and a
gather, the rounding as elementwise ops, then `torch._int_mm` writes an int32 (m, n) product
that one more pass reads back to rescale. Here:
- the transform is one block kernel launched twice: the first rotation, then the second, whose
  tiles are loaded through the permutation, with the rounding to int8 (a static scale;
  per-token scales need the row's peak, so those are rounded by torch ops after it);
- the GEMM reads int8 activations and int8 or packed 4-bit weights (unpacked in registers),
  accumulates in int32 and writes the output type with the scales applied: no int32 (m, n)
  tensor in memory.

The integers are the `int8` path's: the rotations are FP32 products (`input_precision="ieee"`,
no TF32), rounding is half to even and clamped to +-127, the int32 sum is exact, and the scales
are applied in the same order. Only the FP32 summation order of the rotations differs, so a
value on a rounding boundary can land one code apart.

triton ships with torch's CUDA wheels and is optional: `available()` says whether the kernels
can run for a device; QuantLinear refuses the `fused` path when they cannot. The CPU tests run
the kernels under Triton's interpreter where triton is installed.
"""

from __future__ import annotations

import importlib.util
import os

import torch

from policies.quant.numerics import ACT_QMAX, dynamic_scale, quantize_activation

# torch.library.triton_op came with torch 2.6.
HAVE_TRITON = importlib.util.find_spec("triton") is not None and hasattr(torch.library, "triton_op")
# Read once, as triton does when it is imported (and never inside traced code).
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
ROWS_PER_PROGRAM = 32  # rows of x per transform program (tl.dot wants at least 16)


def block_supported(block: int) -> bool:
    """tl.arange needs a power of two, tl.dot at least 16."""
    return block >= 16 and block & (block - 1) == 0


def available(device: torch.device) -> bool:
    """Whether the kernels run for tensors on `device`: triton installed and a CUDA device, or
    any device under Triton's interpreter (the CPU tests)."""
    if not HAVE_TRITON:
        return False
    return device.type == "cuda" or INTERPRETED


def gemm_config(m: int, n: int, k: int) -> tuple[int, int, int, int, int]:
    """(rows, columns, depth of a tile, warps, pipeline stages) of the GEMM for one shape.
    Larger tiles where there are rows enough to fill them; a tile's depth never past k."""
    depth = 128 if k >= 128 else 64 if k >= 64 else 32
    if m >= 256:
        return 128, 128, depth, 8, 3
    if m >= 64:
        return 64, 128, depth, 4, 4
    return 32, 64, depth, 4, 4


def transform_quantize(
    x: torch.Tensor,
    rot_in: torch.Tensor | None,
    perm: torch.Tensor | None,
    rot_mix: torch.Tensor | None,
    act_scale: torch.Tensor | None,
    width: int,
    block: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 codes (m, width), their scale: () static or (m, 1) per token) of x (m, in) through
    (rot_in, perm, rot_mix); act_scale None means per-token scales."""
    rotated = torch.ops.tempo_quant.transform(x, rot_in, perm, rot_mix, act_scale, width, block)
    if act_scale is not None:
        return rotated, act_scale
    scale = dynamic_scale(rotated)
    return quantize_activation(rotated, scale).to(torch.int8), scale


def w4a8_matmul(
    codes: torch.Tensor,
    weights: torch.Tensor,
    packed: bool,
    scale: torch.Tensor,
    weight_scale: torch.Tensor,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """(m, n_padded) in out_dtype: codes (m, width) int8 times the weight codes (n_padded,
    width) int8, or packed two a byte (n_padded, width / 2) uint8, scaled by scale (() or
    (m, 1)) and weight_scale (n_padded,)."""
    per_token = scale.dim() > 0
    return torch.ops.tempo_quant.matmul(  # type: ignore[no-any-return]
        codes, weights, packed, scale.reshape(-1) if per_token else scale, weight_scale, out_dtype
    )


if HAVE_TRITON:
    try:
        import triton
        import triton.language as tl
    except ImportError:  # a broken install
        HAVE_TRITON = False

if HAVE_TRITON:
    _QMAX = tl.constexpr(float(ACT_QMAX))
    # Adding 1.5 * 2**23 rounds an FP32 value below 2**22 to an integer, half to even: past
    # 2**23 the spacing of FP32 values is 1. (The interpreter has no libdevice rint.)
    _ROUNDER = tl.constexpr(12582912.0)

    @triton.jit
    def _block_kernel(  # type: ignore[no-untyped-def]
        u_ptr, stride_u, perm_ptr, rot_ptr, scale_ptr, out_ptr, rows, columns, width,
        HAS_PERM: tl.constexpr, HAS_ROT: tl.constexpr, ROUND: tl.constexpr,
        BM: tl.constexpr, BB: tl.constexpr,
    ):  # fmt: skip
        # One (BM rows, one block) tile of the output: u's columns (through perm, if any; past
        # u's width, zeros), times the block's rotation (if any), in FP32, then (ROUND: a static
        # scale) rounded to int8 codes, else stored in FP32. The transform launches it twice:
        # the first rotation, then the permutation, second rotation and rounding.
        r = tl.program_id(0) * BM + tl.arange(0, BM)
        b = tl.program_id(1)
        c = b * BB + tl.arange(0, BB)
        source = tl.load(perm_ptr + c) if HAS_PERM else c
        row_ok = r[:, None] < rows
        v = tl.load(
            u_ptr + r[:, None] * stride_u + source[None, :],
            mask=row_ok & (source[None, :] < columns),
            other=0.0,
        ).to(tl.float32)
        if HAS_ROT:
            i = tl.arange(0, BB)
            rot = tl.load(rot_ptr + b * BB * BB + i[:, None] * BB + i[None, :])
            v = tl.dot(v, rot, input_precision="ieee")
        at = out_ptr + r[:, None] * width + c[None, :]
        if ROUND:
            # div_rn: `/` is an approximate division on a GPU, which can move a value across a
            # rounding boundary that torch's exact division leaves where it is.
            q = tl.clamp(tl.div_rn(v, tl.load(scale_ptr)), -_QMAX, _QMAX)
            tl.store(at, ((q + _ROUNDER) - _ROUNDER).to(tl.int8), mask=row_ok)
        else:
            tl.store(at, v, mask=row_ok)

    @triton.jit
    def _w4a8_matmul_kernel(  # type: ignore[no-untyped-def]
        a_ptr, w_ptr, scale_ptr, wscale_ptr, out_ptr, M, N, K,
        PACKED: tl.constexpr, PER_TOKEN: tl.constexpr, EVEN_K: tl.constexpr,
        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
    ):  # fmt: skip
        # Tiles in groups of GROUP_M row tiles, so that neighbouring programs share weights in
        # L2. K is the width (a multiple of 8); EVEN_K: a multiple of BK, no depth mask.
        pid = tl.program_id(0)
        tiles_n = tl.cdiv(N, BN)
        in_group = GROUP_M * tiles_n
        first_m = (pid // in_group) * GROUP_M
        group_m = min(tl.cdiv(M, BM) - first_m, GROUP_M)
        tile_m = first_m + (pid % in_group) % group_m
        tile_n = (pid % in_group) // group_m
        rm = tile_m * BM + tl.arange(0, BM)
        rn = tile_n * BN + tl.arange(0, BN)
        acc = tl.zeros((BM, BN), dtype=tl.int32)
        for k in range(0, K, BK):
            rk = k + tl.arange(0, BK)
            a_mask = rm[:, None] < M
            if not EVEN_K:
                a_mask = a_mask & (rk[None, :] < K)
            a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=a_mask, other=0)
            if PACKED:
                # Two codes a byte, column 2j in the low nibble: sign-extended by shifts, then
                # interleaved back into (BN, BK).
                rk2 = k // 2 + tl.arange(0, BK // 2)
                w_mask = rn[:, None] < N
                if not EVEN_K:
                    w_mask = w_mask & (rk2[None, :] < K // 2)
                p = tl.load(w_ptr + rn[:, None] * (K // 2) + rk2[None, :], mask=w_mask, other=0)
                low = (p << 4).to(tl.int8) >> 4
                high = p.to(tl.int8) >> 4
                w = tl.trans(tl.reshape(tl.join(low, high), (BN, BK)))
            else:
                w_mask = rn[None, :] < N
                if not EVEN_K:
                    w_mask = w_mask & (rk[:, None] < K)
                w = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=w_mask, other=0)
            acc = tl.dot(a, w, acc, out_dtype=tl.int32)
        wscale = tl.load(wscale_ptr + rn, mask=rn < N, other=0.0)
        if PER_TOKEN:
            scale = tl.load(scale_ptr + rm, mask=rm < M, other=0.0)
            y = acc.to(tl.float32) * (scale[:, None] * wscale[None, :])
        else:
            y = acc.to(tl.float32) * (tl.load(scale_ptr) * wscale)[None, :]
        out = out_ptr + rm[:, None] * N + rn[None, :]
        tl.store(out, y.to(out_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))

    @torch.library.triton_op("tempo_quant::transform", mutates_args=())
    def _transform_op(
        x: torch.Tensor,
        rot_in: torch.Tensor | None,
        perm: torch.Tensor | None,
        rot_mix: torch.Tensor | None,
        act_scale: torch.Tensor | None,
        width: int,
        block: int,
    ) -> torch.Tensor:
        """int8 codes (m, width) with a static act_scale; else the FP32 transformed x."""
        if x.stride(-1) != 1:
            x = x.contiguous()
        # tl.dot takes two operands of one type: the rotations in FP32 whatever the model's.
        rot_in = None if rot_in is None else rot_in.float().contiguous()
        rot_mix = None if rot_mix is None else rot_mix.float().contiguous()
        rows, columns = x.shape
        grid = (triton.cdiv(rows, ROWS_PER_PROGRAM), width // block)
        source = x
        if rot_in is not None:
            source = torch.empty(rows, width, device=x.device, dtype=torch.float32)
            torch.library.wrap_triton(_block_kernel)[grid](
                x, x.stride(0), x, rot_in, x, source, rows, columns, width,
                HAS_PERM=False, HAS_ROT=True, ROUND=False,
                BM=ROWS_PER_PROGRAM, BB=block, num_warps=4,
            )  # fmt: skip
        static = act_scale is not None
        out = torch.empty(
            rows, width, device=x.device, dtype=torch.int8 if static else torch.float32
        )
        torch.library.wrap_triton(_block_kernel)[grid](
            source, source.stride(0), source if perm is None else perm,
            source if rot_mix is None else rot_mix, source if act_scale is None else act_scale,
            out, rows, source.shape[1], width,
            HAS_PERM=perm is not None, HAS_ROT=rot_mix is not None, ROUND=static,
            BM=ROWS_PER_PROGRAM, BB=block, num_warps=4,
        )  # fmt: skip
        return out

    @torch.library.triton_op("tempo_quant::matmul", mutates_args=())
    def _matmul_op(
        codes: torch.Tensor,
        weights: torch.Tensor,
        packed: bool,
        scale: torch.Tensor,
        weight_scale: torch.Tensor,
        out_dtype: torch.dtype,
    ) -> torch.Tensor:
        codes, weights = codes.contiguous(), weights.contiguous()  # the kernel takes no strides
        rows, depth = codes.shape
        columns = weights.shape[0]
        out = torch.empty(rows, columns, device=codes.device, dtype=out_dtype)
        bm, bn, bk, warps, stages = gemm_config(rows, columns, depth)
        grid = (triton.cdiv(rows, bm) * triton.cdiv(columns, bn),)
        torch.library.wrap_triton(_w4a8_matmul_kernel)[grid](
            codes, weights, scale, weight_scale, out, rows, columns, depth,
            PACKED=packed, PER_TOKEN=scale.dim() > 0, EVEN_K=depth % bk == 0,
            BM=bm, BN=bn, BK=bk, GROUP_M=8, num_warps=warps, num_stages=stages,
        )  # fmt: skip
        return out
