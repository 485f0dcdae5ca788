"""What a policy's module may tell the runner about itself, declared once.

    class ACT(ServedModule): ...          # a policy's top module: overrides the hooks it needs
    hooks = hooks_of(module)              # the runner: the module's hooks, or the defaults
    hooks.compile_options()               # {} unless the module asks for inductor settings

The hooks, each with the runner's default for a module that does not override it:

    precast_half_weights   False    half tiers run a copy with matmul weights cast once
                                    (controller.inference.half_weights)
    use_channels_last()    the whole module channels-last (4-D weights); a policy that feeds its
                                    frames channels-last too overrides it
    compile_options()      {}       inductor settings for the compiled tiers (and the cache key)
    compile_regions(fn)    False    compile the module's repeated blocks with `fn` instead of
                                    the whole step (True: it did; the tiers run the rest eagerly)
    precision_scope()      no-op    entered around the reduced-precision tiers only

A submodule whose bare parameters feed matmuls (not an nn.Linear or nn.Conv*) names them by
deriving from MatmulParameters, so the half-weight copy casts them too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import nn


class ServedModule(nn.Module):
    """Base of a policy's top module: every hook the runner may call, with its default."""

    precast_half_weights: ClassVar[bool] = False

    def use_channels_last(self, enabled: bool = True) -> nn.Module:
        """This module channels-last (or back); returns the module to serve. Call before
        compiling."""
        return channels_last(self, enabled)

    def compile_options(self) -> dict[str, object]:
        """Inductor settings the compiled tiers need for this module."""
        return {}

    def precision_scope(self) -> contextlib.AbstractContextManager[object]:
        """What the runner enters around the reduced-precision tiers (never eager FP32)."""
        return contextlib.nullcontext()

    def compile_regions(self, compile_fn: Callable[[Callable[..., Any]], Any]) -> bool:
        """Compile this module's repeated blocks in place with `compile_fn` (torch.compile with
        the runner's settings) and return True, or return False to have the whole step compiled.
        A deep model whose layers share one compiled block compiles once per kind of layer
        instead of once per layer call, minutes faster; the CUDA graph still captures it all."""
        return False


class MatmulParameters(nn.Module):
    """Base of a submodule whose bare parameters feed matmuls: it names them here."""

    matmul_parameters: ClassVar[tuple[str, ...]] = ()


def channels_last(module: nn.Module, enabled: bool = True) -> nn.Module:
    """The module's 4-D weights channels-last (or back to contiguous)."""
    memory_format = torch.channels_last if enabled else torch.contiguous_format
    return module.to(memory_format=memory_format)  # type: ignore[call-overload,no-any-return]


class _Defaults:
    """The hooks of a module that is not a ServedModule: every default."""

    precast_half_weights = False

    def __init__(self, module: nn.Module) -> None:
        self._module = module

    def use_channels_last(self, enabled: bool = True) -> nn.Module:
        return channels_last(self._module, enabled)

    def compile_options(self) -> dict[str, object]:
        return {}

    def precision_scope(self) -> contextlib.AbstractContextManager[object]:
        return contextlib.nullcontext()

    def compile_regions(self, compile_fn: Callable[[Callable[..., Any]], Any]) -> bool:
        return False


def hooks_of(module: nn.Module) -> ServedModule | _Defaults:
    """The module's own hooks, or the defaults for a plain nn.Module (tests, small tools)."""
    return module if isinstance(module, ServedModule) else _Defaults(module)


def compiles_regions(module: nn.Module) -> bool:
    """Whether the module's class brings its own `compile_regions` (so the runner copies it and
    lets it compile its blocks, instead of compiling the whole step)."""
    return (
        isinstance(module, ServedModule)
        and type(module).compile_regions is not ServedModule.compile_regions
    )


def matmul_parameter_names(module: nn.Module) -> tuple[str, ...]:
    """The parameters of one submodule (not its children) that feed matmuls or convolutions."""
    if isinstance(module, nn.Linear | nn.Conv1d | nn.Conv2d | nn.Conv3d):
        return ("weight", "bias")
    return module.matmul_parameters if isinstance(module, MatmulParameters) else ()
