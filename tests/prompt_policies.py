"""A toy policy that reads a prompt: a small demo ACT whose spec names a tokenizer, recording
every context it is asked about (the prompt's token ids and the state it came with)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

from policies.base import PolicySpec, Prediction, PromptSpec, RobotContext
from policies.demo import make_demo_policy
from policies.tensor_policy import EagerPolicy
from tests.prompt_fixtures import VOCAB_SIZE

JOINTS = ["a", "b", "c"]
FRAME = np.random.default_rng(0).integers(0, 256, (32, 48, 3), dtype=np.uint8)


def prompt_spec(tokenizer: Path, **fields: Any) -> PromptSpec:
    return PromptSpec(
        tokenizer=str(tokenizer), max_length=fields.pop("max_length", 24), vocab_size=VOCAB_SIZE,
        **fields,
    )  # fmt: skip


class PromptRecorder:
    """Serves a small ACT under a spec with `prompt`; keeps each context it was given."""

    def __init__(self, prompt: PromptSpec | None) -> None:
        self.inner = EagerPolicy(
            make_demo_policy(
                cameras=(("front", 32, 48),),
                joint_names=JOINTS,
                state_size=3,
                chunk_size=8,
                seed=3,
            )
        )
        self.spec: PolicySpec = self.inner.spec.model_copy(update={"prompt": prompt})
        self.contexts: list[RobotContext] = []
        self._lock = threading.Lock()

    def predict(self, images: Any, context: RobotContext) -> Prediction:
        with self._lock:
            self.contexts.append(context)
        return self.inner.predict(images, context)

    def prompts_for(self, state0: float) -> list[list[int]]:
        """The prompt ids of every context whose newest state began with `state0`."""
        with self._lock:
            contexts = list(self.contexts)
        return [
            c.prompt.ids[: c.prompt.length].tolist()
            for c in contexts
            if c.prompt is not None and abs(float(c.state[0]) - state0) < 1e-6
        ]
