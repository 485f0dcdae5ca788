"""What SmolVLA's step takes after the frames, built from one robot's context, and the
TensorPolicy built on it.

    state        float32 (1, state_size): the robot's state (the step normalizes it)
    noise        float32 (chunk_size, max_action_dim): the chunk's starting point, drawn on the
                 host from a generator seeded by (seed, context.step), as pi0's: a chunk is a
                 function of its observation and context, so every serving tier is checked
                 against the same noise at start-up and a recording replays exactly
    prompt       float32 (tokenizer_max_length, text width): the prompt's token ids through the
                 token table, times sqrt(width) (the 49,280-row table stays on the host)
    prompt_mask  float32 (tokenizer_max_length,): 1 for a real token

The ids come with the context (`context.prompt`, tokenized by the control process when the
robot's task changes: policies.prompt_tokens, template "smolvla"); they are embedded once per
distinct prompt (a small cache). LeRobot pads a prompt only to the longest of its batch; padding
to tokenizer_max_length changes nothing (padded tokens are masked and take no position).
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

import numpy as np

from policies.base import PolicySpec, PromptTokens, RobotContext
from policies.flow.codec import NOISE_SEED, fill_noise
from policies.inputs import InputCodec, TensorInput
from policies.pi0.prompt import PromptEmbedder
from policies.smolvla.model import SmolVLAPolicy
from policies.tensor_policy import TensorPolicy, with_state_bounds

EMBEDDED_PROMPTS_KEPT = 16  # distinct prompts whose embeddings are kept (robots' tasks)


class SmolVLACodec(InputCodec):
    """The state, the noise and the embedded prompt (see the module doc)."""

    def __init__(self, spec: PolicySpec, module: SmolVLAPolicy, seed: int = NOISE_SEED) -> None:
        super().__init__(spec)
        config = module.config
        self.seed = seed
        self.length = config.tokenizer_max_length
        self.width = config.text.width
        self.noise_shape = (config.chunk_size, config.max_action_dim)
        table = module.get_parameter("vlm_with_expert.text.embed_tokens.weight")
        self.embedder = PromptEmbedder(table)
        self._embedded: collections.OrderedDict[bytes, np.ndarray] = collections.OrderedDict()

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
        self._embedded[key] = embedded
        if len(self._embedded) > EMBEDDED_PROMPTS_KEPT:
            self._embedded.popitem(last=False)
        return embedded

    def example(self, seed: int) -> RobotContext:
        """A random state and a random prompt of random length (warm-up, parity checks)."""
        base = super().example(seed)
        rng = np.random.default_rng(seed + 7)
        used = int(rng.integers(1, self.length + 1))
        ids = np.zeros(self.length, dtype=np.int64)
        ids[:used] = rng.integers(1, self.embedder.vocab_size, used)
        prompt = PromptTokens(ids, np.arange(self.length) < used)
        return RobotContext(
            step=int(rng.integers(0, 1000)),
            episode_start=True,
            state_history=base.state_history,
            prompt=prompt,
        )


def smolvla_policy(module: SmolVLAPolicy, spec: PolicySpec) -> TensorPolicy:
    """The module served with its codec (noise, prompt), its state bounds from the statistics."""
    policy = TensorPolicy(spec=spec, module=module, codec=SmolVLACodec(spec, module))
    return with_state_bounds(policy)
