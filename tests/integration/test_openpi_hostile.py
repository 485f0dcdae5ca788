"""Hostile openpi clients against a real daemon (API keys on, small limits): oversized requests,
wrong dtypes, object arrays, missing keys, text and junk frames, no key, a wrong key, a flood of
requests and a flood of connections. Each request gets one sentence (never a traceback) and
its connection stays usable; a good openpi-client streaming beside them gets the same chunk for
the same observation every time and is never refused."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest

pytest.importorskip("websockets")
websocket_client_policy = pytest.importorskip("openpi_client.websocket_client_policy")
msgpack_numpy = pytest.importorskip("openpi_client.msgpack_numpy")

from websockets.exceptions import ConnectionClosed, InvalidStatus  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

from tests.conftest import running_daemon, wait_for  # noqa: E402
from tests.integration.test_openpi_clients import (  # noqa: E402
    in_process_policy,
    observation,
    openpi_config,
)

pytestmark = pytest.mark.filterwarnings("ignore:connect\\(\\) must be used:DeprecationWarning")
KEY = "k3y-for-the-good-and-the-hostile-0001"
LIMIT_BYTES = 128 * 1024
RATE = 20  # requests a second per connection
LAYOUT = "libero"


def sentence(reply: object) -> str:
    """A refusal: one line of text, no traceback."""
    assert isinstance(reply, str), f"expected a sentence, got {type(reply).__name__}"
    assert "\n" not in reply and "Traceback" not in reply and 10 < len(reply) < 400
    return reply


class GoodClient:
    """openpi-client streaming one observation on its own thread, under the rate limit."""

    def __init__(self, endpoint: str) -> None:
        self.policy = websocket_client_policy.WebsocketClientPolicy(endpoint, api_key=KEY)
        self.chunks: list[np.ndarray] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="good-openpi", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        obs = observation(LAYOUT, 5)
        try:
            while not self._stop.wait(1.5 / RATE):
                self.chunks.append(self.policy.infer(obs)["actions"])
        except BaseException as exc:  # the test reports it
            self.error = exc

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Any]:
    keys = tmp_path / "openpi.keys"
    keys.write_text(f"# the lab's keys\n{KEY}\n")
    os.chmod(keys, 0o600)
    config = openpi_config(
        tmp_path,
        LAYOUT,
        f"server.openpi.api_keys={keys}",
        f"server.openpi.max_message_bytes={LIMIT_BYTES}",
        f"server.openpi.max_requests_per_s={RATE}",
        "server.openpi.max_connections=4",
    )
    with running_daemon(config, in_process_policy(config, LAYOUT)) as running:
        yield running


def raw(endpoint: str, key: str | None = KEY) -> Any:
    """A websocket as openpi-client opens it, metadata read; for sending what it never would."""
    headers = {"Authorization": f"Api-Key {key}"} if key is not None else None
    ws = connect(endpoint, additional_headers=headers, max_size=None, compression=None)
    msgpack_numpy.unpackb(ws.recv(timeout=10))
    return ws


def ask(ws: Any, payload: bytes | str) -> Any:
    ws.send(payload)
    return ws.recv(timeout=30)


def array_map(data: bytes, dtype: str, shape: list[int]) -> dict[bytes, Any]:
    return {b"__ndarray__": True, b"data": data, b"dtype": dtype, b"shape": shape}


def hostile_requests() -> list[tuple[bytes | str, str]]:
    """(request, words its sentence holds), each sent 5 times on one connection."""
    good = observation(LAYOUT)
    floats = {**good, "observation/image": good["observation/image"].astype(np.float32)}
    missing = {k: v for k, v in good.items() if k != "observation/state"}
    big = {**good, "extra": np.zeros(LIMIT_BYTES + 1000, np.uint8)}
    pickled = msgpack.packb(
        {"observation/state": array_map(b"\x80\x04K\x01.", "|O", [1])}, use_bin_type=True
    )
    return [
        (msgpack_numpy.packb(big), f"at most {LIMIT_BYTES}"),
        (msgpack_numpy.packb(floats), "uint8"),
        (pickled, "not accepted"),
        (msgpack_numpy.packb(missing), "no 'observation/state'"),
        (msgpack_numpy.packb({**good, "observation/state": np.full(8, np.nan)}), "NaN"),
        ("a text frame", "not text"),
        (b"\xc1\xc1\xc1", "not msgpack"),
    ]


def test_hostile_clients_get_one_sentence_and_leave_a_good_one_alone(daemon: Any) -> None:
    endpoint = daemon.openpi_endpoint
    good = GoodClient(endpoint)
    try:
        wait_for(lambda: len(good.chunks) >= 3 or good.error, timeout=60)
        before = len(good.chunks)
        refusals = 0

        for payload, words in hostile_requests():
            with raw(endpoint) as ws:
                for _ in range(5):
                    assert words in sentence(ask(ws, payload))
                    refusals += 1
                # The connection still serves a good request after its refusals.
                reply = ask(ws, msgpack_numpy.packb(observation(LAYOUT)))
                assert msgpack_numpy.unpackb(reply)["actions"].shape == (10, 7)

        # Twice the size limit: websockets stops reading, the connection closes (1009).
        with raw(endpoint) as ws:
            ws.send(b"\0" * (2 * LIMIT_BYTES + 1))
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009

        # No key, a wrong key, a key in the wrong scheme: refused at the handshake, one
        # sentence as the body (what openpi-client raises with).
        for key, status, words in [
            (None, 401, "asks for an API key"),
            ("not-the-key-at-all-0000000", 403, "not accepted"),
        ]:
            for _ in range(5):
                with pytest.raises(InvalidStatus) as refused:
                    raw(endpoint, key)
                response = refused.value.response
                assert response.status_code == status
                assert words in sentence(response.body.decode().rstrip("\n"))
                refusals += 1
        with pytest.raises(InvalidStatus):
            websocket_client_policy.WebsocketClientPolicy(endpoint, api_key="wrong-" + KEY)

        # A flood: 100 requests sent back to back on one connection, replies read after.
        obs = msgpack_numpy.packb(observation(LAYOUT, 9))
        with raw(endpoint) as ws:
            for _ in range(100):
                ws.send(obs)
            replies = [ws.recv(timeout=30) for _ in range(100)]
        flooded = [r for r in replies if isinstance(r, str)]
        served = [r for r in replies if isinstance(r, bytes)]
        assert flooded and served and len(flooded) + len(served) == 100
        for reply in flooded:
            assert "requests a second" in sentence(reply)
        refusals += len(flooded)

        # A flood of connections: past server.openpi.max_connections (the good one counts).
        opened = [raw(endpoint) for _ in range(3)]
        try:
            with pytest.raises(InvalidStatus) as full:
                raw(endpoint)
            assert full.value.response.status_code == 503
            assert "max_connections" in sentence(full.value.response.body.decode().rstrip())
        finally:
            for ws in opened:
                ws.close()
        refusals += 1
        assert refusals >= 100

        wait_for(lambda: len(good.chunks) >= before + 3 or good.error, timeout=60)
    finally:
        good.stop()
    assert good.error is None, f"the good client failed: {good.error!r}"
    # Every chunk of the good client's one observation is the same (to the last bits a batch
    # of another size may change): nothing of the hostile connections reached its session.
    worst = max(float(np.abs(chunk - good.chunks[0]).max()) for chunk in good.chunks)
    assert worst < 1e-5, f"the good client's chunks differ by up to {worst}"

    status = daemon.status()
    openpi = status["openpi"]
    assert openpi["connections_refused"] >= 11
    assert {"not_allowed", "malformed", "non_finite"} <= set(openpi["refused"])
    listed = [r for r in status["robots"] if r.get("client") == "openpi"]
    (mine,) = [r for r in listed if r["sent"] == len(good.chunks)]
    assert not any(name.startswith("refused_") for name in mine["counters"])
