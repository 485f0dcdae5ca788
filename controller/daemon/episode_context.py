"""What a robot's session remembers of its current episode for the policy, and the context it
builds from that for each inference request: which episode it is, whether a chunk of it has come
back yet, the recent states (and frames, for a policy that reads several steps of them), the
inference delay estimate, the policy's memory and the robot's prompt. An episode start forgets
all of it but the prompt.

The session owns one (loop thread only) and changes it through these methods:

    start            a new episode (the session drops its plan and chunks beside it)
    use_prompt       the robot's task from now on
    push_state       an accepted observation's state: the window the request carries
    push_frames      its frames (a policy reading several steps of them): the earlier ones
    chunk_landed     a chunk came back: its memory and delay count, unless its episode ended
    robot_context    what the policy is told with a request
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

from controller.daemon.estimates import InferenceDelay
from controller.daemon.frame_history import FrameHistory, Frames
from controller.daemon.prompts import Prompt, log_truncated
from controller.feed.inference_feed import Chunk
from controller.feed.pending_requests import PendingObservation, StateHistory
from policies.base import Plan, PolicySpec, RobotContext


class EpisodeContext:
    """One robot's episode as the policy sees it (see the module doc)."""

    def __init__(self, robot: str, spec: PolicySpec) -> None:
        self._robot = robot
        self._history = StateHistory(spec.state_history, spec.state_size)
        self._frames = FrameHistory(spec) if spec.frame_history > 1 else None
        self._delay = InferenceDelay()
        self._episode = 0  # counts episode starts; chunks and memory of an older one are dropped
        self._episode_start = True  # no chunk of this episode has come back yet
        self._memory: Mapping[str, np.ndarray] = {}
        self._prompt: Prompt | None = None  # the robot's task, tokenized (a prompt policy's)
        self._said_truncated = False  # a prompt cut to the token limit is logged once

    @property
    def episode(self) -> int:
        return self._episode

    @property
    def episode_start(self) -> bool:
        """No chunk of this episode has come back yet."""
        return self._episode_start

    @property
    def memory(self) -> Mapping[str, np.ndarray]:
        """The policy's memory of this robot, as its last chunk left it (read-only)."""
        return MappingProxyType(self._memory)

    @property
    def prompt(self) -> Prompt | None:
        """The robot's task and its token ids; None for a policy that reads no prompt."""
        return self._prompt

    @property
    def inference_delay(self) -> int:
        """Control steps from an observation to its chunk (see InferenceDelay)."""
        return self._delay.steps

    def start(self) -> None:
        """A new episode: forget the state history, the policy's memory and the delay estimate
        (the prompt stays until the robot names another)."""
        self._episode += 1
        self._episode_start = True
        self._history.clear()
        if self._frames is not None:
            self._frames.clear()
        self._memory = {}
        self._delay.clear()

    def use_prompt(self, prompt: Prompt | None) -> None:
        """The robot's task from now on; None leaves it as it is."""
        if prompt is None:
            return
        if prompt.truncated and not self._said_truncated:
            self._said_truncated = True
            log_truncated(self._robot, prompt)
        self._prompt = prompt

    def push_state(self, state: np.ndarray) -> np.ndarray:
        """The newest state; returns the window of recent ones (a copy, it travels)."""
        return self._history.push(state)

    def push_frames(self, images: Mapping[str, np.ndarray]) -> tuple[Frames, ...]:
        """The newest frames, for a policy that reads several steps of them; returns the
        earlier steps' (what the request carries), () for any other policy."""
        return self._frames.push(images) if self._frames is not None else ()

    def chunk_landed(self, chunk: Chunk, step: int) -> bool:
        """False (to be dropped) if the chunk belongs to an ended episode; else the policy's new
        memory is kept, the episode has begun, and its delay counts in the estimate."""
        if chunk.episode != self._episode:
            return False
        if chunk.memory is not None:
            self._memory = chunk.memory
        self._episode_start = False
        self._delay.record(step - chunk.start_step)
        return True

    def robot_context(
        self, observation: PendingObservation, previous_plan: Plan | None
    ) -> RobotContext:
        """What the policy is told of this robot with a request about `observation`."""
        return RobotContext(
            step=observation.step,
            episode_start=self._episode_start,
            state_history=observation.state_window,
            previous_plan=previous_plan,
            inference_delay=self._delay.steps,
            memory=MappingProxyType(self._memory),  # read-only to the policy
            prompt=self._prompt.tokens if self._prompt is not None else None,
            past_frames=(
                self._frames.stack(observation.past_frames) if self._frames is not None else None
            ),
        )
