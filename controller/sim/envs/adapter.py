"""SimEnv: a gymnasium environment seen as a robot. Its observation dict becomes camera frames
named as the policy names them and the state vector; the policy's action vector becomes the
environment's action. The mapping is data (EnvLayout), so a test can build it wrong on purpose
and see the closed loop fail."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class EnvLayout:
    """How one environment's observations and actions meet a policy's.

    `cameras`: policy camera name -> (path of the frame in the observation dict, e.g.
    ("pixels",) or ("pixels", "top"), (height, width)); LeRobot names `pixels` `image` and
    `pixels/top` `top` (observation.image, observation.images.top). `state_key`: the observation
    entry that is observation.state. `action_order`: the environment's action element i is the
    policy's action[action_order[i]] (identity unless a test wires it wrong)."""

    name: str
    gym_id: str
    gym_kwargs: Mapping[str, Any]
    fps: float
    max_steps: int
    joints: tuple[str, ...]
    cameras: Mapping[str, tuple[tuple[str, ...], tuple[int, int]]]
    state_key: str
    state_size: int
    task: str | None = None
    action_order: tuple[int, ...] | None = None
    transpose_frames: bool = False  # a test's wrong wiring: rows and columns swapped
    # Builds the environment instead of gymnasium.make(gym_id) (a variant gym does not register)
    builder: Callable[[EnvLayout], Any] | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def camera_shapes(self) -> dict[str, tuple[int, int]]:
        return {name: shape for name, (_, shape) in self.cameras.items()}

    def describe(self) -> str:
        cams = ", ".join(
            f"{name} ({'/'.join(path)}, {h}x{w})" for name, (path, (h, w)) in self.cameras.items()
        )
        seen = f"camera{'s' if len(self.cameras) > 1 else ''} {cams}" if cams else "no camera"
        return (
            f"env {self.name} gives {seen} and a "
            f"state of {self.state_size} values ({self.state_key}), and takes "
            f"{len(self.joints)} action values"
        )


@dataclass(frozen=True)
class EnvObservation:
    images: dict[str, np.ndarray]
    state: np.ndarray


@dataclass(frozen=True)
class EnvStep:
    observation: EnvObservation
    reward: float
    done: bool  # terminated or truncated (time limit)
    success: bool  # info["is_success"] of this step


class SimEnv:
    """One environment instance (see the module doc)."""

    def __init__(self, layout: EnvLayout, env: Any) -> None:
        self.layout = layout
        self._env = env
        self._last_frame: np.ndarray | None = None

    @property
    def gym_env(self) -> Any:
        """The gymnasium environment it wraps (a test reads its simulated state)."""
        return self._env

    def reset(self, seed: int) -> EnvObservation:
        observation, _ = self._env.reset(seed=seed)
        return self._map(observation)

    def step(self, action: np.ndarray) -> EnvStep:
        order = self.layout.action_order
        values = np.asarray(action, dtype=np.float64)
        if order is not None:
            values = values[list(order)]
        observation, reward, terminated, truncated, info = self._env.step(values)
        return EnvStep(
            self._map(observation),
            float(reward),
            bool(terminated or truncated),
            bool(info.get("is_success", False)),
        )

    def render(self) -> np.ndarray:
        """The scene now, for a rollout video: the environment's own rendering (PushT's at
        LeRobot's visualization size), else the first camera's newest frame."""
        frame = self._env.render()
        if frame is not None:
            return np.asarray(frame, dtype=np.uint8)
        if self._last_frame is None:
            raise ValueError(f"env {self.layout.name} renders nothing and has no camera")
        return self._last_frame

    def close(self) -> None:
        self._env.close()
        # gym-aloha's close leaves dm_control's rendering contexts (OSMesa/EGL) to its exit
        # hook, which runs after the render thread pool is shut down and prints tracebacks.
        physics = getattr(getattr(self._env.unwrapped, "_env", None), "physics", None)
        if physics is not None:
            physics.free()

    def _map(self, observation: Mapping[str, Any]) -> EnvObservation:
        images = {}
        for name, (path, _) in self.layout.cameras.items():
            value: Any = observation
            for key in path:
                value = value[key]
            frame = np.asarray(value, dtype=np.uint8)
            if self.layout.transpose_frames:
                frame = frame.transpose(1, 0, 2)
            # A fresh, contiguous array per frame: the client sends it without copying.
            images[name] = np.ascontiguousarray(frame).copy()
        self._last_frame = next(iter(images.values()), None)
        state = np.asarray(observation[self.layout.state_key], dtype=np.float32)
        return EnvObservation(images, state)
