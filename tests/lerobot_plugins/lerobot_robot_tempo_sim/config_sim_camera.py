"""`--robot.cameras="{front: {type: tempo_sim, width: 128, height: 96, fps: 30}}"`."""

from dataclasses import dataclass

from lerobot.cameras import CameraConfig


@CameraConfig.register_subclass("tempo_sim")
@dataclass
class SimCameraConfig(CameraConfig):
    """A camera that draws its frames: a new one `fps` times a second."""

    seed: int = 0
