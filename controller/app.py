"""Composition root: start the policy (its inference process, or in this process), then the daemon.

Everything slow or fallible happens here, before the daemon reports ready, so that a bad config
or checkpoint stops the start with one clear sentence instead of failing while serving.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import zmq

from controller.config import TempoConfig, policy_views
from controller.daemon.openpi_endpoint import check_openpi
from controller.daemon.security import check_bind_allowed, check_local_only, status_access
from controller.daemon.service import (
    Daemon,
    check_action_config,
    open_transport,
    unopened_transport,
)
from controller.daemon.systemd import notify
from controller.daemon.transport import RouterTransport
from controller.errors import CheckpointError
from controller.feed.served_policy import ServedPolicy
from controller.link.policy_swap import swap_command
from controller.link.remote_policy import RemotePolicy
from controller.observe.metrics_http import MetricsServer, check_available
from controller.observe.status_server import StatusServer
from controller.observe.telemetry import Telemetry
from controller.record.jpeg_frames import check_available as check_jpeg_available

log = logging.getLogger(__name__)

# How far below the control process's CPU priority an inference process starts (until it is
# built, see process_spawner): a restart's build and warm-up (and the next standby's imports)
# on every core must not take the CPU from the control loop.
INFERENCE_NICE = 10


def inference_process(config: TempoConfig) -> RemotePolicy:
    """The policy in its own supervised process (`tempo inference-process`), not started yet:
    `start()` spawns it and waits until it has loaded, warmed up and checked the policy.
    Every start of the process reads the config on its stdin, from the daemon's memory: no file
    that a tmp cleaner could remove while the daemon runs for weeks."""
    command = [sys.executable, "-m", "controller.cli", "inference-process"]
    if config.policy.remote is not None:  # a relay to `tempo infer-server` stands in for it
        command = [sys.executable, "-m", "controller.cli", "infer-relay"]
    supervision = config.supervision
    return RemotePolicy(
        command,
        hang_timeout_s=supervision.hang_timeout_s,
        start_timeout_s=supervision.start_timeout_s,
        standby=supervision.standby,
        config_json=json.dumps(config.model_dump(mode="json")),
        nice=INFERENCE_NICE,
        batching=(config.execution.batch_sizes, config.execution.batch_window_us),
        episode_swap_timeout_s=supervision.episode_swap_timeout_s,
    )


def _start_policy(config: TempoConfig, cleanup: contextlib.ExitStack) -> ServedPolicy:
    """The configured policy, ready: in its own supervised process (stopped by `cleanup`), or in
    this one when `supervision.inference_process` is off."""
    if not config.supervision.inference_process:
        # In-process mode, by design the one import of torch into the control process (and the
        # one exception in pyproject.toml's import contract for it).
        from controller.inference.build import apply_inference_threads, build_policy

        apply_inference_threads(config.supervision.inference_threads)
        sizes, window_us = config.execution.batch_sizes, config.execution.batch_window_us
        return build_policy(
            config.policy, config.robot, config.runner, None, None, sizes, window_us
        )
    remote = inference_process(config)
    cleanup.callback(remote.stop)  # registered first: a failed or interrupted start cleans up
    remote.start()
    return remote


def check_checkpoint_folder(path: Path | None) -> None:
    """The check the checkpoint reader makes first (same sentence), made in the control
    process: there it costs nothing, in the inference process it waits for torch's import."""
    if path is not None and not path.is_dir():
        raise CheckpointError(f"checkpoint directory {path} does not exist or is not a folder")


def serve(
    config: TempoConfig,
    *,
    stop: threading.Event | None = None,
    on_ready: Callable[[Daemon], Any] | None = None,
    install_signals: bool = True,
    policy: ServedPolicy | Sequence[ServedPolicy] | None = None,
) -> int:
    """Run the daemon until SIGTERM/SIGINT (or `stop`); returns the exit code. `policy`, when
    given, is served instead of the configured one, or ones (tests and embedding)."""
    stop = stop or threading.Event()
    # Refuse an exposed bind before the (possibly slow) policy load, not after.
    check_bind_allowed(config.server.bind, config.security)
    check_local_only(config.server.status_bind, "server.status_bind")
    check_available(config.metrics)  # prometheus-client missing: say so before the slow load
    check_jpeg_available(config.record)  # PyAV, for record.frames: jpeg
    check_openpi(config.server.openpi)  # websockets, its bind and its API keys
    # Bind both sockets before the load too: a taken endpoint is one sentence (BindError, exit
    # 2) before minutes of compiling, and the endpoint is held from now on.
    access = status_access(config.server)  # its token made or loaded, before any bind
    context: zmq.Context[Any] = zmq.Context.instance()
    transport = open_transport(config, unopened_transport(config, context))
    status = StatusServer(context, config.server.status_bind, access=access)  # answers once ready
    with contextlib.ExitStack() as cleanup:
        try:
            status_endpoint = status.start()
            if policy is None:
                # A missing checkpoint folder: said now, not after an inference process has
                # started and imported torch (after the binds, whose errors come first).
                for _, view in policy_views(config):
                    check_checkpoint_folder(view.policy.path)
                with transport.discarding():  # nobody else reads the bound socket meanwhile
                    # One inference process per policy (each its own device and tiers).
                    policy = [_start_policy(view, cleanup) for _, view in policy_views(config)]
            served = list(policy) if isinstance(policy, Sequence) else [policy]
            for (_, view), one in zip(policy_views(config), served, strict=False):
                check_action_config(one.spec, view)  # unknown joints refused; guards logged
            names = [name for name, _ in policy_views(config)]
            status.commands["swap"] = swap_command(dict(zip(names, served, strict=False)))
        except BaseException:
            status.stop()
            transport.close()
            if transport.curve is not None:
                transport.curve.stop()
            raise
        sockets = (context, transport, status, status_endpoint)
        return _serve_policy(config, policy, sockets, stop, on_ready, install_signals)


def _serve_policy(
    config: TempoConfig,
    policy: ServedPolicy | Sequence[ServedPolicy],
    sockets: tuple[zmq.Context, RouterTransport, StatusServer, str],
    stop: threading.Event,
    on_ready: Callable[[Daemon], Any] | None,
    install_signals: bool,
) -> int:
    """Serve a ready policy until `stop`; the sockets are bound already."""
    context, transport, status, status_endpoint = sockets
    telemetry = Telemetry.from_config(config.telemetry)
    for one in policy if isinstance(policy, Sequence) else [policy]:
        one.attach_telemetry(telemetry)  # a runner here: upload, model, postprocess
    daemon = Daemon(config, policy, context, telemetry=telemetry, transport=transport)
    status.commands["mark"] = daemon.operator_marks.command
    for lane in daemon.lanes.all:
        named = f" of policy {lane.name}" if config.policies else ""
        log.info("execution%s: %s", named, lane.execution)
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
        ", ".join(f"{name} ({view.policy.kind})" for name, view in policy_views(config))
        if config.policies
        else config.policy.kind,
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
