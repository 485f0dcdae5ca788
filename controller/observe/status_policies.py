"""`tempo status`'s line per policy: its robots, their rate, and the load they make against
the policy's ceiling (the daemon's admission rule, controller.daemon.admission).

    policy act: 16 robots at 50 Hz (queried at 50 Hz), load 0.93 of 0.90 (graph), serving
"""

from __future__ import annotations

from typing import Any


def policy_load_lines(policies: dict[str, Any] | None) -> list[str]:
    """One line per policy of a status snapshot's `policies` map (none for an older daemon)."""
    lines = []
    for name, entry in (policies or {}).items():
        robots = entry.get("robots", 0)
        load = entry.get("load")
        load_text = "not measured yet" if load is None else f"{load:.2f}"
        tier = (entry.get("policy") or {}).get("tier")
        lines.append(
            f"policy {name}: {robots} robot{'' if robots == 1 else 's'} at "
            f"{entry.get('rate_hz', 0):g} Hz (queried at {entry.get('query_hz', 0):g} Hz), "
            f"load {load_text}"
            + (f" of {ceiling:.2f}" if (ceiling := entry.get("max_load")) is not None else "")
            + (f" ({tier})" if tier else "")
            + (", serving" if entry.get("serving") else ", not serving (restarting)")
        )
    return lines
