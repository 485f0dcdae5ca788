"""The tiny family: a conv + MLP test policy with random weights, built in memory (no
checkpoints); `tempo bench` times it as `tiny`.

Standard library only at import (see policies.registry).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from policies.registry import BenchmarkPolicy, PolicyFamily

if TYPE_CHECKING:
    from policies.tensor_policy import TensorPolicy


def _tiny_policy() -> TensorPolicy:
    from policies.tiny.policy import build_tiny_policy

    return build_tiny_policy()


FAMILY = PolicyFamily(
    name="tiny",
    title="tiny",
    summary="a tiny conv + MLP test policy with random weights (seconds to compile)",
    benchmarks={"tiny": BenchmarkPolicy("tiny conv+MLP test policy", _tiny_policy)},
)
