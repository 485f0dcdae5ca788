"""QuantLinear: a W4A8 DuQuant linear layer whose whole state is buffers prepared before serving.

    y = dequant( Q8(x T) @ Q4(W T^-T)^T ) [rotated back by out_rot] + bias

T (smoothing folded into the first block rotation, permutation, second rotation) and the 4-bit
weight are computed once, by calibration (`policies.quant.apply`) or when a checkpoint loads;
forward only reads buffers. Nothing is computed or assigned on the first call, and no branch
depends on data, so torch.compile(fullgraph=True) traces it once and a CUDA graph captures it.

Forward picks its arithmetic from how it is being run (never from the data):

    under torch.compile (graph, compiled tiers)   `compiled_path`: int8 (int8 x int8 -> int32
                                                  GEMM, torch._int_mm), fused (the same
                                                  integers in Triton kernels, scales in the
                                                  GEMM: policies.quant.kernels) or dequant
    eager under autocast (eager_half)             dequant: FP16/BF16 GEMM with the weights
                                                  dequantized in forward
    eager, no autocast (eager_fp32)               the fake-quant reference: dequantized values,
                                                  FP32 GEMM; this defines correct numerics

Every path transforms and rounds the input in FP32 (autocast off) by the same rule, so they all
see the same integers; they differ only in how the integers are multiplied.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from policies.quant import kernels
from policies.quant.config import ComputePath, LayerLayout
from policies.quant.duquant import Plan
from policies.quant.numerics import (
    dynamic_scale,
    int8_matmul,
    pack_int4,
    padded,
    quantize_activation,
    quantize_weight,
    unpack_int4,
)
from policies.quant.transform import rotate_blocks, transform_columns


class QuantLinear(nn.Module):
    """A linear layer (in_features -> out_features) in W4A8; build with `from_plan`."""

    # Buffers registered in __init__, declared so that type checkers see tensors. The codes are
    # held in one of the first two, by `packed`.
    weight_packed: torch.Tensor
    weight_q: torch.Tensor
    weight_scale: torch.Tensor
    act_scale: torch.Tensor | None
    rot_in: torch.Tensor | None
    perm: torch.Tensor | None
    rot_mix: torch.Tensor | None
    out_rot: torch.Tensor | None
    bias: torch.Tensor | None

    def __init__(
        self, layout: LayerLayout, compiled_path: ComputePath = "int8", packed: bool = False
    ) -> None:
        """An empty shell of the right shapes (buffers zero); `from_plan` or a checkpoint's
        buffers fill it. packed: hold the 4-bit codes two per byte (`weight_packed`, a quarter
        of FP16's memory) and unpack them in forward, instead of one per byte (`weight_q`)."""
        super().__init__()
        self.layout = layout
        self.in_features, self.out_features = layout.in_features, layout.out_features
        self.width = -(-layout.in_features // layout.block) * layout.block
        if self.width % 8:
            raise ValueError(f"block {layout.block}: the padded width must be a multiple of 8")
        self.out_padded = padded(layout.out_features)
        if compiled_path == "fused" and not kernels.block_supported(layout.block):
            raise ValueError(
                f"the fused compute path needs a block size that is a power of two from 16, "
                f"got {layout.block}"
            )
        self.compiled_path = compiled_path
        self.block = layout.block  # an int for traced code (the layout is a pydantic model)
        n_blocks, block = self.width // layout.block, layout.block
        self.packed = packed
        if packed:
            codes = torch.zeros(self.out_padded, self.width // 2, dtype=torch.uint8)
            self.register_buffer("weight_packed", codes)
        else:
            codes = torch.zeros(self.out_padded, self.width, dtype=torch.int8)
            self.register_buffer("weight_q", codes)
        self.register_buffer("weight_scale", torch.zeros(self.out_padded))
        self.register_buffer("act_scale", torch.ones(()) if layout.static else None)
        rotation = torch.zeros(n_blocks, block, block)
        self.register_buffer("rot_in", rotation.clone() if layout.rot_in else None)
        perm = torch.arange(self.width)
        self.register_buffer("perm", perm if layout.perm else None)
        self.register_buffer("rot_mix", rotation.clone() if layout.rot_mix else None)
        out_rot = None
        if layout.out_block is not None:
            ob = layout.out_block
            if layout.out_features % ob:
                raise ValueError(f"out_features {layout.out_features} is not a multiple of {ob}")
            out_rot = torch.zeros(layout.out_features // ob, ob, ob)
        self.register_buffer("out_rot", out_rot)
        self.register_buffer("bias", torch.zeros(layout.out_features) if layout.bias else None)

    @classmethod
    def from_plan(
        cls,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        plan: Plan,
        act_scale: float | None,
        compiled_path: ComputePath = "int8",
        clip_search: bool = True,
        out_rot: torch.Tensor | None = None,
        packed: bool = False,
    ) -> QuantLinear:
        """Quantize `weight` (out, in) under `plan`; act_scale None means per-token scales.
        out_rot (orthogonal blocks, for imported packs): the weight's rows become
        blockdiag(out_rot) W before quantizing, and forward multiplies the output by
        blockdiag(out_rot) again, which undoes it."""
        out_features, in_features = weight.shape
        layout = LayerLayout(
            in_features=in_features,
            out_features=out_features,
            block=plan.block,
            rot_in=plan.input_rotation() is not None,
            perm=plan.perm is not None,
            rot_mix=plan.rot2 is not None,
            out_block=None if out_rot is None else out_rot.shape[-1],
            bias=bias is not None,
            static=act_scale is not None,
        )
        layer = cls(layout, compiled_path, packed)
        transformed = cls.transformed_weight(weight, plan, out_rot)
        q, scale = quantize_weight(transformed, clip_search)
        with torch.no_grad():
            codes = torch.zeros(layer.out_padded, layer.width, dtype=torch.int8)
            codes[:out_features] = q.cpu()
            layer.set_codes(codes)
            layer.weight_scale[:out_features] = scale.cpu()
            if layer.act_scale is not None:
                layer.act_scale.fill_(float(act_scale))  # type: ignore[arg-type]
            for name, value in (
                ("rot_in", plan.input_rotation()),
                ("perm", plan.perm),
                ("rot_mix", plan.rot2),
                ("out_rot", out_rot),
                ("bias", None if bias is None else bias.detach()),
            ):
                buffer = getattr(layer, name)
                if buffer is not None and value is not None:
                    buffer.copy_(value.to("cpu", buffer.dtype))
        return layer.to(weight.device)

    @staticmethod
    def transformed_weight(
        weight: torch.Tensor, plan: Plan, out_rot: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The weight the layer quantizes, in float64 where the weight is (a GPU's float64 does
        pi0's 16384-wide layers in milliseconds, the host in tens of seconds): W T^-T, rows
        through blockdiag(out_rot) when given (forward multiplies the output by it again,
        which undoes it)."""
        transformed = plan.transform_weight(weight.detach().to(torch.float64))
        if out_rot is not None:
            transformed = rotate_blocks(
                transformed.t(), out_rot.to(transformed.device, torch.float64).transpose(1, 2)
            ).t()
        return transformed

    @property
    def weight(self) -> torch.Tensor:
        """Not the weight: a stand-in for models that read `linear.weight.dtype` or `.device`
        to cast a layer's input (pi0's Gemma layers), the FP32 per-channel scale, since the
        layer transforms and rounds its input in FP32 whatever the serving precision."""
        return self.weight_scale

    def codes(self) -> torch.Tensor:
        """The int8 weight codes (out_padded, width), unpacked when held packed."""
        if self.packed:
            return unpack_int4(self.weight_packed, self.width)
        return self.weight_q

    def set_codes(self, codes: torch.Tensor) -> None:
        with torch.no_grad():
            if self.packed:
                self.weight_packed.copy_(pack_int4(codes.cpu()))
            else:
                self.weight_q.copy_(codes)

    # ---- forward ------------------------------------------------------------------------------

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        flat = x.reshape(-1, self.in_features)
        path: ComputePath | Literal["reference"]
        if torch.compiler.is_compiling():
            path = self.compiled_path
        elif torch.is_autocast_enabled(x.device.type):
            path = "dequant"
        else:
            path = "reference"
        if path == "fused" and kernels.available(x.device):
            y = self.fused_product(flat)
        elif path in ("int8", "fused"):
            y = self.int8_product(flat)
        elif path == "dequant":
            y = self.dequant_product(flat)
        else:
            y = self.reference_product(flat)
        y = y[:, : self.out_features]
        if self.out_rot is not None:
            y = rotate_blocks(y, self.out_rot.to(y.dtype))
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y.reshape(*lead, self.out_features)

    def quantized_input(
        self, x: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(int8 codes as `dtype` floats, their scale: () static or (m, 1) per token)."""
        with torch.autocast(x.device.type, enabled=False):
            t = transform_columns(
                x.to(dtype),
                _as(self.rot_in, dtype),
                self.perm,
                _as(self.rot_mix, dtype),
                self.width,
            )
            scale = self.act_scale.to(dtype) if self.act_scale is not None else dynamic_scale(t)
            return quantize_activation(t, scale), scale

    def int8_product(self, x: torch.Tensor) -> torch.Tensor:
        """int8 x int8 -> int32 GEMM, rescaled in FP32."""
        q, scale = self.quantized_input(x, torch.float32)
        with torch.autocast(x.device.type, enabled=False):
            acc = int8_matmul(q.to(torch.int8), self.codes().t())
            y = acc.to(torch.float32) * (scale * self.weight_scale)
        return y.to(x.dtype)

    def fused_product(self, x: torch.Tensor) -> torch.Tensor:
        """int8_product's integers and scales in three Triton kernels (see kernels)."""
        q, scale = kernels.transform_quantize(
            x,
            self.rot_in,
            self.perm,
            self.rot_mix,
            self.act_scale,
            self.width,
            self.block,
        )
        weights = self.weight_packed if self.packed else self.weight_q
        return kernels.w4a8_matmul(q, weights, self.packed, scale, self.weight_scale, x.dtype)

    def dequant_product(self, x: torch.Tensor) -> torch.Tensor:
        """Dequantized activations and weights in the serving precision (autocast's half type,
        else the input's), one floating-point GEMM."""
        device = x.device.type
        half = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype
        q, scale = self.quantized_input(x, torch.float32)
        weight = self.codes().to(half) * self.weight_scale.to(half)[:, None]
        return ((q * scale).to(half) @ weight.t()).to(x.dtype)

    def reference_product(self, x: torch.Tensor) -> torch.Tensor:
        """The fake-quant reference in the input's precision (FP32, or FP64 in tests)."""
        dtype = x.dtype
        q, scale = self.quantized_input(x, dtype)
        weight = self.codes().to(dtype) * self.weight_scale.to(dtype)[:, None]
        return (q * scale) @ weight.t()

    def extra_repr(self) -> str:
        parts = [f"in={self.in_features}", f"out={self.out_features}", f"block={self.layout.block}"]
        parts.append("static" if self.layout.static else "per-token")
        parts.append(f"compiled_path={self.compiled_path}")
        parts.append("packed" if self.packed else "int8")
        return ", ".join(parts)


def _as(t: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    return None if t is None else t.to(dtype)


def memory_bytes(module: nn.Module) -> dict[str, int]:
    """Device memory of the quantized layers as held: `weights` (codes and scales, as they are
    in memory), `transform` (rotations, permutation, activation scale), and `fp16` (the same
    layers' weights in FP16, the figure both are compared with). Biases are left out (kept in
    FP32 either way)."""
    out = {"weights": 0, "transform": 0, "fp16": 0}
    for layer in module.modules():
        if isinstance(layer, QuantLinear):
            code = layer.weight_packed if layer.packed else layer.weight_q
            out["weights"] += _nbytes(code) + _nbytes(layer.weight_scale)
            for name in ("rot_in", "perm", "rot_mix", "out_rot", "act_scale"):
                out["transform"] += _nbytes(getattr(layer, name))
            out["fp16"] += layer.out_features * layer.in_features * 2
    return out


def _nbytes(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.numel() * t.element_size()
