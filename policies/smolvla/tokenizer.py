"""SmolVLA's tokenizer: SmolVLM2's Hugging Face fast tokenizer (`tokenizer.json`, SmolLM2's
byte-level BPE), found where LeRobot would find it, offline:

    <checkpoint>/tokenizer.json, <checkpoint>/tokenizer/tokenizer.json
    the local Hugging Face cache's snapshot of the tokenizer step's tokenizer_name (LeRobot
    0.6's preprocessor names it), else of vlm_model_name

`smolvla_prompt` makes the PolicySpec.prompt that names the file (template "smolvla"); the
control process reads it with policies.hf_tokenizer.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from policies.base import PromptSpec
from policies.checkpoints.hub_cache import cached_snapshot

if TYPE_CHECKING:
    from policies.smolvla.config import SmolVLAConfig

TOKENIZER_JSON = "tokenizer.json"


def find_tokenizer(src: Path, name: str) -> Path | None:
    """The tokenizer.json of the checkpoint in `src`, else the cached one of Hub repository
    `name`; None when neither exists."""
    for candidate in (src / TOKENIZER_JSON, src / "tokenizer" / TOKENIZER_JSON):
        if candidate.is_file():
            return candidate
    snapshot = cached_snapshot(name, (TOKENIZER_JSON,))
    return None if snapshot is None else snapshot / TOKENIZER_JSON


def smolvla_prompt(tokenizer: Path, config: SmolVLAConfig) -> PromptSpec:
    return PromptSpec(
        tokenizer=str(Path(tokenizer).resolve()),
        max_length=config.tokenizer_max_length,
        vocab_size=config.vocab_size,
        template="smolvla",
    )
