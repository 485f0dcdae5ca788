"""The planner's norms (policies/tdmpc2/norm_kernels.py) on the CPU: the torch-op path the
planner takes without a GPU, its refusals, and, where triton is installed, the Triton kernels
themselves under Triton's interpreter (a child process: the interpreter is chosen when triton is
first imported) in FP32 and FP16, in every layout the planner passes."""

from __future__ import annotations

import pytest
import torch

from policies.tdmpc2 import norm_kernels
from tests.triton_interpreter import needs_triton, run_interpreted


def test_cpu_input_takes_torch_ops_and_equals_layer_norm_then_mish() -> None:
    torch.manual_seed(0)
    x, add = torch.randn(2, 3, 5, 16), torch.randn(2, 3, 1, 16)
    weight, bias = torch.randn(2, 16), torch.randn(2, 16)
    assert not norm_kernels.uses_kernel(x, add, 0)
    got = norm_kernels.norm_act(x, add, weight, bias)
    for head in range(2):
        h = torch.nn.functional.layer_norm(x[head] + add[head], (16,), weight[head], bias[head])
        torch.testing.assert_close(got[head], torch.nn.functional.mish(h).reshape(15, 16))


def test_a_weight_of_the_wrong_size_is_refused() -> None:
    x = torch.randn(2, 1, 4, 16)
    with pytest.raises(ValueError, match="2 x 16"):
        norm_kernels.norm_act(x, None, torch.ones(16), torch.zeros(16))


@needs_triton
def test_triton_kernels_under_the_interpreter() -> None:
    script = (
        "import torch\n"
        "from tests.norm_kernel_cases import check_all\n"
        "for dtype in (torch.float32, torch.float16):\n"
        "    check_all('cpu', dtype, widths=(40, 64), samples=5)\n"
        "print('checked')\n"
    )
    done = run_interpreted(script, timeout_s=600)
    assert done.returncode == 0 and "checked" in done.stdout, done.stderr[-3000:]
