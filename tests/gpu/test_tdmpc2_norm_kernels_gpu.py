"""The planner's Triton norms (policies/tdmpc2/norm_kernels.py) on a GPU, in BF16 and FP16: every
layout the planner passes (tests/norm_kernel_cases.py) at the widths of the official model sizes,
batches that straddle a program's rows; which inputs take the kernel; and the op inside a
compiled function (fullgraph: it must trace without a graph break)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from policies.tdmpc2 import norm_kernels  # noqa: E402
from tests.norm_kernel_cases import check_all  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_every_layout_matches_fp32_torch_ops(dtype: torch.dtype) -> None:
    # 384, 512, 1024: the 1M, 5M and 19M mlp widths; 768 and 1376 latents; 1792 (48M), which the
    # planner keeps with inductor, still served correctly when asked directly.
    check_all("cuda", dtype, widths=(384, 512, 768, 1024, 1376, 1792), samples=37)


def test_which_inputs_take_the_kernel() -> None:
    x = torch.zeros(2, 1, 4, 512, device="cuda", dtype=torch.bfloat16)
    assert norm_kernels.uses_kernel(x, None, 0)
    assert not norm_kernels.uses_kernel(x.float(), None, 0)  # FP32 is the reference precision
    assert not norm_kernels.uses_kernel(x.cpu(), None, 0)
    wide = torch.zeros(2, 1, 4, norm_kernels.MISH_MAX_WIDTH + 8, device="cuda").bfloat16()
    assert not norm_kernels.uses_kernel(wide, None, 0)
    assert norm_kernels.uses_kernel(x[:1], None, 8)
    assert not norm_kernels.uses_kernel(x, None, 8)  # SimNorm: one head only
    assert not norm_kernels.uses_kernel(x[:1], x[:1], 8)  # and no add
    assert not norm_kernels.uses_kernel(x[:1], None, 6)  # groups of a power of two


def test_traces_whole_under_torch_compile() -> None:
    torch.manual_seed(2)
    h = torch.randn(2, 1, 256, 512, device="cuda").bfloat16()
    bias_add = torch.randn(2, 1, 1, 512, device="cuda").bfloat16()
    weight = (1 + 0.2 * torch.randn(2, 512, device="cuda")).bfloat16()
    shift = (0.3 * torch.randn(2, 512, device="cuda")).bfloat16()

    def two_norms(t: torch.Tensor) -> torch.Tensor:
        once = norm_kernels.norm_act(t, bias_add, weight, shift)
        return norm_kernels.norm_act(once.unsqueeze(1), None, weight, shift)

    compiled = torch.compile(two_norms, fullgraph=True)
    # Inductor builds the kernel with its own compiler options: the last bf16 bit may differ.
    torch.testing.assert_close(compiled(h), two_norms(h), atol=2e-2, rtol=2e-2)
