"""The guard chain: finite check, position limits, rate limits, watchdog, counters, config."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from controller.action.guards import GuardChain, Verdict
from controller.action.guards_config import GuardsConfig

JOINTS = ("shoulder", "elbow", "wrist")
MS = 1_000_000  # ns per ms
FRESH = 0


def chain(rate_hz: float = 100.0, handshake=None, **fields) -> GuardChain:
    return GuardChain(JOINTS, GuardsConfig(**fields), rate_hz, handshake_limits=handshake)


def arr(*values: float) -> np.ndarray:
    return np.array(values, dtype=float)


# -- config ---------------------------------------------------------------------------------------


def test_defaults_are_a_working_config():
    guards = GuardChain(JOINTS, GuardsConfig(), 50.0)
    out = np.zeros(3)
    assert guards.check(arr(1e6, -1e6, 3.0), FRESH, out) is Verdict.ACTION
    np.testing.assert_array_equal(out, arr(1e6, -1e6, 3.0))
    assert guards.limits == {name: (-math.inf, math.inf) for name in JOINTS}


def test_stop_after_must_exceed_hold_after():
    with pytest.raises(ValidationError, match="raise stop_after_ms or lower hold_after_ms"):
        GuardsConfig(hold_after_ms=500, stop_after_ms=500)


def test_config_refuses_reversed_limits_and_bad_rates_and_unknown_fields():
    with pytest.raises(ValidationError, match="'elbow' has lower limit 1.0 above upper limit"):
        GuardsConfig(position_limits={"elbow": (1.0, -1.0)})
    with pytest.raises(ValidationError, match="not a positive finite number"):
        GuardsConfig(max_velocity={"elbow": -1.0})
    with pytest.raises(ValidationError, match="not a positive finite number"):
        GuardsConfig(max_acceleration=0.0)
    with pytest.raises(ValidationError, match="extra"):
        GuardsConfig(max_jerk=1.0)
    with pytest.raises(ValidationError):
        GuardsConfig(hold_after_ms=0)
    config = GuardsConfig()
    with pytest.raises(ValidationError):
        config.hold_after_ms = 10  # frozen


@pytest.mark.parametrize(
    "fields",
    [
        {"position_limits": {"knee": (0.0, 1.0)}},
        {"max_velocity": {"knee": 1.0}},
        {"max_acceleration": {"knee": 1.0}},
    ],
)
def test_unknown_joint_in_config_names_it_and_lists_valid_ones(fields):
    with pytest.raises(ValueError, match="unknown joint 'knee'.*shoulder, elbow, wrist"):
        chain(**fields)


def test_unknown_or_reversed_handshake_limits_are_refused():
    with pytest.raises(ValueError, match="handshake limits: unknown joint 'knee'"):
        chain(handshake={"knee": (0.0, 1.0)})
    with pytest.raises(ValueError, match="lower limit 2.0 above upper limit"):
        chain(handshake={"elbow": (2.0, 1.0)})


def test_limits_intersect_the_tighter_bound_wins():
    guards = chain(
        handshake={"shoulder": (-1.0, 1.0), "elbow": (-3.0, 3.0)},
        position_limits={"shoulder": (-2.0, 0.5), "wrist": (0.0, 0.1)},
    )
    assert guards.limits == {
        "shoulder": (-1.0, 0.5),
        "elbow": (-3.0, 3.0),
        "wrist": (0.0, 0.1),
    }
    with pytest.raises(ValueError, match="'shoulder'.*do not overlap"):
        chain(handshake={"shoulder": (-1.0, 0.0)}, position_limits={"shoulder": (0.5, 1.0)})


# -- the chain ------------------------------------------------------------------------------------


def test_non_finite_action_holds_the_last_safe_action():
    guards = chain()
    out = np.zeros(3)
    assert guards.check(arr(0.1, 0.2, 0.3), FRESH, out) is Verdict.ACTION
    for bad in (arr(np.nan, 0.0, 0.0), arr(0.0, np.inf, 0.0), arr(0.0, 0.0, -np.inf)):
        out.fill(9.0)
        assert guards.check(bad, FRESH, out) is Verdict.ACTION
        np.testing.assert_array_equal(out, arr(0.1, 0.2, 0.3))  # the whole action, not a joint
    assert guards.counters["non_finite"] == 3


def test_non_finite_before_any_safe_action_holds_and_seed_is_a_safe_action():
    guards = chain()
    out = np.full(3, 9.0)
    assert guards.check(arr(np.nan, 0.0, 0.0), FRESH, out) is Verdict.HOLD
    assert (out == 9.0).all()  # untouched on HOLD
    assert guards.counters["non_finite"] == 1
    guards.seed(arr(1.0, 2.0, 3.0))
    assert guards.check(arr(np.nan, 0.0, 0.0), FRESH, out) is Verdict.ACTION
    np.testing.assert_array_equal(out, arr(1.0, 2.0, 3.0))
    with pytest.raises(ValueError, match="NaN"):
        guards.seed(arr(np.nan, 0.0, 0.0))


def test_position_clamp_counts_actions_not_joints():
    guards = chain(position_limits={"shoulder": (-1.0, 1.0), "elbow": (0.0, 0.5)})
    out = np.zeros(3)
    assert guards.check(arr(5.0, -5.0, 100.0), FRESH, out) is Verdict.ACTION
    np.testing.assert_array_equal(out, arr(1.0, 0.0, 100.0))
    assert guards.counters["position_clamped"] == 1  # two joints clamped, one action
    guards.check(arr(0.5, 0.25, 0.0), FRESH, out)
    assert guards.counters["position_clamped"] == 1


def test_velocity_limit_global_and_per_joint():
    guards = chain(rate_hz=100.0, max_velocity=2.0)  # 0.02 per tick
    guards.seed(np.zeros(3))
    out = np.zeros(3)
    guards.check(arr(1.0, -1.0, 0.001), FRESH, out)
    np.testing.assert_allclose(out, arr(0.02, -0.02, 0.001))
    guards.check(arr(1.0, -1.0, 0.001), FRESH, out)  # from the last sent action
    np.testing.assert_allclose(out, arr(0.04, -0.04, 0.001))
    assert guards.counters["velocity_limited"] == 2

    per_joint = chain(rate_hz=100.0, max_velocity={"elbow": 1.0})
    per_joint.seed(np.zeros(3))
    per_joint.check(arr(1.0, 1.0, 1.0), FRESH, out)
    np.testing.assert_allclose(out, arr(1.0, 0.01, 1.0))


def test_velocity_limit_without_seed_starts_after_the_first_action():
    guards = chain(rate_hz=100.0, max_velocity=1.0)
    out = np.zeros(3)
    guards.check(arr(0.5, 0.5, 0.5), FRESH, out)  # no seed: position limits only
    np.testing.assert_allclose(out, arr(0.5, 0.5, 0.5))
    guards.check(arr(0.0, 0.0, 0.0), FRESH, out)
    np.testing.assert_allclose(out, arr(0.49, 0.49, 0.49))


def test_acceleration_limit_ramps_from_rest():
    guards = chain(rate_hz=10.0, max_velocity=1.0, max_acceleration=1.0)  # 0.1/tick, 0.01/tick^2
    guards.seed(np.zeros(3))
    out = np.zeros(3)
    positions = []
    for _ in range(15):
        assert guards.check(arr(100.0, 0.0, 0.0), FRESH, out) is Verdict.ACTION
        positions.append(out[0])
    steps = np.diff([0.0, *positions])
    np.testing.assert_allclose(steps[:10], 0.01 * np.arange(1, 11))  # speeds up by 0.01/tick
    np.testing.assert_allclose(steps[10:], 0.1)  # then the velocity limit holds
    assert guards.counters["acceleration_limited"] == 9
    # A hold brings the robot to rest: the ramp starts again.
    assert guards.check(None, FRESH, out) is Verdict.HOLD
    before = out[0]
    guards.check(arr(100.0, 0.0, 0.0), FRESH, out)
    assert out[0] - before == pytest.approx(0.01)


def test_acceleration_limit_never_carries_a_joint_past_its_position_limit():
    guards = chain(
        rate_hz=10.0,
        max_velocity=1.0,
        max_acceleration=0.1,
        position_limits={"shoulder": (-1.0, 0.5)},
    )
    guards.seed(np.zeros(3))
    out = np.zeros(3)
    for _ in range(200):
        guards.check(arr(0.5, 0.0, 0.0), FRESH, out)
        assert out[0] <= 0.5
    assert out[0] == 0.5


def test_seed_outside_limits_moves_back_at_the_velocity_limit():
    guards = chain(rate_hz=100.0, max_velocity=1.0, position_limits={"shoulder": (-1.0, 1.0)})
    guards.seed(arr(1.5, 0.0, 0.0))
    out = np.zeros(3)
    guards.check(arr(1.5, 0.0, 0.0), FRESH, out)
    assert out[0] == pytest.approx(1.49)  # no jump to 1.0


def test_none_proposed_is_hold_and_not_an_intervention():
    guards = chain()
    out = np.full(3, 4.0)
    assert guards.check(None, FRESH, out) is Verdict.HOLD
    assert (out == 4.0).all()
    counters = guards.counters
    assert counters["held_ticks"] == 1
    assert sum(v for name, v in counters.items() if name != "held_ticks") == 0
    assert guards.state == "ok"


def test_shape_mismatch_is_refused():
    with pytest.raises(ValueError, match="shape"):
        chain().check(np.zeros(2), FRESH, np.zeros(3))


# -- watchdog -------------------------------------------------------------------------------------


def test_watchdog_hold_then_stop_then_resume_on_observation():
    guards = chain(hold_after_ms=200, stop_after_ms=1000)
    out = np.zeros(3)
    action = arr(0.1, 0.1, 0.1)
    assert guards.check(action, 199 * MS, out) is Verdict.ACTION
    assert guards.check(action, 200 * MS, out) is Verdict.HOLD
    assert guards.state == "hold"
    assert guards.check(action, 500 * MS, out) is Verdict.HOLD
    assert guards.counters["watchdog_hold"] == 1  # entries, not ticks
    assert guards.check(action, 10 * MS, out) is Verdict.ACTION  # fresh again: hold ends
    assert guards.state == "ok"
    assert guards.check(action, 300 * MS, out) is Verdict.HOLD
    assert guards.counters["watchdog_hold"] == 2
    assert guards.check(action, 1000 * MS, out) is Verdict.STOP
    assert guards.state == "stop"
    assert guards.check(action, 5000 * MS, out) is Verdict.STOP
    assert guards.check(action, 10 * MS, out) is Verdict.STOP  # young age alone is not enough
    guards.on_fresh_observation()
    assert guards.check(action, 300 * MS, out) is Verdict.STOP  # the observation must be fresh
    assert guards.check(action, 10 * MS, out) is Verdict.ACTION
    assert guards.state == "ok"
    assert guards.counters["watchdog_stop"] == 1


def test_watchdog_explicit_resume_needs_both_observation_and_resume():
    guards = chain(hold_after_ms=100, stop_after_ms=200, resume="explicit")
    out = np.zeros(3)
    action = arr(0.0, 0.0, 0.0)
    guards.resume()  # while ok: must not pre-arm the next stop
    assert guards.check(action, 250 * MS, out) is Verdict.STOP  # straight from ok to stop
    guards.on_fresh_observation()
    assert guards.check(action, FRESH, out) is Verdict.STOP
    guards.resume()
    assert guards.check(action, FRESH, out) is Verdict.ACTION
    # resume before the observation works too
    assert guards.check(action, 250 * MS, out) is Verdict.STOP
    guards.resume()
    assert guards.check(action, FRESH, out) is Verdict.STOP
    guards.on_fresh_observation()
    assert guards.check(action, FRESH, out) is Verdict.ACTION
    assert guards.counters["watchdog_stop"] == 2
    assert guards.counters["held_ticks"] == 4


def test_watchdog_wins_over_a_good_action():
    guards = chain()
    out = np.full(3, 7.0)
    assert guards.check(arr(0.0, 0.0, 0.0), 250 * MS, out) is Verdict.HOLD
    assert (out == 7.0).all()


# -- property -------------------------------------------------------------------------------------

any_float = st.floats(allow_nan=True, allow_infinity=True, width=64)
limit_pairs = st.one_of(
    st.none(),
    st.tuples(st.floats(-10, 10), st.floats(0, 10)).map(lambda p: (p[0], p[0] + p[1])),
)
rates = st.one_of(st.none(), st.floats(0.01, 100.0))


@settings(max_examples=300, deadline=None)
@given(
    limits=st.lists(limit_pairs, min_size=3, max_size=3),
    velocity=st.lists(rates, min_size=3, max_size=3),
    acceleration=st.one_of(st.none(), st.floats(0.01, 1000.0)),
    seeded=st.booleans(),
    actions=st.lists(st.lists(any_float, min_size=3, max_size=3), min_size=1, max_size=25),
)
def test_any_input_gives_a_finite_action_within_limits_and_max_step(
    limits, velocity, acceleration, seeded, actions
):
    rate_hz = 50.0
    config = GuardsConfig(
        position_limits={j: p for j, p in zip(JOINTS, limits, strict=True) if p is not None},
        max_velocity={j: v for j, v in zip(JOINTS, velocity, strict=True) if v is not None},
        max_acceleration=acceleration,
    )
    guards = GuardChain(JOINTS, config, rate_hz)
    lower = np.array([p[0] if p else -np.inf for p in limits])
    upper = np.array([p[1] if p else np.inf for p in limits])
    max_step = np.array([v / rate_hz if v else np.inf for v in velocity])
    previous = None
    if seeded:
        previous = (np.nan_to_num(lower, neginf=-1.0) + np.nan_to_num(upper, posinf=1.0)) / 2
        guards.seed(previous)
    out = np.zeros(3)
    for values in actions:
        proposed = np.array(values)
        verdict = guards.check(proposed, FRESH, out)
        if verdict is not Verdict.ACTION:
            # (magnitudes beyond 1e300 count as non-finite: see the guards' step (a))
            assert previous is None and not (np.abs(proposed) < 1e300).all()
            continue
        assert np.isfinite(out).all()
        assert (out >= lower).all() and (out <= upper).all()
        if previous is not None:
            # up to float resolution at the joint's magnitude (last +- step rounds)
            # (at the float's largest values the spacing and the difference overflow to inf,
            # which bounds nothing and is no warning)
            with np.errstate(over="ignore"):
                slack = 4 * np.spacing(np.maximum(np.abs(previous), np.abs(out))) + 1e-12
                assert (np.abs(out - previous) <= max_step + slack).all()
        previous = out.copy()


def test_last_action_is_a_read_only_view_of_the_last_sent_action():
    guards = chain()
    assert guards.last_action is None
    out = np.zeros(3)
    guards.check(arr(1.0, 2.0, 3.0), FRESH, out)
    view = guards.last_action
    np.testing.assert_array_equal(view, out)
    with pytest.raises(ValueError):
        view[0] = 5.0
    guards.check(arr(4.0, 5.0, 6.0), FRESH, out)
    np.testing.assert_array_equal(view, arr(4.0, 5.0, 6.0))


@pytest.mark.parametrize("value", [{"shoulder": 1.5}, {"shoulder": [1.0]}, [1.0, 2.0]])
def test_a_position_limit_of_the_wrong_form_is_refused_with_the_form(value):
    with pytest.raises(ValidationError) as caught:
        GuardsConfig(position_limits=value)
    assert "[lower, upper], e.g. {shoulder: [-1.5, 1.5]}" in str(caught.value)


def test_values_near_the_float_maximum_are_refused_as_non_finite_without_overflow_warnings():
    # Alternating +-1.7e308 once overflowed `out - last` (a RuntimeWarning per tick); such
    # values are now treated as non-finite, and the arithmetic never sees them.
    guards = GuardChain(["a"], GuardsConfig(max_acceleration=1.0), 10.0)
    out = np.zeros(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert guards.check(arr(0.5), FRESH, out) is Verdict.ACTION
        for value in (1.7e308, -1.7e308, 1e301, -np.inf):
            assert guards.check(arr(value), FRESH, out) is Verdict.ACTION
            assert np.isfinite(out).all() and abs(out[0]) < 1.0
    assert guards.counters["non_finite"] == 4
