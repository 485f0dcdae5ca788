"""The hello check: a driver is served only if its robot is the one the policy expects."""

from __future__ import annotations

from typing import Any

import pytest

from controller.daemon.handshake import check_driver_spec, parse_driver_spec, spec_to_wire
from controller.errors import ErrorCode, ProtocolError, SpecMismatchError
from policies.base import CameraSpec, PolicySpec

POLICY = PolicySpec(
    cameras=(
        CameraSpec(name="front", height=96, width=128),
        CameraSpec(name="wrist", height=48, width=64),
    ),
    state_size=6,
    joint_names=("j0", "j1", "j2", "j3", "j4", "j5"),
    chunk_size=20,
    state_history=2,
)


def driver_spec(**changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "joints": ["j0", "j1", "j2", "j3", "j4", "j5"],
        "cameras": [
            {"name": "front", "height": 96, "width": 128},
            {"name": "wrist", "height": 48, "width": 64},
        ],
        "state_size": 6,
    }
    spec.update(changes)
    return spec


def mismatch(spec: dict[str, Any]) -> str:
    with pytest.raises(SpecMismatchError) as info:
        check_driver_spec(spec, POLICY)
    assert info.value.code is ErrorCode.SPEC_MISMATCH
    return str(info.value)


# -- accepted ------------------------------------------------------------------------------------


def test_a_matching_spec_is_accepted():
    check_driver_spec(driver_spec(), POLICY)


def test_camera_order_and_camera_hz_do_not_matter():
    cameras = list(reversed(driver_spec()["cameras"]))
    check_driver_spec(driver_spec(cameras=cameras, camera_hz=30), POLICY)
    check_driver_spec(driver_spec(camera_hz=29.97), POLICY)


def test_parse_returns_joints_cameras_and_state_size():
    joints, cameras, state_size = parse_driver_spec(driver_spec(camera_hz=30.0))
    assert joints == ("j0", "j1", "j2", "j3", "j4", "j5")
    assert cameras == {"front": (96, 128), "wrist": (48, 64)}
    assert state_size == 6


def test_welcome_spec_has_the_hello_shape_plus_chunking():
    wire = spec_to_wire(POLICY)
    assert parse_driver_spec({k: wire[k] for k in ("joints", "cameras", "state_size")}) == (
        POLICY.joint_names,
        {"front": (96, 128), "wrist": (48, 64)},
        6,
    )
    assert wire["chunk_size"] == 20
    assert wire["state_history"] == 2
    check_driver_spec({k: wire[k] for k in ("joints", "cameras", "state_size")}, POLICY)


# -- refused: the robot differs ------------------------------------------------------------------


def test_different_joint_names_are_refused_naming_both_lists():
    message = mismatch(driver_spec(joints=["j0", "j1", "j2", "j3", "j4", "gripper"]))
    assert "'gripper'" in message
    assert "'j5'" in message
    assert "in this order" in message


def test_joints_in_another_order_are_refused():
    message = mismatch(driver_spec(joints=["j1", "j0", "j2", "j3", "j4", "j5"]))
    assert "['j1', 'j0'," in message
    assert "['j0', 'j1'," in message


@pytest.mark.parametrize("joints", [["j0", "j1", "j2", "j3", "j4"], [f"j{i}" for i in range(7)]])
def test_too_few_or_too_many_joints_are_refused(joints):
    message = mismatch(driver_spec(joints=joints))
    assert str(joints) in message


@pytest.mark.parametrize("size", [5, 7, 0])
def test_a_different_state_size_is_refused_with_both_sizes(size):
    message = mismatch(driver_spec(state_size=size))
    assert f"has {size} values" in message
    assert "expects 6" in message


def test_a_missing_camera_is_named():
    message = mismatch(driver_spec(cameras=[{"name": "front", "height": 96, "width": 128}]))
    assert "missing ['wrist']" in message
    assert "unexpected" not in message


def test_an_extra_camera_is_named():
    cameras = driver_spec()["cameras"] + [{"name": "top", "height": 96, "width": 128}]
    message = mismatch(driver_spec(cameras=cameras))
    assert "unexpected ['top']" in message
    assert "missing" not in message


def test_a_renamed_camera_is_named_both_ways():
    cameras = [
        {"name": "front", "height": 96, "width": 128},
        {"name": "hand", "height": 48, "width": 64},
    ]
    message = mismatch(driver_spec(cameras=cameras))
    assert "missing ['wrist']" in message
    assert "unexpected ['hand']" in message


@pytest.mark.parametrize(("height", "width"), [(48, 65), (47, 64), (64, 48)])
def test_a_camera_of_another_shape_is_refused_with_both_shapes(height, width):
    cameras = [
        {"name": "front", "height": 96, "width": 128},
        {"name": "wrist", "height": height, "width": width},
    ]
    message = mismatch(driver_spec(cameras=cameras))
    assert "'wrist'" in message
    assert f"{height}x{width}" in message
    assert "48x64" in message


# -- refused: the spec itself is malformed -------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ([], "must be a map"),
        (driver_spec(colour="red"), "unknown fields in hello spec: ['colour']"),
        ({k: v for k, v in driver_spec().items() if k != "joints"}, "spec.joints"),
        (driver_spec(joints="j0,j1"), "spec.joints"),
        (driver_spec(joints=["j0", 1]), "spec.joints"),
        ({k: v for k, v in driver_spec().items() if k != "state_size"}, "spec.state_size"),
        (driver_spec(state_size="6"), "spec.state_size"),
        (driver_spec(state_size=6.0), "spec.state_size"),
        (driver_spec(state_size=True), "spec.state_size"),
        (driver_spec(state_size=-1), "spec.state_size"),
        ({k: v for k, v in driver_spec().items() if k != "cameras"}, "spec.cameras"),
        (driver_spec(cameras={"front": [96, 128]}), "spec.cameras"),
        (driver_spec(cameras=["front"]), "spec.cameras entry"),
        (driver_spec(cameras=[{"name": "front", "height": 96}]), "spec.cameras entry"),
        (
            driver_spec(cameras=[{"name": "front", "height": 96, "width": 128, "fps": 30}]),
            "spec.cameras entry",
        ),
        (driver_spec(cameras=[{"name": 1, "height": 96, "width": 128}]), "spec.cameras entry"),
        (driver_spec(cameras=[{"name": "f", "height": 0, "width": 128}]), "spec.cameras entry"),
        (driver_spec(cameras=[{"name": "f", "height": 96, "width": -1}]), "spec.cameras entry"),
        (driver_spec(cameras=[{"name": "f", "height": 96.0, "width": 1}]), "spec.cameras entry"),
        (driver_spec(cameras=[{"name": "f", "height": True, "width": 1}]), "spec.cameras entry"),
        (
            driver_spec(
                cameras=[
                    {"name": "front", "height": 96, "width": 128},
                    {"name": "front", "height": 96, "width": 128},
                ]
            ),
            "'front' more than once",
        ),
        (driver_spec(camera_hz=0), "spec.camera_hz"),
        (driver_spec(camera_hz=-30), "spec.camera_hz"),
        (driver_spec(camera_hz="30"), "spec.camera_hz"),
        (driver_spec(camera_hz=True), "spec.camera_hz"),
        (driver_spec(camera_hz=float("inf")), "spec.camera_hz"),
        (driver_spec(camera_hz=float("nan")), "spec.camera_hz"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_malformed_specs_are_refused_as_protocol_errors(spec, says):
    for check in (parse_driver_spec, lambda s: check_driver_spec(s, POLICY)):
        with pytest.raises(ProtocolError) as info:
            check(spec)
        assert info.value.code is ErrorCode.MALFORMED
        assert says in str(info.value)


def test_driver_limits_are_parsed_and_checked():
    from controller.daemon.handshake import parse_driver_limits

    assert parse_driver_limits({}) == {}
    assert parse_driver_limits({"limits": {"j0": [-1, 2.5]}}) == {"j0": (-1.0, 2.5)}
    for bad in ({"limits": [1, 2]}, {"limits": {"j0": [1]}}, {"limits": {"j0": [True, 2]}}):
        with pytest.raises(ProtocolError) as refused:
            parse_driver_limits(bad)
        assert refused.value.code is ErrorCode.MALFORMED
        assert "limits" in str(refused.value)


@pytest.mark.parametrize(
    "name", ["arm\nINFO forged", "\x1b[31mred", "r" * 65, "", "arm 0", "bras-gauche-é", "a/b"]
)
def test_a_robot_name_outside_the_safe_set_is_refused(name: str) -> None:
    from controller.daemon.handshake import check_robot_name

    with pytest.raises(ProtocolError) as info:
        check_robot_name(name)
    assert info.value.code is ErrorCode.NOT_ALLOWED
    assert "\n" not in str(info.value) and "\x1b" not in str(info.value)


@pytest.mark.parametrize("name", ["arm0", "left_arm-2.b", "r" * 64])
def test_safe_robot_names_pass(name: str) -> None:
    from controller.daemon.handshake import check_robot_name

    check_robot_name(name)


@pytest.mark.parametrize("bounds", [[float("-inf"), float("inf")], [0.0, float("nan")]])
def test_hello_limits_must_be_finite(bounds: list[float]) -> None:
    from controller.daemon.handshake import parse_driver_limits

    with pytest.raises(ProtocolError, match="must be finite") as info:
        parse_driver_limits({"limits": {"j0": bounds}})
    assert info.value.code is ErrorCode.NOT_ALLOWED
