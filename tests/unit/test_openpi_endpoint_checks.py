"""server.openpi's checks at start (one sentence each): the bind beyond localhost needs keys, the
keys file is private and holds real keys, the layout maps every camera of the policy; the
request bucket of the rate limit; the chunk limits as the guard chain has them."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from controller.action.chunk_limits import ChunkLimits
from controller.action.guards_config import GuardsConfig
from controller.config import load_config
from controller.daemon.openpi_endpoint import (
    check_layout_fits,
    check_openpi_bind,
    openpi_layout,
    read_api_keys,
)
from controller.errors import ConfigError, SecurityError
from controller.openpi.websocket_server import RequestBucket
from policies.base import CameraSpec, PolicySpec


def openpi(*settings: str):  # type: ignore[no-untyped-def]
    return load_config(None, [f"server.openpi.{s}" for s in settings]).server.openpi


def test_beyond_localhost_needs_api_keys(tmp_path: Path) -> None:
    check_openpi_bind(openpi("bind=127.0.0.1:8000"))
    with pytest.raises(SecurityError, match="set server.openpi.api_keys"):
        check_openpi_bind(openpi("bind=0.0.0.0:8000"))
    check_openpi_bind(openpi("bind=0.0.0.0:8000", f"api_keys={tmp_path / 'keys'}"))


def test_the_keys_file_is_private_and_holds_real_keys(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("# lab\n\n0123456789abcdef0123\n  fedcba9876543210fedc  \n")
    os.chmod(keys, 0o644)
    with pytest.raises(SecurityError, match="chmod 600"):
        read_api_keys(keys)
    os.chmod(keys, 0o600)
    assert read_api_keys(keys) == {"0123456789abcdef0123", "fedcba9876543210fedc"}
    for text, words in [("# none\n", "holds no key"), ("short\n", "16 or more")]:
        keys.write_text(text)
        with pytest.raises(ConfigError, match=words):
            read_api_keys(keys)
    with pytest.raises(ConfigError, match="cannot be read"):
        read_api_keys(tmp_path / "missing")


def spec(*cameras: str, joints: int = 2) -> PolicySpec:
    return PolicySpec(
        cameras=tuple(CameraSpec(name=c, height=8, width=8) for c in cameras),
        state_size=joints,
        joint_names=tuple(f"j{i}" for i in range(joints)),
        chunk_size=4,
    )


def test_every_camera_of_the_policy_is_mapped() -> None:
    layout = openpi_layout(openpi("layout=libero"))
    check_layout_fits(layout, spec("image", "wrist_image"))
    with pytest.raises(ConfigError, match="camera 'top' is mapped to no image"):
        check_layout_fits(layout, spec("top"))
    mapped = openpi_layout(openpi("layout=libero", "cameras={observation/image: top}"))
    with pytest.raises(ConfigError, match="'wrist' is mapped to no image"):
        check_layout_fits(mapped, spec("top", "wrist"))
    with pytest.raises(ConfigError, match="has no image"):
        openpi_layout(openpi("layout=libero", "cameras={images/cam_high: top}"))


def test_a_custom_layout_names_its_keys() -> None:
    layout = openpi_layout(
        openpi(
            "layout=custom",
            "cameras={rgb/front: front}",
            "state=[q, gripper]",
            "channels_first=true",
        )  # fmt: skip
    )
    assert layout.images == ("rgb/front",) and layout.state == ("q", "gripper")
    assert layout.channels_first
    with pytest.raises(ConfigError, match="layout custom needs cameras"):
        openpi("layout=custom")
    with pytest.raises(ConfigError, match="are for layout custom"):
        openpi("layout=aloha", "state=[q]")


def test_the_bucket_allows_a_burst_then_the_rate() -> None:
    bucket = RequestBucket(10.0, 0)
    assert all(bucket.take(0) for _ in range(10)) and not bucket.take(0)
    assert bucket.take(100_000_000) and not bucket.take(100_000_000)  # 0.1 s: one more


def test_chunk_limits_clamp_and_rate_limit_as_the_guard_chain() -> None:
    chunk = np.array([[0.0, 3.0], [0.5, 3.0], [2.0, -3.0]], np.float32)
    clamp = ChunkLimits(spec("c"), GuardsConfig(position_limits={"j1": (-1.0, 1.0)}), 10.0)
    out, counts = clamp.apply(chunk, np.zeros(2, np.float32))
    assert np.array_equal(out, [[0.0, 1.0], [0.5, 1.0], [2.0, -1.0]])
    assert counts == {"position_clamped": 3}
    rated = ChunkLimits(spec("c"), GuardsConfig(max_velocity=1.0), 10.0)  # 0.1 a row
    out, counts = rated.apply(chunk, np.zeros(2, np.float32))  # seeded at 0: state = joints
    np.testing.assert_allclose(out, [[0.0, 0.1], [0.1, 0.2], [0.2, 0.1]], atol=1e-6)
    assert counts["velocity_limited"] == 3
    with pytest.raises(ValueError, match="NaN"):
        clamp.apply(np.full((2, 2), np.nan, np.float32), np.zeros(2, np.float32))
