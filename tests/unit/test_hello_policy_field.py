"""hello's optional `policy` field: a name of 1 to 64 characters, text only; TempoClient
sends it when given one."""

from __future__ import annotations

import pytest

from controller.errors import ErrorCode, ProtocolError
from controller.wire.protocol import decode, encode

SPEC = {"joints": ["a"], "cameras": [], "state_size": 1}


def hello(**fields: object) -> list[object]:
    return encode("hello", robot="r", seq=1, time_ns=1, fields={"spec": SPEC, **fields})


def test_a_hello_may_name_a_policy():
    assert decode(hello(policy="pi0")).header["policy"] == "pi0"
    assert "policy" not in decode(hello()).header


@pytest.mark.parametrize(
    ("policy", "why"),
    [
        ("", "must name one in 1 to 64"),
        ("p" * 65, "must name one in 1 to 64"),
        (3, "must be a string"),
    ],
)
def test_a_policy_that_is_no_name_is_malformed(policy: object, why: str):
    with pytest.raises(ProtocolError) as refused:
        decode(hello(policy=policy))
    assert refused.value.code is ErrorCode.MALFORMED
    assert "policy" in str(refused.value) and why in str(refused.value)


def test_the_client_names_the_policy_in_its_hello(monkeypatch: pytest.MonkeyPatch):
    from controller.wire.client import TempoClient

    sent: list[tuple[str, dict[str, object]]] = []
    client = TempoClient("ipc:///nonexistent", "r", ["a"], {}, 1, policy="pi0")
    monkeypatch.setattr(client, "_send", lambda kind, fields: sent.append((kind, fields)))
    client._send_hello()
    client._close_socket()
    assert sent[0][0] == "hello" and sent[0][1]["policy"] == "pi0"
