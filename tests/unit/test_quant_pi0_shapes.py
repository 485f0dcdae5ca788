"""scripts/quant_pi0_shapes.py (the per GEMM shape half of bench_quant_pi0.py): pi0's GEMM shapes
at its token counts, and a shape's table line."""

from __future__ import annotations

from types import ModuleType

from policies.pi0.config import Pi0Config
from tests.script_modules import load_script


def _load(name: str) -> ModuleType:
    return load_script(name)


def test_pi0s_prefix_gemms_run_at_three_cameras_and_the_prompt() -> None:
    shapes = _load("quant_pi0_shapes").gemm_shapes(
        Pi0Config.model_validate({"tokenizer_max_length": 48}), 3
    )
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
    line = _load("quant_pi0_shapes").shape_line(row)
    assert "2.00x" in line and "0.50x" in line and line.endswith("0.250")


def test_the_script_still_finds_its_shapes_module() -> None:
    script = _load("bench_quant_pi0")
    assert script.bench_shapes.__module__ == "quant_pi0_shapes"
