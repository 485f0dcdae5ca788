"""pi0 served with real-time chunking by a real daemon (in this process): each inference gets
the robot's plan from the observation's step on and its inference delay, and the new chunk
keeps the first d actions of that plan (inpaint mode keeps them exactly), for a robot with a
task (the prompt reaches the RTC step as it reaches the plain one)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from policies.flow.settings import RTCConfig
from policies.pi0.demo import write_demo_checkpoint
from policies.pi0.policy import read_pi0_policy
from policies.pi0.rtc import serve_pi0_with_rtc
from policies.tensor_policy import EagerPolicy
from tests.conftest import ipc_config
from tests.integration.rtc_daemon_check import Recording, guided_calls


def test_pi0_rtc_chunks_keep_the_actions_executed_while_they_were_computed(
    tmp_path: Path,
) -> None:
    directory = write_demo_checkpoint(tmp_path / "pi0", "pi0")
    pi0 = read_pi0_policy(directory, None).policy
    policy = Recording(EagerPolicy(serve_pi0_with_rtc(pi0, RTCConfig(mode="inpaint"))))
    config = ipc_config(
        tmp_path, "control.rate_hz=50", "execution.ensemble=newest", "execution.query_period=8"
    )
    calls = guided_calls(policy, config, pi0.spec.cameras[0], 90, task="pick up the cube")
    for context, actions in calls:
        plan = context.previous_plan
        assert context.prompt is not None
        assert plan is not None and plan.start_step == context.step  # aligned to this step
        d = min(context.inference_delay, len(plan.actions), 10)  # 10: pi0's overlap_rows
        np.testing.assert_allclose(actions[:d], plan.actions[:d], atol=1e-4)
