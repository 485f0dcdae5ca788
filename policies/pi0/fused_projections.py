"""Side-by-side projections run as one matrix product in the compiled tiers.

An expert step multiplies 51 tokens by each of q, k and v, and by gate and up, separately: at
that size each product is a few microseconds of fixed cost, 180 layer calls a step. Fused,
q/k/v is one product and gate/up another. `fuse_linears` concatenates the weights once and
re-points the separate layers' weights at slices of the result, so no weight is held twice and
the unfused path (the eager tiers) computes with the very same numbers.

The fused layers are set only on the copy the compiled tiers run (Pi0Step.compile_regions);
LeRobot's key names, the checkpoints and quantized layers are untouched (a layer that is not a
plain nn.Linear is never fused).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


def fuse_linears(layers: Sequence[nn.Module]) -> nn.Linear | None:
    """One nn.Linear whose output is `layers`' outputs side by side, or None when they cannot
    be fused (not all plain nn.Linear, different inputs, dtypes or devices, bias on some only).
    Afterwards each layer's weight (and bias) is a view into the fused one's."""
    if not layers or not all(type(layer) is nn.Linear for layer in layers):
        return None
    linears = [layer for layer in layers if isinstance(layer, nn.Linear)]
    weights = [layer.weight for layer in linears]
    if len({(w.shape[1], w.dtype, w.device) for w in weights}) != 1:
        return None
    biased = {layer.bias is not None for layer in linears}
    if len(biased) != 1:
        return None
    with torch.no_grad():
        # Fused before (another compiled copy, one per batch size): the weights are already
        # consecutive slices of one tensor; fuse onto that instead of holding a second copy.
        weight = _joined(weights)
        if weight is None:
            weight = torch.cat([w.detach() for w in weights])
        biases = [layer.bias for layer in linears if layer.bias is not None]
        bias = _joined(biases) if biases else None
        if biases and bias is None:
            bias = torch.cat([b.detach() for b in biases])
    fused = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device="meta")
    fused.weight = nn.Parameter(weight, requires_grad=False)
    if bias is not None:
        fused.bias = nn.Parameter(bias, requires_grad=False)
    start = 0
    for layer in linears:
        rows = layer.weight.shape[0]
        layer.weight.data = weight[start : start + rows]
        if bias is not None and layer.bias is not None:
            layer.bias.data = bias[start : start + rows]
        start += rows
    return fused


def _joined(parts: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """One tensor over the storage `parts` lie in, when they are contiguous row slices of it
    one after another; else None."""
    first = parts[0].detach()
    storage = first.untyped_storage()
    offset = first.storage_offset()
    for part in parts:
        tensor = part.detach()
        same = tensor.untyped_storage().data_ptr() == storage.data_ptr()
        if not same or not tensor.is_contiguous() or tensor.storage_offset() != offset:
            return None
        if tensor.dtype != first.dtype or tensor.shape[1:] != first.shape[1:]:
            return None
        offset += tensor.numel()
    size = (sum(part.shape[0] for part in parts), *first.shape[1:])
    stride = torch.empty(size, device="meta").stride()
    return first.new_empty(0).set_(storage, first.storage_offset(), size, stride)


def split_sizes(layers: Sequence[nn.Module]) -> list[int]:
    """The output widths of `layers`, to split a fused output back."""
    return [layer.weight.shape[0] for layer in layers if isinstance(layer, nn.Linear)]
