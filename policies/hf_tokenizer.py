"""A Hugging Face fast tokenizer (`tokenizer.json`) on the control side, for SmolVLA's prompts:
SmolVLM2's tokenizer is SmolLM2's byte-level BPE, which SentencePiece (pi0's) cannot read, so
it is read with the `tokenizers` package (extra `smolvla`). A task is tokenized as LeRobot's
SmolVLA preprocessor does it: a newline appended unless the task ends with one, then the
tokenizer's own special tokens (policies.prompt_tokens truncates and pads).

Imports the standard library and controller only; `tokenizers` when a tokenizer is loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from controller.bounded_file import read_bytes
from controller.errors import CheckpointError

MAX_TOKENIZER_BYTES = 64 * 1024 * 1024  # SmolVLM2's tokenizer.json is about 3.5 MiB


def load_hf_tokenizer(path: Path, vocab_size: int) -> Any:
    """The `tokenizers.Tokenizer` in `path`, read with a size limit; CheckpointError (one
    sentence) when the package is missing, the file is missing or no tokenizer, or its
    vocabulary is larger than the model's token table."""
    try:
        import tokenizers
    except ImportError:
        raise CheckpointError(
            "SmolVLA's prompts need the `tokenizers` package: pip install 'tempo-controller"
            "[smolvla]'"
        ) from None
    data = read_bytes(path, MAX_TOKENIZER_BYTES, CheckpointError, "the tokenizer file")
    try:
        tokenizer = tokenizers.Tokenizer.from_str(data.decode("utf-8"))
    except (Exception, UnicodeDecodeError):  # the package raises plain Exceptions
        raise CheckpointError(
            f"the tokenizer file {path} is not a Hugging Face tokenizer.json"
        ) from None
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    if size > vocab_size:
        raise CheckpointError(
            f"the tokenizer {path} has {size} tokens but the model's token table has "
            f"{vocab_size} rows; give the tokenizer the model was trained with"
        )
    return tokenizer


def task_text(task: str) -> str:
    """The task as LeRobot's SmolVLA preprocessor hands it to the tokenizer."""
    return task if task.endswith("\n") else f"{task}\n"
