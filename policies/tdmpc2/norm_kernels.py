"""The planner's layer norms as hand-written Triton kernels, for half-precision planning on CUDA.

    norm_act(x, add, weight, bias, simnorm)   LayerNorm(x + add) -> affine -> Mish | SimNorm

x (and add, broadcast against it) are (heads, batch, samples, width) views with any strides; the
result is (heads, batch * samples, width), contiguous: the layout the next batched matmul reads.
weight and bias are (heads, width): each head has its own affine. SimNorm takes one head and no
add (the dynamics' output).

The planner sends the kernels its step's norms: both Mish norms of the dynamics and reward heads
(rows up to MISH_MAX_WIDTH) and the dynamics' LayerNorm + SimNorm. The policy prior's, the
Q-ensemble's and the termination head's norms, and wider Mish rows, stay with inductor.

Why hand-written, measured on an H100 (bf16 plans, GPU time per plan):
- Inductor decides per process, by timing the first call (`multi_kernel`), whether a row
  reduction runs in one pass or in a loop. The same code's 48M plan took 2.74 ms in one process
  and 3.44 ms in another (two leases): there the dynamics' LayerNorm + SimNorm ran looped, 33.6
  us a call against 5.3 in one pass (this kernel: 5.1-5.3). These kernels always take the whole
  row at once. The planner turns `multi_kernel` on for its other reductions
  (planner.compile_options), which are still inductor's choice, and can still differ between
  processes.
- Together with the second layer's bias moved out of `baddbmm` (fused.py), a 5M plan went from
  1.54 to 1.30 ms and a 48M plan from 2.79 to 2.63 ms (old and new code in one call, one process
  each).
- Mish rows wider than MISH_MAX_WIDTH stay with inductor: at 48M's 1792 the kernel took 16.5 us
  a call inside the plan against 4.8 us alone, and the plan got slower (2.95 ms). Not yet
  understood.

triton ships with torch's CUDA wheels and is optional here: without it, on a CPU, in FP32 (the
reference precision) or on a GPU older than the dtype needs, `norm_act` runs the same arithmetic
in torch ops (equal up to rounding: the kernel adds x and add in FP32). Under torch.compile the
kernel gets its inputs' strides as traced; the planner's inputs are views of matmul outputs.
"""

from __future__ import annotations

import functools
import importlib.util

import torch
import torch.nn.functional as F

# torch.library.triton_op came with torch 2.6; an older torch runs the torch ops.
HAVE_TRITON = importlib.util.find_spec("triton") is not None and hasattr(torch.library, "triton_op")
EPS = 1e-5  # nn.LayerNorm's
MISH_MAX_WIDTH = 1024


def torch_norm_act(
    x: torch.Tensor,
    add: torch.Tensor | None,
    weight: torch.Tensor,
    bias: torch.Tensor,
    simnorm: int,
) -> torch.Tensor:
    """`norm_act` in torch ops: what runs without the kernel, and what the tests check it by."""
    h = x if add is None else x + add
    heads, width = h.shape[0], h.shape[-1]
    h = F.layer_norm(h.reshape(heads, -1, width), (width,), eps=EPS)
    h = h * weight.unsqueeze(1) + bias.unsqueeze(1)
    if simnorm:
        return F.softmax(h.reshape(heads, -1, width // simnorm, simnorm), dim=-1).reshape(h.shape)
    return F.mish(h)


@functools.lru_cache
def gpu_runs_kernel(device: torch.device, dtype: torch.dtype) -> bool:
    """Triton's BF16 needs compute capability 8.0 (Ampere), its FP16 7.0. Asked inside the op,
    which runs as plain Python under torch.compile too (never traced by dynamo)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    return torch.cuda.get_device_capability(index) >= (
        (8, 0) if dtype == torch.bfloat16 else (7, 0)
    )


def uses_kernel(x: torch.Tensor, add: torch.Tensor | None, simnorm: int) -> bool:
    """Whether `norm_act` calls the Triton op for this input (a trace-time constant): half
    precision on CUDA, triton installed; SimNorm on one head, no add, groups of a power of two;
    Mish rows no wider than MISH_MAX_WIDTH (see the module doc). The op itself falls back to
    torch ops on a GPU too old for the dtype (`gpu_runs_kernel`)."""
    if not (HAVE_TRITON and x.is_cuda and x.dtype in (torch.float16, torch.bfloat16)):
        return False
    if simnorm:
        return x.shape[0] == 1 and add is None and simnorm & (simnorm - 1) == 0
    return x.shape[-1] <= MISH_MAX_WIDTH


def norm_act(
    x: torch.Tensor,
    add: torch.Tensor | None,
    weight: torch.Tensor,
    bias: torch.Tensor,
    simnorm: int = 0,
) -> torch.Tensor:
    """LayerNorm over the last dim of x (+ add), each head's affine, then Mish (simnorm 0) or a
    softmax over groups of `simnorm`: (H, B, N, C) -> (H, B N, C)."""
    if add is not None:
        add = add.expand_as(x)
    heads, width = x.shape[0], x.shape[-1]
    if weight.numel() != heads * width or bias.numel() != heads * width:
        raise ValueError(f"norm_act needs a weight and a bias of {heads} x {width} values")
    weight, bias = weight.reshape(heads, width), bias.reshape(heads, width)
    if uses_kernel(x, add, simnorm):
        return torch.ops.tempo_tdmpc2.norm_act(x, add, weight, bias, simnorm)
    return torch_norm_act(x, add, weight, bias, simnorm)


try:
    import triton
    import triton.language as tl
except ImportError:  # a broken install: the torch ops serve
    HAVE_TRITON = False

if HAVE_TRITON:

    @triton.jit
    def _mish(x):  # type: ignore[no-untyped-def]
        # x tanh(softplus(x)) = x n (n + 2) / (n (n + 2) + 2) with n = e^x; torch's softplus is
        # x itself above 20, where the ratio is 1 in FP32 anyway.
        n = tl.exp(tl.minimum(x, 20.0))
        p = n * (n + 2.0)
        return tl.where(x > 20.0, x, x * p / (p + 2.0))

    @triton.jit
    def _norm_mish_kernel(  # type: ignore[no-untyped-def]
        x_ptr, x_sh, x_sb, x_sn, add_ptr, a_sh, a_sb, a_sn, w_ptr, b_ptr, y_ptr,
        rows, samples, width, eps,
        HAS_ADD: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
    ):  # fmt: skip
        head = tl.program_id(1)
        r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        c = tl.arange(0, BLOCK_C)
        mask = (r < rows)[:, None] & (c < width)[None, :]
        batch, sample = r // samples, r % samples
        x_off = head * x_sh + batch * x_sb + sample * x_sn
        h = tl.load(x_ptr + x_off[:, None] + c[None, :], mask=mask, other=0.0).to(tl.float32)
        if HAS_ADD:
            a_off = head * a_sh + batch * a_sb + sample * a_sn
            h += tl.load(add_ptr + a_off[:, None] + c[None, :], mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(h, axis=1) / width
        centred = tl.where(mask, h - mean[:, None], 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=1) / width + eps)
        gain = tl.load(w_ptr + head * width + c, mask=c < width, other=0.0).to(tl.float32)
        shift = tl.load(b_ptr + head * width + c, mask=c < width, other=0.0).to(tl.float32)
        y = _mish(centred * rstd[:, None] * gain[None, :] + shift[None, :])
        out = y_ptr + (head * rows + r)[:, None] * width + c[None, :]
        tl.store(out, y.to(y_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def _norm_simnorm_kernel(  # type: ignore[no-untyped-def]
        x_ptr, x_sb, x_sn, w_ptr, b_ptr, y_ptr, rows, samples, width, eps,
        GROUP: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_G: tl.constexpr,
    ):  # fmt: skip
        # Loaded as (rows, groups, GROUP): each softmax group is one axis, no reshape (which
        # can cost a trip through shared memory).
        r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        c = tl.arange(0, BLOCK_G)[:, None] * GROUP + tl.arange(0, GROUP)[None, :]
        mask = (r < rows)[:, None, None] & (c < width)[None, :, :]
        x_off = (r // samples) * x_sb + (r % samples) * x_sn
        h = tl.load(x_ptr + x_off[:, None, None] + c[None], mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(tl.sum(h, axis=2), axis=1) / width
        centred = tl.where(mask, h - mean[:, None, None], 0.0)
        var = tl.sum(tl.sum(centred * centred, axis=2), axis=1) / width
        rstd = 1.0 / tl.sqrt(var + eps)
        gain = tl.load(w_ptr + c, mask=c < width, other=0.0).to(tl.float32)
        shift = tl.load(b_ptr + c, mask=c < width, other=0.0).to(tl.float32)
        # Padding groups are zeros: a finite softmax that is never stored.
        y = tl.where(mask, centred * rstd[:, None, None] * gain[None] + shift[None], 0.0)
        e = tl.exp(y - tl.max(y, axis=2)[:, :, None])
        y = e / tl.sum(e, axis=2)[:, :, None]
        out = y_ptr + r[:, None, None] * width + c[None]
        tl.store(out, y.to(y_ptr.dtype.element_ty), mask=mask)

    @torch.library.triton_op("tempo_tdmpc2::norm_act", mutates_args=())
    def _norm_act_op(
        x: torch.Tensor,
        add: torch.Tensor | None,
        weight: torch.Tensor,
        bias: torch.Tensor,
        simnorm: int,
    ) -> torch.Tensor:
        if x.is_cuda and not gpu_runs_kernel(x.device, x.dtype):
            return torch_norm_act(x, add, weight, bias, simnorm).to(x.dtype)
        heads, batch, samples, width = x.shape
        rows = batch * samples
        y = torch.empty(heads, rows, width, device=x.device, dtype=x.dtype)
        if x.stride(-1) != 1:
            x = x.contiguous()
        a = add if add is not None else x
        if a.stride(-1) != 1:
            a = a.contiguous()
        weight, bias = weight.contiguous(), bias.contiguous()
        block_c = triton.next_power_of_2(width)
        if simnorm:
            if heads != 1 or add is not None:
                raise ValueError("norm_act with simnorm takes one head and no add")
            block_r = 2
            torch.library.wrap_triton(_norm_simnorm_kernel)[(triton.cdiv(rows, block_r),)](
                x, x.stride(1), x.stride(2), weight, bias, y, rows, samples, width, EPS,
                GROUP=simnorm, BLOCK_R=block_r, BLOCK_G=block_c // simnorm, num_warps=4,
            )  # fmt: skip
            return y
        # Rows per program, from the kernel timed alone on an H100 (2 heads x 512 rows): two
        # rows of 512 wide (2.8 us; inductor's norm 4.0), one row of 1792 (4.8 us; inductor's
        # looped norm 15.5). Rows past 1024 and 2048 come only from direct calls, not the planner.
        block_r = 2 if block_c <= 1024 else 1
        grid = (triton.cdiv(rows, block_r), heads)
        torch.library.wrap_triton(_norm_mish_kernel)[grid](
            x, x.stride(0), x.stride(1), x.stride(2), a, a.stride(0), a.stride(1), a.stride(2),
            weight, bias, y, rows, samples, width, EPS,
            HAS_ADD=add is not None, BLOCK_R=block_r, BLOCK_C=block_c,
            num_warps=4 if block_c <= 2048 else 8,
        )  # fmt: skip
        return y
