"""Observations for `tempo profile`: synthesised from the policy's spec, or replayed from a file.

The replay format is a plain numpy `.npz` archive (no pickle), one array per name:

    <camera name>   uint8   (T, height, width, 3)    one per camera in the policy's spec
    state           float   (T, state_size)          or (T, state_history, state_size)

T (the time axis) is the same for every array. With a (T, state_size) state and a policy that
reads a history of K states, step t sees states t-K+1 .. t, the first one repeated at the start
(as the daemon's StateHistory does). Write one with `save_replay`, or with numpy directly:

    np.savez("episode.npz", front=frames_uint8, state=joint_positions)

Profiling cycles through the T observations in order.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from controller.errors import ConfigError
from controller.inference.examples import Observation, random_observation
from policies.base import PolicySpec

STATE_KEY = "state"


class ObservationSource:
    """A fixed list of observations, handed out in a cycle (no copies: views into the data)."""

    def __init__(self, observations: list[Observation], description: str) -> None:
        if not observations:
            raise ValueError("an observation source needs at least one observation")
        self._observations = observations
        self._next = 0
        self.description = description

    def __len__(self) -> int:
        return len(self._observations)

    def next(self) -> Observation:
        observation = self._observations[self._next]
        self._next = (self._next + 1) % len(self._observations)
        return observation

    @classmethod
    def synthetic(cls, spec: PolicySpec, count: int = 8, seed: int = 0) -> ObservationSource:
        """`count` random observations shaped for `spec` (uniform pixels, normal state)."""
        observations = [random_observation(spec, 7919 * (seed + 1) + i) for i in range(count)]
        return cls(observations, f"synthetic: {count} random observations from the spec")

    @classmethod
    def from_npz(cls, path: Path, spec: PolicySpec) -> ObservationSource:
        return cls(load_replay(path, spec), f"replay: {path}")


def _refuse(path: Path, text: str) -> ConfigError:
    return ConfigError(f"replay file {path}: {text}")


def load_replay(path: Path, spec: PolicySpec) -> list[Observation]:
    """The observations in a replay file, checked against `spec`; raises ConfigError naming
    the file and what is wrong."""
    path = Path(path)
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise _refuse(path, f"cannot be read as a numpy .npz archive ({exc})") from None
    if not hasattr(archive, "files"):
        raise _refuse(path, "is a single array, not an .npz archive of named arrays")
    with archive:
        names = set(archive.files)
        expected = set(spec.camera_names) | {STATE_KEY}
        if names != expected:
            missing, unknown = sorted(expected - names), sorted(names - expected)
            raise _refuse(
                path,
                f"must hold exactly the arrays {sorted(expected)} (one per camera, and "
                f"'state'); missing {missing}, unknown {unknown}",
            )
        arrays = {name: archive[name] for name in sorted(names)}
    lengths = {name: a.shape[0] if a.ndim else 0 for name, a in arrays.items()}
    if len(set(lengths.values())) != 1 or 0 in lengths.values():
        raise _refuse(path, f"every array needs the same, non-zero time axis; lengths {lengths}")
    steps = lengths[STATE_KEY]
    for camera in spec.cameras:
        frames = arrays[camera.name]
        if frames.dtype != np.uint8 or frames.shape[1:] != camera.shape:
            raise _refuse(
                path,
                f"camera {camera.name!r} must be uint8 of shape (T, {camera.height}, "
                f"{camera.width}, 3); got {frames.dtype} {frames.shape}",
            )
    state = arrays[STATE_KEY]
    history, size = spec.state_history, spec.state_size
    if state.dtype.kind != "f":
        raise _refuse(path, f"'state' must be a float array, got {state.dtype}")
    if state.shape == (steps, size):
        windows = _history_windows(state.astype(np.float32), history)
    elif state.shape == (steps, history, size):
        windows = np.ascontiguousarray(state, dtype=np.float32)
    else:
        raise _refuse(
            path,
            f"'state' must have shape (T, {size}) or (T, {history}, {size}); got {state.shape}",
        )
    if not np.isfinite(windows).all():
        raise _refuse(path, "'state' contains NaN or Inf")
    return [({c.name: arrays[c.name][t] for c in spec.cameras}, windows[t]) for t in range(steps)]


def _history_windows(states: np.ndarray, history: int) -> np.ndarray:
    """(T, size) -> (T, history, size): the last `history` states at each step, oldest first,
    the first state repeated before the start."""
    padded = np.concatenate([np.repeat(states[:1], history - 1, axis=0), states])
    return np.stack([padded[t : t + history] for t in range(len(states))])


def save_replay(path: Path, images: Mapping[str, np.ndarray], state: np.ndarray) -> Path:
    """Write a replay file: images[camera] uint8 (T, H, W, 3), state (T, size) or
    (T, history, size). Returns the path (numpy adds .npz when it is missing)."""
    if STATE_KEY in images:
        raise ValueError(f"a camera cannot be called {STATE_KEY!r}")
    arrays = {name: np.asarray(frames) for name, frames in images.items()}
    arrays[STATE_KEY] = np.asarray(state, dtype=np.float32)
    path = Path(path)
    np.savez(path, **arrays)  # type: ignore[arg-type]
    return path if path.suffix == ".npz" else path.with_name(path.name + ".npz")
