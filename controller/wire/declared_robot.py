"""The robot a driver declares in `hello` (joints, cameras, state size, its own joint limits),
and the checks each observation passes against it in the driver's process, before anything is
sent: a mistake in the driver is an ObservationError naming it there, not a refusal from the
daemon later. Only numpy (a driver imports this)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from controller.errors import ObservationError


class DeclaredRobot:
    """What TempoClient declared: `spec` (hello's field) and the checks of its observations."""

    def __init__(
        self,
        joints: Sequence[str],
        cameras: Mapping[str, tuple[int, int]],
        state_size: int,
        limits: Mapping[str, tuple[float, float]] | None = None,
    ) -> None:
        self.spec: dict[str, Any] = {
            "joints": list(joints),
            "cameras": [
                {"name": n, "height": int(h), "width": int(w)} for n, (h, w) in cameras.items()
            ],
            "state_size": int(state_size),
        }
        if limits:
            # The robot's own joint limits; the daemon's guards keep the tighter of these and
            # its configured ones.
            self.spec["limits"] = {j: [float(lo), float(hi)] for j, (lo, hi) in limits.items()}
        self.camera_shapes = {n: (int(h), int(w), 3) for n, (h, w) in cameras.items()}
        self.state_size, self.n_joints = int(state_size), len(joints)

    def check_images(self, images: Mapping[str, Any]) -> None:
        """Each declared camera's frame: a uint8 numpy array of shape (height, width, 3)."""
        declared = self.camera_shapes
        if set(images) != set(declared):
            missing = sorted(set(declared) - set(images))
            extra = sorted(set(images) - set(declared))
            raise ObservationError(
                f"the observation's cameras {sorted(images)} differ from those declared "
                f"{sorted(declared)}"
                + (f" (missing {missing})" if missing else "")
                + (f" (not declared {extra})" if extra else "")
            )
        for name, frame in images.items():
            shape = declared[name]
            if not isinstance(frame, np.ndarray):
                raise ObservationError(
                    f"camera {name!r}: the frame is a {type(frame).__name__}, not a numpy array"
                )
            if frame.shape != shape:
                hint = ""
                if frame.shape == (3, shape[0], shape[1]):
                    hint = "; it is channels-first: send frame.transpose(1, 2, 0)"
                elif frame.ndim == 3 and frame.shape[2] == 3:
                    hint = "; resize the frame, or declare the camera's real size in cameras="
                raise ObservationError(
                    f"camera {name!r}: frame of shape {list(frame.shape)}, declared "
                    f"{list(shape)} (height, width, 3 RGB){hint}"
                )
            if frame.dtype != np.uint8:
                raise ObservationError(
                    f"camera {name!r}: frames are uint8 (0-255 RGB), got {frame.dtype}; convert "
                    "them, e.g. (frame * 255).clip(0, 255).astype(np.uint8) for [0, 1] floats"
                )

    def state(self, values: Any) -> np.ndarray:
        """The joint state as float32, of the declared state size, finite."""
        return checked_vector(values, "state", self.state_size)

    def teleop(self, values: Any) -> np.ndarray:
        """The operator's values as float32, one per declared joint, finite."""
        return checked_vector(values, "teleop", self.n_joints)


def checked_vector(values: Any, name: str, size: int) -> np.ndarray:
    try:
        with np.errstate(over="ignore", invalid="ignore"):  # beyond float32: Inf, refused
            vector = np.asarray(values, dtype=np.float32)
    except (TypeError, ValueError):
        raise ObservationError(f"{name} must be {size} numbers") from None
    if vector.shape != (size,):
        raise ObservationError(
            f"{name} has shape {list(vector.shape)}; the declared robot has {size} values"
        )
    if not np.isfinite(vector).all():
        raise ObservationError(f"{name} contains NaN or Inf (or values beyond float32)")
    return vector
