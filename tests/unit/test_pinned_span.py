"""Frames of one camera-shape group that lie back to back in pinned memory (an observation slot)
go to the device as one copy: which layouts qualify. The copy itself is shown on a GPU in
tests/gpu/test_pinned_upload_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from controller.inference.staging import InputStaging  # noqa: E402
from policies.base import CameraSpec, PolicySpec  # noqa: E402

SPEC = PolicySpec(
    cameras=tuple(CameraSpec(name=f"cam{i}", height=4, width=6) for i in range(3)),
    state_size=2,
    joint_names=("a", "b"),
    chunk_size=3,
)


@pytest.fixture
def region() -> tuple[InputStaging, np.ndarray]:
    staging = InputStaging(SPEC, torch.device("cpu"))
    memory = np.random.default_rng(0).integers(0, 255, (4, 4, 6, 3), dtype=np.uint8)
    staging.add_pinned_region(memory.ctypes.data, memory.nbytes)
    return staging, memory


def test_back_to_back_frames_in_a_pinned_region_are_one_array(region) -> None:  # type: ignore[no-untyped-def]
    staging, memory = region
    frames = [memory[0], memory[1], memory[2]]
    span = staging._pinned_span(frames)
    assert span is not None and span.shape == (3, 4, 6, 3)
    np.testing.assert_array_equal(span, np.stack(frames))
    assert span.__array_interface__["data"][0] == memory.ctypes.data  # a view, not a copy


@pytest.mark.parametrize(
    "pick",
    [
        [0, 2, 1],  # out of the group's order
        [0, 1, 3],  # a gap
        [1, 2, 3],  # back to back, but the last one ends past the region (see below)
    ],
)
def test_other_layouts_go_camera_by_camera(region, pick) -> None:  # type: ignore[no-untyped-def]
    staging, memory = region
    if pick == [1, 2, 3]:  # shrink the region so that the third frame lies outside it
        staging.remove_pinned_region(memory.ctypes.data, memory.nbytes)
        staging.add_pinned_region(memory.ctypes.data, 3 * memory[0].nbytes)
    assert staging._pinned_span([memory[i] for i in pick]) is None


def test_frames_outside_pinned_memory_or_not_contiguous_go_camera_by_camera(region) -> None:  # type: ignore[no-untyped-def]
    staging, memory = region
    elsewhere = memory.copy()
    assert staging._pinned_span([elsewhere[0], elsewhere[1], elsewhere[2]]) is None
    strided = memory[:, :, ::2]  # every other column: not one block
    assert staging._pinned_span([strided[0], strided[1], strided[2]]) is None
