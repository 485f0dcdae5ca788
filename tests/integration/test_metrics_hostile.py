"""/metrics and the status socket outlive hostile clients: slow or idle connections never delay
a scrape, and a client that leaves mid-reply leaves no traceback. Loopback only."""

from __future__ import annotations

import logging
import re
import select
import socket
import struct
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import zmq

from controller.observe.metrics_http import MAX_CONNECTIONS, MetricsConfig, MetricsServer
from controller.observe.status_server import StatusServer, request_status

pytest.importorskip("prometheus_client")

ANSWERS_WITHIN_S = 2.0  # "not blocked": well under the 3 s request read timeout, generous


@pytest.fixture()
def metrics() -> Iterator[tuple[MetricsServer, str]]:
    server = MetricsServer(
        lambda: {}, lambda: {"uptime_s": 1.0}, MetricsConfig(enabled=True, bind="127.0.0.1:0")
    )
    url = server.start()
    assert url is not None
    try:
        yield server, url
    finally:
        server.stop()


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=ANSWERS_WITHIN_S) as reply:
        return reply.read().decode()


def connections(port: int, count: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(count)]


def test_idle_connections_do_not_delay_a_scrape(metrics: tuple[MetricsServer, str]) -> None:
    _, url = metrics
    idle = connections(port_of(url), 30)
    try:
        time.sleep(0.2)  # each is accepted and waits for its request line
        for _ in range(3):
            assert "tempo_uptime_seconds 1.0" in scrape(url)
    finally:
        for connection in idle:
            connection.close()


def test_a_trickling_client_does_not_delay_a_scrape(metrics: tuple[MetricsServer, str]) -> None:
    _, url = metrics
    stop = threading.Event()
    trickler = socket.create_connection(("127.0.0.1", port_of(url)), timeout=5)

    def trickle() -> None:
        for byte in b"GET /metrics HTTP/1.0\r\n":
            if stop.wait(0.5):
                return
            try:
                trickler.send(bytes([byte]))
            except OSError:
                return  # the server gave up on it: also fine

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        for _ in range(3):
            assert "tempo_uptime_seconds" in scrape(url)
    finally:
        stop.set()
        thread.join(2)
        trickler.close()


def test_a_trickling_client_is_cut_off_at_the_read_timeout(
    metrics: tuple[MetricsServer, str],
) -> None:
    _, url = metrics
    trickler = socket.create_connection(("127.0.0.1", port_of(url)), timeout=10)
    start = time.monotonic()
    closed = False
    try:
        while not closed and time.monotonic() - start < 8:  # a byte every 0.3 s, forever
            trickler.send(b"G")
            if select.select([trickler], [], [], 0.3)[0]:
                closed = trickler.recv(1) == b""
    except OSError:
        closed = True  # reset by the server
    finally:
        trickler.close()
    assert closed, "the server kept reading a request that never ends"


def test_connections_past_the_cap_are_closed_and_counted(
    metrics: tuple[MetricsServer, str],
) -> None:
    server, url = metrics
    held = connections(port_of(url), MAX_CONNECTIONS + 5)
    try:
        deadline = time.monotonic() + 5
        while server.refused_connections < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.refused_connections >= 5
    finally:
        for connection in held:
            connection.close()
    deadline = time.monotonic() + 5  # once they are gone, scrapes are served again
    while True:
        try:
            text = scrape(url)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    assert "tempo_uptime_seconds" in text
    refused = re.search(
        r"^tempo_metrics_connections_refused_total(?:\{[^}]*\})? (\S+)$", text, re.M
    )
    assert refused is not None and float(refused.group(1)) >= 5  # the refusals are scraped too


def test_a_client_leaving_mid_reply_leaves_no_traceback(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)

    def slow_status() -> dict[str, Any]:
        time.sleep(0.3)  # the client is gone by the time the reply is written
        return {"uptime_s": 1.0}

    server = MetricsServer(lambda: {}, slow_status, MetricsConfig(enabled=True, bind="127.0.0.1:0"))
    url = server.start()
    assert url is not None
    try:
        for _ in range(3):
            client = socket.create_connection(("127.0.0.1", port_of(url)), timeout=5)
            client.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()  # a reset: the reply's write fails
        time.sleep(1.2)
        assert "tempo_uptime_seconds" in scrape(url)  # and it still serves
    finally:
        server.stop()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "BrokenPipe" not in err and "ConnectionReset" not in err
    for record in caplog.records:
        assert record.exc_info is None, record.getMessage()
        assert "Traceback" not in record.getMessage()
        assert record.levelno <= logging.DEBUG or "metrics on" in record.getMessage()


def test_the_status_socket_answers_past_idle_and_trickling_clients(tmp_path: Any) -> None:
    """ZeroMQ reads connections on its own I/O thread and hands the server thread only whole
    messages, so raw connections that never finish a greeting cannot hold it."""
    context = zmq.Context()
    status = StatusServer(context, "tcp://127.0.0.1:0", lambda: {"ok": 1})
    endpoint = status.start()
    port = int(endpoint.rsplit(":", 1)[1])
    idle = connections(port, 30)
    trickler = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        trickler.send(b"\xff")  # the first byte of a ZMTP greeting, and no more
        for _ in range(3):
            start = time.monotonic()
            assert request_status(endpoint, timeout_s=ANSWERS_WITHIN_S, context=context) == {
                "ok": 1
            }
            assert time.monotonic() - start < ANSWERS_WITHIN_S
    finally:
        for connection in [*idle, trickler]:
            connection.close()
        status.stop()
        context.destroy(0)
