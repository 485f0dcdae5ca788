"""A LeRobot ACT directory is executed as LeRobot executes it: its config's n_action_steps and
temporal_ensemble_coeff set the daemon's query period and ensembling, unless the daemon's config
sets them. The daemon here is the real dispatcher and control loop over the policy that
`tempo serve --policy.path DIR` builds, driven step by step (inference runs at once on submit, as
LeRobot's loop does), so the executed stream can be compared with LeRobot's loop exactly."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from controller.config import TempoConfig
from controller.inference.build import build_policy
from controller.wire.protocol import encode
from policies.base import first_context
from policies.checkpoints.load import load_checkpoint
from policies.tensor_policy import EagerPolicy
from tests.conftest import ipc_config, offline_daemon
from tests.unit.test_lerobot_import import (
    MEAN_STD,
    MEAN_STD_NAMES,
    tempo_model,
    write_processor_layout,
)

JOINTS = ["shoulder", "elbow", "gripper"]
CHUNK = 4
STEPS = 10
RNG = np.random.default_rng(7)
FRAMES = [
    {name: RNG.integers(0, 256, (32, 32, 3), dtype=np.uint8) for name in ("front", "wrist")}
    for _ in range(STEPS)
]
STATES = [RNG.normal(size=3).astype(np.float32) for _ in range(STEPS)]


def lerobot_dir(tmp_path: Path, **execution: Any) -> Path:
    """A LeRobot ACT directory (processor layout) with the given execution settings."""
    directory = write_processor_layout(
        tmp_path / "lerobot", tempo_model(chunk_size=CHUNK), MEAN_STD, MEAN_STD_NAMES
    )
    config = json.loads((directory / "config.json").read_text())
    config.update(execution)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def serve_offline(config: TempoConfig) -> list[np.ndarray | None]:
    """The actions the daemon sends one robot over STEPS steps (None for a hold), one
    observation per step, inference finishing within its step."""
    policy = build_policy(config.policy, config.robot, config.runner)
    dispatcher, loop, recorder, step = offline_daemon(config, policy)
    spec = {
        "joints": JOINTS,
        "cameras": [{"name": n, "height": 32, "width": 32} for n in ("front", "wrist")],
        "state_size": 3,
    }
    dispatcher.handle(b"R", encode("hello", robot="r", seq=1, time_ns=0, fields={"spec": spec}), 0)
    _, kind, fields, _ = recorder.sent[-1]
    assert kind == "welcome", fields
    session = fields["session"]
    stream: list[np.ndarray | None] = []
    for t in range(STEPS):
        step[0] = t
        now = time.monotonic_ns()
        frames = encode(
            "obs",
            robot="r",
            seq=t + 2,
            time_ns=now,
            fields={"session": session},
            arrays={**FRAMES[t], "state": STATES[t]},
        )
        dispatcher.handle(b"R", frames, now)
        sent_before = len(recorder.sent)
        # The tick's deadline far ahead: on a loaded machine no action may be dropped as late.
        now = time.monotonic_ns()
        loop.tick(t, now + 60_000_000_000, now)
        ((_, kind, fields, action),) = recorder.sent[sent_before:]
        assert fields["step"] == t
        stream.append(action.copy() if kind == "action" else None)
    return stream


_CHUNKS: list[np.ndarray] = []


def chunks_of(directory: Path) -> list[np.ndarray]:
    """What the checkpoint predicts from each step's observation (eager FP32 reference). Every
    test's directory holds the same weights (tempo_model is seeded): computed once."""
    if not _CHUNKS:
        policy = EagerPolicy(load_checkpoint(directory))
        _CHUNKS.extend(
            policy.predict(FRAMES[t], first_context(policy.spec, STATES[t], t)).actions
            for t in range(STEPS)
        )
    return _CHUNKS


def lerobot_queue_loop(chunks: list[np.ndarray], n_action_steps: int) -> list[np.ndarray]:
    """LeRobot's ACT select_action without ensembling: when the action queue is empty, predict
    a chunk from this step's observation and queue its first n_action_steps actions."""
    queue: list[np.ndarray] = []
    out = []
    for t in range(STEPS):
        if not queue:
            queue = list(chunks[t][:n_action_steps])
        out.append(queue.pop(0))
    return out


def lerobot_ensembled_loop(chunks: list[np.ndarray], coeff: float) -> list[np.ndarray]:
    """LeRobot's temporal ensembling: a chunk every step; a step's action is the mean of every
    chunk's prediction for it, weighted exp(-coeff * i), i = 0 the oldest chunk."""
    out = []
    for t in range(STEPS):
        rows = [chunks[k][t - k] for k in range(max(0, t - CHUNK + 1), t + 1)]
        weights = np.exp(-coeff * np.arange(len(rows)))
        out.append(np.tensordot(weights, np.stack(rows), axes=1) / weights.sum())
    return out


def config_for(tmp_path: Path, directory: Path, *overrides: str) -> TempoConfig:
    return ipc_config(
        tmp_path,
        "policy.kind=checkpoint",
        f"policy.path={directory}",
        f"policy.joint_names=[{', '.join(JOINTS)}]",
        "guards.hold_after_ms=60000",  # driven by hand: the watchdog must not see wall time
        "guards.stop_after_ms=120000",
        "runner.warmup_steps=1",
        "runner.parity_observations=1",
        "runner.step_budget_ms=10000",  # a loaded machine must not turn this into overruns
        *overrides,
    )


def test_lerobot_defaults_execute_chunk_by_chunk(tmp_path: Path) -> None:
    """n_action_steps = chunk_size and no ensembling (LeRobot's ACT defaults): the daemon plays
    each chunk to its end, then asks for the next, exactly as LeRobot's loop does."""
    directory = lerobot_dir(tmp_path, n_action_steps=CHUNK, temporal_ensemble_coeff=None)
    stream = serve_offline(config_for(tmp_path, directory))
    expected = lerobot_queue_loop(chunks_of(directory), CHUNK)
    assert all(action is not None for action in stream)
    np.testing.assert_allclose(np.stack(stream), np.stack(expected), rtol=1e-5, atol=1e-6)


def test_temporal_ensemble_coeff_executes_as_lerobot_ensembles(tmp_path: Path) -> None:
    directory = lerobot_dir(tmp_path, n_action_steps=1, temporal_ensemble_coeff=0.5)
    stream = serve_offline(config_for(tmp_path, directory))
    expected = lerobot_ensembled_loop(chunks_of(directory), 0.5)
    np.testing.assert_allclose(np.stack(stream), np.stack(expected), rtol=1e-5, atol=1e-6)


def test_the_daemons_config_overrides_the_checkpoint(tmp_path: Path) -> None:
    """Set in the config, the daemon's inference settings win: here every step, temporal k=0.5,
    which is not what the checkpoint says (chunk by chunk)."""
    directory = lerobot_dir(tmp_path, n_action_steps=CHUNK, temporal_ensemble_coeff=None)
    config = config_for(
        tmp_path,
        directory,
        "execution.query_period=1",
        "execution.ensemble=temporal",
        "execution.temporal_k=0.5",
    )
    stream = serve_offline(config)
    chunks = chunks_of(directory)
    np.testing.assert_allclose(
        np.stack(stream), np.stack(lerobot_ensembled_loop(chunks, 0.5)), rtol=1e-5, atol=1e-6
    )
    chunk_by_chunk = np.stack(lerobot_queue_loop(chunks, CHUNK))
    assert not np.allclose(np.stack(stream), chunk_by_chunk, atol=1e-4)


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"n_action_steps": CHUNK}, f"query every {CHUNK} step(s), play the newest chunk"),
        ({"n_action_steps": 1, "temporal_ensemble_coeff": 0.01}, "temporal ensembling k=0.01"),
    ],
)
def test_start_up_log_says_which_execution_and_where_from(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, settings: dict[str, Any], expected: str
) -> None:
    import threading

    from controller.app import serve

    directory = lerobot_dir(tmp_path, **settings)
    stop = threading.Event()
    caplog.set_level("INFO", logger="controller.app")
    serve(
        config_for(tmp_path, directory),
        stop=stop,
        on_ready=lambda daemon: stop.set(),
        install_signals=False,
    )
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("execution:")]
    assert len(lines) == 1, caplog.text
    assert expected in lines[0]
    assert "from checkpoint" in lines[0] and "LeRobot config.json" in lines[0]
