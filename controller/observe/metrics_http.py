"""An optional Prometheus `/metrics` endpoint: the daemon's histograms, counters and gauges.

    metrics:
      enabled: true              # off by default
      bind: 127.0.0.1:9464       # loopback only unless allow_remote: true
      labels: {cell: lab-3}      # added to every series (optional)

Off unless configured, and needs the optional dependency (`pip install
'tempo-controller[metrics]'`). It runs its own thread and reads the same lock-free snapshots as
`tempo status` (a scrape never touches the control loop); nothing is registered in
prometheus_client's global registry.

Exported (base units, Prometheus naming conventions):

    tempo_section_duration_seconds{section}        histogram, one series per telemetry section
    tempo_tick_lateness_seconds                    histogram
    tempo_observation_to_action_seconds            histogram
    tempo_<counter>_total, tempo_<gauge>           telemetry counters and gauges
    tempo_uptime_seconds, tempo_control_rate_target_hertz, tempo_control_rate_achieved_hertz
    tempo_ticks_total, tempo_missed_ticks_total, tempo_actions_sent_total, tempo_holds_sent_total,
    tempo_inferences_total, tempo_inference_failures_total, tempo_chunks_rejected_total,
    tempo_messages_received_total, tempo_send_dropped_total, tempo_protocol_errors_total{code}
    (every code, 0 until it happens), tempo_daemon_guard_interventions_total{guard} (all robots
    since start, those gone included)
    tempo_recording_records_written_total, tempo_recording_incidents_total,
    tempo_recording_dropped_total{kind}, tempo_recording_files_deleted_total,
    tempo_recording_deleted_bytes_total (with the flight recorder on: record.mode)
    tempo_robots_connected, tempo_robot_last_observation_age_seconds{robot},
    tempo_robot_guard_state{robot,state}, tempo_guard_interventions_total{robot,guard},
    tempo_robot_held_ticks_total{robot}, tempo_robot_events_total{robot,event}
    tempo_policy_tier_info{tier,precision,device}, tempo_policy_tier_level (0 = graph ..
    3 = eager_fp32), tempo_policy_ready, tempo_policy_steps_total{outcome},
    tempo_policy_demotions_total{from_tier,to_tier,cause}
    per policy (controller.observe.metrics_policies): tempo_policy_robots, _load, _max_load,
    _serving, _inferences_total, _inference_failures_total, _actions_sent_total,
    _holds_sent_total, all {policy}; tempo_policy_batch_step_seconds{policy,batch}

Hostile or broken clients cannot hold it: each connection has its own (daemon) thread, has
REQUEST_READ_TIMEOUT_S to send its whole request, at most MAX_CONNECTIONS are served at once (more
are closed at once and counted), and one that leaves mid-reply is logged at DEBUG, not as a
traceback.

Histogram buckets are the fine log buckets of `controller.observe.histogram` coarsened to 1-2-5
steps from 10 us to 10 s (19 `le` bounds and +Inf); every coarse bound is also a fine bound, so the
cumulative counts are exact.
"""

from __future__ import annotations

import io
import ipaddress
import logging
import re
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from controller.errors import ConfigError
from controller.observe.metrics_export import TempoCollector

log = logging.getLogger(__name__)

RESERVED_LABELS = {"section", "robot", "tier", "le", "code", "guard", "event", "state", "cause"}
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
INSTALL_HINT = "pip install 'tempo-controller[metrics]'"
REQUEST_READ_TIMEOUT_S = 3.0  # for a whole request, however slowly it trickles in
WRITE_TIMEOUT_S = 5.0  # per send of the reply, to a client that stopped reading
MAX_CONNECTIONS = 64  # served at once; a Prometheus scrape needs one


def parse_bind(bind: str) -> tuple[str, int]:
    """'127.0.0.1:9464' / '[::1]:9464' / 'localhost:9464' -> (host, port)."""
    host, sep, port_text = bind.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError(f"{bind!r} is not HOST:PORT, e.g. 127.0.0.1:9464")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"port {port} is out of range (0-65535; 0 picks a free port)")
    return host, port


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve anywhere


class MetricsConfig(BaseModel):
    """The optional Prometheus endpoint."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(
        default=False,
        description=f"Serve GET /metrics in the Prometheus text format (needs {INSTALL_HINT}).",
    )
    bind: str = Field(
        default="127.0.0.1:9464",
        description="HOST:PORT to listen on; loopback unless allow_remote. Port 0 picks a "
        "free port (tests).",
    )
    allow_remote: bool = Field(
        default=False,
        description="Allow a non-loopback bind. /metrics has no authentication or TLS: only "
        "on a trusted network.",
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="Labels added to every series, e.g. {cell: lab-3}, so a fleet's "
        "dashboards can tell daemons apart beyond Prometheus' own instance label.",
    )

    @field_validator("bind")
    @classmethod
    def _parse(cls, value: str) -> str:
        parse_bind(value)
        return value

    @field_validator("labels")
    @classmethod
    def _label_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _LABEL_NAME.match(name) or name.startswith("__"):
                raise ValueError(
                    f"label name {name!r} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, "
                    "not starting with __)"
                )
            if name in RESERVED_LABELS:
                raise ValueError(f"label name {name!r} is used by Tempo's own series; rename it")
        return value

    @model_validator(mode="after")
    def _loopback_unless_allowed(self) -> MetricsConfig:
        host, _ = parse_bind(self.bind)
        if not self.allow_remote and not is_loopback(host):
            raise ValueError(
                f"metrics.bind {self.bind} is not a loopback address. /metrics has no "
                "authentication or TLS and shows anyone who can reach it the robots' names, "
                "the policy and its timings; keep it on 127.0.0.1 and let a Prometheus agent on "
                "this machine (or an SSH tunnel) scrape it, or set metrics.allow_remote: true "
                "if this network is trusted"
            )
        return self


def check_available(config: MetricsConfig) -> None:
    """Refuse enabled metrics without prometheus-client now (call before the slow policy load)."""
    if not config.enabled:
        return
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise ConfigError(_missing_text()) from None


def _missing_text() -> str:
    return (
        f"metrics.enabled is true but prometheus-client is not installed: {INSTALL_HINT} "
        "(or set metrics.enabled: false)"
    )


# -- the HTTP server -------------------------------------------------------------------------------


class _Server(socketserver.ThreadingMixIn, HTTPServer):
    """A thread per connection (daemon threads, never joined: a stuck client cannot hold
    `stop`), at most MAX_CONNECTIONS of them; past that a connection is closed at once."""

    allow_reuse_address = True
    daemon_threads = True
    block_on_close = False
    request_queue_size = MAX_CONNECTIONS

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self._lock = threading.Lock()
        self.active = 0
        self.refused = 0  # connections closed unserved: MAX_CONNECTIONS were being served
        self.client_errors = 0  # connections that failed on the client's side (left, timed out)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            full = self.active >= MAX_CONNECTIONS
            if full:
                self.refused += 1
            else:
                self.active += 1
        if full:
            log.debug(
                "metrics: %d connections open; closed one from %s", MAX_CONNECTIONS, client_address
            )
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except Exception:  # no thread started: give the slot back
            with self._lock:
                self.active -= 1
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self.active -= 1

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that leaves or stalls is its own business (DEBUG, counted); anything else
        is ours and goes to the daemon's log, never to stderr."""
        error = sys.exc_info()[1]
        if isinstance(error, OSError):  # BrokenPipe, ConnectionReset, TimeoutError, ...
            with self._lock:
                self.client_errors += 1
            log.debug("metrics: client %s: %s", client_address, error)
        else:
            log.error("metrics: serving %s failed", client_address, exc_info=error)


class _Server6(_Server):
    address_family = socket.AF_INET6


class _DeadlineReader(io.RawIOBase):
    """A socket's reads, all of them within one deadline: a client trickling a byte now and
    then cannot keep its connection (a plain socket timeout restarts with each byte)."""

    def __init__(self, connection: socket.socket, timeout_s: float) -> None:
        self._connection = connection
        self._deadline = time.monotonic() + timeout_s

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request took too long to arrive")
        self._connection.settimeout(left)
        return self._connection.recv_into(buffer)


class _ServerCounters:
    """The /metrics server's own trouble, scraped with the rest: a scrape that succeeds can
    show that others were refused or cut short."""

    def __init__(self, server: MetricsServer, labels: dict[str, str]) -> None:
        self._server, self._labels = server, labels

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        for name, help_text, value in (
            (
                "metrics_connections_refused",
                f"Connections to /metrics closed unserved: {MAX_CONNECTIONS} were open.",
                self._server.refused_connections,
            ),
            (
                "metrics_client_errors",
                "Connections to /metrics that failed on the client's side (left or too slow).",
                self._server.client_errors,
            ),
        ):
            family = CounterMetricFamily("tempo_" + name, help_text, labels=list(self._labels))
            family.add_metric(list(self._labels.values()), value)
            yield family


class MetricsServer:
    """GET /metrics on its own thread. The constructor does no I/O; `start` binds."""

    def __init__(
        self,
        telemetry_snapshot: Callable[[], dict[str, Any]],
        status: Callable[[], dict[str, Any]] | None,
        config: MetricsConfig,
    ) -> None:
        """telemetry_snapshot: e.g. `lambda: telemetry.snapshot(buckets=True)` (buckets are
        needed for the histograms); status: e.g. `daemon.status`."""
        self.config = config
        self._telemetry_snapshot = telemetry_snapshot
        self._status = status
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.url: str | None = None

    @property
    def refused_connections(self) -> int:
        """Connections closed unserved because MAX_CONNECTIONS were open."""
        return self._server.refused if self._server is not None else 0

    @property
    def client_errors(self) -> int:
        """Connections that failed on the client's side: it left mid-reply or was too slow."""
        return self._server.client_errors if self._server is not None else 0

    def start(self) -> str | None:
        """Bind and serve; returns the URL of /metrics, or None when metrics are disabled.

        Raises ConfigError when prometheus-client is missing or the address cannot be bound."""
        if not self.config.enabled:
            return None
        try:
            from prometheus_client import CollectorRegistry
            from prometheus_client.exposition import choose_encoder
        except ImportError:
            raise ConfigError(_missing_text()) from None
        registry = CollectorRegistry(auto_describe=False)  # fresh: nothing global is touched
        registry.register(  # type: ignore[arg-type]
            TempoCollector(self._telemetry_snapshot, self._status, self.config.labels)
        )
        registry.register(_ServerCounters(self, self.config.labels))  # type: ignore[arg-type]
        handler = _handler(registry, choose_encoder)
        host, port = parse_bind(self.config.bind)
        server_class: type[_Server] = _Server6 if ":" in host else _Server
        try:
            self._server = server_class((host, port), handler)
        except OSError as exc:
            raise ConfigError(
                f"cannot serve metrics on {self.config.bind} (metrics.bind): {exc.strerror or exc}"
            ) from None
        address = self._server.server_address
        bound_host, bound_port = str(address[0]), int(address[1])
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        self.url = f"http://{shown}:{bound_port}/metrics"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="tempo-metrics",
            daemon=True,
        )
        self._thread.start()
        log.info("metrics on %s", self.url)
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(1.0)
            self._thread = None


def _handler(registry: Any, choose_encoder: Callable[[str], Any]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "tempo-metrics"
        timeout = WRITE_TIMEOUT_S  # the reply's; the request has its own deadline (setup)

        def setup(self) -> None:
            super().setup()
            self.rfile.close()  # replaced by one whose reads share a deadline
            self.rfile = io.BufferedReader(_DeadlineReader(self.connection, REQUEST_READ_TIMEOUT_S))

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.split("?", 1)[0] not in ("/metrics", "/metrics/"):
                self._reply(404, b"not found: Tempo serves /metrics only\n", "text/plain")
                return
            try:
                encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                body = encoder(registry)
            except Exception:
                log.exception("metrics: collecting failed")
                self._reply(500, b"collecting metrics failed; see the daemon's log\n", "text/plain")
                return
            self._reply(200, body, content_type)

        def _reply(self, code: int, body: bytes, content_type: str) -> None:
            self.connection.settimeout(WRITE_TIMEOUT_S)
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            log.debug("metrics: " + format, *args)

    return Handler
