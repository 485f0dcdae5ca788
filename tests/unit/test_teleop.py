"""Teleop override: per-joint ownership, bumpless hand-over, and the guards behind it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from controller.action.guards import GuardChain, Verdict
from controller.action.guards_config import GuardsConfig
from controller.action.teleop import TeleopConfig, TeleopMixer

JOINTS = ("base", "shoulder", "elbow", "gripper")
RATE = 100.0


def mixer(joints=(), blend_s=0.5) -> TeleopMixer:
    return TeleopMixer(JOINTS, TeleopConfig(joints=tuple(joints), blend_s=blend_s), RATE)


def test_policy_joints_follow_policy_and_operator_joints_follow_teleop():
    mix = mixer(joints=("elbow", "gripper"))
    assert mix.owned == ("elbow", "gripper")
    np.testing.assert_array_equal(mix.mask, [False, False, True, True])
    out = np.zeros(4)
    policy = np.array([1.0, 2.0, 3.0, 4.0])
    teleop = np.array([-1.0, -2.0, -3.0, -4.0])
    assert mix.mix(policy, teleop, None, out)
    np.testing.assert_array_equal(out, [1.0, 2.0, -3.0, -4.0])


def test_all_policy_needs_no_teleop_values_and_all_operator_needs_no_policy():
    out = np.zeros(4)
    assert mixer().mix(np.ones(4), None, None, out)
    np.testing.assert_array_equal(out, np.ones(4))
    assert mixer(joints=JOINTS).mix(None, np.full(4, 2.0), None, out)
    np.testing.assert_array_equal(out, np.full(4, 2.0))


def test_missing_source_for_an_owned_joint_gives_nothing_to_send():
    out = np.full(4, 9.0)
    mix = mixer(joints=("elbow",))
    assert not mix.mix(np.ones(4), None, None, out)  # operator joint, no teleop value yet
    assert not mix.mix(None, np.ones(4), None, out)  # policy joints, no policy action yet
    assert (out == 9.0).all()


def test_unknown_joints_are_refused_and_nothing_changes():
    with pytest.raises(ValueError, match="unknown joint 'knee'.*base, shoulder, elbow, gripper"):
        mixer(joints=("knee",))
    mix = mixer(joints=("elbow",))
    with pytest.raises(ValueError, match="unknown joint 'knee'"):
        mix.set_owned(["base", "knee"])
    assert mix.owned == ("elbow",)


def test_config_validation():
    with pytest.raises(ValidationError):
        TeleopConfig(blend_s=-0.1)
    with pytest.raises(ValidationError, match="more than once: elbow"):
        TeleopConfig(joints=("elbow", "elbow"))
    with pytest.raises(ValidationError):
        TeleopConfig(mask=[True])


def test_shape_mismatch_is_refused():
    with pytest.raises(ValueError, match="shape"):
        mixer().mix(np.ones(3), None, None, np.zeros(4))


def run_handover(policy_path, teleop_path, switch_at, owned_after, blend_s):
    """Drive the mixer through a switch; returns the commands sent, one row per tick."""
    mix = mixer(blend_s=blend_s)
    out = np.zeros(4)
    last = None
    sent = []
    for tick in range(len(policy_path)):
        if tick == switch_at:
            mix.set_owned(owned_after)
        assert mix.mix(policy_path[tick], teleop_path[tick], last, out)
        last = out.copy()
        sent.append(last)
    return np.array(sent), mix


def test_blend_reaches_the_new_source_after_blend_ticks_and_is_linear():
    ticks = 80
    policy = np.zeros((ticks, 4))
    teleop = np.ones((ticks, 4))
    sent, mix = run_handover(policy, teleop, 10, ["shoulder"], blend_s=0.2)  # 20 ticks
    assert mix.blend_ticks == 20
    np.testing.assert_allclose(sent[10:30, 1], np.arange(1, 21) / 20)
    np.testing.assert_allclose(sent[30:, 1], 1.0)
    np.testing.assert_allclose(sent[:, [0, 2, 3]], 0.0)  # the others never moved
    assert not mix.blending


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    switch_at=st.integers(1, 30),
    second_switch=st.integers(1, 60),
    blend_s=st.sampled_from([0.0, 0.01, 0.05, 0.3]),
    owned_first=st.lists(st.sampled_from(JOINTS), unique=True),
    owned_second=st.lists(st.sampled_from(JOINTS), unique=True),
)
def test_switching_mid_motion_is_continuous(
    seed, switch_at, second_switch, blend_s, owned_first, owned_second
):
    ticks = 120
    rng = np.random.default_rng(seed)
    phase = rng.uniform(0, 2 * np.pi, size=(2, 4))
    time = np.arange(ticks)[:, None] / RATE
    policy = np.sin(2 * np.pi * 0.5 * time + phase[0])  # both sources move, differently
    teleop = 0.8 * np.cos(2 * np.pi * 0.7 * time + phase[1]) + rng.uniform(-1, 1, size=4)
    mix = mixer(blend_s=blend_s)
    blend = mix.blend_ticks
    out = np.zeros(4)
    last = None
    owned = np.zeros(4, dtype=bool)
    bound = np.zeros(4)  # |delta| / blend_ticks for joints handing over
    left = np.zeros(4, dtype=int)
    for tick in range(ticks):
        for when, names in ((switch_at, owned_first), (switch_at + second_switch, owned_second)):
            if tick == when:
                mix.set_owned(names)
                new = np.isin(JOINTS, names)
                changed = new != owned
                owned = new
                source = np.where(owned, teleop[tick], policy[tick])
                if blend:
                    delta = np.abs(last - source)
                    bound = np.where(changed, delta / blend, bound)
                    left = np.where(changed, blend, left)
        assert mix.mix(policy[tick], teleop[tick], last, out)
        source = np.where(owned, teleop[tick], policy[tick])
        if not blend:
            np.testing.assert_array_equal(out, source)  # no blend: the new source at once
        elif tick > 0:
            previous_source = np.where(owned, teleop[tick - 1], policy[tick - 1])
            own_motion = np.abs(source - previous_source)
            allowed = np.where(left > 0, bound, 0.0) + own_motion
            assert (np.abs(out - last) <= allowed + 1e-9).all(), (tick, out, last, allowed)
        left = np.maximum(left - 1, 0)
        if blend and not (left > 0).any() and tick > switch_at:
            np.testing.assert_allclose(out, source, atol=1e-12)  # blends end on the source
        last = out.copy()


def test_switch_back_mid_blend_starts_from_where_the_joint_is():
    mix = mixer(blend_s=0.1)  # 10 ticks
    out = np.zeros(4)
    policy, teleop = np.zeros(4), np.ones(4)
    mix.set_owned(["base"])
    last = np.zeros(4)
    for _ in range(5):
        mix.mix(policy, teleop, last, out)
        last = out.copy()
    assert last[0] == pytest.approx(0.5)
    mix.set_owned([])  # back to the policy (0.0) halfway
    mix.mix(policy, teleop, last, out)
    assert out[0] == pytest.approx(0.45)  # 0.5 fading to 0 over 10 ticks: no jump


def test_a_teleop_value_past_a_limit_is_clamped_by_the_guards():
    guards = GuardChain(
        JOINTS,
        GuardsConfig(position_limits={"elbow": (-1.0, 1.0)}, max_velocity=10.0),
        RATE,
    )
    guards.seed(np.zeros(4))
    mix = mixer(joints=("elbow",), blend_s=0.0)
    command = np.zeros(4)
    sent = np.zeros(4)
    teleop = np.array([0.0, 0.0, 5.0, 0.0])  # the leader arm is way past the follower's limit
    for _ in range(50):
        assert mix.mix(np.zeros(4), teleop, sent, command)
        assert command[2] == 5.0  # the mixer only picks
        assert guards.check(command, 0, sent) is Verdict.ACTION
        assert sent[2] <= 1.0
    assert sent[2] == 1.0
    assert guards.counters["position_clamped"] == 50
    # NaN from the leader arm: the guards hold the last safe action
    teleop[2] = np.nan
    assert mix.mix(np.zeros(4), teleop, sent, command)
    assert guards.check(command, 0, sent) is Verdict.ACTION
    assert sent[2] == 1.0
    assert guards.counters["non_finite"] == 1
