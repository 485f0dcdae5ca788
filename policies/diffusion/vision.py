"""What Diffusion Policy sees of one camera frame: a vector of keypoints.

    frame (N, 3, H, W), normalized -> resize (optional) -> center crop (optional)
        -> ResNet trunk (layer4 map) -> spatial softmax keypoints -> Linear -> ReLU -> (N, D)

The spatial softmax (Finn et al., "Deep Spatial Autoencoders for Visuomotor Learning", 2016)
turns each of `num_keypoints` channels (a 1x1 convolution of the feature map) into a softmax over
the map's cells and takes the expected (x, y) position under it, in [-1, 1]. Names follow
LeRobot's `DiffusionRgbEncoder` but for the backbone, which is Tempo's ResNet (torchvision's
names: `backbone.conv1`, `backbone.layer1.0.bn1`, ...; policies.diffusion.lerobot renames
LeRobot's `backbone.0`, `backbone.1`, ... onto them).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from policies.act.backbone import FrozenBatchNorm2d, ResNet, backbone_channels, feature_map_size
from policies.diffusion.config import DiffusionConfig


def group_norm(channels: int) -> nn.Module:
    """GroupNorm with groups of 16 channels, what Diffusion Policy trains in place of batch norm."""
    return nn.GroupNorm(num_groups=channels // 16, num_channels=channels)


def batch_norm(channels: int) -> nn.Module:
    """Batch norm in eval mode: its running statistics, frozen (torchvision's BatchNorm2d names,
    which LeRobot's weights carry; their num_batches_tracked is dropped)."""
    return FrozenBatchNorm2d(channels)


class SpatialSoftmax(nn.Module):
    """(N, C, h, w) feature map -> (N, K, 2) expected keypoint positions (see the module doc)."""

    pos_grid: torch.Tensor

    def __init__(self, channels: int, height: int, width: int, num_keypoints: int) -> None:
        super().__init__()
        self.nets = nn.Conv2d(channels, num_keypoints, kernel_size=1)
        self.num_keypoints = num_keypoints
        self.cells = height * width
        # (h * w, 2): each cell's x then y in [-1, 1], rows of the map one after another.
        xs = torch.linspace(-1.0, 1.0, width, dtype=torch.float64)
        ys = torch.linspace(-1.0, 1.0, height, dtype=torch.float64)
        grid = torch.stack(torch.meshgrid(xs, ys, indexing="xy"), dim=-1)
        self.register_buffer("pos_grid", grid.reshape(self.cells, 2).float())

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        logits = self.nets(features).reshape(-1, self.cells)
        expected = F.softmax(logits, dim=-1) @ self.pos_grid
        return expected.view(-1, self.num_keypoints, 2)


class RgbEncoder(nn.Module):
    """One camera's encoder (see the module doc)."""

    def __init__(self, config: DiffusionConfig) -> None:
        super().__init__()
        self.resize = config.resize_shape
        self.crop = config.crop_shape
        norm = group_norm if config.use_group_norm else batch_norm
        self.backbone = ResNet(config.vision_backbone, norm=norm)
        height, width = feature_map_size(*config.backbone_input)
        keypoints = config.spatial_softmax_num_keypoints
        channels = backbone_channels(config.vision_backbone)
        self.pool = SpatialSoftmax(channels, height, width, keypoints)
        self.out = nn.Linear(2 * keypoints, config.image_feature_dim)
        self.relu = nn.ReLU()

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        if self.resize is not None:  # torchvision's Resize on tensors: bilinear, antialiased
            frames = F.interpolate(
                frames, size=self.resize, mode="bilinear", align_corners=False, antialias=True
            )
        if self.crop is not None:
            frames = center_crop(frames, self.crop)
        keypoints = self.pool(self.backbone(frames)).flatten(1)
        return self.relu(self.out(keypoints))


def center_crop(frames: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """The (height, width) window at the center of (N, C, H, W) frames, its offsets rounded as
    torchvision's CenterCrop rounds them (the config makes sure the window fits)."""
    height, width = frames.shape[-2:]
    top = int(round((height - size[0]) / 2.0))
    left = int(round((width - size[1]) / 2.0))
    return frames[..., top : top + size[0], left : left + size[1]]
