"""Config loading: defaults, a YAML file, --set overrides, and errors that say what to change."""

from __future__ import annotations

from pathlib import Path

import pydantic
import pytest

from controller.config import TempoConfig, dump_config, load_config, parse_override
from controller.config_sections import ControlConfig, ServerConfig
from controller.errors import ConfigError


def write(tmp_path: Path, text: str, name: str = "tempo.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def config_error(*args, **kwargs) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(*args, **kwargs)
    return str(info.value)


# -- defaults ------------------------------------------------------------------------------------


def test_defaults_validate_and_are_what_a_bare_daemon_uses():
    config = TempoConfig()
    assert load_config() == config
    assert TempoConfig.model_validate(config.model_dump()) == config
    assert config.server.bind == "tcp://127.0.0.1:5555"  # localhost only by default
    assert config.control.rate_hz == 50.0
    assert config.policy.kind == "reach"
    assert config.logging.level == "INFO"


def test_an_empty_file_means_defaults(tmp_path):
    assert load_config(write(tmp_path, "")) == TempoConfig()
    assert load_config(write(tmp_path, "# nothing here\n", "c.yaml")) == TempoConfig()


# -- the YAML file and overrides -----------------------------------------------------------------


def test_a_yaml_file_sets_fields_and_leaves_the_rest_at_defaults(tmp_path):
    path = write(
        tmp_path,
        "control:\n  rate_hz: 200\n  spin_us: 500\n"
        "server:\n  bind: ipc:///tmp/tempo.sock\n"
        "robot:\n  joints: [a, b]\n  cameras:\n    - {name: wrist, height: 48, width: 64}\n",
    )
    config = load_config(path)
    assert config.control.rate_hz == 200.0
    assert config.control.spin_us == 500
    assert config.control.action_valid_ticks == ControlConfig().action_valid_ticks
    assert config.server.bind == "ipc:///tmp/tempo.sock"
    assert config.server.max_robots == ServerConfig().max_robots
    assert config.robot.joints == ("a", "b")
    assert [(c.name, c.height, c.width) for c in config.robot.cameras] == [("wrist", 48, 64)]


def test_overrides_are_parsed_as_yaml():
    config = load_config(
        overrides=[
            "control.rate_hz=200",  # a number
            "robot.joints=[x, y, z]",  # a list
            "policy.reach.target=[0.1, 0.2, 0.3]",  # a list of numbers
            "logging.level=DEBUG",  # a string
            "execution.ensemble=newest",
            "guards.max_velocity={x: 1.5}",  # a mapping
            "server.bind=ipc:///run/tempo.sock",  # a string with a colon
        ]
    )
    assert config.control.rate_hz == 200.0
    assert config.robot.joints == ("x", "y", "z")
    assert config.policy.section("reach").target == (0.1, 0.2, 0.3)
    assert config.logging.level == "DEBUG"
    assert config.execution.ensemble == "newest"
    assert config.guards.max_velocity == {"x": 1.5}
    assert config.server.bind == "ipc:///run/tempo.sock"


def test_parse_override_reads_the_value_as_yaml():
    assert parse_override("control.rate_hz=200") == ("control.rate_hz", 200)
    assert parse_override("a.b=2.5") == ("a.b", 2.5)
    assert parse_override("a.b=true") == ("a.b", True)
    assert parse_override("a.b=[1, 2]") == ("a.b", [1, 2])
    assert parse_override("a.b=null") == ("a.b", None)
    assert parse_override(" a.b = hello ") == ("a.b", "hello")
    assert parse_override("a.b=x=y") == ("a.b", "x=y")  # only the first = splits
    assert parse_override("a.b=") == ("a.b", "")


def test_overrides_apply_on_top_of_the_file_in_order(tmp_path):
    path = write(tmp_path, "control:\n  rate_hz: 100\n  spin_us: 300\n")
    config = load_config(path, ["control.rate_hz=250", "control.rate_hz=300"])
    assert config.control.rate_hz == 300.0  # the last override wins
    assert config.control.spin_us == 300  # the file's value survives


@pytest.mark.parametrize("text", ["=5", " =5", "control.rate_hz", ""])
def test_a_malformed_override_says_how_to_write_one(text):
    message = config_error(overrides=[text])
    assert repr(text) in message
    assert "section.field=value" in message


def test_an_override_without_a_section_is_an_unknown_top_level_field():
    message = config_error(overrides=["rate_hz=5"])
    assert "--set: rate_hz: unknown field" in message


def test_an_override_value_that_is_not_yaml_is_refused():
    message = config_error(overrides=["control.rate_hz=[1"])
    assert "'control.rate_hz=[1'" in message
    assert "not valid YAML" in message


def test_an_override_into_a_value_is_refused():
    message = config_error(overrides=["control=5", "control.rate_hz=3"])
    assert "control.rate_hz" in message
    assert "'control' is a value, not a section" in message


# -- errors name the source, the field and what is allowed ---------------------------------------


def test_a_bad_level_lists_the_allowed_levels():
    message = config_error(overrides=["logging.level=LOUD"])
    assert "--set" in message
    assert "logging.level" in message
    for level in ("DEBUG", "INFO", "WARNING", "ERROR"):
        assert level in message


def test_an_error_in_the_file_names_the_file_and_the_field(tmp_path):
    path = write(tmp_path, "logging:\n  level: LOUD\n")
    message = config_error(path)
    assert str(path) in message
    assert "logging.level" in message
    assert "'DEBUG', 'INFO', 'WARNING' or 'ERROR'" in message


@pytest.mark.parametrize(
    "override", ["control.rat_hz=5", "controls.rate_hz=5", "policy.checkpoint=/x"]
)
def test_an_unknown_field_is_called_unknown(override):
    message = config_error(overrides=[override])
    field = override.partition("=")[0]
    assert field.split(".")[0] in message
    assert "unknown field" in message


def test_every_invalid_field_is_reported_at_once():
    message = config_error(overrides=["control.rate_hz=-1", "server.max_robots=0"])
    assert "control.rate_hz" in message
    assert "server.max_robots" in message


@pytest.mark.parametrize(
    ("override", "field", "says"),
    [
        ("control.rate_hz=-50", "control.rate_hz", "greater than 0"),
        ("control.rate_hz=0", "control.rate_hz", "greater than 0"),
        ("control.rate_hz=.nan", "control.rate_hz", "control.rate_hz"),
        ("control.spin_us=-1", "control.spin_us", "greater than or equal to 0"),
        ("server.session_timeout_s=-1", "server.session_timeout_s", "greater than 0"),
        ("control.rate_hz=fast", "control.rate_hz", "number"),
        ("server.max_robots=1.5", "server.max_robots", "integer"),
    ],
)
def test_out_of_range_and_mistyped_values_are_refused(override, field, says):
    message = config_error(overrides=[override])
    assert field in message
    assert says in message


@pytest.mark.parametrize("field", ["server.bind", "server.status_bind"])
@pytest.mark.parametrize("value", ["127.0.0.1:5555", "udp://127.0.0.1:5555", "inproc://x", ""])
def test_bind_must_be_tcp_or_ipc(field, value):
    message = config_error(overrides=[f"{field}={value}"])
    assert field in message
    assert "tcp:// or ipc://" in message


def test_bind_accepts_tcp_and_ipc():
    assert load_config(overrides=["server.bind=tcp://127.0.0.1:0"]).server.bind.startswith("tcp")
    assert load_config(overrides=["server.bind=ipc:///tmp/t.sock"]).server.bind.startswith("ipc")


def test_a_checkpoint_policy_needs_a_path():
    message = config_error(overrides=["policy.kind=checkpoint"])
    assert "policy.kind 'checkpoint' needs policy.path" in message
    config = load_config(overrides=["policy.kind=checkpoint", "policy.path=/models/act"])
    assert config.policy.path == Path("/models/act")


def test_a_bad_policy_kind_lists_the_kinds():
    message = config_error(overrides=["policy.kind=magic"])
    assert "policy.kind" in message
    assert "'reach'" in message and "'checkpoint'" in message


def test_cross_field_guard_check_says_what_to_change():
    message = config_error(overrides=["guards.hold_after_ms=500", "guards.stop_after_ms=400"])
    assert "guards.stop_after_ms" in message
    assert "must be greater than" in message


def test_errors_name_both_the_file_and_set_when_both_are_used(tmp_path):
    path = write(tmp_path, "control:\n  rate_hz: 100\n")
    message = config_error(path, ["control.spin_us=-5"])
    assert f"{path} + --set" in message
    assert "control.spin_us" in message


# -- the file itself -----------------------------------------------------------------------------


def test_a_missing_file_is_named(tmp_path):
    path = tmp_path / "nope.yaml"
    message = config_error(path)
    assert "cannot read config file" in message
    assert str(path) in message
    assert "No such file" in message


def test_a_directory_is_not_a_config_file(tmp_path):
    message = config_error(tmp_path)
    assert "cannot read config file" in message
    assert str(tmp_path) in message


def test_invalid_yaml_is_refused_with_the_file_name(tmp_path):
    path = write(tmp_path, "control:\n  rate_hz: [1, 2\n")
    message = config_error(path)
    assert str(path) in message
    assert "not valid YAML" in message


@pytest.mark.parametrize("text", ["- control\n- server\n", "just a string\n", "42\n"])
def test_the_top_level_must_be_a_mapping(tmp_path, text):
    path = write(tmp_path, text)
    message = config_error(path)
    assert str(path) in message
    assert "top level must be a mapping" in message


def test_yaml_tags_that_build_python_objects_are_refused(tmp_path):
    # safe_load: a config file cannot run code.
    path = write(tmp_path, "control: !!python/object/apply:os.system ['true']\n")
    message = config_error(path)
    assert "not valid YAML" in message


# -- dump and immutability -----------------------------------------------------------------------


def test_dump_of_defaults_loads_back_equal(tmp_path):
    config = TempoConfig()
    assert load_config(write(tmp_path, dump_config(config))) == config


def test_dump_of_a_changed_config_loads_back_equal(tmp_path):
    config = load_config(
        overrides=[
            "control.rate_hz=123.5",
            "server.bind=ipc:///tmp/x.sock",
            "robot.joints=[a, b, c]",
            "robot.cameras=[{name: left, height: 4, width: 5}, {name: right, height: 6, width: 7}]",
            "policy.kind=checkpoint",
            "policy.path=/models/act",
            "policy.reach.target=[1, 2, 3]",
            "guards.position_limits={a: [-1, 1]}",
            "guards.max_velocity=2.0",
            "teleop.joints=[b]",
            "logging.level=WARNING",
        ]
    )
    text = dump_config(config)
    assert load_config(write(tmp_path, text)) == config
    assert "123.5" in text and "/models/act" in text


def test_configs_are_frozen():
    config = TempoConfig()
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        config.control.rate_hz = 10.0  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        config.control = ControlConfig()  # type: ignore[misc]
    assert config.control.rate_hz == 50.0
    assert isinstance(config.robot.joints, tuple)  # no list to mutate in place


def test_sections_refuse_unknown_fields_when_built_in_code():
    with pytest.raises(pydantic.ValidationError, match="rat_hz"):
        ControlConfig(rat_hz=5)  # type: ignore[call-arg]


# -- execution: the checkpoint's unless the config sets it ---------------------------------------


def _spec(execution=None, chunk_size=10):  # type: ignore[no-untyped-def]
    from policies.base import CameraSpec, Execution, PolicySpec

    return PolicySpec(
        cameras=(CameraSpec(name="front", height=4, width=4),),
        state_size=2,
        joint_names=("a", "b"),
        chunk_size=chunk_size,
        execution=None if execution is None else Execution(**execution),
    )


def test_execution_comes_from_the_checkpoint_unless_the_config_sets_it():
    from controller.daemon.execution import resolve_execution

    hint = {"query_period": 10, "ensemble": "newest", "source": "LeRobot config.json: ..."}
    resolved, line = resolve_execution(TempoConfig().execution, _spec(hint))
    assert (resolved.query_period, resolved.ensemble) == (10, "newest")
    assert "query every 10 step(s), play the newest chunk" in line
    assert "query_period from checkpoint" in line and "LeRobot config.json" in line

    config = load_config(overrides=["execution.ensemble=temporal"])
    resolved, line = resolve_execution(config.execution, _spec(hint))
    assert (resolved.query_period, resolved.ensemble, resolved.temporal_k) == (10, "temporal", 0.01)
    assert "ensemble from config" in line and "temporal_k from default" in line

    resolved, line = resolve_execution(TempoConfig().execution, _spec())
    assert (resolved.query_period, resolved.ensemble) == (1, "temporal")
    assert "checkpoint" not in line


def test_a_query_period_longer_than_the_chunk_is_refused():
    from controller.daemon.execution import resolve_execution

    config = load_config(overrides=["execution.query_period=20"])
    with pytest.raises(ConfigError, match="exceeds the policy's chunk_size 10"):
        resolve_execution(config.execution, _spec())


def test_config_show_leaves_unset_execution_fields_to_the_checkpoint(tmp_path):
    text = dump_config(TempoConfig())
    assert "query_period" not in text
    reloaded = load_config(write(tmp_path, text))
    assert reloaded.execution.model_fields_set == set()
    config = load_config(overrides=["execution.query_period=5"])
    reloaded = load_config(write(tmp_path, dump_config(config)))
    assert reloaded.execution.model_fields_set == {"query_period"}
    assert reloaded.execution.query_period == 5


def test_rtc_section_is_the_flow_familys_model():
    """policy.rtc is validated by the model the flow family declares (one definition of the
    modes and schedules, the one its samplers read)."""
    from policies.flow.settings import RTCConfig

    rtc = load_config(None, ["policy.rtc.mode=off"]).policy.section("rtc")
    assert type(rtc) is RTCConfig
    assert rtc.mode == "off"  # YAML's bare `off` is false; it means off here


def test_a_policy_path_alone_means_a_checkpoint(tmp_path: Path) -> None:
    """Setting a path never serves the scripted reach policy in its place."""
    assert load_config(None, [f"policy.path={tmp_path}"]).policy.kind == "checkpoint"
    file = tmp_path / "robot.yaml"
    file.write_text(f"policy:\n  path: {tmp_path}\n")
    assert load_config(file).policy.kind == "checkpoint"
    with pytest.raises(ConfigError, match="policy.kind is 'reach'"):
        load_config(None, ["policy.kind=reach", f"policy.path={tmp_path}"])
    assert load_config(None, []).policy.kind == "reach"  # no path: the built-in default
