"""The pinned-buffer race of `controller.inference.staging`, shown on a real GPU.

The compute stream, where uploads are enqueued, is stalled with a long GPU sleep so that every
upload's H2D copy is still queued when the host prepares the next observation. With one pinned
buffer reused without waiting (the naive design) the first step reads the second observation;
with the runner's design (two slots, each reused only after its copy's event) every step reads
exactly its own observation.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from controller.inference.staging import InputStaging  # noqa: E402
from policies.base import RobotContext, window_context  # noqa: E402
from policies.tiny import tiny_spec  # noqa: E402

pytestmark = pytest.mark.gpu

SPEC = tiny_spec(cameras=2, height=240, width=320, state_size=14, joints=14)
STALL_CYCLES = 1_000_000_000  # ~0.5 s of GPU time at 2 GHz: far longer than the host's copies


def observation(value: int) -> tuple[dict[str, np.ndarray], RobotContext]:
    frame = np.full((240, 320, 3), value, dtype=np.uint8)
    images = {name: frame.copy() for name in SPEC.camera_names}
    return images, window_context(np.full((1, 14), float(value), dtype=np.float32))


def stage_all(staging: InputStaging, compute: torch.cuda.Stream, values: list[int]):  # type: ignore[no-untyped-def]
    """Upload each observation and, on the compute stream, snapshot what the step would read."""
    with torch.cuda.stream(staging.stream):
        torch.cuda._sleep(STALL_CYCLES)  # every copy below queues behind this
    seen = []
    for value in values:
        staging.upload(*observation(value))
        with torch.cuda.stream(compute):
            seen.append(tuple(t.clone() for t in staging.tensors))
    torch.cuda.synchronize()
    return seen


def read_exactly(seen, values) -> list[bool]:  # type: ignore[no-untyped-def]
    return [
        bool((images == value).all().item() and (state == float(value)).all().item())
        for (images, state), value in zip(seen, values, strict=True)
    ]


def test_single_reused_pinned_buffer_is_corrupted() -> None:
    device = torch.device("cuda")
    compute = torch.cuda.Stream(device)
    naive = InputStaging(SPEC, device, compute_stream=compute, slots=1, wait_for_slot=False)
    seen = stage_all(naive, compute, [1, 2])
    first_images, _ = seen[0]
    # The first step's copy ran after the host had written observation 2 into the same buffer.
    assert not read_exactly(seen, [1, 2])[0]
    assert (first_images == 2).any().item()


def test_double_buffered_staging_reads_every_observation_exactly() -> None:
    device = torch.device("cuda")
    compute = torch.cuda.Stream(device)
    staging = InputStaging(SPEC, device, compute_stream=compute)
    values = [1, 2, 3, 4, 5]  # 3 reuses slot 0 while 1's copy may still be queued: it must wait
    assert read_exactly(stage_all(staging, compute, values), values) == [True] * len(values)


def test_upload_returns_before_the_gpu_copy_and_the_caller_may_reuse_its_arrays() -> None:
    device = torch.device("cuda")
    compute = torch.cuda.Stream(device)
    staging = InputStaging(SPEC, device, compute_stream=compute)
    images, state = observation(7)
    with torch.cuda.stream(staging.stream):
        torch.cuda._sleep(STALL_CYCLES)
    staging.upload(images, state)
    for frame in images.values():
        frame.fill(0)  # the caller reuses its buffers at once
    state.state_history.fill(0)
    with torch.cuda.stream(compute):
        snapshot = staging.frames[0].clone()
    torch.cuda.synchronize()
    assert (snapshot == 7).all().item()
