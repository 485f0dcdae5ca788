"""What the RTC daemon tests share: a policy wrapper that answers late and keeps every context
and chunk, and a robot that sends observations until some inference was guided."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from controller.config import TempoConfig
from controller.feed.served_policy import served_here
from controller.wire.client import TempoClient
from policies.base import CameraSpec, Prediction, RobotContext
from tests.conftest import running_daemon, wait_for

JOINTS = [f"joint_{i}" for i in range(6)]


class Recording:
    """Serves `inner` 60 ms late (3 control steps at 50 Hz: a delay d > 0 whatever the machine)
    and keeps every context and chunk."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.spec = inner.spec
        self.calls: list[tuple[RobotContext, np.ndarray]] = []

    def predict(self, images: Any, context: RobotContext) -> Prediction:
        prediction = self.inner.predict(images, context)
        time.sleep(0.06)
        self.calls.append((context, prediction.actions.copy()))
        return prediction


def guided_calls(
    policy: Recording,
    config: TempoConfig,
    camera: CameraSpec,
    timeout: float,
    task: str | None = None,
) -> list[tuple[RobotContext, np.ndarray]]:
    """Serve `policy` to one six-joint robot until some of its inferences had a previous plan
    and a delay; those calls (context, chunk)."""
    frame = np.zeros((camera.height, camera.width, 3), np.uint8)
    with running_daemon(config, served_here(policy)):
        with TempoClient(
            config.server.bind,
            robot="arm",
            joints=JOINTS,
            cameras={camera.name: (camera.height, camera.width)},
            state_size=6,
            task=task,
            handshake_timeout_s=20.0,
        ) as client:

            def guided() -> list[tuple[RobotContext, np.ndarray]]:
                client.send_observation({camera.name: frame}, np.zeros(6, np.float32))
                client.receive(timeout_s=0.02)
                return [
                    (c, a)
                    for c, a in list(policy.calls)
                    if c.previous_plan is not None and c.inference_delay > 0
                ]

            return wait_for(guided, timeout=timeout)
