"""With real-time chunking on, the start-up log's and `tempo status`'s execution line say so,
with its settings, instead of "play the newest chunk" (controller.daemon.execution)."""

from __future__ import annotations

from controller.daemon.execution import resolve_execution
from controller.feed.served_policy import served_here
from controller.observe.status_view import render_status
from policies.demo import make_demo_flow_policy
from policies.flow.rtc import serve_with_rtc
from policies.flow.settings import RTCConfig
from policies.tensor_policy import EagerPolicy
from tests.conftest import ipc_config, running_daemon


def test_the_execution_line_names_real_time_chunking_and_its_settings(tmp_path) -> None:
    config = ipc_config(tmp_path, "execution.ensemble=newest")
    spec = make_demo_flow_policy(cameras=(("front", 32, 32),), chunk_size=50, dim_model=16).spec
    rtc = RTCConfig(mode="stop_grad", beta=3.0, schedule="linear")
    _, line = resolve_execution(config.execution, spec, rtc)
    assert "real-time chunking" in line and "play the newest chunk" not in line
    assert "stop_grad" in line and "beta 3" in line and "linear" in line
    _, line = resolve_execution(config.execution, spec, RTCConfig(mode="off"))
    assert "play the newest chunk" in line and "real-time" not in line


def test_tempo_status_says_real_time_chunking_is_on(tmp_path) -> None:
    flow = make_demo_flow_policy(cameras=(("front", 32, 32),), chunk_size=50, dim_model=16)
    rtc = RTCConfig(mode="inpaint")
    config = ipc_config(
        tmp_path, "policy.rtc.mode=inpaint", "execution.ensemble=newest", "execution.query_period=4"
    )
    with running_daemon(config, served_here(EagerPolicy(serve_with_rtc(flow, rtc)))) as daemon:
        text = render_status(daemon.status())
    line = next(x for x in text.splitlines() if x.startswith("execution:"))
    assert "real-time chunking (policy.rtc: mode inpaint, beta default" in line
    assert "play the newest chunk" not in line
