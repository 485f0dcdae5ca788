"""An observation's frames carried inline, for the remote inference link (no shared memory).

    parts = frames_parts(images, state)        # a header, then each array's raw bytes
    images, state = parts_frames(parts, spec)  # back, checked against the policy's spec

Over TCP there is no memory to share: the robot side reads the frames out of the daemon's slot
and sends them beside the `infer` message; the server side writes them into the slot its own
inference process reads. Raw bytes only for now (no JPEG). Nothing is pickled: the header is a
msgpack map of names, shapes and dtypes, checked against the spec before a byte is used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from controller.process_protocol.message_codec import (
    ARRAY_DTYPES,
    MessageError,
    pack_map,
    unpack_map,
)
from policies.base import PolicySpec

STATE = "__state__"


def frames_parts(images: Mapping[str, np.ndarray], state: np.ndarray) -> list[bytes]:
    """The header (names, shapes, dtypes) and each array's bytes, cameras first, state last."""
    arrays = {**images, STATE: state}
    header = {
        "kind": "frames",
        "names": list(arrays),
        "shapes": [list(a.shape) for a in arrays.values()],
        "dtypes": [a.dtype.name for a in arrays.values()],
    }
    return [pack_map(header), *(np.ascontiguousarray(a).tobytes() for a in arrays.values())]


def parts_frames(
    parts: Sequence[bytes], spec: PolicySpec
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The frames and state `frames_parts` made; MessageError when they are not the spec's."""
    if not parts:
        raise MessageError("an inline observation came without its header")
    header = unpack_map(parts[0])
    names, shapes, dtypes = header.get("names"), header.get("shapes"), header.get("dtypes")
    if not (isinstance(names, list) and isinstance(shapes, list) and isinstance(dtypes, list)):
        raise MessageError("an inline observation's header lacks names, shapes or dtypes")
    if not len(names) == len(shapes) == len(dtypes) == len(parts) - 1:
        raise MessageError("an inline observation's header does not match its parts")
    if set(names) != {*(c.name for c in spec.cameras), STATE}:
        raise MessageError(f"an inline observation carries {sorted(names)}, not the spec's cameras")
    arrays: dict[str, np.ndarray] = {}
    for name, shape, dtype, data in zip(names, shapes, dtypes, parts[1:], strict=True):
        if dtype not in ARRAY_DTYPES:
            raise MessageError(
                f"inline frame {name!r} has dtype {dtype!r}, not one of {sorted(ARRAY_DTYPES)}"
            )
        try:
            array = np.frombuffer(data, dtype=np.dtype(dtype)).reshape(tuple(shape))
        except (TypeError, ValueError):
            raise MessageError(f"inline frame {name!r} is not {dtype} of shape {shape}") from None
        arrays[name] = array
    state = arrays.pop(STATE)
    return arrays, state
