"""pi0.5's prompt: the task and the robot's discretized state, as token ids. It changes with
every observation and needs the normalization stats, so it is built in the inference process,
from the task part the control process tokenized (PromptTokenizer, template "pi05": BOS and
"Task: {task}, State:") and the normalized state. numpy and sentencepiece only.

The text is openpi's (PaligemmaTokenizer.tokenize with a state; LeRobot's pi05 processor
agrees): "Task: {task}, State: {s0 s1 ...};\\nAction: ", each state value in [-1, 1] as one of
256 bins (np.digitize, so a value below -1 reads -1 and one above 1 reads 255, as there).

Cheap per observation: SentencePiece splits words at spaces, so the prompt's ids are the task
part's, then those of " {bin}" for each value but the last, then those of
" {bin};\\nAction: ": two tables of 257 entries, built once. `StateTokenTable` checks that
this holds for its tokenizer against the whole string for every bin, and falls back to
tokenizing the whole string per call where it does not (there a task part already cut to
max_length by the control process may end in other ids than the whole string's would).

    table = StateTokenTable(processor)                  # once, in the inference process
    tokens = pi05_prompt_tokens(table, context.prompt, normalized_state, max_length)
"""

from __future__ import annotations

import numpy as np
import sentencepiece

from policies.base import PromptTokens
from policies.prompt_tokens import clean_task, padded

STATE_BINS = 256
_BIN_EDGES = np.linspace(-1, 1, STATE_BINS + 1)[:-1]
ACTION_PREFIX = ";\nAction: "
_BINS = range(-1, STATE_BINS)  # what np.digitize(...) - 1 gives: -1 below the range
_ANCHOR = "Task: a, State:"  # the task part's ending, before the first state value


def discretize_state(state: np.ndarray) -> np.ndarray:
    """Each normalized state value as its bin, int64 in [-1, 255] (openpi's digitize)."""
    return np.digitize(np.asarray(state, dtype=np.float64), bins=_BIN_EDGES) - 1


def pi05_prompt_text(task: str, state: np.ndarray) -> str:
    """The whole prompt as openpi writes it."""
    values = " ".join(map(str, discretize_state(state).tolist()))
    return f"Task: {clean_task(task)}, State: {values}{ACTION_PREFIX}"


def pi05_reference_tokens(
    processor: sentencepiece.SentencePieceProcessor,
    task: str,
    state: np.ndarray,
    max_length: int,
) -> PromptTokens:
    """The prompt's ids as openpi makes them: the whole string tokenized, BOS first."""
    return padded(processor.encode(pi05_prompt_text(task, state), add_bos=True), max_length)


class StateTokenTable:
    """The ids of each state bin in the prompt, for one tokenizer (see the module doc)."""

    def __init__(self, processor: sentencepiece.SentencePieceProcessor) -> None:
        self.processor = processor
        anchor = processor.encode(_ANCHOR)
        self._between: dict[int, list[int]] = {}  # " {bin}" followed by another value
        self._last: dict[int, list[int]] = {}  # " {bin};\nAction: "
        self.composes = True
        for value in _BINS:
            between = processor.encode(f"{_ANCHOR} {value}")
            last = processor.encode(f"{_ANCHOR} {value}{ACTION_PREFIX}")
            if between[: len(anchor)] != anchor or last[: len(anchor)] != anchor:
                self.composes = False
                break
            self._between[value] = between[len(anchor) :]
            self._last[value] = last[len(anchor) :]
        if self.composes:
            self.composes = self._every_bin_composes(anchor)

    def _every_bin_composes(self, anchor: list[int]) -> bool:
        """Whether the tables give the whole string's ids with each bin first, between and
        last, next to other bins."""
        bins = list(_BINS)
        for i, value in enumerate(bins):
            state = [bins[(i * 7 + 3) % len(bins)], value, bins[(i * 13 + 5) % len(bins)], value]
            text = f"{_ANCHOR} {' '.join(map(str, state))}{ACTION_PREFIX}"
            if self.processor.encode(text) != anchor + self._state_ids(state):
                return False
        return True

    def _state_ids(self, bins: list[int]) -> list[int]:
        ids: list[int] = []
        between = self._between
        for value in bins[:-1]:
            ids += between[value]
        return ids + self._last[bins[-1]]

    def ids(self, task_ids: list[int], state: np.ndarray) -> list[int]:
        """The whole prompt's ids, untruncated: `task_ids` are the task part's (BOS first)."""
        bins = discretize_state(state).tolist()
        if self.composes:
            return task_ids + self._state_ids(bins)
        # A tokenizer whose pieces cross spaces: the whole string, as openpi tokenizes it.
        text = self.processor.decode(task_ids[1:])
        values = " ".join(map(str, bins))
        return task_ids[:1] + self.processor.encode(f"{text} {values}{ACTION_PREFIX}")


def pi05_prompt_tokens(
    table: StateTokenTable, task: PromptTokens, state: np.ndarray, max_length: int
) -> PromptTokens:
    """pi0.5's prompt for one observation: `task` is the robot's task part from its context
    (template "pi05"), `state` its state normalized to [-1, 1]; padded or truncated to
    max_length as openpi does."""
    task_ids = task.ids[: task.length].tolist()
    if table.composes and len(task_ids) >= max_length:  # the state would be cut off anyway
        return padded(task_ids, max_length)
    return padded(table.ids(task_ids, state), max_length)
