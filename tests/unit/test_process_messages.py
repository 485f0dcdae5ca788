"""The messages between the control process and its inference process: every message class comes
back from its bytes exactly as it went (arrays to the byte, any dtype), and bytes or maps that
are not a well-formed message raise MessageError, never another exception."""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from controller.process_protocol.message_codec import ARRAY_DTYPES, pack_array, unpack_array
from controller.process_protocol.process_messages import (
    FAILURE_CAUSES,
    AttachRing,
    AttachSlots,
    Build,
    ChunkReply,
    DetachRing,
    FailedStart,
    Hello,
    Infer,
    Message,
    MessageError,
    Prepared,
    Ready,
    RequestFailed,
    RingReady,
    Standby,
    Stop,
    decode,
    encode,
)
from policies.base import CameraSpec, Plan, PolicySpec, PromptSpec, PromptTokens

INTEGERS = st.integers(min_value=-(2**63), max_value=2**64 - 1)  # what msgpack carries
NAMES = st.text(max_size=8)

arrays = st.sampled_from(sorted(ARRAY_DTYPES)).flatmap(
    lambda dtype: hnp.arrays(
        dtype, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
    )
)
named_arrays = st.none() | st.dictionaries(NAMES, arrays, max_size=3)
plain_values = st.recursive(
    st.none()
    | st.booleans()
    | INTEGERS
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(NAMES, inner, max_size=3),
    max_leaves=10,
)
statuses = st.dictionaries(NAMES, plain_values, max_size=4)


prompt_specs = st.builds(
    PromptSpec,
    tokenizer=st.text(min_size=1, max_size=20),
    max_length=st.integers(1, 4096),
    vocab_size=st.integers(1, 1_000_000),
    template=st.sampled_from(["pi0", "pi05"]),
    default_task=st.none() | st.text(min_size=1, max_size=20),
)


@st.composite
def specs(draw: st.DrawFn) -> PolicySpec:
    cameras = draw(st.integers(0, 2))
    joints = draw(st.integers(1, 4))
    return PolicySpec(
        cameras=tuple(
            CameraSpec(
                name=f"cam{i}", height=draw(st.integers(1, 64)), width=draw(st.integers(1, 64))
            )
            for i in range(cameras)
        ),
        state_size=draw(st.integers(1, 8)),
        joint_names=tuple(f"j{i}" for i in range(joints)),
        chunk_size=draw(st.integers(1, 50)),
        state_history=draw(st.integers(1, 4)),
        frame_history=draw(st.integers(1, 4)),
        prompt=draw(st.none() | prompt_specs),
    )


past_frames = hnp.arrays(np.uint8, st.tuples(*(st.integers(1, 3),) * 3, st.just(3)))


@st.composite
def infers(draw: st.DrawFn) -> Infer:
    plan = draw(st.none() | st.builds(Plan, INTEGERS, arrays))
    in_ring = draw(st.booleans())
    length = draw(st.integers(0, 64))
    prompt = draw(
        st.none()
        | st.builds(
            PromptTokens,
            hnp.arrays(np.int64, length, elements=st.integers(0, 2**40)),
            hnp.arrays(np.bool_, length),
        )
    )
    return Infer(
        id=draw(INTEGERS),
        slot=draw(INTEGERS),
        generation=draw(INTEGERS),
        step=draw(INTEGERS),
        episode_start=draw(st.booleans()),
        delay=draw(INTEGERS),
        plan=plan,
        memory=draw(named_arrays),
        ring=draw(INTEGERS) if in_ring else None,
        state=draw(arrays) if in_ring else None,
        prompt=prompt,
        past_frames=draw(st.none() | st.dictionaries(st.text(max_size=4), past_frames, max_size=2)),
    )


STRATEGIES: dict[type[Message], st.SearchStrategy[Message]] = {
    Build: st.just(Build()),
    Stop: st.just(Stop()),
    AttachSlots: st.builds(AttachSlots, st.text(), INTEGERS),
    Infer: infers(),
    AttachRing: st.builds(AttachRing, INTEGERS, st.text(), INTEGERS),
    DetachRing: st.builds(DetachRing, INTEGERS),
    Standby: st.just(Standby()),
    Prepared: st.builds(Prepared, st.booleans()),
    Hello: st.builds(Hello, specs(), st.lists(st.text()).map(tuple), statuses),
    Ready: st.builds(Ready, st.booleans()),
    RingReady: st.builds(RingReady, INTEGERS, st.booleans()),
    FailedStart: st.builds(FailedStart, st.text()),
    ChunkReply: st.builds(
        ChunkReply, INTEGERS, arrays, named_arrays, INTEGERS, INTEGERS, st.none() | statuses
    ),
    RequestFailed: st.builds(RequestFailed, INTEGERS, st.sampled_from(FAILURE_CAUSES), st.text()),
}


def test_every_message_class_has_a_strategy() -> None:
    assert set(Message.__subclasses__()) == set(STRATEGIES)


@settings(max_examples=300)
@given(st.one_of(*STRATEGIES.values()))
def test_every_message_comes_back_exactly(message: Message) -> None:
    back = decode(encode(message))
    assert back == message and type(back) is type(message)


def test_equality_compares_arrays_by_dtype_and_bytes() -> None:
    actions = np.array([[1.0, np.nan]], np.float32)

    def reply(array: np.ndarray) -> ChunkReply:
        return ChunkReply(1, array, None, 0, 0)

    assert reply(actions) == reply(actions.copy())  # NaN too: the same bytes
    assert reply(actions) != reply(actions.astype(np.float64))
    assert reply(actions) != reply(actions.reshape(2, 1))
    assert reply(actions) != reply(np.array([[1.0, 2.0]], np.float32))


def test_decoded_arrays_are_writable_copies() -> None:
    actions = np.arange(6, dtype=np.float32).reshape(3, 2)
    back = decode(encode(ChunkReply(1, actions, {"m": actions}, 0, 0)))
    assert isinstance(back, ChunkReply) and back.memory is not None
    back.actions[0, 0] = 99.0
    back.memory["m"][0, 0] = 98.0
    assert actions[0, 0] == 0.0


@settings(max_examples=300)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_message_error(data: bytes) -> None:
    try:
        decode(data)
    except MessageError:
        pass


# ---- malformed messages --------------------------------------------------------------------

EXAMPLES: list[Message] = [
    AttachSlots("/dev/shm/tempo-x", 2),
    Infer(
        1,
        0,
        2,
        5,
        False,
        1,
        Plan(4, np.ones((2, 3), np.float32)),
        {"m": np.zeros(2, np.float32)},
        ring=3,
        state=np.zeros((1, 3), np.float32),
        prompt=PromptTokens(np.array([2, 9, 4, 0], np.int64), np.array([1, 1, 1, 0], bool)),
    ),
    AttachRing(2, "/dev/shm/tempo-y", 4),
    DetachRing(2),
    Hello(
        PolicySpec(cameras=(), state_size=2, joint_names=("a",), chunk_size=4),
        ("actions",),
        {"device": "cpu"},
    ),
    Ready(True),
    Prepared(True),
    RingReady(2, False),
    FailedStart("no tier passed"),
    ChunkReply(1, np.ones((4, 1), np.float32), None, 10, 20, {"device": "cpu"}),
    RequestFailed(1, "refused", "camera 'a': expected uint8"),
]


def as_map(message: Message) -> dict[str, Any]:
    raw = msgpack.unpackb(encode(message), raw=False)
    assert isinstance(raw, dict)
    return raw


def pack(raw: Any) -> bytes:
    return msgpack.packb(raw, use_bin_type=True)


def field_cases() -> list[tuple[str, bytes]]:
    """Every example without each of its fields, and with each field of a wrong type."""
    cases = []
    for message in EXAMPLES:
        raw = as_map(message)
        for name in raw:
            if name == "kind":
                continue
            cases.append(
                (f"{raw['kind']} without {name}", pack({k: v for k, v in raw.items() if k != name}))
            )
            for wrong in ([1], 1.5):
                cases.append((f"{raw['kind']} {name}={wrong!r}", pack({**raw, name: wrong})))
        cases.append((f"{raw['kind']} with an extra field", pack({**raw, "extra": 1})))
    return cases


@pytest.mark.parametrize(("case", "data"), field_cases(), ids=[c for c, _ in field_cases()])
def test_a_missing_or_mistyped_field_raises_message_error(case: str, data: bytes) -> None:
    with pytest.raises(MessageError):
        decode(data)


@pytest.mark.parametrize(
    "data",
    [
        b"\xc1",  # never used in msgpack
        b"\x93\x01\x02\x03",  # a list, not a map
        encode(Ready(True))[:-1],  # cut short
        pack({"pinned": True}),  # no kind
        pack({"kind": 3}),
        pack({"kind": "reboot"}),
        pack({1: 2}),  # a map key that is not a string
    ],
)
def test_bytes_that_are_no_message_raise_message_error(data: bytes) -> None:
    with pytest.raises(MessageError):
        decode(data)


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ({"dtype": "float32", "shape": [2, 2], "data": b"\x00" * 12}, "do not fill"),
        ({"dtype": "object", "shape": [1], "data": b"\x00" * 8}, "not a dtype"),
        ({"dtype": "<f4", "shape": [1], "data": b"\x00" * 4}, "not a dtype"),
        ({"dtype": "float32", "shape": [-1], "data": b""}, "bad shape"),
        ({"dtype": "float32", "shape": [True], "data": b"\x00" * 4}, "bad shape"),
        ({"dtype": "float32", "shape": [2**40, 0], "data": b""}, "bad shape"),
        ({"dtype": "float32", "shape": "1", "data": b"\x00" * 4}, "bad shape"),
        ({"dtype": "float32", "shape": [1], "data": "four"}, "must be bytes"),
        ({"shape": [1], "data": b"\x00" * 4}, "expected an array"),
        ([1, 2], "expected an array"),
    ],
)
def test_a_malformed_array_raises_message_error(value: Any, match: str) -> None:
    with pytest.raises(MessageError, match=match):
        unpack_array(value, "chunk")
    raw = {**as_map(EXAMPLES[8]), "actions": value}  # the same inside a message
    with pytest.raises(MessageError):
        decode(pack(raw))


def test_an_array_of_an_object_dtype_is_not_sent() -> None:
    with pytest.raises(MessageError):
        pack_array(np.array([object()]))


def test_a_plan_or_a_ring_comes_with_its_other_half() -> None:
    raw = as_map(EXAMPLES[1])
    for name in ("plan", "plan_start", "ring", "state", "prompt", "prompt_mask"):
        with pytest.raises(MessageError, match="or neither"):
            decode(pack({**raw, name: None}))
    with pytest.raises(MessageError, match="or neither"):
        Infer(1, 0, 2, 5, False, 1, ring=3)  # the state history is missing


@pytest.mark.parametrize(
    "ids, mask",
    [
        (np.zeros(4, np.float32), np.ones(4, bool)),  # ids that are no token ids
        (np.zeros(4, np.int64), np.ones(4, np.uint8)),  # a mask that is no mask
        (np.zeros(4, np.int64), np.ones(3, bool)),  # of two lengths
        (np.zeros((2, 2), np.int64), np.ones((2, 2), bool)),  # a batch, not one prompt
    ],
)
def test_a_prompt_of_other_dtypes_or_shapes_raises_message_error(ids: Any, mask: Any) -> None:
    raw = as_map(EXAMPLES[1])
    with pytest.raises(MessageError, match="prompt must be int64 ids and a bool mask"):
        decode(pack({**raw, "prompt": pack_array(ids), "prompt_mask": pack_array(mask)}))


def test_a_spec_that_is_no_policy_spec_raises_message_error() -> None:
    raw = as_map(EXAMPLES[4])
    raw["spec"] = {**raw["spec"], "chunk_size": 0}
    with pytest.raises(MessageError, match="chunk_size"):
        decode(pack(raw))


def test_an_unknown_cause_of_a_failed_request_is_refused() -> None:
    with pytest.raises(MessageError):
        RequestFailed(1, "exploded", "no")  # type: ignore[arg-type]


def test_the_inference_process_answers_a_malformed_request_failed() -> None:
    """A request it cannot read is answered (its robot goes on); other malformed messages are
    dropped; bytes that are no message at all end the process (MessageError)."""
    pytest.importorskip("torch")
    from controller.inference.process_server import _received
    from controller.process_protocol.process_channel import ProcessChannel

    ours, theirs = ProcessChannel.pair()
    server = ProcessChannel(theirs)
    try:
        infer = {k: v for k, v in as_map(EXAMPLES[1]).items() if k != "step"}
        assert _received(server, pack(infer)) is None
        data = ours.receive(timeout_ms=2000)
        assert data is not None
        reply = decode(data)
        assert isinstance(reply, RequestFailed) and reply.id == 1 and reply.cause == "failed"
        assert "'step'" in reply.error
        assert _received(server, pack({**as_map(EXAMPLES[2]), "count": "4"})) is None
        assert ours.receive(timeout_ms=200) is None  # nothing to answer
        with pytest.raises(MessageError):
            _received(server, b"\xc1")
        assert _received(server, encode(Stop())) == Stop()
    finally:
        ours.close()
        server.close()
