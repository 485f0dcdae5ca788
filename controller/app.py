"""Composition root: build the policy, load and warm it, then start the daemon.

Everything slow or fallible happens here, before the daemon reports ready, so that a bad config
or checkpoint stops the start with one clear sentence instead of failing while serving.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

import zmq

from controller.config import TempoConfig
from controller.daemon.security import check_bind_allowed, check_local_only
from controller.daemon.service import Daemon, open_transport, unopened_transport
from controller.daemon.systemd import notify
from controller.inference.build import resolve_device, start_runner
from controller.inference.runner import Runner
from controller.observe.metrics_http import MetricsServer, check_available
from controller.observe.status_server import StatusServer
from controller.observe.telemetry import Telemetry
from policies.base import Policy
from policies.catalog import build_tensor_policy

log = logging.getLogger(__name__)


def build_policy(config: TempoConfig, progress: Callable[[str], None] | None = None) -> Runner:
    """Load the policy and make it ready to serve: every tier built, warmed up and checked
    against the FP32 reference (see controller.inference.runner)."""
    device = resolve_device(config.policy.device)
    tensor_policy = build_tensor_policy(config.policy, config.robot, device=device)
    return start_runner(tensor_policy, config.runner, device, progress)


def serve(
    config: TempoConfig,
    *,
    stop: threading.Event | None = None,
    on_ready: Callable[[Daemon], Any] | None = None,
    install_signals: bool = True,
    policy: Policy | None = None,
) -> int:
    """Run the daemon until SIGTERM/SIGINT (or `stop`); returns the exit code. `policy`, when
    given, is served instead of the configured one (tests and embedding)."""
    stop = stop or threading.Event()
    # Refuse an exposed bind before the (possibly slow) policy load, not after.
    check_bind_allowed(config.server.bind, config.security)
    check_local_only(config.server.status_bind, "server.status_bind")
    check_available(config.metrics)  # prometheus-client missing: say so before the slow load
    # Bind both sockets before the load too: a taken endpoint is one sentence (BindError, exit
    # 2) before minutes of compiling, and the endpoint is held from now on.
    context = zmq.Context.instance()
    transport = open_transport(config, unopened_transport(config, context))
    status = StatusServer(context, config.server.status_bind)  # answers once the daemon runs
    try:
        status_endpoint = status.start()
        if policy is None:
            policy = build_policy(config)
    except BaseException:
        status.stop()
        transport.close()
        if transport.curve is not None:
            transport.curve.stop()
        raise
    telemetry = Telemetry.from_config(config.telemetry)
    attach = getattr(policy, "attach_telemetry", None)  # the Runner: upload, model, postprocess
    if callable(attach):
        attach(telemetry)
    daemon = Daemon(config, policy, context, telemetry=telemetry, transport=transport)
    metrics = MetricsServer(lambda: telemetry.snapshot(buckets=True), daemon.status, config.metrics)
    if install_signals:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
    try:
        endpoint = daemon.start()
    except BaseException:
        status.stop()
        raise
    status.serve(daemon.status)
    try:
        metrics_url = metrics.start()  # None unless metrics.enabled
    except Exception:
        daemon.stop()
        status.stop()
        raise
    log.info(
        "ready: serving %s on %s (status on %s%s)",
        config.policy.kind,
        endpoint,
        status_endpoint,
        f", metrics on {metrics_url}" if metrics_url else "",
    )
    notify("READY=1")
    if on_ready is not None:
        on_ready(daemon)
    failed = False
    while not stop.wait(0.2):
        if not daemon.running:
            failed = True
            break
    notify("STOPPING=1")
    log.info("stopping: holding every robot")
    daemon.stop()
    status.stop()
    metrics.stop()
    return 1 if failed else 0
