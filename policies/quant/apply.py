"""Quantizing a module's linear layers: calibrate on observations, then swap in QuantLinear.

    quantize_module(module, settings, run_calibration, target)   # run_calibration() feeds
                                                                 # observations; target: the
                                                                 # family's (ACT by default)

1. Every target layer's input is recorded (forward pre-hooks) while `run_calibration` runs the
   FP32 model: per-channel max and the peak tokens (`duquant.StatsCollector`).
2. Each layer's plan: DuQuant's smoothing, rotations and permutation (or none, for RTN).
3. With static activation scales, the observations run again and each layer records the peak
   of its transformed input, x T; its scale is act_clip * peak / 127.
4. Each nn.Linear is replaced by a QuantLinear holding the quantized, transformed weight.

The model stays FP32 and unquantized upstream of every layer during calibration (each layer
sees the activations the FP32 model produces).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import torch
from torch import nn

from policies.quant.act import ACT_TARGET, set_submodule
from policies.quant.config import LayerLayout, QuantSettings
from policies.quant.duquant import Plan, StatsCollector, duquant_plan, identity_plan
from policies.quant.layer import QuantLinear
from policies.quant.numerics import ACT_QMAX
from policies.quant.target import QuantTarget

log = logging.getLogger(__name__)


def quantize_module(
    module: nn.Module,
    settings: QuantSettings,
    run_calibration: Callable[[], None],
    target: QuantTarget = ACT_TARGET,
) -> dict[str, LayerLayout]:
    """Quantize `module`, a module of `target`'s family, in place (`target.prepare` first: ACT
    splits its attention); returns each quantized layer's layout, by name. `run_calibration()`
    must run the module's forward on the calibration observations (under torch.no_grad, in
    FP32)."""
    target.prepare(module)
    names = target.layers(module, settings)
    linears = {name: _linear(module, name) for name in names}
    collectors = {name: StatsCollector() for name in names}
    with _recording(linears, lambda name, x: collectors[name].update(x)):
        run_calibration()
    unused = [name for name in names if collectors[name].stats is None]
    if len(unused) == len(names):
        raise ValueError("calibration ran none of the layers to quantize: check run_calibration")
    if unused:
        # Layers the forward never runs (pi0's prefix computes only the keys and values of
        # its last layer): no statistics, so plain round-to-nearest with per-token scales.
        log.info(
            "%d layers never ran in calibration, quantized without a transform: %s",
            len(unused),
            ", ".join(unused),
        )
    plans: dict[str, Plan] = {}
    for name, linear in linears.items():
        stats = collectors[name].stats
        if stats is None:
            plans[name] = identity_plan(linear.in_features, settings.block_size)
        elif settings.method == "duquant":
            plans[name] = duquant_plan(
                linear.weight, stats, settings.block_size, settings.alpha, settings.rotation_steps
            )
        else:
            plans[name] = identity_plan(linear.in_features, settings.block_size)
    scales: dict[str, float | None] = dict.fromkeys(names)
    if settings.activations == "static":
        peaks = dict.fromkeys(names, 0.0)

        def record_peak(name: str, x: torch.Tensor) -> None:
            flat = x.detach().reshape(-1, x.shape[-1]).float()  # where x lives, in FP32
            peaks[name] = max(peaks[name], float(plans[name].transform_input(flat).abs().max()))

        with _recording(linears, record_peak):
            run_calibration()
        scales = {n: settings.act_clip * max(p, 1e-8) / ACT_QMAX for n, p in peaks.items()}
        scales.update(dict.fromkeys(unused))
    layouts = {}
    for name, linear in linears.items():
        layer = QuantLinear.from_plan(
            linear.weight,
            linear.bias,
            plans[name],
            scales[name],
            settings.compiled_path,
            settings.weight_clip_search,
            packed=settings.packed_weights,
        )
        set_submodule(module, name, layer)
        layouts[name] = layer.layout
    log.info("quantized %d layers (%s, W4A8)", len(layouts), settings.method)
    return layouts


def _linear(module: nn.Module, name: str) -> nn.Linear:
    layer = module.get_submodule(name)
    if not isinstance(layer, nn.Linear):  # target_layers names only nn.Linear layers
        raise TypeError(f"layer {name} is not an nn.Linear, so it cannot be quantized")
    return layer


class _recording:
    """Forward pre-hooks calling record(name, input) on every layer; removed on exit."""

    def __init__(
        self, layers: Mapping[str, nn.Module], record: Callable[[str, torch.Tensor], None]
    ) -> None:
        self._layers, self._record = layers, record
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    def __enter__(self) -> None:
        for name, layer in self._layers.items():
            hook = (lambda n: lambda _module, args: self._record(n, args[0]))(name)
            self._handles.append(layer.register_forward_pre_hook(hook))

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()


def quantized_shell(
    module: nn.Module, layouts: dict[str, LayerLayout], settings: QuantSettings
) -> nn.Module:
    """Put empty QuantLinear layers of `layouts` into `module` (a target's `empty_module`), for
    loading; ValueError naming the layer when the module has no such nn.Linear or its shape is
    not the layout's."""
    for name, layout in layouts.items():
        try:
            layer = module.get_submodule(name)
        except AttributeError:
            raise ValueError(f"the model has no layer {name!r} to hold a quantized layer") from None
        if not isinstance(layer, nn.Linear):
            raise ValueError(f"layer {name!r} of the model is not a linear layer")
        if (layer.in_features, layer.out_features) != (layout.in_features, layout.out_features):
            raise ValueError(
                f"layer {name!r} maps {layer.in_features} to {layer.out_features} features in "
                f"the model, but its quantized form {layout.in_features} to {layout.out_features}"
            )
        shell = QuantLinear(layout, settings.compiled_path, settings.packed_weights)
        set_submodule(module, name, shell.to(_device_of(layer)))
    return module


def _device_of(layer: nn.Module) -> torch.device:
    return next(layer.parameters()).device
