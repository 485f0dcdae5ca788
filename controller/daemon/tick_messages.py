"""The messages of a control tick (`action`, `hold`), packed once per robot and patched per send.

    headers = TickHeaders(session_id)
    frame = headers.action(seq, time_ns, step, obs_seq, deadline_ns)  # a reused bytearray
    frame = headers.hold(seq, time_ns, step, reason)

`msgpack.packb` builds a Packer, and with it a 256 KiB buffer, on every call: on the tick that
was a quarter of a megabyte allocated and freed per robot per tick. Here each header is encoded
once by the wire encoder (`protocol.encode`, so the bytes are what it would send) with its
integer fields as int64 placeholders; a send rewrites those 8-byte fields in place. What a
driver decodes is the same map (msgpack readers accept an int in any width). Not thread-safe:
the loop thread owns it, and the transport copies the frame before the next tick rewrites it.
"""

from __future__ import annotations

import struct

import numpy as np

from controller.wire.protocol import encode

_INT64 = struct.Struct(">q")
_COMMON_INTS = ("seq", "time_ns")  # arguments of encode; the other integers are fields
# Distinct placeholders that msgpack can only pack as int64 (0xd3 then 8 bytes, big-endian).
_PLACEHOLDER = -(2**62)


class PackedHeader:
    """One message's header frame with its integer fields at known offsets."""

    def __init__(
        self,
        kind: str,
        fields: dict[str, object],
        ints: tuple[str, ...],
        arrays: dict[str, np.ndarray] | None = None,
    ) -> None:
        values = {name: _PLACEHOLDER - i for i, name in enumerate(ints)}
        header_fields = {**fields, **{n: v for n, v in values.items() if n not in _COMMON_INTS}}
        # The frame is what the wire encoder would send for these fields: one encoder.
        raw = encode(
            kind,
            robot="tempo",
            seq=values["seq"],
            time_ns=values["time_ns"],
            fields=header_fields,
            arrays=arrays,
        )[0]
        self.frame = bytearray(raw)
        offsets = []
        for name in ints:
            marker = b"\xd3" + _INT64.pack(values[name])
            at = raw.find(marker)
            if at < 0 or raw.find(marker, at + 1) >= 0:
                raise RuntimeError(f"cannot place the field {name!r} in a packed {kind} header")
            offsets.append(at + 1)
        self.offsets = tuple(offsets)


class TickHeaders:
    """The `action` header and one `hold` header per reason, of one session."""

    def __init__(self, session_id: str, action_dim: int) -> None:
        self._session = session_id
        example = {"action": np.zeros(action_dim, dtype=np.float32)}
        self._action = PackedHeader(
            "action",
            {"session": session_id},
            ("seq", "time_ns", "step", "obs_seq", "deadline_ns"),
            example,
        )
        self._holds: dict[str, PackedHeader] = {}

    def action(
        self, seq: int, time_ns: int, step: int, obs_seq: int, deadline_ns: int
    ) -> bytearray | None:
        """The packed header, or None when a value does not fit an int64 (a deadline pushed
        past 2^63 by a hostile clock offset): the caller then encodes it the ordinary way."""
        header = self._action
        frame, (a, b, c, d, e) = header.frame, header.offsets
        try:
            _INT64.pack_into(frame, a, seq)
            _INT64.pack_into(frame, b, time_ns)
            _INT64.pack_into(frame, c, step)
            _INT64.pack_into(frame, d, obs_seq)
            _INT64.pack_into(frame, e, deadline_ns)
        except struct.error:
            return None
        return frame

    def hold(self, seq: int, time_ns: int, step: int, reason: str) -> bytearray | None:
        header = self._holds.get(reason)
        if header is None:  # the first hold for this reason: packed once, kept
            header = PackedHeader(
                "hold", {"session": self._session, "reason": reason}, ("seq", "time_ns", "step")
            )
            self._holds[reason] = header
        frame, (a, b, c) = header.frame, header.offsets
        try:
            _INT64.pack_into(frame, a, seq)
            _INT64.pack_into(frame, b, time_ns)
            _INT64.pack_into(frame, c, step)
        except struct.error:
            return None
        return frame
