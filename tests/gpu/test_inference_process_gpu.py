"""The inference process on a GPU: pinned observation slots, and a restart after a kernel
fault poisons the CUDA context."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from controller.link.remote_policy import RemotePolicy
from policies.base import first_context
from tests.conftest import ipc_config, wait_for

pytestmark = pytest.mark.gpu

POISON = Path(__file__).with_name("poison_inference.py")


def _remote(tmp_path: Path, script: list[str]) -> RemotePolicy:
    config_file = tmp_path / "config.json"
    config = ipc_config(tmp_path, "policy.device=cuda")
    config_file.write_text(json.dumps(config.model_dump(mode="json")))
    command = [sys.executable, *script, "inference-process", "--config-json", str(config_file)]
    return RemotePolicy(command, hang_timeout_s=10.0)


def _predict(policy: RemotePolicy) -> np.ndarray:
    images = {"front": np.full((96, 128, 3), 3, np.uint8)}
    return policy.predict(images, first_context(policy.spec, np.zeros(6, np.float32))).actions


def test_slots_are_pinned_and_served_chunks_match_in_process(tmp_path: Path) -> None:
    policy = _remote(tmp_path, ["-m", "controller.cli"])
    policy.start()
    try:
        assert policy.pinned
        chunk = _predict(policy)
        assert np.isfinite(chunk).all() and chunk.shape == (policy.spec.chunk_size, 6)
        assert policy.status()["tier"] == "graph"
    finally:
        policy.stop()


def test_a_device_side_assert_restarts_the_process_and_serving_resumes(tmp_path: Path) -> None:
    policy = _remote(tmp_path, [str(POISON)])
    policy.start()
    try:
        first = policy.pid
        failures = 0
        for _ in range(8):  # the 5th step poisons the context
            try:
                _predict(policy)
            except Exception:  # noqa: BLE001 - the step that hit the fault
                failures += 1
                break
        assert failures == 1
        wait_for(lambda: policy.serving and policy.pid != first, 180)
        assert policy.restarts[0].cause in ("fatal", "exited"), policy.restarts
        assert np.isfinite(_predict(policy)).all()
    finally:
        policy.stop()
