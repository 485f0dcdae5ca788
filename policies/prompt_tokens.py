"""A robot's task as token ids, on the control side: numpy and sentencepiece only (no torch).

    tokenizer = PromptTokenizer(Path(spec.prompt.tokenizer), spec.prompt.max_length,
                                spec.prompt.vocab_size, spec.prompt.template)
    ids, mask = tokenizer.encode("pick up the red cube")   # int64 and bool, (max_length,)

The text is cleaned and framed as openpi's PaligemmaTokenizer does it (LeRobot's pi0 processor
agrees): stripped, "_" and newlines become spaces, BOS first; pi0 ends the prompt with "\\n"
(its own token), pi0.5's task part is "Task: {task}, State:" (policies.pi05_prompt appends
the state in the inference process). Ids are padded right with 0 to max_length, a longer
prompt keeps its first max_length ids. SmolVLA's (template "smolvla") is LeRobot's: the task
ending in "\\n" through SmolVLM2's Hugging Face tokenizer.json (policies.hf_tokenizer).
Tokenizing runs once per task string (a small cache):
a robot's task changes at hello and episode starts, never per tick.
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any, Literal

import numpy as np
import sentencepiece

from controller.bounded_file import read_bytes
from controller.errors import CheckpointError
from policies.base import PromptTokens

# Gemma's tokenizer.model is about 4 MiB; a file many times that is not a tokenizer.
MAX_TOKENIZER_BYTES = 64 * 1024 * 1024
CACHED_TASKS = 64  # distinct tasks kept tokenized; a fleet of robots shares a handful
SPEC_FIELD = "prompt.tokenizer"  # where a policy spec names the file (PromptSpec.tokenizer)


def clean_task(task: str) -> str:
    """The task as openpi cleans it before tokenizing: stripped, "_" and newlines as spaces."""
    return task.strip().replace("_", " ").replace("\n", " ")


def load_sentencepiece(path: Path, vocab_size: int) -> sentencepiece.SentencePieceProcessor:
    """The SentencePiece model in `path`, read with a size limit; CheckpointError (one
    sentence) when the file is missing or not a model, or its vocabulary is not `vocab_size`
    (the checkpoint's: its embedding has one row per token id)."""
    data = read_bytes(
        path, MAX_TOKENIZER_BYTES, CheckpointError, f"the tokenizer file ({SPEC_FIELD})"
    )
    processor = sentencepiece.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(data)
    except (RuntimeError, OSError):
        raise CheckpointError(
            f"the tokenizer file {path} ({SPEC_FIELD}) is not a SentencePiece model"
        ) from None
    if processor.vocab_size() != vocab_size:
        raise CheckpointError(
            f"the tokenizer {path} has a vocabulary of {processor.vocab_size()} tokens but the "
            f"checkpoint's model has {vocab_size}; give the tokenizer the model was trained with"
        )
    if processor.bos_id() < 0:
        raise CheckpointError(
            f"the tokenizer {path} ({SPEC_FIELD}) defines no BOS token, which the prompt begins "
            "with"
        )
    return processor


def padded(ids: list[int], max_length: int) -> PromptTokens:
    """`ids` as PromptTokens: the first max_length of them, padded right with 0."""
    kept = ids[:max_length]
    out = np.zeros(max_length, dtype=np.int64)
    out[: len(kept)] = kept
    mask = np.zeros(max_length, dtype=bool)
    mask[: len(kept)] = True
    return PromptTokens(out, mask)


class PromptTokenizer:
    """One policy's tokenizer, on the control side (see the module doc)."""

    def __init__(
        self,
        model_path: Path,
        max_length: int,
        vocab_size: int,
        template: Literal["pi0", "pi05", "smolvla"] = "pi0",
    ) -> None:
        self.path = model_path
        self.max_length = max_length
        self.template = template
        self._hf: Any = None  # SmolVLA's Hugging Face tokenizer (policies.smolvla.tokenizer)
        if template == "smolvla":
            from policies.hf_tokenizer import load_hf_tokenizer

            self._hf = load_hf_tokenizer(model_path, vocab_size)
        else:
            self.processor = load_sentencepiece(model_path, vocab_size)
            self._newline = self.processor.encode("\n")  # pi0's "start of answer"
        # task -> (tokens, untruncated length), oldest first.
        self._cache: collections.OrderedDict[str, tuple[PromptTokens, int]] = (
            collections.OrderedDict()
        )
        self.tokenized = 0  # tasks tokenized (not taken from the cache)

    def encode(self, task: str) -> PromptTokens:
        """The task's token ids and mask, (max_length,) each."""
        return self._lookup(task)[0]

    def full_length(self, task: str) -> int:
        """How many ids the task's prompt has before truncation to max_length."""
        return self._lookup(task)[1]

    def truncated(self, task: str) -> bool:
        return self.full_length(task) > self.max_length

    def ids(self, task: str) -> list[int]:
        """The prompt's ids, untruncated and unpadded."""
        if self._hf is not None:
            from policies.hf_tokenizer import task_text

            return list(self._hf.encode(task_text(task)).ids)
        text = clean_task(task)
        bos = [self.processor.bos_id()]
        if self.template == "pi05":
            return bos + self.processor.encode(f"Task: {text}, State:")
        return bos + self.processor.encode(text) + self._newline

    def _lookup(self, task: str) -> tuple[PromptTokens, int]:
        found = self._cache.get(task)
        if found is not None:
            self._cache.move_to_end(task)
            return found
        ids = self.ids(task)
        self.tokenized += 1
        found = (padded(ids, self.max_length), len(ids))
        found[0].ids.flags.writeable = False  # shared by every robot of this task
        found[0].mask.flags.writeable = False
        self._cache[task] = found
        if len(self._cache) > CACHED_TASKS:
            self._cache.popitem(last=False)
        return found
