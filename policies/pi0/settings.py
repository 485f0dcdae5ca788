"""The prompt settings of pi0 and pi0.5, `policy.prompt:` (`policy.tokenizer` and
`policy.default_task` before). Pydantic only (see policies.section_model)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from policies.section_model import FamilySection


class PromptSettings(FamilySection):
    """How a pi0 / pi0.5 policy's prompt is made."""

    tokenizer: Path | None = Field(
        default=None,
        description="The PaliGemma SentencePiece model file (tokenizer.model), for a checkpoint "
        "that ships none (openpi's); overrides one it ships.",
    )
    default_task: str | None = Field(
        default=None,
        min_length=1,
        max_length=1000,
        description="The task of a robot whose hello names none; unset, such a robot is refused.",
    )
