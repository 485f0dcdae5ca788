"""Quantized pi0.5 checkpoints: the pi0 family's quantization (policies.pi0.quantized), for the
pi05 policy type (policies.registry.VARIANTS lists one variant per module)."""

from __future__ import annotations

from policies.pi0.quantized import PI0_TARGET
from policies.quant.checkpoint import quantized_variant

VARIANT = quantized_variant("pi05", PI0_TARGET)
