"""The ALOHA, DROID and LIBERO layouts, as openpi's examples send them, read into a policy's
cameras, state and prompt; what does not fit is one sentence naming the key."""

from __future__ import annotations

import numpy as np
import pytest

from controller.errors import ErrorCode, ProtocolError
from controller.openpi.codec import DecodeLimits, decode
from controller.openpi.layouts import PRESETS, preset

msgpack_numpy = pytest.importorskip("openpi_client.msgpack_numpy")
RNG = np.random.default_rng(1)


def _image(shape: tuple[int, ...]) -> np.ndarray:
    return RNG.integers(0, 256, shape, dtype=np.uint8)


def _aloha() -> dict[str, object]:
    names = ("cam_high", "cam_low", "cam_left_wrist", "cam_right_wrist")
    return {
        "state": np.ones(14),
        "images": {name: _image((3, 224, 224)) for name in names},
        "prompt": "do something",
    }


def _droid() -> dict[str, object]:
    return {
        "observation/exterior_image_1_left": _image((224, 224, 3)),
        "observation/wrist_image_left": _image((224, 224, 3)),
        "observation/joint_position": RNG.random(7),
        "observation/gripper_position": RNG.random(1),
        "prompt": "do something",
    }


def _libero() -> dict[str, object]:
    return {
        "observation/state": RNG.random(8),
        "observation/image": _image((224, 224, 3)),
        "observation/wrist_image": _image((224, 224, 3)),
        "prompt": "do something",
    }


def _wire(obs: dict[str, object]) -> dict[str, object]:
    return decode(msgpack_numpy.packb(obs), DecodeLimits())


def test_presets_are_the_three_examples() -> None:
    assert set(PRESETS) == {"aloha", "droid", "libero"}


def test_aloha_images_come_channels_last_by_camera() -> None:
    obs = _aloha()
    cameras = {"top": (224, 224), "left": (224, 224)}
    layout = preset("aloha", {"images/cam_high": "top", "images/cam_left_wrist": "left"})
    images, state, prompt = layout.read(_wire(obs), cameras, 14)
    high = obs["images"]["cam_high"]  # type: ignore[index]
    assert images["top"].shape == (224, 224, 3)
    assert np.array_equal(images["top"], high.transpose(1, 2, 0))
    assert state.dtype == np.float32 and state.shape == (14,) and prompt == "do something"


def test_droid_state_is_joints_then_gripper() -> None:
    obs = _droid()
    layout = preset("droid")
    cameras = {"exterior_image_1_left": (224, 224), "wrist_image_left": (224, 224)}
    images, state, _ = layout.read(_wire(obs), cameras, 8)
    expected = np.concatenate(
        [obs["observation/joint_position"], obs["observation/gripper_position"]]
    )  # type: ignore[list-item]
    assert np.allclose(state, expected) and set(images) == set(cameras)


def test_libero_reads_with_its_defaults() -> None:
    images, state, _ = preset("libero").read(
        _wire(_libero()), {"image": (224, 224), "wrist_image": (224, 224)}, 8
    )
    assert images["image"].shape == (224, 224, 3) and state.shape == (8,)


@pytest.mark.parametrize(
    ("change", "code", "words"),
    [
        (lambda o: o.pop("observation/image"), ErrorCode.MALFORMED, "no 'observation/image'"),
        (lambda o: o.update(extra=1), ErrorCode.MALFORMED, "no key 'extra'"),
        (lambda o: o.update({"observation/state": RNG.random(7)}), ErrorCode.SHAPE, "7 numbers"),
        (
            lambda o: o.update({"observation/image": _image((3, 224, 224))}),
            ErrorCode.SHAPE,
            "shape (3, 224, 224)",
        ),
        (
            lambda o: o.update({"observation/image": RNG.random((224, 224, 3))}),
            ErrorCode.NOT_ALLOWED,
            "uint8",
        ),
        (
            lambda o: o.update({"observation/state": np.full(8, np.nan)}),
            ErrorCode.NON_FINITE,
            "NaN",
        ),
        (lambda o: o.update(prompt="x" * 2000), ErrorCode.NOT_ALLOWED, "prompt"),
    ],
)
def test_what_does_not_fit_is_one_sentence(change, code, words) -> None:  # type: ignore[no-untyped-def]
    obs = _libero()
    change(obs)
    with pytest.raises(ProtocolError) as caught:
        preset("libero").read(_wire(obs), {"image": (224, 224), "wrist_image": (224, 224)}, 8)
    assert caught.value.code == code and words in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_camera_no_image_maps_to_is_refused() -> None:
    layout = preset("libero", {"observation/image": "top"})
    with pytest.raises(ProtocolError, match="'wrist' is mapped to no image"):
        layout.read(_wire(_libero()), {"top": (224, 224), "wrist": (224, 224)}, 8)


def test_an_unknown_preset_or_image_is_refused() -> None:
    with pytest.raises(ValueError, match="presets are aloha, droid, libero"):
        preset("bridge")
    with pytest.raises(ValueError, match="has no image"):
        preset("droid", {"observation/image": "top"})
