"""The messages between the control process and its inference process: msgpack maps on their
private channel (`process_channel`), arrays as float32 bytes with their shape; never pickle.

    control -> inference   attach {path, count}          the observation slots, after `hello`
                           infer {id, slot, generation, step, episode_start, delay, plan_start,
                                  plan, memory}           one observation (frames, state: slot)
                                 [ring, state]            frames in a driver's ring slot instead
                           attach_ring {id, path, count}  a same-host driver's frame ring
                           detach_ring {ring}            its session ended
                           stop {}
    inference -> control   hello {spec, outputs, status} the policy is loaded, warmed, checked
                           ready {}                       slots attached: serving
                           ring_ready {id, pinned}        a driver's ring attached (pinned?)
                           failed_start {error}           it cannot serve (the sentence why)
                           chunk {id, actions, memory, status?}
                           refused {id, error}            a malformed observation: that robot's
                           input_fault {id, error}        the FP32 reference fails on it too: the
                                                          input's fault, that robot's (InputFault)
                           failed {id, error}             the policy failed on it (or a torn slot)
                           fatal {id, error}              the device is unusable: exiting

Only numpy, msgpack and the standard library (the control process never imports torch).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgpack
import numpy as np

from controller.errors import PolicyError

# A chunk or a plan is at most 10,000 x 1,024 float32 (the spec's bounds): 40 MB.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


class MessageError(PolicyError):
    """A message between the two processes does not have the expected form (our fault, never
    the robot's: so not a ValueError, which would refuse the robot's observation)."""


def pack(kind: str, **fields: Any) -> bytes:
    return msgpack.packb({"kind": kind, **fields}, use_bin_type=True)


def unpack(data: bytes) -> dict[str, Any]:
    try:
        message = msgpack.unpackb(data, raw=False, strict_map_key=True, max_bin_len=len(data))
    except Exception as exc:  # msgpack raises several types; all mean the same here
        raise MessageError(f"undecodable message between the processes: {exc}") from None
    if not isinstance(message, dict) or not isinstance(message.get("kind"), str):
        raise MessageError("a message between the processes must be a map with a 'kind'")
    return message


def pack_array(array: np.ndarray) -> dict[str, Any]:
    array = np.ascontiguousarray(array, dtype=np.float32)
    return {"shape": list(array.shape), "data": array.tobytes()}


def unpack_array(value: Any, what: str) -> np.ndarray:
    """A float32 array from `pack_array`'s form (a new, writable array)."""
    if not isinstance(value, dict) or not isinstance(value.get("data"), bytes):
        raise MessageError(f"{what}: expected an array")
    shape = value.get("shape")
    if not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
        raise MessageError(f"{what}: bad shape {shape!r}")
    data = value["data"]
    if len(data) != 4 * int(np.prod(shape, dtype=np.int64)):
        raise MessageError(f"{what}: {len(data)} bytes do not fill float32 {tuple(shape)}")
    return np.frombuffer(data, dtype=np.float32).reshape(shape).copy()


def pack_memory(memory: Mapping[str, np.ndarray] | None) -> dict[str, Any] | None:
    if memory is None:
        return None
    return {name: pack_array(value) for name, value in memory.items()}


def unpack_memory(value: Any) -> dict[str, np.ndarray] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise MessageError("memory: expected a map of names to arrays")
    return {str(name): unpack_array(array, f"memory {name}") for name, array in value.items()}
