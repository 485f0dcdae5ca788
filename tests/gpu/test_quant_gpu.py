"""W4A8 layers on a GPU: the naive layer's CUDA graph error, Tempo's layer through the whole
ladder (graph tier included) without recompiles, and the int8 GEMM's numerics on CUDA, in
torch ops and in Tempo's Triton kernels."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from controller.inference.runner import Runner  # noqa: E402
from controller.runner_config import RunnerConfig  # noqa: E402
from controller.tools.quantize import run_module, stacked_observations  # noqa: E402
from policies.quant.apply import quantize_module  # noqa: E402
from policies.quant.config import QuantSettings  # noqa: E402
from policies.quant.duquant import StatsCollector, duquant_plan  # noqa: E402
from policies.quant.layer import QuantLinear  # noqa: E402
from policies.quant.numerics import exact_int_matmul, int8_matmul  # noqa: E402
from policies.tensor_policy import ReferenceChunks  # noqa: E402
from tests.quant_fixtures import NaiveQuantLinear, calibration_runner, small_act_policy  # noqa: E402

pytestmark = pytest.mark.gpu


def test_the_naive_layer_reproduces_the_cuda_graph_overwrite_error():
    torch._dynamo.reset()
    layer = NaiveQuantLinear(64, 32).cuda().eval()
    compiled = torch.compile(layer, mode="reduce-overhead", fullgraph=True)
    x = torch.randn(32, 64, device="cuda")
    with (
        torch.no_grad(),
        pytest.raises(RuntimeError, match="overwritten by a subsequent run|prevent overwriting"),
    ):
        for _ in range(4):
            compiled(x)
        # The scale is a tensor the first call produced inside cudagraph-owned memory.
        float(layer.act_scale)  # type: ignore[arg-type]


def _layer(compiled_path: str = "int8") -> tuple[QuantLinear, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(96, 256, generator=gen)
    x = torch.randn(300, 256, generator=gen)
    x[:, [3, 100]] *= 100.0
    collector = StatsCollector()
    collector.update(x)
    assert collector.stats is not None
    plan = duquant_plan(weight, collector.stats, block=32)
    scale = float(plan.transform_input(x.double()).abs().max()) / 127
    layer = QuantLinear.from_plan(weight, torch.randn(96), plan, scale, compiled_path)  # type: ignore[arg-type]
    return layer.cuda(), x.cuda()


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def test_the_triton_kernels_compute_the_int8_paths_integers_on_cuda():
    pytest.importorskip("triton")
    from tests.quant_kernel_cases import check_all

    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        assert check_all("cuda", dtype) == 24


def test_fp32_fused_path_compiles_once_and_equals_the_int8_path():
    pytest.importorskip("triton")
    torch._dynamo.reset()
    layer, x = _layer("fused")
    with torch.no_grad():
        expected = layer.int8_product(x)[:, : layer.out_features] + layer.bias
        compiled = torch.compile(layer, fullgraph=True, dynamic=False)
        assert _relative(compiled(x), expected) < 1e-5
        with torch.compiler.set_stance("fail_on_recompile"):
            compiled(x * 0.5)


@pytest.mark.parametrize("m", [1, 5, 16, 17, 300])
def test_int_mm_padding_keeps_the_int32_accumulator_exact_on_cuda(m):
    gen = torch.Generator().manual_seed(m)
    q = torch.randint(-127, 128, (m, 512), generator=gen, dtype=torch.int8).cuda()
    w = torch.randint(-8, 8, (96, 512), generator=gen, dtype=torch.int8).cuda()
    acc = int8_matmul(q, w.t())
    assert acc.shape == (m, 96) and acc.dtype == torch.int32
    assert torch.equal(acc.long(), exact_int_matmul(q, w.t()))


def test_fp32_int8_path_equals_the_fake_quant_reference_eager_and_compiled():
    torch._dynamo.reset()
    layer, x = _layer("int8")
    with torch.no_grad():
        reference = layer.reference_product(x)
        assert _relative(layer.int8_product(x), reference) < 1e-5
        compiled = torch.compile(layer, fullgraph=True, dynamic=False)
        first = compiled(x)
        with torch.compiler.set_stance("fail_on_recompile"):
            compiled(x * 0.5)
        assert _relative(first, layer(x)) < 1e-5  # layer(x) eager FP32 = the reference
        with torch.autocast("cuda", dtype=torch.float16):
            half = layer(x)  # eager_half: dequantized FP16 GEMM
    assert _relative(half, layer(x)) < 1e-2


@pytest.mark.parametrize("compiled_path", ["int8", "fused", "dequant"])
def test_a_quantized_act_serves_from_the_graph_tier_without_recompiles(
    gpu_cache_dir, compiled_path
):
    torch._dynamo.reset()
    policy = small_act_policy()
    reference_obs = stacked_observations(policy.spec, 3, seed=99)
    chunks = run_module(policy.module, *reference_obs, torch.device("cpu"))
    settings = QuantSettings(block_size=16, compiled_path=compiled_path, activations="dynamic")  # type: ignore[arg-type]
    quantize_module(policy.module, settings, calibration_runner(policy))
    policy.reference = ReferenceChunks(
        images=reference_obs[0], state=reference_obs[1], chunks=chunks
    )
    # FP16 activations through this small model's W4A8 layers land 2.0e-2 to 2.3e-2 from the
    # FP32 fake-quant reference (measured on an H100; ACT at ALOHA size: 4.5e-3 to 5.3e-3).
    config = RunnerConfig(
        cache_dir=gpu_cache_dir,
        step_budget_ms=None,
        parity_observations=3,
        parity_rtol=5e-2,
        reference_parity_rtol=2.0,
    )
    runner = Runner(policy, config, device="cuda")
    runner.start()
    assert runner.ready_tiers == ["graph", "compiled", "eager_half", "eager_fp32"], runner.status()
    for tier in runner.status()["tiers"]:  # type: ignore[union-attr]
        assert tier["parity_error"] <= 5e-2 and tier["reference_error"] is not None, tier
    from controller.inference.examples import random_observation

    for i in range(30):  # a recompile or a graph error would demote the graph tier
        runner.predict_chunk(*random_observation(policy.spec, 40 + i))
    assert runner.tier == "graph" and runner.demotions == []
