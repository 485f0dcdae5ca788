"""A tiny conv + MLP policy with random weights, for runner tests, CPU demos and benchmarks
(policy.py), and its family (family.py: `tempo bench`'s `tiny`).

This __init__ imports nothing (the `tempo` parser reads family.py without torch);
`from policies.tiny import build_tiny_policy` still works, importing policy.py on first use.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name in ("TinyVisuomotor", "build_tiny_policy", "tiny_spec"):
        from policies.tiny import policy

        return getattr(policy, name)
    raise AttributeError(f"module 'policies.tiny' has no attribute {name!r}")
