"""The FP32 reference's matmul weights kept off the device, each layer's brought there while it
runs.

A model of pi0's size holds 11 GB of FP32 matmul weights for its reference tier (eager_fp32)
beside the 5.6 GB half copy the serving tiers run. With `runner.reference_weights: host` the
FP32 weights of every nn.Linear, nn.Conv* and MatmulParameters module stay in host memory: a
forward pre-hook puts one layer's weights on the device (on the current stream) and a forward
hook drops the device copy after the call, so the device holds the half copy and one layer.
Everything else (norms, embeddings, buffers) lives on the device as usual.

Where a weight's half copy holds its value exactly (a checkpoint stored in BF16, as openpi's
converter and LeRobot's bfloat16 pi0 write it), the hook casts that device copy back to FP32
instead of uploading: nothing crosses PCIe, and the host copy is never pinned (pinning pi0's
10.8 GB took 8.1 s of its start on an H100). The others are pinned and uploaded per call (pi0
stored in FP32: about 1 s a reference step), so start-up checks, fault attribution and
re-promotion are slower, and eager_fp32 as a serving tier is a last resort in earnest. The half
tiers' copy is made from the host weights straight to the device (`half_weight_copy(...,
device=)`), so the FP32 model is never on the device whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from controller.errors import PolicyError
from policies.model_hooks import hooks_of, matmul_parameter_names


def check_host_weights(module: nn.Module, device: torch.device) -> None:
    """PolicyError unless host weights can work: a CUDA device, and a model whose half tiers
    run their own copy of the weights (else they would compute from the host)."""
    if device.type != "cuda":
        raise PolicyError(
            f"runner.reference_weights: host keeps the reference's weights off a CUDA device; "
            f"this runner is on {device.type}, so set it to device"
        )
    if not hooks_of(module).precast_half_weights:
        raise PolicyError(
            "runner.reference_weights: host needs a model whose half tiers hold their own copy "
            f"of the weights (precast_half_weights), and {type(module).__name__} does not; set "
            "it to device"
        )


def place_with_host_weights(module: nn.Module, device: torch.device) -> nn.Module:
    """`module` on `device` except its matmul weights, which stay in host memory (pinned later,
    by stream_host_weights, only those the reference must upload)."""
    host_ids = {id(p) for p in _matmul_parameters(module)}
    for sub in module.modules():
        if type(sub)._apply is not nn.Module._apply:
            continue  # it decides where it lives (pi0's HostTable stays on the host)
        for param in sub._parameters.values():
            if param is None:
                continue
            target = torch.device("cpu") if id(param) in host_ids else device
            if param.device != target:
                param.data = param.data.to(target)
        for name, buffer in sub._buffers.items():
            if buffer is not None and buffer.device != device:
                sub._buffers[name] = buffer.to(device)
    return module


def stream_host_weights(
    module: nn.Module, device: torch.device, exact: Mapping[int, torch.Tensor] | None = None
) -> HostWeights:
    """Hooks that bring each matmul layer's weights to the device for its call and drop them
    after: from `exact` (id(host parameter) -> the half copy's parameter on the device,
    holding the same values in another dtype: half_weight_copy's), else uploaded from the
    host, which is pinned here. Call after any copy of the module is made (a deep copy would
    take the hooks along)."""
    exact = exact or {}
    placed = HostWeights()
    counted: set[int] = set()  # a weight tied to several layers counts once
    for sub in module.modules():
        found = {n: sub._parameters.get(n) for n in matmul_parameter_names(sub)}
        params = {n: p for n, p in found.items() if p is not None}
        if not params:
            continue
        twins: dict[str, torch.Tensor] = {}
        for name, param in params.items():
            if param.device == device:
                continue  # nothing to bring: the hook leaves it alone
            twin = exact.get(id(param))
            first = id(param) not in counted
            counted.add(id(param))
            if twin is not None and twin.device == device and twin.shape == param.shape:
                twins[name] = twin
                placed.from_half_copy += first
            else:
                if device.type == "cuda" and not param.data.is_pinned():
                    param.data = param.data.pin_memory()
                placed.pinned_bytes += first * param.numel() * param.element_size()
                placed.uploaded += first
        layer = _LayerUpload(tuple(params), device, twins)
        placed.handles.append(sub.register_forward_pre_hook(layer.upload))
        placed.handles.append(sub.register_forward_hook(layer.release))
    return placed


@dataclass
class HostWeights:
    """What stream_host_weights set up: the hooks, and how many weights the reference reads
    from the half copy or uploads (with the pinned host memory those take)."""

    handles: list[RemovableHandle] = field(default_factory=list)
    from_half_copy: int = 0
    uploaded: int = 0
    pinned_bytes: int = 0

    def describe(self) -> str:
        """One line for the start-up log."""
        return (
            f"reference weights: {self.from_half_copy} read from the half copy (exact), "
            f"{self.uploaded} uploaded from {self.pinned_bytes / 1e9:.2f} GB of pinned host memory"
        )


class _LayerUpload:
    """One layer's host weights and their device copies while it runs."""

    def __init__(
        self, names: tuple[str, ...], device: torch.device, twins: dict[str, torch.Tensor]
    ) -> None:
        self._names, self._device, self._twins = names, device, twins
        self._host: dict[str, torch.Tensor] = {}

    def upload(self, layer: nn.Module, args: Any) -> None:
        for name in self._names:
            param = layer._parameters[name]
            if param is None or param.device == self._device:
                continue
            self._host[name] = param.data
            twin = self._twins.get(name)
            if twin is not None:
                param.data = twin.to(param.dtype)  # the same values, cast on the device
            else:
                param.data = param.data.to(self._device, non_blocking=True)

    def release(self, layer: nn.Module, args: Any, output: Any) -> None:
        # The device copy is freed into the caching allocator, which reuses it only for work
        # queued after this layer's kernels on the same stream.
        for name, host in self._host.items():
            param = layer._parameters[name]
            if param is not None:
                param.data = host
        self._host.clear()


def matmul_weights_on(module: nn.Module, device: torch.device) -> bool:
    """Whether every matmul weight of `module` is on `device` (not kept on the host)."""
    return all(param.device == device for param in _matmul_parameters(module))


def _matmul_parameters(module: nn.Module) -> list[nn.Parameter]:
    found = []
    for sub in module.modules():
        for name in matmul_parameter_names(sub):
            param = sub._parameters.get(name)
            if param is not None and param.is_floating_point():
                found.append(param)
    return found
