"""Observations made up for checks and benchmarks: random frames and state shaped for a policy,
or the ones its reference chunks were computed on."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from policies.base import PolicySpec, RobotContext, window_context
from policies.inputs import InputCodec, example_frames
from policies.tensor_policy import ReferenceChunks

Observation = tuple[dict[str, np.ndarray], np.ndarray]  # frames and a state window
Example = tuple[dict[str, np.ndarray], RobotContext]  # frames and a robot's context


def random_observation(spec: PolicySpec, seed: int) -> Observation:
    """A random observation shaped for `spec`: uniform frames, a normal state window."""
    rng = np.random.default_rng(seed)
    state = rng.standard_normal((spec.state_history, spec.state_size)).astype(np.float32)
    return example_frames(spec, seed), state


def random_example(spec: PolicySpec, codec: InputCodec, seed: int) -> Example:
    """Random frames and the codec's random context (parity checks use a different one each)."""
    return example_frames(spec, seed), codec.example(seed)


def reference_examples(spec: PolicySpec, reference: ReferenceChunks) -> list[Example]:
    """The observations of a policy's ReferenceChunks as examples (frames, a state-window
    context): reference chunks exist for policies whose inputs are the default codec's."""
    return [
        (
            {c.name: reference.images[i, k] for k, c in enumerate(spec.cameras)},
            replace(
                window_context(reference.state[i]),
                prompt=None if reference.prompts is None else reference.prompts[i],
            ),
        )
        for i in range(reference.chunks.shape[0])
    ]
