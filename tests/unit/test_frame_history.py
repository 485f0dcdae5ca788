"""The frames a robot's session keeps for a policy that reads several observation steps of them
(controller.daemon.frame_history), as LeRobot's observation queue holds them: every accepted
observation, the first standing for the steps before it, cleared at an episode start; and the
`infer` message carrying them to the inference process."""

from __future__ import annotations

import numpy as np
import pytest

from controller.daemon.episode_context import EpisodeContext
from controller.daemon.frame_history import FrameHistory
from controller.errors import PolicyError
from controller.feed.pending_requests import PendingObservation
from controller.link.swap_checks import check_compatible
from controller.process_protocol.message_codec import MessageError
from controller.process_protocol.process_messages import Infer, decode, encode
from policies.base import CameraSpec, PolicySpec

SPEC = PolicySpec(
    cameras=(CameraSpec(name="a", height=2, width=3), CameraSpec(name="b", height=2, width=3)),
    state_size=1,
    joint_names=("j",),
    chunk_size=4,
    state_history=3,
    frame_history=3,
)


def frames(value: int) -> dict[str, np.ndarray]:
    return {name: np.full((2, 3, 3), value + i, np.uint8) for i, name in enumerate("ab")}


def values(stacked: dict[str, np.ndarray]) -> list[int]:
    return [int(step[0, 0, 0]) for step in stacked["a"]]


def test_every_push_enters_the_history_and_the_first_fills_it() -> None:
    history = FrameHistory(SPEC)
    assert history.length == 2
    snapshots = [history.push(frames(v)) for v in (10, 20, 30, 40)]
    assert [values(history.stack(s)) for s in snapshots] == [
        [10, 10], [10, 10], [10, 20], [20, 30],
    ]  # fmt: skip
    assert history.stack(snapshots[3])["b"].shape == (2, 2, 3, 3)
    assert [int(x[0, 0, 0]) for x in history.stack(snapshots[3])["b"]] == [21, 31]
    history.clear()
    assert values(history.stack(history.push(frames(50)))) == [50, 50]


def test_a_snapshot_keeps_its_frames_when_the_driver_reuses_its_buffer() -> None:
    history = FrameHistory(SPEC)
    buffer = frames(1)
    history.push(buffer)
    buffer["a"][:] = 99  # a driver's frames in place: the slot is written again
    assert values(history.stack(history.push(frames(2)))) == [1, 1]


def test_the_episode_context_carries_them_and_forgets_them_at_an_episode_start() -> None:
    context = EpisodeContext("arm", SPEC)

    def ask(value: int) -> list[int]:
        pending = PendingObservation(
            step=value, since_previous=1, obs_seq=value, received_ns=0, images=frames(value),
            state_window=context.push_state(np.zeros(1, np.float32)),
            past_frames=context.push_frames(frames(value)),
        )  # fmt: skip
        past = context.robot_context(pending, None).past_frames
        assert past is not None
        return values(dict(past))

    ask(1), ask(2)
    assert ask(3) == [1, 2]
    context.start()
    assert ask(7) == [7, 7]
    plain = EpisodeContext("arm", SPEC.model_copy(update={"frame_history": 1}))
    assert plain.push_frames(frames(1)) == ()


def test_the_infer_message_carries_past_frames_and_refuses_other_dtypes() -> None:
    past = {"a": np.arange(36, dtype=np.uint8).reshape(2, 2, 3, 3)}
    message = Infer(id=1, slot=0, generation=1, step=5, episode_start=False, delay=0,
                    past_frames=past)  # fmt: skip
    back = decode(encode(message))
    assert isinstance(back, Infer) and back.past_frames is not None
    np.testing.assert_array_equal(back.past_frames["a"], past["a"])
    assert decode(encode(Infer(2, 0, 1, 5, False, 0))).past_frames is None  # type: ignore[union-attr]
    with pytest.raises(MessageError, match="past frames must be uint8"):
        Infer(3, 0, 1, 5, False, 0, past_frames={"a": past["a"].astype(np.float32)})


def test_a_swap_to_another_frame_history_is_refused() -> None:
    with pytest.raises(PolicyError, match="frames of 2 observation step"):
        check_compatible(SPEC, SPEC.model_copy(update={"frame_history": 2}))
