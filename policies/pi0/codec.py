"""What pi0's and pi0.5's step takes after the frames, built from one robot's context.

    state        float32 (1, state_size): the robot's state (the step normalizes it)
    noise        float32 (chunk_size, max_action_dim): the chunk's starting point, drawn on the
                 host from a generator seeded by (seed, context.step), as the flow family's: a
                 chunk is a function of its observation and context, so every serving tier is
                 checked against the same noise at start-up and a recording replays exactly
    prompt       float32 (tokenizer_max_length, language width): the prompt's token ids through
                 the token table (policies.pi0.prompt: the 257,152-row table stays on the host)
    prompt_mask  float32 (tokenizer_max_length,): 1 for a real token

The prompt's ids come with the context (`context.prompt`, tokenized by the control process when
the robot's task changes). pi0 embeds them as they are, once per distinct prompt (a small cache).
pi0.5's prompt also holds the robot's state, discretized, so it is completed here on every
observation (policies.pi05_prompt) from the task part and the normalized state.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from policies.base import PolicySpec, PromptTokens, RobotContext
from policies.flow.codec import NOISE_SEED, fill_noise
from policies.inputs import InputCodec, TensorInput
from policies.pi0.prompt import PromptEmbedder
from policies.pi0.step import Pi0Step

if TYPE_CHECKING:
    from policies.pi05_prompt import StateTokenTable

EMBEDDED_PROMPTS_KEPT = 16  # distinct pi0 prompts whose embeddings are kept (robots' tasks)


class Pi0Codec(InputCodec):
    """The state, the noise and the embedded prompt (see the module doc)."""

    def __init__(self, spec: PolicySpec, step: Pi0Step, seed: int = NOISE_SEED) -> None:
        super().__init__(spec)
        self.seed = seed
        network = step.config.network
        self.length = network.tokenizer_max_length
        self.width = network.language.width
        self.noise_shape = (network.chunk_size, network.max_action_dim)
        self.embedder = PromptEmbedder.from_network(step.network)
        self._embedded: collections.OrderedDict[bytes, np.ndarray] = collections.OrderedDict()
        self.pi05 = not step.uses_state
        if self.pi05:
            self.center = step.state_norm.center.detach().cpu().numpy().astype(np.float64)
            self.scale = step.state_norm.scale.detach().cpu().numpy().astype(np.float64)
        self._table: StateTokenTable | None = None  # pi0.5's state tokens, built on first use

    @property
    def inputs(self) -> tuple[TensorInput, ...]:
        return (
            TensorInput("state", (self.spec.state_history, self.spec.state_size)),
            TensorInput("noise", self.noise_shape),
            TensorInput("prompt", (self.length, self.width)),
            TensorInput("prompt_mask", (self.length,)),
        )

    def encode(self, context: RobotContext, out: Sequence[np.ndarray]) -> None:
        super().encode(context, out[:1])
        fill_noise(self.seed, context.step, out[1])
        tokens = context.prompt
        if tokens is None:
            raise ValueError("this policy reads a prompt, and the robot's context has none")
        if self.pi05:
            tokens = self._pi05_tokens(tokens, context.state)
        if tokens.ids.shape != (self.length,):
            raise ValueError(f"prompt: expected {self.length} token ids, got {tokens.ids.shape[0]}")
        np.copyto(out[2], self._embed(tokens.ids))
        np.copyto(out[3], tokens.mask.astype(np.float32))

    def _embed(self, ids: np.ndarray) -> np.ndarray:
        key = ids.tobytes()
        found = self._embedded.get(key)
        if found is not None:
            self._embedded.move_to_end(key)
            return found
        embedded = self.embedder.embed(ids)
        if not self.pi05:  # a pi0.5 prompt changes with the state: not worth keeping
            self._embedded[key] = embedded
            if len(self._embedded) > EMBEDDED_PROMPTS_KEPT:
                self._embedded.popitem(last=False)
        return embedded

    def _pi05_tokens(self, task: PromptTokens, state: np.ndarray) -> PromptTokens:
        from policies.pi05_prompt import StateTokenTable, pi05_prompt_tokens  # noqa: F811
        from policies.prompt_tokens import load_sentencepiece

        if self._table is None:
            spec = self.spec.prompt
            if spec is None:
                raise ValueError("pi0.5 reads its tokenizer for the state's tokens; none is set")
            processor = load_sentencepiece(Path(spec.tokenizer), spec.vocab_size)
            self._table = StateTokenTable(processor)
        normalized = (np.asarray(state, dtype=np.float64) - self.center) / self.scale
        return pi05_prompt_tokens(self._table, task, normalized, self.length)

    def example(self, seed: int) -> RobotContext:
        """A random state and a random prompt of random length (warm-up, parity checks)."""
        base = super().example(seed)
        rng = np.random.default_rng(seed + 7)
        length = self.length
        used = int(rng.integers(1, length + 1))
        ids = np.zeros(length, dtype=np.int64)
        ids[:used] = rng.integers(4, self.embedder.vocab_size, used)
        mask = np.arange(length) < used
        prompt = PromptTokens(ids, mask)
        return RobotContext(
            step=int(rng.integers(0, 1000)),
            episode_start=True,
            state_history=base.state_history,
            prompt=prompt,
        )
