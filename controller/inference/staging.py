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
- The static GPU tensors are themselves reused; the copies into them are enqueued on the compute
  stream, the stream every step runs on, so stream order alone keeps an upload from overwriting
  inputs a queued step has not read yet, and the model never starts before its inputs have
  landed. (A separate copy stream would need two cross-stream event waits and an event record
  per step, host calls on the serving path, and buys no overlap: each step waits for its
  download before the next upload starts.)

The chunk goes the other way (`output_download`) through a pinned buffer owned by the runner,
then into a fresh numpy array for the caller: graph-owned output memory is overwritten by the
next replay, and a chunk already returned must never change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from policies.base import PolicySpec, RobotContext
from policies.inputs import InputCodec, check_frames, frame_groups

_DTYPES = {"uint8": torch.uint8, "float32": torch.float32, "int64": torch.int64}
_PACK_ALIGN = 64  # bytes between packed inputs: vector loads and cuBLAS want 16 at least

Shapes = list[tuple[tuple[int, ...], torch.dtype]]


def packed(
    shapes: Shapes, device: torch.device, pin_memory: bool = False
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """One byte buffer and, in it, one zeroed tensor of each (shape, dtype), each starting at a
    multiple of 64 bytes: the codec's inputs travel to the device as one copy of the buffer
    (a small copy costs its launch and DMA latency whatever its size)."""
    offsets, total = [], 0
    for shape, dtype in shapes:
        offsets.append(total)
        nbytes = torch.Size(shape).numel() * dtype.itemsize
        total += -(-nbytes // _PACK_ALIGN) * _PACK_ALIGN
    buffer = torch.zeros(total, dtype=torch.uint8, device=device, pin_memory=pin_memory)
    views = []
    for offset, (shape, dtype) in zip(offsets, shapes, strict=True):
        nbytes = torch.Size(shape).numel() * dtype.itemsize
        views.append(buffer[offset : offset + nbytes].view(dtype).view(shape))
    return buffer, views


class _Slot:
    """One pinned host copy of a batch's inputs and the event of its last upload: the frame
    tensors, then the codec's inputs packed in one buffer (`packed`)."""

    def __init__(self, frame_shapes: Shapes, codec_shapes: Shapes, batch: int) -> None:
        frames = [torch.empty(s, dtype=d, pin_memory=True) for s, d in frame_shapes]
        self.packed, codec = packed(codec_shapes, torch.device("cpu"), pin_memory=True)
        self.tensors = frames + codec
        # numpy views of the pinned memory: np.copyto also takes read-only arrays (zmq frames).
        self.arrays = [t.numpy() for t in self.tensors]
        # What the codec writes, per batch row: its inputs without the batch dimension (0-d
        # for shape (1,)), made once: the views never change.
        self.codec_arrays = self.arrays[len(frames) :]
        self.codec_rows = [[a[r, ...] for a in self.codec_arrays] for r in range(batch)]
        self.uploaded = torch.cuda.Event()
        self.uploaded.record()  # "already done": the first use does not wait


Item = tuple[Mapping[str, np.ndarray], RobotContext]  # one robot's frames and context


class InputStaging:
    """Static input tensors (allocated once) and the host -> device path into them.

    `tensors` are what every tier passes to the module, in `forward`'s order: the frame groups
    (uint8, (batch, n, H, W, 3) each, `policies.inputs.frame_groups`), then the codec's inputs
    (the state history by default), each with `batch` rows: one robot per row. Their addresses
    never change, so a CUDA graph can be captured over them. On a CPU device the upload is a
    plain copy into them.

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
        codec: InputCodec | None = None,
        batch: int = 1,
    ) -> None:
        if slots < 1:
            raise ValueError("staging needs at least one slot")
        if batch < 1:
            raise ValueError("staging needs at least one batch row")
        self._spec = spec
        self._codec = codec or InputCodec(spec)
        self.batch = batch
        groups = frame_groups(spec)
        # camera name -> (frame tensor index, row): where each frame goes.
        self._placement = [
            (name, index, row)
            for index, group in enumerate(groups)
            for row, name in enumerate(group.cameras)
        ]
        self._n_frames = len(groups)
        frame_shapes: Shapes = [((batch, *g.shape), torch.uint8) for g in groups]
        codec_shapes: Shapes = [((batch, *i.shape), _DTYPES[i.dtype]) for i in self._codec.inputs]
        self.device = device
        frames = [torch.zeros(s, dtype=d, device=device) for s, d in frame_shapes]
        # The codec's inputs are views of one device buffer, uploaded by one copy.
        self._packed, codec_views = packed(codec_shapes, device)
        self.tensors = tuple(frames + codec_views)
        # Device views made once (indexing a tensor costs microseconds a step), per batch row:
        # each group's frames as one (n, H, W, 3) tensor, with its cameras' names, and each
        # camera's frame.
        self._groups = [
            [(g.cameras, self.tensors[i][b]) for i, g in enumerate(groups)] for b in range(batch)
        ]
        self._rows = [
            {name: self.tensors[i][b, row] for name, i, row in self._placement}
            for b in range(batch)
        ]
        self._cuda = device.type == "cuda"
        self._wait_for_slot = wait_for_slot
        self._next = 0
        self._has_codec_inputs = self._packed.numel() > 0
        if self._cuda:
            self._compute = compute_stream or torch.cuda.current_stream(device)
            self._slots = [_Slot(frame_shapes, codec_shapes, batch) for _ in range(slots)]
            # Per slot and batch row, each camera's frame: (numpy view to write, tensor view
            # to copy from).
            self._slot_rows = [
                [
                    {
                        name: (s.arrays[i][b, row], s.tensors[i][b, row])
                        for name, i, row in self._placement
                    }
                    for b in range(batch)
                ]
                for s in self._slots
            ]
        else:
            self._host = [t.numpy() for t in self.tensors]
            codec_host = self._host[self._n_frames :]
            self._host_codec = [[a[b, ...] for a in codec_host] for b in range(batch)]
        self._pinned_regions: list[tuple[int, int]] = []

    def add_pinned_region(self, address: int, size: int) -> None:
        """Host memory at [address, address + size) is page-locked (cudaHostRegister): frames
        that lie in it are copied to the device by one DMA, without the copy into a staging
        slot. Its owner must not rewrite a frame until the step that read it has finished."""
        self._pinned_regions.append((address, address + size))

    def remove_pinned_region(self, address: int, size: int) -> None:
        """The region is about to be unregistered: frames in it go through staging again."""
        if (address, address + size) in self._pinned_regions:
            self._pinned_regions.remove((address, address + size))

    def _pinned(self, frame: np.ndarray) -> bool:
        start = frame.__array_interface__["data"][0]
        return self._in_pinned_region(start, start + frame.nbytes)

    def _in_pinned_region(self, start: int, end: int) -> bool:
        return any(lo <= start and end <= hi for lo, hi in self._pinned_regions)

    def _pinned_span(self, frames: list[np.ndarray]) -> np.ndarray | None:
        """A group's frames as one (n, H, W, 3) array when they lie back to back in pinned
        memory: the group then goes up in one DMA instead of one per camera. None otherwise. An
        observation slot lays the cameras out in the spec's order, each part at a multiple of
        64 bytes: its frames are back to back when a group's cameras are consecutive in the spec
        and H x W x 3 is a multiple of 64 (480x640 is; 84x84 is not)."""
        if not self._pinned_regions or not frames:
            return None
        first = frames[0]
        start, size = first.__array_interface__["data"][0], first.nbytes
        for k, frame in enumerate(frames):
            if frame.__array_interface__["data"][0] != start + k * size:
                return None
            if not frame.flags.c_contiguous:
                return None
        if not self._in_pinned_region(start, start + size * len(frames)):
            return None
        # A view over the frames' own memory (it keeps that memory alive), checked above.
        return np.lib.stride_tricks.as_strided(
            first, shape=(len(frames), *first.shape), strides=(size, *first.strides)
        )

    @property
    def frames(self) -> tuple[torch.Tensor, ...]:
        """The frame tensors alone (one per camera shape)."""
        return self.tensors[: self._n_frames]

    def upload(self, images: Mapping[str, np.ndarray], context: RobotContext) -> None:
        """Copy one observation into the static tensors (row 0; the other rows, if any, get a
        copy of it), on the compute stream. Raises ValueError, before anything is written,
        when a frame does not fit the spec; the codec checks its own inputs.

        Returns once the host-side copy into pinned memory is done: the caller may reuse or free
        its arrays at once.
        """
        if not self._cuda:
            self.stage(images, context)
            return
        with torch.cuda.stream(self._compute):
            self.stage(images, context)

    def stage(self, images: Mapping[str, np.ndarray], context: RobotContext) -> None:
        """`upload` for a caller whose current stream is already the compute stream (the
        runner's step, which switches streams once for upload, run and download)."""
        refused = self.stage_rows(((images, context),))[0]
        if refused is not None:
            raise refused

    def stage_rows(self, items: Sequence[Item]) -> list[ValueError | None]:
        """Up to `batch` robots' observations into consecutive rows, in order, on the current
        stream (the compute stream); rows past them are padded with a copy of row 0, whose
        outputs the caller discards. An item whose frames or context do not fit is left out
        (its ValueError in the returned list, at its position; None for each staged one) and
        the next item takes its row: item k's row is the number of staged items before it."""
        if len(items) > self.batch:
            raise ValueError(f"{len(items)} observations for a batch of {self.batch}")
        refused: list[ValueError | None] = []
        if not self._cuda:
            row = 0
            for images, context in items:
                try:
                    check_frames(self._spec, images)
                    self._codec.encode(context, self._host_codec[row])
                except ValueError as exc:
                    refused.append(exc)
                    continue
                for name, index, camera in self._placement:
                    np.copyto(self._host[index][row, camera], images[name])
                refused.append(None)
                row += 1
            if 0 < row < self.batch:
                for array in self._host:
                    array[row:] = array[0]
            return refused
        index = self._next
        slot, slot_rows = self._slots[index], self._slot_rows[index]
        if self._wait_for_slot:
            slot.uploaded.synchronize()  # the slot's previous copy has been read by the GPU
        row = 0
        for images, context in items:
            try:
                check_frames(self._spec, images)
                # The codec first: it may refuse the context, and then nothing is enqueued.
                self._codec.encode(context, slot.codec_rows[row])
            except ValueError as exc:
                refused.append(exc)
                continue
            self._upload_frames(images, row, slot_rows[row])
            refused.append(None)
            row += 1
        if row == 0:
            return refused  # nothing staged: the slot was not used
        self._next = (index + 1) % len(self._slots)
        if row < self.batch:  # padding: copies of row 0, outputs discarded
            for array in slot.codec_arrays:
                array[row:] = array[0]
            for frames in self.frames:
                frames[row:].copy_(frames[:1].expand_as(frames[row:]))
        if self._has_codec_inputs:
            self._packed.copy_(slot.packed, non_blocking=True)  # every codec input at once
        slot.uploaded.record(self._compute)
        return refused

    def _upload_frames(
        self,
        images: Mapping[str, np.ndarray],
        row: int,
        slot_rows: dict[str, tuple[np.ndarray, torch.Tensor]],
    ) -> None:
        """One robot's frames into batch row `row` of the device's frame tensors."""
        device_rows = self._rows[row]
        for names, device_group in self._groups[row]:
            frames = [images[name] for name in names]
            span = self._pinned_span(frames)
            if span is not None:
                # Already page-locked and back to back (a shared observation slot): one DMA.
                device_group.copy_(torch.from_numpy(span), non_blocking=True)
                continue
            # Camera by camera, so each frame's DMA overlaps the host copy of the next one.
            for name, frame in zip(names, frames, strict=True):
                if self._pinned_regions and self._pinned(frame):
                    source = torch.from_numpy(frame)  # page-locked: one DMA from there
                else:
                    # np.copyto, single-threaded on purpose: torch's multi-threaded CPU copy
                    # was faster when the machine was idle but took 24 ms a step on an H200
                    # host while other processes kept its cores busy (its threads wait on
                    # each other).
                    host_row, source = slot_rows[name]
                    np.copyto(host_row, frame)
                device_rows[name].copy_(source, non_blocking=True)

    @property
    def stream(self) -> torch.cuda.Stream | None:
        """The stream the copies are enqueued on: the compute stream (None on a CPU)."""
        return self._compute if self._cuda else None
