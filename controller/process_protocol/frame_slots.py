"""Observation slots in shared memory: the frames and state of one observation, written by the
control process and read, in place, by the inference process.

    slots = FrameSlots.create(spec, count=2)         # control process: sealed shared memory
    generation = slots.write(i, images, state)       # copy one observation into slot i (summed)
    slots = FrameSlots.attach_fd(fd, spec, count, name)  # inference process: the same memory
    images, state = slots.views(i)                   # numpy views, no copy
    slots.check(i, generation)                       # still that observation? (after the DMA)
    slots.check(i, generation, intact=True)          # ... and its data as written?

A `SlotRing` (controller.wire.slot_ring: the layout, the generation counters, the heartbeat)
whose parts come from the policy's spec: each camera's uint8 frame, in the spec's order, then
the state history (float32). A same-host driver's ring of frames in place has this same layout,
so the inference process reads either kind the same way.

Only numpy and the standard library: the control process imports this without torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from controller.wire.slot_ring import Part, SlotRing, ring_bytes, sealed_memory
from policies.base import PolicySpec

STATE = "state"  # the state history's part; camera names cannot take it (the wire refuses it)


def slot_parts(spec: PolicySpec) -> list[Part]:
    """One observation's parts for `spec`: the cameras' frames, then the state history."""
    parts: list[Part] = [(c.name, c.shape, "uint8") for c in spec.cameras]
    parts.append((STATE, (spec.state_history, spec.state_size), "float32"))
    return parts


class TornSlot(RuntimeError):
    """The slot no longer holds the observation a request named (torn or overwritten)."""


class CorruptSlot(TornSlot):
    """The slot's data is not what its writer wrote: something else wrote into the memory."""


class FrameSlots(SlotRing):
    """`count` observation slots shaped for `spec` in one shared mapping (see the module doc)."""

    def __init__(self, spec: PolicySpec, count: int, fd: int, path: Path, owner: bool) -> None:
        super().__init__(slot_parts(spec), count, fd, path, owner)
        self.spec = spec
        self._camera_names = [c.name for c in spec.cameras]

    @classmethod
    def create(cls, spec: PolicySpec, count: int) -> FrameSlots:  # type: ignore[override]
        fd = sealed_memory(ring_bytes(slot_parts(spec), count))
        return cls(spec, count, fd, Path(f"/proc/{os.getpid()}/fd/{fd}"), owner=True)

    @classmethod
    def attach(cls, path: str | Path, spec: PolicySpec, count: int) -> FrameSlots:  # type: ignore[override]
        return cls(spec, count, os.open(path, os.O_RDWR), Path(path), owner=False)

    @classmethod
    def attach_fd(  # type: ignore[override]
        cls, fd: int, spec: PolicySpec, count: int, name: str
    ) -> FrameSlots:
        return cls(spec, count, fd, Path(name), owner=False)

    def write(  # type: ignore[override]
        self, index: int, images: Mapping[str, np.ndarray], state: np.ndarray
    ) -> int:
        """Copy one observation into slot `index`, with the sum of its data; returns its new
        (even) generation. The caller has checked shapes and dtypes (a shape mismatch raises
        ValueError)."""
        parts = {name: images[name] for name in self._camera_names}
        parts[STATE] = state
        return super().write(index, parts, checksum=True)

    def views(self, index: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The slot's frames and state, as views into the shared memory (no copy)."""
        arrays = self.arrays(index)
        return {name: arrays[name] for name in self._camera_names}, arrays[STATE]

    def check(self, index: int, generation: int, intact: bool = False) -> None:
        """Raise TornSlot unless slot `index` still holds the complete observation `generation`;
        with `intact`, CorruptSlot unless its data is also what `write` summed."""
        if not self.unchanged(index, generation):
            raise TornSlot(
                f"observation slot {index} holds generation {self.generation(index)}, the "
                f"request named {generation}: it was overwritten or is being written"
            )
        if intact and not self.intact(index):
            raise CorruptSlot(
                f"observation slot {index} was written behind the control process's back "
                "(its data no longer matches its checksum); the observation is refused"
            )
