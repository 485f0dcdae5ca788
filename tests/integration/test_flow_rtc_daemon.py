"""A flow policy served with real-time chunking by a real daemon: each inference gets the robot's
plan from the observation's step on and its inference delay, and the new chunk keeps the first d
actions of that plan (inpaint mode keeps them exactly)."""

from __future__ import annotations

import numpy as np

from policies.demo import make_demo_flow_policy
from policies.flow.rtc import serve_with_rtc
from policies.flow.settings import RTCConfig
from policies.tensor_policy import EagerPolicy
from tests.conftest import ipc_config
from tests.integration.rtc_daemon_check import Recording, guided_calls


def test_rtc_chunks_keep_the_actions_executed_while_they_were_computed(tmp_path) -> None:
    flow = make_demo_flow_policy(cameras=(("front", 32, 32),), chunk_size=50, dim_model=16)
    policy = Recording(EagerPolicy(serve_with_rtc(flow, RTCConfig(mode="inpaint"))))
    config = ipc_config(
        tmp_path, "control.rate_hz=50", "execution.ensemble=newest", "execution.query_period=4"
    )
    calls = guided_calls(policy, config, flow.spec.cameras[0], 60)
    for context, actions in calls:
        plan = context.previous_plan
        assert plan is not None and plan.start_step == context.step  # aligned to this step
        d = min(context.inference_delay, len(plan.actions))
        np.testing.assert_allclose(actions[:d], plan.actions[:d], atol=1e-4)
