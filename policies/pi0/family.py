"""The pi0 family: Physical Intelligence's flow-matching vision-language-action model, from
LeRobot `pi0` directories and openpi PyTorch checkpoints (pi0 or pi0.5: openpi's reader tells
them apart).

Standard library only at import (see policies.registry); each part imports what it needs when
it is used.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from policies.flow.family import RTC_SETTINGS
from policies.registry import CheckpointFamily, DemoPolicy, FamilySettings, PolicyFamily

if TYPE_CHECKING:
    from policies.pi0.settings import PromptSettings
    from policies.settings import PolicySettings
    from policies.tensor_policy import TensorPolicy


def _prompt_model() -> type[PromptSettings]:
    from policies.pi0.settings import PromptSettings

    return PromptSettings


# `policy.prompt:` (pi0 and pi0.5); its fields sat directly under `policy:` before.
PROMPT_SETTINGS = FamilySettings(
    section="prompt", model=_prompt_model, old_fields=("tokenizer", "default_task")
)


def _checkpoint() -> CheckpointFamily:
    from policies.pi0.checkpoint_family import PI0_CHECKPOINT

    return PI0_CHECKPOINT


def serve_prompt_settings(policy: TensorPolicy, settings: PolicySettings) -> TensorPolicy:
    """The policy with policy.prompt (tokenizer, default_task) applied to its prompt, then
    served with real-time chunking as policy.rtc says (mode trained refused in one sentence on
    a checkpoint not trained for it); another family's policy is returned as it is, and
    refused when either prompt setting is set for it (catalog.build_tensor_policy hands every
    checkpoint to every family)."""
    from policies.pi0.policy import with_prompt_settings
    from policies.pi0.step import Pi0Step

    prompt = settings.section("prompt")
    rtc = settings.section("rtc")
    if not isinstance(policy.module, Pi0Step):
        # Another prompted family (SmolVLA) serves policy.prompt itself.
        serves_prompt = getattr(policy.module, "serves_prompt_settings_itself", False)
        if serves_prompt or (prompt.tokenizer is None and prompt.default_task is None):
            return policy
        from controller.errors import ConfigError

        raise ConfigError(
            "policy.prompt.tokenizer and policy.prompt.default_task apply to pi0 / pi0.5 "
            f"checkpoints; {settings.path} holds another policy"
        )
    prompted = with_prompt_settings(policy, prompt.tokenizer, prompt.default_task)
    if rtc.mode == "off":
        return prompted
    from controller.errors import ConfigError
    from policies.pi0.rtc import serve_pi0_with_rtc

    try:
        return serve_pi0_with_rtc(prompted, rtc)
    except ValueError as exc:
        raise ConfigError(f"policy.rtc: {exc}") from None


def demo_settings(cache: Path) -> list[str]:
    """`tempo demo --policy pi0`: pi0 at a reduced width (policies.pi0.demo)."""
    from policies.pi0 import demo

    return demo.demo_settings(cache, "pi0")


FAMILY = PolicyFamily(
    name="pi0",
    title="pi0",
    summary="Physical Intelligence's pi0 (PaliGemma + flow-matching action expert), from "
    "LeRobot and openpi checkpoints",
    checkpoint=_checkpoint,
    serve_settings=serve_prompt_settings,
    settings=(RTC_SETTINGS, PROMPT_SETTINGS),
    demo=DemoPolicy(
        help="pi0 at a reduced width with random weights (CPU-sized), prompted per robot",
        settings=demo_settings,
    ),
)
