"""Frames a same-host driver wrote in place, on a GPU: the inference process pins the driver's
ring and uploads from the slot, and the chunk equals that of the same frames copied into the
control process's slots."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from controller.daemon.registry import DRIVER_RING_SLOTS
from controller.link.remote_policy import RemotePolicy
from controller.process_protocol.frame_slots import FrameSlots
from controller.wire.slot_ring import SlotFrames
from policies.base import first_context
from policies.checkpoints.tempo_format import save_checkpoint
from policies.demo import make_demo_policy
from tests.conftest import ipc_config

pytestmark = pytest.mark.gpu


def remote_demo_act(tmp_path: Path, device: str) -> RemotePolicy:
    """The small demo ACT (its chunk depends on the frames) in an inference process."""
    save_checkpoint(tmp_path / "ckpt", make_demo_policy())
    config_file = tmp_path / "config.json"
    config = ipc_config(
        tmp_path,
        f"policy.device={device}",
        "policy.kind=checkpoint",
        f"policy.path={tmp_path}/ckpt",
    )
    config_file.write_text(json.dumps(config.model_dump(mode="json")))
    command = [sys.executable, "-m", "controller.cli", "inference-process"]
    return RemotePolicy([*command, "--config-json", str(config_file)], hang_timeout_s=10.0)


def test_a_driver_ring_is_pinned_and_serves_the_chunks_of_copied_frames(tmp_path: Path) -> None:
    policy = remote_demo_act(tmp_path, "cuda")
    policy.start()
    ring = FrameSlots.create(policy.spec, DRIVER_RING_SLOTS)
    try:
        names = [c.name for c in policy.spec.cameras]
        rng = np.random.default_rng(0)
        for step in range(2 * DRIVER_RING_SLOTS):
            images = {
                c.name: rng.integers(0, 256, c.shape, dtype=np.uint8) for c in policy.spec.cameras
            }
            context = first_context(policy.spec, np.zeros(policy.spec.state_size, np.float32))
            copied = policy.predict(images, context).actions
            index = step % ring.count
            generation = ring.write(index, images, ring.views(index)[1])
            frames = SlotFrames(ring, index, generation, names)
            in_place = policy.predict(frames, context).actions
            assert frames.unchanged()
            np.testing.assert_allclose(in_place, copied, rtol=1e-5, atol=1e-6)
        process = policy.status()["process"]
        assert process["driver_rings"] == 1 and process["pinned_driver_rings"] == 1
    finally:
        ring.close()
        policy.stop()
