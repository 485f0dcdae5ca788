"""Quantized pi0.5 checkpoints: the pi0 family's quantization (policies.pi0.quantized), for the
pi05 policy type (policies.registry.VARIANTS lists one variant per module)."""

from __future__ import annotations

from policies.pi0.pi05_config import Pi05Config
from policies.pi0.quantized import pi0_target
from policies.quant.checkpoint import quantized_variant

PI05_TARGET = pi0_target("pi05", Pi05Config)
VARIANT = quantized_variant("pi05", PI05_TARGET)
