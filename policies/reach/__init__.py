"""The built-in `reach` policy: a scripted stand-in that moves every joint smoothly toward a
target pose (policy.py), and its family (family.py).

This __init__ imports nothing (the `tempo` parser reads family.py without torch);
`from policies.reach import build_reach_policy` still works, importing policy.py on first use.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name in ("ReachModule", "build_reach_policy"):
        from policies.reach import policy

        return getattr(policy, name)
    raise AttributeError(f"module 'policies.reach' has no attribute {name!r}")
