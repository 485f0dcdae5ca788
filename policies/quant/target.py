"""What quantization needs to know of one policy family's module: the `QuantTarget`.

    ACT_TARGET (policies.quant.act), PI0_TARGET (policies.pi0.quantized)

Calibration (`policies.quant.apply.quantize_module`), the quantized checkpoint's reader
(`policies.quant.checkpoint`) and the import of the pi0 port's packs take one, so that every
family's quantized checkpoint is written and read by the same code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from policies.quant.config import QuantSettings


@dataclass(frozen=True)
class QuantTarget:
    """One family's hooks (see the module doc)."""

    title: str  # how messages name the family: "ACT", "pi0"
    policy_type: str  # the family's name, its checkpoints' policy_type: "act", "pi0", "pi05"
    # The structural change made before calibration, with the same numbers (ACT splits its
    # packed attention projection into three nn.Linear); identity for most families.
    prepare: Callable[[nn.Module], nn.Module]
    # The module of a config with that change made, for a quantized checkpoint's tensors to
    # fill: possibly on the meta device (QuantLinear shells go in there, then `materialize`).
    empty_module: Callable[[Any], nn.Module]
    # Names of the nn.Linear layers the settings quantize (after `prepare`).
    layers: Callable[[nn.Module, QuantSettings], list[str]]
    # The shelled module on the CPU, weights uninitialised, its computed buffers set: the real
    # size of pi0 is never randomly initialised, nor its quantized layers' FP32 weights allocated.
    materialize: Callable[[nn.Module], nn.Module] = lambda module: module
    # The submodule whose layer names the pi0 port's .npz packs are named after ("" : the module).
    pack_root: str = ""


def identity(module: nn.Module) -> nn.Module:
    return module
