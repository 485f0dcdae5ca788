"""The cameras and joints a checkpoint directory fixes, read from its config.json alone (no
torch): what `tempo config show` prints instead of a robot.cameras that would not be served.

    fixed = fixed_inputs("ckpt/")    # FixedInputs, or None where the config does not say
    fixed.lines()                    # ["cameras: wrist 96x128, top 96x128", "joints: a, b"]

A Tempo checkpoint records its spec (cameras, joint names); a LeRobot directory its
input_features (cameras, as LeRobot's `observation.images.<name>`, and their shapes) and the
action's size (its joints are named by policy.joint_names). An openpi checkpoint records
neither: None.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from policies.checkpoints.checkpoint_dir import detect_format, locate_checkpoint


@dataclass(frozen=True)
class FixedInputs:
    cameras: tuple[tuple[str, int, int], ...]  # (name, height, width)
    joints: tuple[str, ...] | None  # None: unnamed, `action_dim` of them
    action_dim: int | None

    def lines(self) -> list[str]:
        cameras = ", ".join(f"{name} {h}x{w}" for name, h, w in self.cameras) or "none"
        if self.joints is not None:
            joints = ", ".join(self.joints)
        elif self.action_dim is not None:
            joints = f"{self.action_dim} (named by policy.joint_names)"
        else:
            joints = "not recorded"
        return [f"cameras: {cameras}", f"joints: {joints}"]


def fixed_inputs(directory: str | Path) -> FixedInputs | None:
    """What the checkpoint at `directory` fixes, or None where its config.json does not say
    (an openpi checkpoint, a config without those fields). CheckpointError: no readable
    checkpoint there."""
    kind, raw = detect_format(locate_checkpoint(directory))
    try:
        if kind == "tempo":
            return _tempo(raw.get("spec"))
        if kind == "lerobot":
            return _lerobot(raw.get("input_features"), raw.get("output_features"))
    except (TypeError, ValueError):  # a malformed field: the load says which, in full
        return None
    return None


def _tempo(spec: Any) -> FixedInputs | None:
    if not isinstance(spec, dict) or not isinstance(spec.get("cameras"), list):
        return None
    cameras = tuple(
        (str(c.get("name")), int(c.get("height", 0)), int(c.get("width", 0)))
        for c in spec["cameras"]
        if isinstance(c, dict)
    )
    joints = spec.get("joint_names")
    named = tuple(str(j) for j in joints) if isinstance(joints, list) else None
    return FixedInputs(cameras, named, None if named is None else len(named))


def _lerobot(inputs: Any, outputs: Any) -> FixedInputs | None:
    if not isinstance(inputs, dict):
        return None
    cameras = []
    for key, feature in inputs.items():
        if not isinstance(feature, dict) or feature.get("type") != "VISUAL":
            continue
        shape = feature.get("shape")
        if not isinstance(shape, list) or len(shape) != 3:
            continue
        name = key
        for prefix in ("observation.images.", "observation."):  # as the LeRobot readers name it
            if key.startswith(prefix):
                name = key.removeprefix(prefix)
                break
        cameras.append((name, int(shape[1]), int(shape[2])))  # LeRobot's (3, H, W)
    action = outputs.get("action") if isinstance(outputs, dict) else None
    shape = action.get("shape") if isinstance(action, dict) else None
    dim = int(shape[0]) if isinstance(shape, list) and len(shape) == 1 else None
    return FixedInputs(tuple(cameras), None, dim)
