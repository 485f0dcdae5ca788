"""A LeRobot camera that draws its frames: a new uint8 RGB frame `fps` times a second (a bar
that moves with time, so frames differ), the same array in between, as a camera's latest frame
is."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from lerobot.cameras import Camera

from lerobot_robot_tempo_sim.config_sim_camera import SimCameraConfig


class SimCamera(Camera):
    def __init__(self, config: SimCameraConfig) -> None:
        super().__init__(config)
        self.config = config
        self._connected = False
        self._frame: np.ndarray | None = None
        self._frame_at = 0.0
        self._tint = np.random.default_rng(config.seed).integers(60, 255, 3, dtype=np.uint8)
        self.frames_drawn = 0

    @property
    def is_connected(self) -> bool:
        return self._connected

    @staticmethod
    def find_cameras() -> list[dict[str, Any]]:
        return []

    def connect(self, warmup: bool = True) -> None:
        self._connected = True

    def read(self) -> np.ndarray:
        return self._draw()

    def async_read(self, timeout_ms: float = 0.0) -> np.ndarray:
        now = time.monotonic()
        if self._frame is None or now - self._frame_at >= 1.0 / (self.fps or 30):
            self._frame, self._frame_at = self._draw(), now
        return self._frame

    def read_latest(self, max_age_ms: int = 500) -> np.ndarray:
        return self.async_read()

    def _draw(self) -> np.ndarray:
        height, width = int(self.height or 0), int(self.width or 0)
        frame = np.full((height, width, 3), 16, dtype=np.uint8)
        column = int(time.monotonic() * 40) % max(width, 1)
        frame[:, column : column + max(width // 16, 1)] = self._tint
        self.frames_drawn += 1
        return frame

    def disconnect(self) -> None:
        self._connected = False
