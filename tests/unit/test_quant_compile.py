"""The naive self-calibrating layer breaks under torch.compile; Tempo's QuantLinear compiles
once (fullgraph) and never recompiles. The CUDA graph half of this is in tests/gpu."""

from __future__ import annotations

import pytest
import torch

from policies.quant.duquant import StatsCollector, duquant_plan
from policies.quant.layer import QuantLinear
from tests.quant_fixtures import NaiveQuantLinear


def test_the_naive_layer_that_sets_its_scale_on_first_forward_recompiles():
    layer = NaiveQuantLinear(16, 8).eval()
    compiled = torch.compile(layer, fullgraph=True, backend="eager", dynamic=False)
    x = torch.randn(4, 16)
    with torch.no_grad():
        compiled(x)  # the scale is assigned from inside the compiled code
        assert isinstance(layer.act_scale, torch.Tensor)
        with (
            torch.compiler.set_stance("fail_on_recompile"),
            pytest.raises(RuntimeError, match="recompile"),
        ):
            compiled(x)  # its guard `act_scale is None` no longer holds


def test_quantlinear_compiles_fullgraph_once_and_equals_the_reference():
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(16, 32, generator=gen)
    x = torch.randn(24, 32, generator=gen)
    x[:, 5] *= 100.0
    collector = StatsCollector()
    collector.update(x)
    assert collector.stats is not None
    plan = duquant_plan(weight, collector.stats, block=16, steps=8)
    scale = float(plan.transform_input(x.double()).abs().max()) / 127
    layer = QuantLinear.from_plan(weight, torch.zeros(16), plan, scale, compiled_path="int8")
    compiled = torch.compile(layer, fullgraph=True, dynamic=False)
    with torch.no_grad():
        first = compiled(x)
        with torch.compiler.set_stance("fail_on_recompile"):
            for _ in range(3):
                again = compiled(x * 0.5)  # new values, same shapes: no recompile
        reference = layer(x)  # eager FP32: the fake-quant reference
    assert torch.equal(again, compiled(x * 0.5))
    assert float((first - reference).norm() / reference.norm()) < 1e-5
