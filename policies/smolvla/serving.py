"""A SmolVLA policy served with the `policy:` settings it reads: `policy.prompt` (tokenizer,
default_task; the section pi0 and pi0.5 read too) and `policy.rtc` (real-time chunking,
policies.smolvla.rtc; the section flow, pi0 and pi0.5 read too)."""

from __future__ import annotations

from pathlib import Path

from controller.errors import CheckpointError, ConfigError
from policies.settings import PolicySettings
from policies.smolvla.codec import smolvla_policy
from policies.smolvla.model import SmolVLAPolicy
from policies.smolvla.tokenizer import smolvla_prompt
from policies.tensor_policy import TensorPolicy


def with_prompt_settings(
    policy: TensorPolicy, tokenizer: Path | None, default_task: str | None
) -> TensorPolicy:
    """The policy with `policy.prompt.tokenizer` / `default_task` applied to its prompt; a
    checkpoint whose tokenizer was found nowhere needs the first (one sentence naming it)."""
    module = policy.module
    if not isinstance(module, SmolVLAPolicy):
        raise TypeError(
            f"a SmolVLA policy's module is a SmolVLAPolicy, not {type(module).__name__}"
        )
    prompt = policy.spec.prompt
    if tokenizer is not None:
        if not Path(tokenizer).is_file():
            raise CheckpointError(f"policy.prompt.tokenizer: {tokenizer} is not a file")
        prompt = smolvla_prompt(Path(tokenizer), module.config)
    if prompt is None:
        raise CheckpointError(
            "policy.prompt.tokenizer is unset, and neither this SmolVLA checkpoint nor the local "
            "Hugging Face cache holds the tokenizer it names (`tempo checkpoint inspect` names "
            "it): set policy.prompt.tokenizer to SmolVLM2's tokenizer.json"
        )
    if default_task is not None:
        prompt = prompt.model_copy(update={"default_task": default_task})
    return smolvla_policy(module, policy.spec.model_copy(update={"prompt": prompt}))


def serve_smolvla_settings(policy: TensorPolicy, settings: PolicySettings) -> TensorPolicy:
    """A SmolVLA policy with policy.prompt applied, then served with real-time chunking as
    policy.rtc says (mode trained refused in one sentence); another family's policy is returned
    as it is (catalog.build_tensor_policy hands every checkpoint to every family; pi0's family
    refuses prompt settings for policies that read none)."""
    if not isinstance(policy.module, SmolVLAPolicy):
        return policy
    prompt = settings.section("prompt")
    prompted = with_prompt_settings(policy, prompt.tokenizer, prompt.default_task)
    from policies.smolvla.rtc import serve_smolvla_with_rtc

    try:
        return serve_smolvla_with_rtc(prompted, settings.section("rtc"))
    except ValueError as exc:
        raise ConfigError(f"policy.rtc: {exc}") from None
