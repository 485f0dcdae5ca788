"""Temporal ensembling of action chunks (ACT), in memory that does not grow with the episode.

A chunk is an array (chunk_size, action_dim) predicted from the observation of absolute control
step `start_step`; row i is the action for step start_step + i. Every tick the control loop asks
for the action of the current step, whatever chunks have landed by then.

    temporal   the action for step t is the weighted mean of every stored prediction for t, with
               weight exp(-k * i), i = 0 for the oldest prediction (ACT, Zhao et al. 2023,
               Algorithm 2). k = 0 is the plain mean, k > 0 favours old predictions (smoother),
               k < 0 favours new ones (more reactive).
    newest     play the row of the newest chunk (highest start_step) that covers t.

ACT keeps a table all_time_actions[max_steps, max_steps + chunk_size, action_dim]: it grows with
the episode, and each tick reads a whole column. Here each step still ahead of the loop has one
slot in a ring of 2 * chunk_size slots holding a running weighted sum, the sum of weights and the
count of predictions; a new prediction for step t gets weight exp(-k * count_t). For chunks that
arrive in start_step order (one inference at a time, on the newest observation) that is exactly
ACT's mean. A chunk that arrives after a newer one (out of order) is still merged (each of its
rows for steps still ahead joins that step's mean), ranked by arrival: exact ordering by
start_step would mean keeping every chunk, O(chunk_size^2) memory. With k = 0 the order does
not matter at all.

Time: steps are absolute, non-negative control step numbers. The present is the highest step seen
so far, as `current_step` in `add_chunk` or as `step` in `action_at` (queries are non-decreasing);
rows for steps before it are late and dropped, and what is stored for them is forgotten.

Not thread-safe: call from one thread, or under the caller's lock. No allocation in `action_at`.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

_EMPTY = np.iinfo(np.int64).min  # tag of a slot that holds no step


class ChunkEnsembler:
    """Merges action chunks keyed by absolute step; `action_at` gives one action per tick."""

    def __init__(
        self,
        chunk_size: int,
        action_dim: int,
        mode: Literal["temporal", "newest"] = "temporal",
        k: float = 0.01,
    ) -> None:
        if chunk_size < 1 or action_dim < 1:
            raise ValueError(
                f"chunk_size ({chunk_size}) and action_dim ({action_dim}) must both be >= 1"
            )
        if mode not in ("temporal", "newest"):
            raise ValueError(f"mode must be 'temporal' or 'newest', not {mode!r}")
        if not np.isfinite(k):
            raise ValueError(f"k must be a finite number, not {k!r}")
        self.chunk_size = int(chunk_size)
        self.action_dim = int(action_dim)
        self.mode = mode
        self.k = float(k)
        # Steps in [present, present + 2 * chunk_size) map to distinct slots, so a chunk that
        # starts up to chunk_size steps ahead of the present never overwrites a step still due.
        cap = 2 * self.chunk_size
        self._cap = cap
        self._tag = np.full(cap, _EMPTY, dtype=np.int64)  # which step a slot holds
        self._count = np.zeros(cap, dtype=np.int64)  # predictions merged into the slot
        self._sum = np.zeros((cap, self.action_dim))  # temporal: running weighted sum
        self._wsum = np.zeros(cap)  # temporal: running sum of weights
        self._owner = np.full(cap, _EMPTY, dtype=np.int64)  # newest: start_step of the row held
        self._value = np.zeros((cap, self.action_dim))  # newest: the row held
        # Scratch for add_chunk, sized for one chunk.
        self._steps = np.zeros(self.chunk_size, dtype=np.int64)
        self._w = np.zeros(self.chunk_size)
        self._rows = np.zeros((self.chunk_size, self.action_dim))
        self._bool = np.zeros(self.chunk_size, dtype=bool)
        self._arange = np.arange(self.chunk_size, dtype=np.int64)
        self._present = 0
        self._max_end = 0

    # -- state -----------------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget every chunk and the present (a new episode may restart at step 0)."""
        self._tag.fill(_EMPTY)
        self._count.fill(0)
        self._sum.fill(0.0)
        self._wsum.fill(0.0)
        self._owner.fill(_EMPTY)
        self._value.fill(0.0)
        self._present = 0
        self._max_end = 0

    @property
    def horizon_end(self) -> int:
        """First step at or after the present that no stored chunk covers.

        `horizon_end - step` is how many more steps can be played without a new chunk; it equals
        the present when nothing is stored for it.
        """
        step = self._present
        end = max(self._max_end, step)
        while step < end:
            if self._tag[step % self._cap] != step:
                break
            step += 1
        return step

    @property
    def nbytes(self) -> int:
        """Bytes held in buffers: fixed at construction, whatever the episode length."""
        arrays = (self._tag, self._count, self._sum, self._wsum, self._owner, self._value)
        scratch = (self._steps, self._w, self._rows, self._bool, self._arange)
        return sum(a.nbytes for a in arrays + scratch)

    # -- writing ---------------------------------------------------------------------------------

    def add_chunk(self, start_step: int, chunk: np.ndarray, current_step: int) -> int:
        """Store a chunk. Elements for steps < current_step are late and dropped; returns how
        many were dropped.

        A chunk whose start_step is older than a previously added chunk's (arrived out of order)
        is still merged in temporal mode (ranked by arrival, see the module docstring); in newest
        mode the chunk with the highest start_step wins, and of two with the same start_step the
        later one. Raises ValueError for a chunk of the wrong shape, with a non-finite value
        (nothing is stored: one NaN would poison every later mean for its steps), or that starts
        more than chunk_size steps after current_step (a step numbering bug).
        """
        size = self.chunk_size
        if chunk.shape != (size, self.action_dim):
            raise ValueError(f"chunk has shape {chunk.shape}, expected ({size}, {self.action_dim})")
        start_step = int(start_step)
        current_step = int(current_step)
        if start_step > current_step + size:
            raise ValueError(
                f"chunk start_step {start_step} is more than chunk_size ({size}) steps after "
                f"current_step {current_step}: steps must count from the observation's tick"
            )
        if not np.isfinite(chunk).all():
            raise ValueError("chunk contains NaN or Inf; nothing was stored")
        if current_step > self._present:
            self._present = current_step
        first = max(0, self._present - start_step)  # first row that is not late
        if first >= size:
            return size
        end = start_step + size
        if end > self._max_end:
            self._max_end = end

        n = size - first
        steps = self._steps[:n]
        np.add(self._arange[first:], start_step, out=steps)
        slots = steps % self._cap  # small int array per chunk, not per tick
        rows = chunk[first:]
        # Slots that still hold an older step (or nothing) start empty for their new step.
        stale = self._bool[:n]
        np.not_equal(self._tag[slots], steps, out=stale)
        if np.count_nonzero(stale):
            fresh = slots[stale]
            self._tag[fresh] = steps[stale]
            self._count[fresh] = 0
            self._sum[fresh] = 0.0
            self._wsum[fresh] = 0.0
            self._owner[fresh] = _EMPTY
        if self.mode == "temporal":
            self._merge_temporal(slots, rows, n)
        else:
            self._merge_newest(slots, rows, start_step, n)
        self._count[slots] += 1
        return first

    def _merge_temporal(self, slots: np.ndarray, rows: np.ndarray, n: int) -> None:
        k = self.k
        w = self._w[:n]
        scaled = self._rows[:n]
        if k >= 0.0:
            # The oldest prediction has weight 1, later ones exp(-k * count): they shrink, so
            # underflow to 0 is harmless.
            np.multiply(self._count[slots], -k, out=w)
            np.exp(w, out=w)
            np.multiply(rows, w[:, None], out=scaled)
            self._sum[slots] += scaled
            self._wsum[slots] += w
        else:
            # Negative k: weights grow with count and would overflow. Keep the sums scaled so
            # that the newest prediction has weight 1: multiply the old ones by exp(k) < 1.
            decay = np.exp(k)
            np.multiply(self._sum[slots], decay, out=scaled)
            scaled += rows
            self._sum[slots] = scaled
            np.multiply(self._wsum[slots], decay, out=w)
            w += 1.0
            self._wsum[slots] = w

    def _merge_newest(self, slots: np.ndarray, rows: np.ndarray, start_step: int, n: int) -> None:
        wins = self._bool[:n]
        np.less_equal(self._owner[slots], start_step, out=wins)
        if np.count_nonzero(wins):
            taken = slots[wins]
            self._value[taken] = rows[wins]
            self._owner[taken] = start_step

    # -- reading ---------------------------------------------------------------------------------

    def action_at(self, step: int, out: np.ndarray) -> bool:
        """Write the action for `step` into `out` (shape (action_dim,)); False if no stored chunk
        covers `step` (out untouched).

        Steps must not decrease between calls; `step` becomes the present, so everything before
        it is forgotten. A step before the present returns False.
        """
        if step < self._present:
            return False
        self._present = step
        slot = step % self._cap
        if self._tag[slot] != step:
            return False
        if self.mode == "temporal":
            np.divide(self._sum[slot], self._wsum[slot], out=out)
        else:
            np.copyto(out, self._value[slot])
        return True
