"""ResNet image backbone with frozen batch norm, written here (torchvision is not a dependency).

Parameter and buffer names are laid out exactly as in torchvision's ResNet (`conv1.weight`,
`bn1.running_mean`, `layer1.0.conv1.weight`, `layer2.0.downsample.0.weight`, ...), so weights
trained with torchvision's model (as LeRobot does) load without renaming. The classifier head
(`avgpool`, `fc`) is not built: ACT reads the layer4 feature map.

Batch norm is frozen: an affine map from four buffers (weight, bias, running_mean,
running_var), as torchvision's `FrozenBatchNorm2d`. A `num_batches_tracked` entry in a state dict
is tolerated and ignored. A model that trained another norm in its place (Diffusion Policy's
GroupNorm) passes `norm`, which makes each norm layer from its channel count.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

NormLayer = Callable[[int], nn.Module]  # channels -> the norm layer after a convolution

_LAYOUTS: dict[str, tuple[str, tuple[int, int, int, int]]] = {
    "resnet18": ("basic", (2, 2, 2, 2)),
    "resnet34": ("basic", (3, 4, 6, 3)),
    "resnet50": ("bottleneck", (3, 4, 6, 3)),
    "resnet101": ("bottleneck", (3, 4, 23, 3)),
    "resnet152": ("bottleneck", (3, 8, 36, 3)),
}


class FrozenBatchNorm2d(nn.Module):
    """Batch norm with fixed statistics and affine parameters, all buffers."""

    weight: torch.Tensor
    bias: torch.Tensor
    running_mean: torch.Tensor
    running_var: torch.Tensor

    def __init__(self, num_features: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.register_buffer("weight", torch.ones(num_features))
        self.register_buffer("bias", torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))

    def _load_from_state_dict(
        self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any
    ) -> None:
        state_dict.pop(prefix + "num_batches_tracked", None)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.weight * (self.running_var + self.eps).rsqrt()
        shift = self.bias - self.running_mean * scale
        return x * scale.reshape(1, -1, 1, 1) + shift.reshape(1, -1, 1, 1)


def _conv3x3(inp: int, out: int, stride: int = 1, dilation: int = 1) -> nn.Conv2d:
    return nn.Conv2d(inp, out, 3, stride=stride, padding=dilation, dilation=dilation, bias=False)


def _conv1x1(inp: int, out: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(inp, out, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(
        self,
        inplanes: int,
        planes: int,
        stride: int,
        downsample: nn.Module | None,
        dilation: int,
        norm: NormLayer = FrozenBatchNorm2d,
    ) -> None:
        super().__init__()
        if dilation > 1:
            raise ValueError("BasicBlock does not support dilation (use a Bottleneck ResNet)")
        self.conv1 = _conv3x3(inplanes, planes, stride)
        self.bn1 = norm(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = norm(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck: the stride sits on the 3x3 convolution."""

    expansion = 4

    def __init__(
        self,
        inplanes: int,
        planes: int,
        stride: int,
        downsample: nn.Module | None,
        dilation: int,
        norm: NormLayer = FrozenBatchNorm2d,
    ) -> None:
        super().__init__()
        self.conv1 = _conv1x1(inplanes, planes)
        self.bn1 = norm(planes)
        self.conv2 = _conv3x3(planes, planes, stride, dilation)
        self.bn2 = norm(planes)
        self.conv3 = _conv1x1(planes, planes * self.expansion)
        self.bn3 = norm(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """ResNet trunk up to layer4; `forward` returns the layer4 feature map (B, C, H/32, W/32)."""

    def __init__(
        self, name: str, dilate_layer4: bool = False, norm: NormLayer = FrozenBatchNorm2d
    ) -> None:
        super().__init__()
        if name not in _LAYOUTS:
            raise ValueError(f"unknown backbone {name!r}; choose one of {sorted(_LAYOUTS)}")
        kind, depths = _LAYOUTS[name]
        block: type[BasicBlock] | type[Bottleneck] = BasicBlock if kind == "basic" else Bottleneck
        if dilate_layer4 and block is BasicBlock:
            raise ValueError(f"{name} cannot dilate layer4: its BasicBlocks do not support it")
        self._inplanes = 64
        self._dilation = 1
        self._norm = norm
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = norm(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, depths[0], stride=1, dilate=False)
        self.layer2 = self._make_layer(block, 128, depths[1], stride=2, dilate=False)
        self.layer3 = self._make_layer(block, 256, depths[2], stride=2, dilate=False)
        self.layer4 = self._make_layer(block, 512, depths[3], stride=2, dilate=dilate_layer4)
        self.out_channels = 512 * block.expansion
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def _make_layer(
        self,
        block: type[BasicBlock] | type[Bottleneck],
        planes: int,
        depth: int,
        stride: int,
        dilate: bool,
    ) -> nn.Sequential:
        previous_dilation = self._dilation
        if dilate:
            self._dilation *= stride
            stride = 1
        downsample = None
        if stride != 1 or self._inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                _conv1x1(self._inplanes, planes * block.expansion, stride),
                self._norm(planes * block.expansion),
            )
        norm = self._norm
        blocks = [block(self._inplanes, planes, stride, downsample, previous_dilation, norm)]
        self._inplanes = planes * block.expansion
        for _ in range(1, depth):
            blocks.append(block(self._inplanes, planes, 1, None, self._dilation, norm))
        return nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        return self.layer4(x)


def backbone_channels(name: str) -> int:
    """Channels of the layer4 feature map of ResNet `name`."""
    return 512 if _LAYOUTS[name][0] == "basic" else 2048


def feature_map_size(height: int, width: int, dilate_layer4: bool = False) -> tuple[int, int]:
    """Spatial size of the layer4 feature map for a (height, width) input.

    The stem (7x7 conv, then max pool) halves the size twice; layer2, layer3 and (unless dilated)
    layer4 halve it once each, every halving rounding up: n -> (n - 1) // 2 + 1.
    """
    halvings = 4 if dilate_layer4 else 5
    for _ in range(halvings):
        height, width = (height - 1) // 2 + 1, (width - 1) // 2 + 1
    return height, width
