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


def test_the_client_names_the_policy_in_its_hello():
    import zmq

    from controller.errors import DaemonUnavailable
    from controller.wire.client import TempoClient

    context = zmq.Context()
    daemon = context.socket(zmq.ROUTER)  # stands for the daemon: takes the hello, answers none
    daemon.bind("inproc://hello-policy")
    client = TempoClient(
        "inproc://hello-policy", "r", ["a"], {}, 1, policy="pi0", context=context,
        handshake_timeout_s=0.05,
    )  # fmt: skip
    try:
        with pytest.raises(DaemonUnavailable):
            client.connect()
        assert daemon.poll(1000)
        _identity, *frames = daemon.recv_multipart()
        said = decode(frames)
        assert said.kind == "hello" and said.header["policy"] == "pi0"
    finally:
        client.close()
        daemon.close(linger=0)
        context.term()
