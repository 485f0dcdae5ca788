"""pi0 served with real-time chunking by a real daemon (in this process): each inference gets
the robot's plan from the observation's step on and its inference delay, and the new chunk
keeps the first d actions of that plan (inpaint mode keeps them exactly), for a robot with a
task (the prompt reaches the RTC step as it reaches the plain one)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from controller.config_sections import RTCConfig
from controller.link.served_policy import served_here
from controller.wire.client import TempoClient
from policies.base import Prediction, RobotContext
from policies.pi0.demo import write_demo_checkpoint
from policies.pi0.policy import read_pi0_policy
from policies.pi0.rtc import serve_pi0_with_rtc
from policies.tensor_policy import EagerPolicy
from tests.conftest import ipc_config, running_daemon, wait_for

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


def test_pi0_rtc_chunks_keep_the_actions_executed_while_they_were_computed(
    tmp_path: Path,
) -> None:
    directory = write_demo_checkpoint(tmp_path / "pi0", "pi0")
    pi0 = read_pi0_policy(directory, None).policy
    policy = Recording(EagerPolicy(serve_pi0_with_rtc(pi0, RTCConfig(mode="inpaint"))))
    config = ipc_config(
        tmp_path, "control.rate_hz=50", "inference.ensemble=newest", "inference.query_period=8"
    )
    camera = pi0.spec.cameras[0]
    frame = np.zeros((camera.height, camera.width, 3), np.uint8)
    with running_daemon(config, served_here(policy)):
        with TempoClient(
            config.server.bind,
            robot="arm",
            joints=JOINTS,
            cameras={camera.name: (camera.height, camera.width)},
            state_size=6,
            task="pick up the cube",
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

            calls = wait_for(guided, timeout=90)
    for context, actions in calls:
        plan = context.previous_plan
        assert context.prompt is not None
        assert plan is not None and plan.start_step == context.step  # aligned to this step
        d = min(context.inference_delay, len(plan.actions), 10)  # 10: pi0's overlap_rows
        np.testing.assert_allclose(actions[:d], plan.actions[:d], atol=1e-4)
