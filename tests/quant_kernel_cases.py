"""The W4A8 Triton kernels (policies/quant/kernels.py) against the int8 path's torch ops, on
every kind of layer QuantLinear builds. Run by tests/unit/test_quant_kernels.py under Triton's
interpreter on the CPU, and by tests/gpu/test_quant_gpu.py on a GPU."""

from __future__ import annotations

import torch

from policies.quant.duquant import StatsCollector, duquant_plan, identity_plan
from policies.quant.layer import QuantLinear


def layer_cases(device: str) -> list[tuple[str, QuantLinear, torch.Tensor]]:
    """(name, layer, input) for DuQuant and plain RTN, static and per-token scales, 4-bit codes
    one or two a byte, a width padded to the block, an output rotation, a bias, and rows that
    do not fill a tile."""
    cases = []
    gen = torch.Generator().manual_seed(0)
    for fan_in, fan_out, rows, block in ((128, 48, 40, 32), (72, 40, 17, 16), (256, 64, 5, 64)):
        weight = torch.randn(fan_out, fan_in, generator=gen, dtype=torch.float64) / fan_in**0.5
        bias = torch.randn(fan_out, generator=gen, dtype=torch.float64)
        x = torch.randn(rows, fan_in, generator=gen, dtype=torch.float64)
        x[:, :3] *= 50.0
        collector = StatsCollector()
        collector.update(x)
        assert collector.stats is not None
        plans = {
            "duquant": duquant_plan(weight, collector.stats, block, steps=8),
            "rtn": identity_plan(fan_in, block),
        }
        for plan_name, plan in plans.items():
            peak = float(plan.transform_input(x).abs().max())
            for static in (True, False):
                for packed in (False, True):
                    layer = QuantLinear.from_plan(
                        weight.float(),
                        bias.float(),
                        plan,
                        peak / 127 if static else None,
                        "fused",
                        packed=packed,
                    )
                    name = (
                        f"{fan_in}->{fan_out} x{rows} block {block} {plan_name} "
                        f"{'static' if static else 'per-token'} {'packed' if packed else 'int8'}"
                    )
                    cases.append((name, layer.to(device), x.float().to(device)))
    return cases


def check_all(device: str, dtype: torch.dtype) -> int:
    """Each case's codes and product, fused against int8; returns how many cases were checked.
    The codes may differ by one where a value sits on a rounding boundary (FP32 summation order
    of the rotations); the products then differ by that code's share."""
    from policies.quant import kernels
    from policies.quant.numerics import int8_matmul, quantize_activation

    checked = 0
    for name, layer, x in layer_cases(device):
        x = x.to(dtype)
        codes, scale = kernels.transform_quantize(
            x, layer.rot_in, layer.perm, layer.rot_mix, layer.act_scale, layer.width,
            layer.layout.block,
        )  # fmt: skip
        expected_q, expected_scale = layer.quantized_input(x, torch.float32)
        torch.testing.assert_close(scale, expected_scale, rtol=1e-6, atol=0, msg=name)
        assert codes.dtype == torch.int8, name
        off = (codes.float() - expected_q).abs()
        assert float(off.max()) <= 1, f"{name}: codes {float(off.max())} apart"
        assert float((off > 0).float().mean()) < 0.01, f"{name}: too many codes one apart"
        # The GEMM alone, on the int8 path's own codes: equal in FP32. (Rounded to a half type
        # the two may sit one unit apart: Triton's interpreter truncates to BF16.)
        weights = layer.weight_packed if layer.packed else layer.weight_q
        codes = quantize_activation(expected_q, 1.0).to(torch.int8)
        with torch.autocast(x.device.type, enabled=False):
            acc = int8_matmul(codes, layer.codes().t())
            expected = acc.to(torch.float32) * (expected_scale * layer.weight_scale)
        for out_dtype in (torch.float32, dtype):
            product = kernels.w4a8_matmul(
                codes, weights, layer.packed, expected_scale, layer.weight_scale, out_dtype
            )
            assert product.dtype == out_dtype, name
            if out_dtype == torch.float32:
                assert torch.equal(product, expected), f"{name}: the GEMM differs from int8"
            else:
                torch.testing.assert_close(product.float(), expected, rtol=2**-7, atol=0, msg=name)
        # The whole layer.
        fused = layer.fused_product(x)[:, : layer.out_features]
        int8 = layer.int8_product(x)[:, : layer.out_features]
        tolerance = 2e-2 if dtype != torch.float32 else 1e-2
        error = float((fused.double() - int8.double()).norm() / int8.double().norm())
        assert error < tolerance, f"{name}: fused is {error:.2e} from int8"
        checked += 1
    return checked
