"""Where an openpi client puts a robot's cameras, state and prompt in its observation dict, and
how that maps onto a policy's cameras (name, height, width) and state vector.

Three layouts ship as presets, as openpi's own examples send them (examples/aloha_real,
examples/droid, examples/libero):

    aloha   images/{cam_high,cam_low,cam_left_wrist,cam_right_wrist} (3, H, W) uint8; state (14,)
    droid   observation/exterior_image_1_left, observation/wrist_image_left (H, W, 3) uint8;
            state = observation/joint_position (7,) then observation/gripper_position (1,)
    libero  observation/image, observation/wrist_image (H, W, 3) uint8; observation/state (8,)

and every one may carry `prompt` (text). A key path `a/b` names `obs["a"]["b"]` when the client
nests maps (ALOHA's images) and `obs["a/b"]` when it does not (DROID's flat keys).

    layout = preset("droid", {"observation/exterior_image_1_left": "top", ...})
    images, state, prompt = layout.read(obs, cameras={"top": (224, 224), ...}, state_size=8)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from controller.errors import ErrorCode, ProtocolError

MAX_PROMPT_BYTES = 1000


@dataclass(frozen=True)
class Layout:
    name: str
    images: tuple[str, ...]  # openpi key paths of the images, in the preset's order
    channels_first: bool  # images as (3, H, W) (ALOHA) rather than (H, W, 3)
    state: tuple[str, ...]  # key paths concatenated into the state vector, in order
    cameras: Mapping[str, str]  # openpi image key path -> the policy's camera name
    prompt_key: str = "prompt"

    def read(
        self,
        obs: Mapping[str, Any],
        cameras: Mapping[str, tuple[int, int]],
        state_size: int,
    ) -> tuple[dict[str, np.ndarray], np.ndarray, str | None]:
        """The policy's images (H, W, 3) uint8 by camera, its state (float32) and the prompt."""
        known = {path.split("/", 1)[0] for path in (*self.images, *self.state)}
        known |= set(self.images) | set(self.state) | {self.prompt_key}
        extra = sorted(k for k in obs if k not in known)
        if extra:
            raise ProtocolError(
                ErrorCode.MALFORMED,
                f"the {self.name} layout has no key {extra[0][:64]!r}; it reads "
                f"{', '.join((*self.images, *self.state, self.prompt_key))}",
            )
        images: dict[str, np.ndarray] = {}
        for path in self.images:
            camera = self.cameras.get(path)
            if camera is None:
                continue  # an image this policy does not look at (it is still checked present)
            height, width = cameras[camera]
            image = _lookup(obs, path, self.name)
            expected = (3, height, width) if self.channels_first else (height, width, 3)
            if not isinstance(image, np.ndarray) or image.dtype != np.uint8:
                raise ProtocolError(
                    ErrorCode.NOT_ALLOWED, f"{path} must be a uint8 image array of {expected}"
                )
            if image.shape != expected:
                raise ProtocolError(
                    ErrorCode.SHAPE,
                    f"{path} has shape {image.shape}; camera {camera!r} takes {expected}",
                )
            images[camera] = image.transpose(1, 2, 0) if self.channels_first else image
        missing = sorted(set(cameras) - set(images))
        if missing:
            raise ProtocolError(
                ErrorCode.SPEC_MISMATCH,
                f"the policy's camera {missing[0]!r} is mapped to no image of the {self.name} "
                "layout",
            )
        parts = []
        for path in self.state:
            part = _lookup(obs, path, self.name)
            if not isinstance(part, np.ndarray) or part.dtype.kind not in "fiub" or part.ndim > 1:
                raise ProtocolError(ErrorCode.NOT_ALLOWED, f"{path} must be a vector of numbers")
            parts.append(part.reshape(-1).astype(np.float32))
        state = np.concatenate(parts) if parts else np.zeros(0, np.float32)
        if state.shape != (state_size,):
            raise ProtocolError(
                ErrorCode.SHAPE,
                f"the state ({' + '.join(self.state)}) holds {state.size} numbers; the policy "
                f"takes {state_size}",
            )
        if not np.isfinite(state).all():
            raise ProtocolError(ErrorCode.NON_FINITE, "the state holds NaN or Inf")
        return images, state, _prompt(obs.get(self.prompt_key))


def _lookup(obs: Mapping[str, Any], path: str, layout: str) -> Any:
    if path in obs:
        return obs[path]
    node: Any = obs
    for part in path.split("/"):
        if not isinstance(node, Mapping) or part not in node:
            raise ProtocolError(
                ErrorCode.MALFORMED, f"the observation has no {path!r} (the {layout} layout)"
            )
        node = node[part]
    return node


def _prompt(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ProtocolError(ErrorCode.MALFORMED, "prompt must be some text")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_PROMPT_BYTES:
        raise ProtocolError(
            ErrorCode.NOT_ALLOWED, f"the prompt is longer than {MAX_PROMPT_BYTES} bytes of UTF-8"
        )
    return value


_PRESETS: dict[str, tuple[tuple[str, ...], bool, tuple[str, ...]]] = {
    "aloha": (
        ("images/cam_high", "images/cam_low", "images/cam_left_wrist", "images/cam_right_wrist"),
        True,
        ("state",),
    ),
    "droid": (
        ("observation/exterior_image_1_left", "observation/wrist_image_left"),
        False,
        ("observation/joint_position", "observation/gripper_position"),
    ),
    "libero": (
        ("observation/image", "observation/wrist_image"),
        False,
        ("observation/state",),
    ),
}
PRESETS = tuple(_PRESETS)


def preset(name: str, cameras: Mapping[str, str] | None = None) -> Layout:
    """One of PRESETS; `cameras`: openpi image key -> the policy's camera (None: each image
    to the camera of its own last path part, e.g. `cam_high`, `wrist_image_left`)."""
    if name not in _PRESETS:
        raise ValueError(f"no openpi layout named {name!r}; the presets are {', '.join(PRESETS)}")
    images, channels_first, state = _PRESETS[name]
    if cameras is None:
        cameras = {path: path.rsplit("/", 1)[-1] for path in images}
    unknown = sorted(set(cameras) - set(images))
    if unknown:
        raise ValueError(
            f"the {name} layout has no image {unknown[0]!r}; its images are {', '.join(images)}"
        )
    return Layout(name, images, channels_first, state, dict(cameras))
