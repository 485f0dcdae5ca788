"""`policies:` (several named policies in one daemon), execution.max_load, and the execution
settings in effect keeping the batch fields."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.config import (
    DEFAULT_POLICY_NAME,
    dump_config,
    load_config,
    policy_views,
)
from controller.daemon.execution import resolve_execution
from controller.errors import ConfigError
from policies.base import CameraSpec, Execution, PolicySpec

TWO = "policies=[{name: act, execution: {query_period: 2}}, {name: pi0, robot: {joints: [a, b]}}]"


def _spec(execution: Execution | None = None) -> PolicySpec:
    return PolicySpec(
        cameras=(CameraSpec(name="front", height=4, width=4),),
        state_size=2,
        joint_names=("a", "b"),
        chunk_size=10,
        execution=execution,
    )


def test_a_config_without_policies_serves_one_policy_named_default():
    config = load_config(None, ["policy.kind=reach"])
    [(name, view)] = policy_views(config)
    assert name == DEFAULT_POLICY_NAME and view is config


def test_each_named_policy_gets_its_own_sections_and_the_top_level_ones_elsewhere():
    config = load_config(None, [TWO, "execution.batch_sizes=[1, 2]", "robot.joints=[x]"])
    (first, act), (second, pi0) = policy_views(config)
    assert (first, second) == ("act", "pi0")
    assert act.execution.query_period == 2 and act.robot.joints == ("x",)
    assert pi0.execution.batch_sizes == (1, 2) and pi0.robot.joints == ("a", "b")
    assert act.policies == () and pi0.policies == ()  # each view is a one-policy config


def test_setting_both_policy_and_policies_is_refused_in_one_sentence():
    with pytest.raises(ConfigError, match="set either policy: .* or policies: .*, not both"):
        load_config(None, [TWO, "policy.kind=reach"])


def test_two_policies_of_one_name_are_refused():
    with pytest.raises(ConfigError, match="each policy needs its own name; \\['a'\\] come twice"):
        load_config(None, ["policies=[{name: a}, {name: a}]"])


def test_a_policy_name_a_hello_cannot_carry_is_refused():
    with pytest.raises(ConfigError, match="policies.0.name"):
        load_config(None, ["policies=[{name: 'my policy'}]"])


def test_rtc_with_temporal_ensembling_is_refused_for_a_named_policy_too():
    with pytest.raises(ConfigError, match="policy 'b'"):
        load_config(None, ["policies=[{name: a}, {name: b, policy: {rtc: {mode: exact}}}]"])


def test_a_dumped_config_with_policies_reads_back_the_same(tmp_path: Path):
    config = load_config(None, [TWO])
    path = tmp_path / "tempo.yaml"
    path.write_text(dump_config(config))
    reloaded = load_config(path)
    assert reloaded == config
    assert reloaded.policies[0].execution is not None
    assert reloaded.policies[0].execution.model_fields_set == {"query_period"}


def test_max_load_is_off_by_default_and_a_fraction():
    assert load_config(None, []).execution.max_load is None
    assert load_config(None, ["execution.max_load=0.9"]).execution.max_load == 0.9
    with pytest.raises(ConfigError, match="execution.max_load"):
        load_config(None, ["execution.max_load=1.5"])


def test_the_settings_in_effect_keep_the_batch_fields_and_max_load():
    config = load_config(
        None,
        [
            "execution.batch_sizes=[1, 2, 4]",
            "execution.batch_window_us=700",
            "execution.max_load=0.5",
        ],
    )
    hint = Execution(query_period=5, ensemble="newest", source="test")
    resolved, _ = resolve_execution(config.execution, _spec(hint))
    assert resolved.query_period == 5 and resolved.ensemble == "newest"  # the checkpoint's
    assert resolved.batch_sizes == (1, 2, 4)
    assert resolved.batch_window_us == 700
    assert resolved.max_load == 0.5
