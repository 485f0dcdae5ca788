"""The chunk's way back: a step's outputs (every robot's row of them) from the device into new
numpy arrays, through pinned buffers the runner owns (see `staging` for the way in).

Graph-owned output memory is overwritten by the next replay, and a chunk already returned must
never change: every row is copied into a fresh array for its caller.
"""

from __future__ import annotations

import numpy as np
import torch


class PackedOutputs(tuple):  # type: ignore[type-arg]
    """A step's outputs that are views of one contiguous float32 device buffer, `packed` (the
    graph tier packs them inside its graph): the download moves them in one copy. A tier that
    replaces an output (fault injection) returns a plain tuple, downloaded output by output."""

    packed: torch.Tensor


def packed_outputs(packed: torch.Tensor, outputs: tuple[torch.Tensor, ...]) -> PackedOutputs:
    """`outputs`' shapes as consecutive views of `packed` (their values concatenated)."""
    views, offset = [], 0
    for out in outputs:
        views.append(packed[offset : offset + out.numel()].view(out.shape))
        offset += out.numel()
    result = PackedOutputs(views)
    result.packed = packed
    return result


class OutputDownload:
    """The device -> host path of a step's outputs (the chunk, then any extras), through pinned
    buffers owned by the runner, allocated on the first fetch (at start-up). On CUDA the copies
    are enqueued on the current stream, which must be `stream` (the compute stream). The
    outputs have `batch` rows, one robot each."""

    def __init__(
        self,
        shape: tuple[int, int],
        device: torch.device,
        stream: torch.cuda.Stream | None = None,
        batch: int = 1,
    ) -> None:
        self._shape = shape
        self._expected = torch.Size((batch, *shape))
        self._cuda = device.type == "cuda"
        self._host: list[torch.Tensor] = []
        self._host_arrays: list[np.ndarray] = []  # numpy views of `_host`, made once
        self._host_shapes: tuple[torch.Size, ...] = ()
        self._packed_source: PackedOutputs | None = None  # what `_packed_host` was made for
        self._packed_host = torch.empty(0)
        self._packed_arrays: list[np.ndarray] = []
        if self._cuda:
            self._stream = stream or torch.cuda.current_stream(device)

    def fetch(self, outputs: tuple[torch.Tensor, ...]) -> list[np.ndarray]:
        """Copy each output's row 0 (on the device) into a new float32 numpy array, without
        the batch dimension; the chunk, (chunk_size, action_dim), comes first.

        Blocks until the copy is done, so graph-owned outputs may be overwritten right after.
        """
        return self.fetch_rows(outputs, 1)[0]

    def fetch_rows(self, outputs: tuple[torch.Tensor, ...], rows: int) -> list[list[np.ndarray]]:
        """`fetch` for the first `rows` batch rows: per row, its outputs as new arrays."""
        if outputs[0].shape != self._expected:
            raise ValueError(
                f"the model returned shape {tuple(outputs[0].shape)}, expected "
                f"{tuple(self._expected)}"
            )
        if not self._cuda:
            arrays = [o.detach().numpy() for o in outputs]
            return [[a[r].astype(np.float32) for a in arrays] for r in range(rows)]  # new arrays
        if isinstance(outputs, PackedOutputs):
            arrays = self._fetch_packed(outputs)
        else:
            arrays = self._fetch_each(outputs)
        return [[array[r].copy() for array in arrays] for r in range(rows)]

    def _fetch_each(self, outputs: tuple[torch.Tensor, ...]) -> list[np.ndarray]:
        shapes = tuple(o.shape for o in outputs)
        if shapes != self._host_shapes:  # the first fetch (a copy_ would broadcast a mismatch)
            self._host = [torch.empty(s, dtype=torch.float32, pin_memory=True) for s in shapes]
            self._host_arrays = [h.numpy() for h in self._host]
            self._host_shapes = shapes
        for host, out in zip(self._host, outputs, strict=True):
            host.copy_(out, non_blocking=True)
        self._stream.synchronize()  # the copies, queued behind the step on this stream
        return self._host_arrays

    def _fetch_packed(self, outputs: PackedOutputs) -> list[np.ndarray]:
        """One copy of the packed buffer; each output's view of it (with its batch rows)."""
        if outputs is not self._packed_source:  # the graph returns one object: made once
            self._packed_host = torch.empty(
                outputs.packed.shape, dtype=torch.float32, pin_memory=True
            )
            flat, self._packed_arrays, offset = self._packed_host.numpy(), [], 0
            for out in outputs:
                size = out.numel()
                self._packed_arrays.append(flat[offset : offset + size].reshape(out.shape))
                offset += size
            self._packed_source = outputs
        self._packed_host.copy_(outputs.packed, non_blocking=True)
        self._stream.synchronize()  # the copies, queued behind the step on this stream
        return self._packed_arrays
