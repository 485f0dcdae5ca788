"""The flow family: flow-matching action-chunk policies, served plainly or with real-time
chunking (the `policy.rtc` settings).

Standard library only at import (see policies.registry); each part imports what it needs when
it is used.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from policies.registry import CheckpointFamily, DemoPolicy, FamilySettings, PolicyFamily

if TYPE_CHECKING:
    from policies.flow.settings import RTCConfig
    from policies.settings import PolicySettings
    from policies.tensor_policy import TensorPolicy


def _rtc_model() -> type[RTCConfig]:
    from policies.flow.settings import RTCConfig

    return RTCConfig


# `policy.rtc:`, shared with pi0 and pi0.5, which serve real-time chunking their own way.
RTC_SETTINGS = FamilySettings(section="rtc", model=_rtc_model)


def _checkpoint() -> CheckpointFamily:
    from policies.flow.checkpoint import CHECKPOINT

    return CHECKPOINT


def serve_rtc_settings(policy: TensorPolicy, settings: PolicySettings) -> TensorPolicy:
    """`policy` served with real-time chunking as policy.rtc says (unchanged when it is off);
    RTC set for a policy that is not a flow is refused, unless its own family serves it (pi0
    and pi0.5: policies.pi0.family)."""
    rtc = settings.section("rtc")
    if rtc.mode == "off" or getattr(policy.module, "serves_rtc_itself", False):
        return policy
    from controller.errors import ConfigError
    from policies.flow.rtc import serve_with_rtc

    try:
        return serve_with_rtc(policy, rtc)
    except ValueError as exc:
        raise ConfigError(f"policy.rtc: {exc}") from None


def demo_settings(cache: Path) -> list[str]:
    """`tempo demo --policy flow`: the small flow policy (random weights, written on the first
    run) with real-time chunking: the old chunk plays until the new one lands."""
    directory = cache / "demo-flow"
    if not (directory / "config.json").exists():
        from policies.checkpoints.tempo_format import save_checkpoint
        from policies.flow.demo import make_demo_flow_policy

        save_checkpoint(directory, make_demo_flow_policy())
    return [
        "policy.kind=checkpoint",
        f"policy.path={directory}",
        "policy.rtc.mode=exact",
        "execution.ensemble=newest",
        "execution.query_period=10",  # the execution horizon s: at least the delay on a CPU
    ]


FAMILY = PolicyFamily(
    name="flow",
    title="flow",
    summary="flow-matching action experts (pi0-like), with real-time chunking when served",
    checkpoint=_checkpoint,
    serve_settings=serve_rtc_settings,
    settings=(RTC_SETTINGS,),
    demo=DemoPolicy(
        help="a small flow-matching policy with random weights, served with real-time chunking",
        settings=demo_settings,
    ),
)
