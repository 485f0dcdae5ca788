"""The configuration of a Diffusion Policy model, stored in its checkpoint next to the weights.

Every field that changes the model's shapes or its arithmetic is here; nothing about training is
(Tempo only serves). Field names follow LeRobot's `DiffusionConfig` where the meaning is the
same, so a LeRobot checkpoint maps onto this config field by field (see
`policies.diffusion.lerobot`). The defaults are LeRobot 0.6's: a ResNet-18 with batch norm per
camera, horizon 64, a U-Net of widths 512, 1024, 2048, DDPM with 100 steps.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from policies.act.config import Backbone, NormMode

SchedulerType = Literal["DDPM", "DDIM"]
BetaSchedule = Literal["linear", "scaled_linear", "squaredcos_cap_v2"]
PredictionType = Literal["epsilon", "sample"]
SCHEDULER_TYPES: tuple[str, ...] = ("DDPM", "DDIM")
BETA_SCHEDULES: tuple[str, ...] = ("linear", "scaled_linear", "squaredcos_cap_v2")
PREDICTION_TYPES: tuple[str, ...] = ("epsilon", "sample")


class DiffusionConfig(BaseModel):
    """Shapes, options, the noise scheduler and normalization modes of one Diffusion Policy."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # ---- Inputs and outputs ------------------------------------------------------------------
    n_cameras: int = Field(ge=0, le=16, description="Cameras the model reads (one shape).")
    image_height: int = Field(ge=1, le=4096, description="Height of every camera frame.")
    image_width: int = Field(ge=1, le=4096, description="Width of every camera frame.")
    state_dim: int = Field(ge=1, le=1024, description="Robot state entries (observation.state).")
    env_state_dim: int = Field(
        default=0,
        ge=0,
        le=1024,
        description="Environment-state entries (observation.environment_state); they follow "
        "the robot state in each state vector.",
    )
    action_dim: int = Field(ge=1, le=1024, description="Entries of one action.")
    n_obs_steps: int = Field(
        default=2, ge=1, le=64, description="Observation steps the model conditions on."
    )
    horizon: int = Field(
        default=64, ge=1, le=4096, description="Actions the U-Net denoises, from the oldest step."
    )
    n_action_steps: int = Field(
        default=32, ge=1, le=4096, description="Actions LeRobot plays from each chunk."
    )

    # ---- Vision ------------------------------------------------------------------------------
    vision_backbone: Backbone = "resnet18"
    resize_shape: tuple[int, int] | None = Field(
        default=None, description="(height, width) frames are resized to first (bilinear)."
    )
    crop_shape: tuple[int, int] | None = Field(
        default=None, description="(height, width) of the center crop; None: no crop."
    )
    use_group_norm: bool = Field(
        default=False, description="GroupNorm (channels // 16 groups) in place of batch norm."
    )
    spatial_softmax_num_keypoints: int = Field(default=32, ge=1, le=4096)
    use_separate_rgb_encoder_per_camera: bool = True

    # ---- U-Net -------------------------------------------------------------------------------
    down_dims: tuple[int, ...] = Field(default=(512, 1024, 2048), min_length=1, max_length=8)
    kernel_size: int = Field(default=5, ge=1, le=31)
    n_groups: int = Field(default=8, ge=1, le=1024)
    diffusion_step_embed_dim: int = Field(default=128, ge=4, le=8192)
    use_film_scale_modulation: bool = True

    # ---- Noise scheduler ---------------------------------------------------------------------
    noise_scheduler_type: SchedulerType = "DDPM"
    num_train_timesteps: int = Field(default=100, ge=1, le=100_000)
    beta_schedule: BetaSchedule = "squaredcos_cap_v2"
    beta_start: float = Field(default=0.0001, gt=0, lt=1)
    beta_end: float = Field(default=0.02, gt=0, lt=1)
    prediction_type: PredictionType = "epsilon"
    clip_sample: bool = True
    clip_sample_range: float = Field(default=1.0, gt=0)
    num_inference_steps: int | None = Field(
        default=None, ge=1, description="Denoising steps; None: num_train_timesteps."
    )

    # ---- Normalization (LeRobot's formulas, see policies.act.preprocess) ----------------------
    image_norm: NormMode = "mean_std"
    state_norm: NormMode = "min_max"
    env_state_norm: NormMode = "identity"
    action_norm: NormMode = "min_max"
    norm_eps: float = Field(default=1e-8, ge=0, le=1)

    @model_validator(mode="after")
    def _consistent(self) -> DiffusionConfig:
        if self.n_cameras == 0 and self.env_state_dim == 0:
            raise ValueError("Diffusion Policy needs at least one camera or an environment state")
        if self.n_action_steps > self.chunk_size:
            raise ValueError(
                f"n_action_steps ({self.n_action_steps}) cannot exceed horizon - n_obs_steps + 1 "
                f"({self.chunk_size}): the actions from the current step on"
            )
        if self.steps > self.num_train_timesteps:
            raise ValueError(
                f"num_inference_steps ({self.steps}) cannot exceed num_train_timesteps "
                f"({self.num_train_timesteps})"
            )
        if self.horizon % 2 ** (len(self.down_dims) - 1) != 0:
            raise ValueError(
                f"horizon ({self.horizon}) must be divisible by {2 ** (len(self.down_dims) - 1)}: "
                f"the U-Net halves it {len(self.down_dims) - 1} time(s) and doubles it back"
            )
        for width in self.down_dims:
            if width % self.n_groups != 0:
                raise ValueError(
                    f"each of down_dims must be divisible by n_groups ({self.n_groups})"
                )
        if self.n_cameras:
            height, width = self.resize_shape or (self.image_height, self.image_width)
            if self.crop_shape is not None and (
                self.crop_shape[0] > height or self.crop_shape[1] > width
            ):
                raise ValueError(
                    f"crop_shape {self.crop_shape} does not fit in the {height}x{width} frames"
                )
        return self

    @property
    def steps(self) -> int:
        """Denoising steps at inference."""
        return self.num_inference_steps or self.num_train_timesteps

    @property
    def chunk_size(self) -> int:
        """Actions served per chunk: the U-Net's from the current observation step on."""
        return self.horizon - self.n_obs_steps + 1

    @property
    def state_size(self) -> int:
        return self.state_dim + self.env_state_dim

    @property
    def state_history(self) -> int:
        return self.n_obs_steps

    @property
    def frame_history(self) -> int:
        """Observation steps of frames the model reads (PolicySpec.frame_history)."""
        return self.n_obs_steps if self.n_cameras else 1

    @property
    def frame_sizes(self) -> list[tuple[int, int]]:
        return [(self.image_height, self.image_width)] * self.n_cameras

    @property
    def backbone_input(self) -> tuple[int, int]:
        """(height, width) of what the backbone sees: after the resize and the crop."""
        return self.crop_shape or self.resize_shape or (self.image_height, self.image_width)

    @property
    def image_feature_dim(self) -> int:
        """Features per camera: x and y of each spatial-softmax keypoint."""
        return 2 * self.spatial_softmax_num_keypoints

    @property
    def step_cond_dim(self) -> int:
        """Conditioning entries per observation step: state, every camera, environment."""
        return self.state_dim + self.n_cameras * self.image_feature_dim + self.env_state_dim
