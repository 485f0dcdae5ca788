"""What a robot's session remembers of its episode for the policy (EpisodeContext): an episode
start forgets the history, memory and delay but keeps the prompt; a chunk of an ended episode
changes nothing."""

from __future__ import annotations

import numpy as np

from controller.daemon.episode_context import EpisodeContext
from controller.daemon.prompts import Prompt
from controller.feed.inference_feed import Chunk
from controller.feed.pending_requests import PendingObservation
from policies.base import CameraSpec, PolicySpec, PromptTokens

SPEC = PolicySpec(
    cameras=(CameraSpec(name="front", height=8, width=8),),
    state_size=2,
    state_history=3,
    joint_names=("a", "b"),
    chunk_size=10,
)
PROMPT = Prompt("pick", PromptTokens(np.array([5, 0], np.int64), np.array([True, False])), 1)


def chunk(start: int, episode: int, memory: dict[str, np.ndarray] | None) -> Chunk:
    return Chunk(start, np.zeros((10, 2), np.float32), 0, 0, 0, episode, memory)


def observation(context: EpisodeContext, state: float) -> PendingObservation:
    window = context.push_state(np.full(2, state, np.float32))
    return PendingObservation(
        step=7, since_previous=1, obs_seq=1, received_ns=0, images={}, state_window=window
    )


def test_a_landed_chunk_sets_memory_delay_and_ends_the_episode_start() -> None:
    context = EpisodeContext("r", SPEC)
    context.use_prompt(PROMPT)
    memory = {"h": np.ones(3, np.float32)}
    assert context.chunk_landed(chunk(10, context.episode, memory), 13)
    robot = context.robot_context(observation(context, 1.0), None)
    assert not robot.episode_start and robot.inference_delay == 3
    assert np.array_equal(robot.memory["h"], memory["h"])
    assert robot.prompt is PROMPT.tokens
    assert robot.state_history.shape == (3, 2) and np.all(robot.state_history == 1.0)


def test_an_episode_start_forgets_all_but_the_prompt_and_drops_older_chunks() -> None:
    context = EpisodeContext("r", SPEC)
    context.use_prompt(PROMPT)
    observation(context, 1.0)
    assert context.chunk_landed(chunk(0, 0, {"h": np.ones(1)}), 4)
    context.start()
    assert context.episode == 1 and context.episode_start
    assert not context.chunk_landed(chunk(0, 0, {"h": np.zeros(1)}), 4)  # planned before it
    robot = context.robot_context(observation(context, 2.0), None)
    assert robot.episode_start and robot.inference_delay == 0 and not robot.memory
    assert np.all(robot.state_history == 2.0)  # the new episode's first state fills the window
    assert context.prompt is PROMPT
    context.use_prompt(None)  # none named: the robot keeps its task
    assert context.prompt is PROMPT
