"""The planner's hand-written layer norms (policies/tdmpc2/norm_kernels.py) on a GPU: the Triton
kernel against the same arithmetic in FP32 torch ops, in each layout the planner gives it (two
heads interleaved in a row plus a broadcast z part, head-major, one head with SimNorm), at widths
that are and are not powers of two and row counts that do not fill a block; and inside a compiled
function (fullgraph: the op must trace without a graph break)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from policies.tdmpc2 import norm_kernels  # noqa: E402

pytestmark = pytest.mark.gpu


def _affine(heads: int, width: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    weight = 1 + 0.2 * torch.randn(heads, width, device="cuda")
    return weight.to(dtype), (0.3 * torch.randn(heads, width, device="cuda")).to(dtype)


def _relative(got: torch.Tensor, want: torch.Tensor) -> float:
    assert torch.isfinite(got).all()
    return float((got.float() - want).norm() / want.norm())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("batch", "samples", "width"), [(1, 512, 512), (2, 37, 1792), (1, 5, 96)])
def test_two_heads_interleaved_plus_a_broadcast_part(
    dtype: torch.dtype, batch: int, samples: int, width: int
) -> None:
    torch.manual_seed(0)
    a_part = (3 * torch.randn(batch, samples, 2 * width, device="cuda") + 1).to(dtype)
    z_part = torch.randn(batch, 1, 2 * width, device="cuda").to(dtype)
    weight, bias = _affine(2, width, dtype)
    x = a_part.view(batch, samples, 2, width).permute(2, 0, 1, 3)
    add = z_part.expand(batch, samples, 2 * width).view(batch, samples, 2, width)
    add = add.permute(2, 0, 1, 3)
    assert norm_kernels.uses_kernel(x, 0) == (width <= norm_kernels.MISH_MAX_WIDTH)
    got = torch.ops.tempo_tdmpc2.norm_act(x, add, weight, bias, 0)  # the kernel at every width
    want = norm_kernels._reference(x.float(), add.float(), weight.float(), bias.float(), 0)
    assert got.shape == (2, batch * samples, width) and got.is_contiguous()
    assert _relative(got, want) < 1e-2  # half-precision output of an FP32 computation


@pytest.mark.parametrize(("rows", "width", "group"), [(512, 512, 8), (77, 768, 8), (3, 1376, 8)])
def test_simnorm_one_head(rows: int, width: int, group: int) -> None:
    torch.manual_seed(1)
    z = (4 * torch.randn(1, 1, rows, width, device="cuda")).bfloat16()
    weight, bias = _affine(1, width, torch.bfloat16)
    assert norm_kernels.uses_kernel(z, group)
    got = norm_kernels.norm_act(z, None, weight, bias, simnorm=group)
    want = norm_kernels._reference(z.float(), None, weight.float(), bias.float(), group)
    assert _relative(got, want) < 1e-2
    sums = got.float().reshape(rows, -1, group).sum(-1)
    torch.testing.assert_close(sums, torch.ones_like(sums), atol=2e-2, rtol=0)


def test_fp32_and_cpu_inputs_take_torch_ops() -> None:
    x = torch.randn(2, 1, 4, 64, device="cuda")
    assert not norm_kernels.uses_kernel(x, 0)  # FP32 is the reference precision
    assert not norm_kernels.uses_kernel(x.cpu().bfloat16(), 0)
    assert not norm_kernels.uses_kernel(x.bfloat16(), 6)  # a group Triton cannot reshape by


def test_traces_whole_under_torch_compile() -> None:
    torch.manual_seed(2)
    h = torch.randn(2, 1, 256, 512, device="cuda").bfloat16()
    weight, bias = _affine(2, 512, torch.bfloat16)

    def two_norms(t: torch.Tensor) -> torch.Tensor:
        once = norm_kernels.norm_act(t, None, weight, bias)
        return norm_kernels.norm_act(once.unsqueeze(1), None, weight, bias)

    compiled = torch.compile(two_norms, fullgraph=True)
    # Inductor builds the kernel with its own compiler options: the last bf16 bit may differ.
    torch.testing.assert_close(compiled(h), two_norms(h), atol=2e-2, rtol=2e-2)
