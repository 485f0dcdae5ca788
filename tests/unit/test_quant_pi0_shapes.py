"""scripts.quant.quant_pi0_shapes (the per GEMM shape half of bench_quant_pi0): pi0's GEMM shapes
at its token counts, and a shape's table line."""

from __future__ import annotations

from policies.pi0.config import Pi0Config
from scripts.quant import bench_quant_pi0, quant_pi0_shapes


def test_pi0s_prefix_gemms_run_at_three_cameras_and_the_prompt() -> None:
    shapes = quant_pi0_shapes.gemm_shapes(Pi0Config.model_validate({"tokenizer_max_length": 48}), 3)
    prefix = {name: (tokens, fan_in, fan_out) for name, tokens, fan_in, fan_out in shapes}
    assert prefix["prefix q_proj"] == (816, 2048, 2048)  # 3 x 256 patches + 48 prompt tokens
    assert prefix["prefix down_proj"] == (816, 16384, 2048)
    assert prefix["expert q_proj"][0] == Pi0Config().chunk_size + 1  # the state, then actions
    assert len(shapes) == 10


def test_a_shapes_line_gives_each_paths_speed_up_and_the_bytes_ratio() -> None:
    row = {
        "layer": "prefix o_proj",
        "tokens": 816,
        "in": 2048,
        "out": 2048,
        "bf16": {"median_ms": 1.0},
        "int8": {"median_ms": 0.5},
        "dequant": {"median_ms": 2.0},
        "bytes": {"bf16": 1000, "w4_packed": 250},
    }
    line = quant_pi0_shapes.shape_line(row)
    assert "2.00x" in line and "0.50x" in line and line.endswith("0.250")


def test_the_script_still_finds_its_shapes_module() -> None:
    assert bench_quant_pi0.bench_shapes.__module__ == "scripts.quant.quant_pi0_shapes"


def test_model_bytes_counts_the_host_tables_apart() -> None:
    """The served weights' ratio leaves out the vocabulary tables held in host memory: counted
    apart, in both totals, at BF16's two bytes; a quantized layer's packed codes take a
    quarter of its BF16 weight plus its scales and transform."""
    import torch

    from policies.pi0.config import tiny_pi0_config
    from policies.pi0.gemma import HostTable
    from policies.pi0.step import Pi0Step, Pi0StepConfig
    from policies.quant.config import LayerLayout
    from policies.quant.layer import QuantLinear

    config = tiny_pi0_config()
    size = config.vision.image_size
    step_config = Pi0StepConfig(
        network=config, state_size=4, action_size=3, camera_sizes=((size, size),)
    )
    with torch.device("meta"):
        step = Pi0Step(step_config)
    before = bench_quant_pi0.model_bytes(step)
    tables = sum(m.weight.numel() * 2 for m in step.modules() if isinstance(m, HostTable))
    assert before["host_tables"] == tables > 0
    assert before["w4a8_packed"] == before["bf16"]  # nothing quantized yet
    name = next(n for n, m in step.named_modules() if n.endswith("mlp.down_proj"))
    linear = step.get_submodule(name)
    layout = LayerLayout(
        in_features=linear.in_features, out_features=linear.out_features, block=16,
        rot_in=True, perm=True, rot_mix=True, out_block=None, bias=False, static=True,
    )  # fmt: skip
    parent, _, leaf = name.rpartition(".")
    with torch.device("meta"):
        quant = QuantLinear(layout, "int8", packed=True)
        setattr(step.get_submodule(parent), leaf, quant)
    after = bench_quant_pi0.model_bytes(step)
    assert after["bf16"] == before["bf16"] and after["host_tables"] == tables
    assert quant.out_padded * quant.width == linear.weight.numel()  # no padding at this shape
    codes = linear.weight.numel() // 2  # two 4-bit codes a byte: a quarter of BF16's bytes
    transform = sum(t.numel() * t.element_size() for t in (quant.rot_in, quant.perm, quant.rot_mix))
    scales = quant.out_padded * 4 + 4  # FP32 per output row, and the static activation scale
    rest = before["bf16"] - linear.weight.numel() * 2
    assert after["w4a8_packed"] == rest + codes + scales + transform
