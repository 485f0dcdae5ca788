"""Robots' tasks for a policy that reads a text prompt (PolicySpec.prompt): checked at hello and
at episode starts, tokenized there with the policy's tokenizer (once per task string), never per
tick; the session carries the token ids into each RobotContext.

    prompts = RobotPrompts(spec)            # loads the tokenizer (CheckpointError if it cannot)
    prompt = prompts.for_hello(task)        # None: the policy reads no prompt
    prompt = prompts.for_episode(task)      # None: no task sent, the robot keeps its own
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from controller.errors import ErrorCode, ProtocolError
from controller.observe.log_safety import shown
from policies.base import PolicySpec, PromptTokens

if TYPE_CHECKING:
    from policies.prompt_tokens import PromptTokenizer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prompt:
    """A robot's task and its token ids (`full_length`: before truncation to the limit)."""

    task: str
    tokens: PromptTokens
    full_length: int

    @property
    def truncated(self) -> bool:
        return self.full_length > len(self.tokens.ids)


class RobotPrompts:
    """The served policy's prompt rules and tokenizer (none for a policy without prompts)."""

    def __init__(self, spec: PolicySpec) -> None:
        self.spec = spec.prompt
        self.tokenizer: PromptTokenizer | None = None
        if self.spec is not None:
            # Imported here: sentencepiece is loaded only where a policy reads prompts.
            from policies.prompt_tokens import PromptTokenizer

            self.tokenizer = PromptTokenizer(
                Path(self.spec.tokenizer),
                self.spec.max_length,
                self.spec.vocab_size,
                self.spec.template,
            )

    def for_hello(self, task: str | None) -> Prompt | None:
        """The prompt of a robot whose hello named `task` (None: named none); ProtocolError
        when the policy reads no prompt but a task came, or needs one and none came."""
        if self.spec is None:
            if task is not None:
                raise ProtocolError(ErrorCode.NOT_ALLOWED, _NO_PROMPT)
            return None
        if task is None:
            task = self.spec.default_task
            if task is None:
                raise ProtocolError(
                    ErrorCode.NOT_ALLOWED,
                    "this policy reads a text prompt and its checkpoint names no default task; "
                    "say the robot's task in hello (TempoClient(..., task=...))",
                )
        return self._prompt(task)

    def for_episode(self, task: str | None) -> Prompt | None:
        """The new prompt of an episode start that named `task`; None when it named none."""
        if task is None:
            return None
        if self.spec is None:
            raise ProtocolError(ErrorCode.NOT_ALLOWED, _NO_PROMPT)
        return self._prompt(task)

    def _prompt(self, task: str) -> Prompt:
        tokenizer = self.tokenizer
        if tokenizer is None:  # never: a spec.prompt always has its tokenizer
            raise ProtocolError(ErrorCode.NOT_ALLOWED, _NO_PROMPT)
        return Prompt(task, tokenizer.encode(task), tokenizer.full_length(task))


def log_truncated(robot: str, prompt: Prompt) -> None:
    """Say that the policy reads only the first ids of a robot's prompt (once per robot: the
    session keeps count)."""
    kept = len(prompt.tokens.ids)
    log.warning(
        "robot %s: its task is %d tokens, more than the policy's %d; the policy reads the first %d",
        shown(robot),
        prompt.full_length,
        kept,
        kept,
    )


_NO_PROMPT = "this policy reads no text prompt; leave out the task"
