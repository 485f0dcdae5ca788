"""Moving one observation into the static tensors the model reads, and its chunk back out.

The race this module exists to exclude
--------------------------------------
A copy from pinned host memory to the GPU with `non_blocking=True` only *enqueues* the copy: the
call returns at once and the DMA engine reads the host buffer later, whenever the stream gets to
it. If the host then writes the next observation into the same pinned buffer while that copy is
still queued or in flight (the GPU is busy, the copy stream is behind), the GPU reads whatever is
in the buffer when the DMA runs: the new observation, or a torn mix of the two, and the model
sees frames from one time and joint states from another. Nothing fails; the actions are just
wrong. Pageable memory hides this because the driver stages pageable copies synchronously, which
is also why it is slower.

How it is excluded here:
- At least two pinned slots, used in turn. Before the host writes a slot it waits on the CUDA
  event recorded after that slot's last copy, so a slot is never rewritten while a copy from it
  can still run. (With one slot that wait would serialize every upload behind the previous one.)
- The static GPU tensors are themselves reused, so a copy into them waits on the event recorded
  after the last step that read them (`mark_consumed`): an upload can never overwrite inputs a
  queued step has not read yet.
- Copies run on a dedicated stream; the compute stream waits on the copy's event, so the model
  never starts before its inputs have landed, and uploads can overlap other GPU work.

The chunk goes the other way through a pinned buffer owned by the runner, then into a fresh numpy
array for the caller: graph-owned output memory is overwritten by the next replay, and a chunk
already returned must never change.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from policies.base import PolicySpec
from policies.tensor_policy import check_stackable


class _Slot:
    """One pinned host copy of an observation and the event of its last upload."""

    def __init__(self, image_shape: tuple[int, ...], state_shape: tuple[int, ...]) -> None:
        self.images = torch.empty(image_shape, dtype=torch.uint8, pin_memory=True)
        self.state = torch.empty(state_shape, dtype=torch.float32, pin_memory=True)
        # numpy views of the pinned memory: np.copyto also takes read-only arrays (zmq frames).
        self.images_np = self.images.numpy()
        self.state_np = self.state.numpy()
        self.uploaded = torch.cuda.Event()
        self.uploaded.record()  # "already done": the first use does not wait


class InputStaging:
    """Static input tensors (allocated once) and the host -> device path into them.

    `images` (uint8, (1, n_cameras, H, W, 3)) and `state` (float32, (1, history, size)) are the
    tensors every tier reads; their addresses never change, so a CUDA graph can be captured over
    them. On a CPU device the upload is a plain copy into them.

    `wait_for_slot=False` with `slots=1` is the naive design, kept only so a test can show the
    race above; never serve with it.
    """

    def __init__(
        self,
        spec: PolicySpec,
        device: torch.device,
        compute_stream: torch.cuda.Stream | None = None,
        slots: int = 2,
        wait_for_slot: bool = True,
    ) -> None:
        if slots < 1:
            raise ValueError("staging needs at least one slot")
        height, width = check_stackable(spec)
        self._spec = spec
        self._names = spec.camera_names
        self._frame_shape = (height, width, 3)
        self._state_shape = (spec.state_history, spec.state_size)
        image_shape = (1, len(spec.cameras), height, width, 3)
        state_shape = (1, *self._state_shape)
        self.device = device
        self.images = torch.zeros(image_shape, dtype=torch.uint8, device=device)
        self.state = torch.zeros(state_shape, dtype=torch.float32, device=device)
        self._cuda = device.type == "cuda"
        self._wait_for_slot = wait_for_slot
        self._next = 0
        if self._cuda:
            self._compute = compute_stream or torch.cuda.current_stream(device)
            self._copy_stream = torch.cuda.Stream(device)
            self._slots = [_Slot(image_shape, state_shape) for _ in range(slots)]
            self._consumed = torch.cuda.Event()
            self._consumed.record(self._compute)

    def check(self, images: Mapping[str, np.ndarray], state: np.ndarray) -> None:
        """Refuse an observation that does not fit the spec, naming what is wrong."""
        for name in self._names:
            frame = images.get(name)
            if frame is None:
                raise ValueError(f"observation has no frame for camera {name!r}")
            if frame.dtype != np.uint8 or frame.shape != self._frame_shape:
                raise ValueError(
                    f"camera {name!r}: expected uint8 {self._frame_shape}, "
                    f"got {frame.dtype} {frame.shape}"
                )
        if state.dtype != np.float32 or state.shape != self._state_shape:
            raise ValueError(
                f"state: expected float32 {self._state_shape}, got {state.dtype} {state.shape}"
            )

    def upload(self, images: Mapping[str, np.ndarray], state: np.ndarray) -> None:
        """Copy one observation into the static tensors; the compute stream waits for it.

        Returns once the host-side copy into pinned memory is done: the caller may reuse or free
        its arrays at once.
        """
        self.check(images, state)
        if not self._cuda:
            host_images, host_state = self.images.numpy(), self.state.numpy()
            for i, name in enumerate(self._names):
                np.copyto(host_images[0, i], images[name])
            np.copyto(host_state[0], state)
            return
        slot = self._slots[self._next]
        self._next = (self._next + 1) % len(self._slots)
        if self._wait_for_slot:
            slot.uploaded.synchronize()  # the slot's previous copy has been read by the GPU
        # Nothing is written to the static tensors before the last step has read them.
        self._copy_stream.wait_event(self._consumed)
        with torch.cuda.stream(self._copy_stream):
            # Camera by camera, so each frame's DMA overlaps the host copy of the next one.
            for i, name in enumerate(self._names):
                # np.copyto, single-threaded on purpose: torch's multi-threaded CPU copy was
                # faster when the machine was idle but took 24 ms a step on an H200 host while
                # other processes kept its cores busy (its worker threads wait on each other).
                np.copyto(slot.images_np[0, i], images[name])
                self.images[0, i].copy_(slot.images[0, i], non_blocking=True)
            np.copyto(slot.state_np[0], state)
            self.state.copy_(slot.state, non_blocking=True)
            slot.uploaded.record(self._copy_stream)
        self._compute.wait_event(slot.uploaded)

    def mark_consumed(self) -> None:
        """Call after enqueuing the step that reads the static tensors (on the compute stream)."""
        if self._cuda:
            self._consumed.record(self._compute)

    @property
    def copy_stream(self) -> torch.cuda.Stream | None:
        return self._copy_stream if self._cuda else None


class OutputDownload:
    """The device -> host path of a chunk, through a pinned buffer owned by the runner."""

    def __init__(self, shape: tuple[int, int], device: torch.device) -> None:
        self._shape = shape
        self._cuda = device.type == "cuda"
        if self._cuda:
            self._host = torch.empty(shape, dtype=torch.float32, pin_memory=True)
            self._host_np = self._host.numpy()
            self._done = torch.cuda.Event()

    def fetch(self, out: torch.Tensor) -> np.ndarray:
        """Copy `out` ((1, chunk, action_dim) on the device) into a new float32 numpy array.

        Blocks until the copy is done, so graph-owned `out` may be overwritten right after.
        """
        if tuple(out.shape) != (1, *self._shape):
            raise ValueError(
                f"the model returned shape {tuple(out.shape)}, expected {(1, *self._shape)}"
            )
        if not self._cuda:
            return out[0].detach().to(torch.float32).numpy().copy()
        self._host.copy_(out[0], non_blocking=True)
        self._done.record()
        self._done.synchronize()
        return self._host_np.copy()
