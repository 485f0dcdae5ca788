"""A policy read before its build was asked for: what a spare inference process does with its
wait, so that a restart's build reads nothing (controller.inference.build).

    READ_AHEAD.keep(key, policy)    # the spare, standing by
    policy = READ_AHEAD.take(key)   # the build: that policy, once, when read for an equal key

One per process: an inference process builds once.
"""

from __future__ import annotations

from collections.abc import Hashable

from policies.tensor_policy import TensorPolicy


class ReadAhead:
    def __init__(self) -> None:
        self._held: tuple[Hashable, TensorPolicy] | None = None

    def keep(self, key: Hashable, policy: TensorPolicy) -> None:
        self._held = (key, policy)

    def take(self, key: Hashable) -> TensorPolicy | None:
        """The policy kept for `key` (handed out once), or None."""
        held, self._held = self._held, None
        if held is None or held[0] != key:
            return None
        return held[1]

    @property
    def holding(self) -> bool:
        return self._held is not None


READ_AHEAD = ReadAhead()
