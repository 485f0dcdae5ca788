"""Frames read in place from pinned observation slots reach the device intact: a group whose
frames lie back to back goes up in one copy, anything else camera by camera."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from controller.inference.staging import InputStaging  # noqa: E402
from controller.process_protocol.frame_slots import FrameSlots  # noqa: E402
from policies.base import CameraSpec, PolicySpec, window_context  # noqa: E402

pytestmark = pytest.mark.gpu

# Two groups: three cameras of one shape (one copy from a slot), one of another.
SPEC = PolicySpec(
    cameras=(
        CameraSpec(name="left", height=240, width=320),
        CameraSpec(name="right", height=240, width=320),
        CameraSpec(name="top", height=240, width=320),
        CameraSpec(name="wrist", height=120, width=160),
    ),
    state_size=4,
    joint_names=("a", "b", "c", "d"),
    chunk_size=5,
)


@pytest.fixture
def pinned_slots():  # type: ignore[no-untyped-def]
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    slots = FrameSlots.create(SPEC, 3)
    pointer = slots.buffer.ctypes.data
    assert int(torch.cuda.cudart().cudaHostRegister(pointer, slots.size, 0)) == 0
    yield slots
    torch.cuda.cudart().cudaHostUnregister(pointer)
    slots.close()


def _frames(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {c.name: rng.integers(0, 255, c.shape, dtype=np.uint8) for c in SPEC.cameras}


def _on_device(staging: InputStaging) -> dict[str, np.ndarray]:
    torch.cuda.synchronize()
    left_right_top, wrist = staging.frames
    group = left_right_top[0].cpu().numpy()
    named = dict(zip(["left", "right", "top"], group, strict=True))
    return {**named, "wrist": wrist[0, 0].cpu().numpy()}


def test_frames_from_one_slot_and_from_several_arrive_intact(pinned_slots) -> None:  # type: ignore[no-untyped-def]
    staging = InputStaging(SPEC, torch.device("cuda"))
    staging.add_pinned_region(pinned_slots.buffer.ctypes.data, pinned_slots.size)
    state = np.zeros((1, 4), np.float32)
    for index in range(3):
        pinned_slots.write(index, _frames(index), state)
    for index in range(3):  # every camera of one slot: the group goes up as one copy
        views, _ = pinned_slots.views(index)
        assert staging._pinned_span([views[n] for n in ("left", "right", "top")]) is not None
        staging.upload(views, window_context(state))
        got = _on_device(staging)
        for name, frame in _frames(index).items():
            np.testing.assert_array_equal(got[name], frame, err_msg=f"slot {index} {name}")
    mixed = {n: pinned_slots.views(i)[0][n] for i, n in enumerate(["left", "right", "top"])}
    mixed["wrist"] = pinned_slots.views(0)[0]["wrist"]
    assert staging._pinned_span([mixed[n] for n in ("left", "right", "top")]) is None
    staging.upload(mixed, window_context(state))  # not back to back: camera by camera
    got = _on_device(staging)
    for i, name in enumerate(["left", "right", "top"]):
        np.testing.assert_array_equal(got[name], _frames(i)[name], err_msg=name)
