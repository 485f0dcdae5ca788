"""Settings of W4A8 quantization, and the record of it a quantized checkpoint carries.

Pydantic only (no torch), like every config of Tempo: `QuantSettings` is what `tempo quantize`
is asked for; `Quantization` is what it wrote, enough to rebuild every quantized layer's empty
shell before its buffers are loaded.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

LayerSelection = Literal["transformer", "transformer+head"]
ComputePath = Literal["int8", "fused", "dequant"]


class QuantSettings(BaseModel):
    """How to quantize a policy's linear layers (weights 4-bit, activations 8-bit)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: Literal["duquant", "rtn"] = Field(
        default="duquant",
        description="duquant: smoothing, block rotations and zigzag permutation before "
        "quantizing; rtn: plain round-to-nearest (the baseline DuQuant is measured against).",
    )
    layers: LayerSelection = Field(
        default="transformer",
        description="Which linear layers: transformer (ACT's encoder and decoder; pi0's and "
        "pi0.5's Gemma prefix and action expert: q, k, v, o, gate, up, down) or "
        "transformer+head (ACT's action head too; pi0's state, action and time projections).",
    )
    vision: bool = Field(
        default=False,
        description="Quantize the vision tower's linear layers too (pi0 / pi0.5's SigLIP "
        "attention and MLPs); off by default, as in the public pi0 DuQuant port.",
    )
    block_size: int = Field(
        default=32,
        ge=16,
        le=128,
        description="Channels per rotation block (multiple of 8). "
        "Each layer holds two (width x block) FP32 rotations: 4 * block / out_features of the "
        "layer's FP16 weight.",
    )
    alpha: float | None = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="Smoothing strength: s = max|x|^alpha / max|W|^(1 - alpha) per input "
        "channel (1: all of the input's range moved into the weight). null: no smoothing, "
        "rotations and permutation only.",
    )
    rotation_steps: int = Field(
        default=32,
        ge=0,
        le=1024,
        description="Greedy rotation steps per block, each for R1 and R2.",
    )
    activations: Literal["static", "dynamic"] = Field(
        default="static",
        description="static: one int8 scale per layer, calibrated; dynamic: one per token, "
        "computed in forward from that token (no calibration of the scale).",
    )
    act_clip: float = Field(
        default=1.0,
        gt=0.0,
        le=1.0,
        description="Static scale = act_clip * calibrated max "
        "/ 127 (below 1 clips the rarest peaks).",
    )
    compiled_path: ComputePath = Field(
        default="int8",
        description="What the compiled and graph tiers run: int8 (int8 x int8 -> int32 GEMM, "
        "torch._int_mm), fused (the same integers in Tempo's Triton kernels on CUDA: the "
        "transform in two kernels, the scales and 4-bit unpacking inside the GEMM; where triton "
        "or CUDA is missing, int8's torch ops) or dequant (weights dequantized to the serving "
        "precision in forward). eager_half always runs dequant, eager_fp32 the FP32 fake-quant "
        "reference.",
    )
    packed_weights: bool = Field(
        default=False,
        description="Hold the 4-bit codes two per byte in device memory (a quarter of FP16; "
        "unpacked in forward, one more kernel per layer) instead of one per byte (half).",
    )
    weight_clip_search: bool = Field(
        default=True,
        description="Pick each output channel's 4-bit scale among clipped "
        "ranges by rounding error (else max |w| / 7).",
    )

    @model_validator(mode="after")
    def _block_multiple_of_8(self) -> QuantSettings:
        if self.block_size % 8:
            raise ValueError(
                f"block_size must be a multiple of 8 (int8 GEMM tiles), got {self.block_size}"
            )
        # The fused path's tiles (policies.quant.kernels.block_supported; not imported here:
        # this module stays free of torch).
        if self.compiled_path == "fused" and self.block_size & (self.block_size - 1):
            raise ValueError(
                f"compiled_path fused needs a block_size that is a power of two (16, 32, 64 or "
                f"128), got {self.block_size}"
            )
        return self


class LayerLayout(BaseModel):
    """The shapes and parts of one quantized layer (its buffers are in the weights file)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    in_features: int = Field(gt=0)
    out_features: int = Field(gt=0)
    block: int = Field(gt=0)
    rot_in: bool
    perm: bool
    rot_mix: bool
    out_block: int | None = None
    bias: bool
    static: bool


class Quantization(BaseModel):
    """The `quantization` section of a quantized Tempo checkpoint's config.json."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    scheme: Literal["w4a8"] = "w4a8"
    source: Literal["calibrated", "pi0-duquant-packs"]
    settings: QuantSettings
    observations: int = Field(ge=0, description="Calibration observations used.")
    layers: dict[str, LayerLayout]
    fp32_reference_observations: int = Field(
        ge=0, description="Observations whose FP32 unquantized chunks the checkpoint holds."
    )
