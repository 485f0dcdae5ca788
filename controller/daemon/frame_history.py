"""The camera frames of a robot's recent observations, for a policy that reads several steps of
them (`PolicySpec.frame_history`, Diffusion Policy's n_obs_steps): the robot's session keeps
them, as it keeps the state history, so the policy keeps nothing about a robot.

    history = FrameHistory(spec)          # spec.frame_history > 1
    past = history.push(images)           # every accepted observation: the steps before it
    history.stack(past)                   # at a request: camera -> (k, H, W, 3), oldest first
    history.clear()                       # an episode start

Every accepted observation is pushed, whether or not it is asked about, so a request made every
`query_period` steps still sees the frames of the control steps just before it, as LeRobot's
observation queue does (it takes every select_action call's observation). At an episode start
the first observation stands for the steps before it, as LeRobot fills its queue with copies of
the first. Each frame is copied once when pushed (a driver's frames in place are reused by the
driver); the snapshots `push` returns share those copies.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

import numpy as np

from policies.base import PolicySpec

Frames = Mapping[str, np.ndarray]  # camera -> uint8 (H, W, 3)


class FrameHistory:
    """The last `spec.frame_history - 1` observations' frames (see the module doc)."""

    def __init__(self, spec: PolicySpec) -> None:
        self._cameras = spec.camera_names
        self._kept: deque[Frames] = deque(maxlen=spec.frame_history - 1)

    @property
    def length(self) -> int:
        """Past steps a request carries: frame_history - 1."""
        return self._kept.maxlen or 0

    def push(self, images: Frames) -> tuple[Frames, ...]:
        """Keep this observation's frames; return the steps before it, oldest first."""
        current = {name: np.array(images[name], dtype=np.uint8) for name in self._cameras}
        if not self._kept:  # the episode's first: it stands for the steps before it
            past: tuple[Frames, ...] = (current,) * self.length
        else:
            kept = tuple(self._kept)
            past = (kept[0],) * (self.length - len(kept)) + kept
        self._kept.append(current)
        return past

    def stack(self, past: tuple[Frames, ...]) -> dict[str, np.ndarray]:
        """A snapshot from `push` as the policy reads it: camera -> (k, H, W, 3)."""
        return {name: np.stack([step[name] for step in past]) for name in self._cameras}

    def clear(self) -> None:
        """A new episode: the next observation stands for the steps before it."""
        self._kept.clear()
