"""W4A8's Triton kernels (policies/quant/kernels.py): the fused compute path without triton, its
refusals, and, where triton is installed, the kernels themselves under Triton's interpreter (a
child process: the interpreter is chosen when triton is first imported) against the int8
path's torch ops, on every kind of layer."""

from __future__ import annotations

import pytest
import torch

from policies.quant import kernels
from policies.quant.config import LayerLayout, QuantSettings
from policies.quant.layer import QuantLinear
from tests.quant_kernel_cases import layer_cases
from tests.triton_interpreter import needs_triton, run_interpreted


def test_without_the_kernels_the_fused_path_computes_the_int8_paths_integers():
    if kernels.available(torch.device("cpu")):
        pytest.skip("the kernels run here (Triton's interpreter is on)")
    for name, layer, x in layer_cases("cpu")[:8]:
        compiled = torch.compile(layer, backend="eager", fullgraph=True)
        layer.compiled_path = "int8"
        int8 = compiled(x)
        torch._dynamo.reset()
        layer.compiled_path = "fused"
        compiled = torch.compile(layer, backend="eager", fullgraph=True)
        assert torch.equal(compiled(x), int8), name
        torch._dynamo.reset()


def test_a_block_the_kernels_cannot_tile_is_refused_for_the_fused_path():
    layout = LayerLayout(
        in_features=48, out_features=8, block=24, rot_in=True, perm=True, rot_mix=True,
        out_block=None, bias=False, static=True,
    )  # fmt: skip
    with pytest.raises(ValueError, match="power of two"):
        QuantLinear(layout, "fused")
    assert QuantLinear(layout, "int8").layout.block == 24
    with pytest.raises(ValueError, match="power of two"):
        QuantSettings(block_size=24, compiled_path="fused")
    assert QuantSettings(block_size=24).compiled_path == "int8"


@needs_triton
def test_triton_kernels_under_the_interpreter():
    script = (
        "import torch\n"
        "from tests.quant_kernel_cases import check_all\n"
        "for dtype in (torch.float32, torch.bfloat16):\n"
        "    print('checked', check_all('cpu', dtype))\n"
    )
    done = run_interpreted(script, timeout_s=900)
    assert done.returncode == 0 and "checked 24" in done.stdout, done.stderr[-3000:]
