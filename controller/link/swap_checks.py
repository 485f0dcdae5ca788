"""Whether a new policy serves the robots bound to the one serving as they are (`tempo swap`).

    check_compatible(old_spec, new_spec)    # PolicyError, one sentence, if not

The same joints in the same order, the same cameras, state and frame history, the same chunk
size, a prompt exactly where there was one and tokenized the same way, a state range at least
as wide, the same execution settings: what the daemon worked out from the old checkpoint and
keeps using for these robots. This module imports no torch.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from controller.bounded_file import read_bytes
from controller.errors import PolicyError
from controller.process_protocol.frame_slots import slot_parts
from policies.base import PolicySpec, PromptSpec

# A tokenizer file read to compare two policies' prompts, at most (as policies.prompt_tokens
# reads it; that module imports sentencepiece, which the control process does not).
MAX_TOKENIZER_BYTES = 64 * 1024 * 1024


def check_compatible(old: PolicySpec, new: PolicySpec) -> None:
    """PolicyError (one sentence) unless `new` serves the robots bound to `old` as they are:
    the same joints in the same order (so the same action size), the same cameras and state,
    the same chunk size, and a prompt exactly where there was one."""
    if new.joint_names != old.joint_names:
        raise PolicyError(
            f"the new policy commands joints {list(new.joint_names)}, not the "
            f"{list(old.joint_names)} the robots are bound to; nothing was changed"
        )
    if slot_parts(new) != slot_parts(old):
        raise PolicyError(
            "the new policy reads other cameras or another state "
            f"({_observation(new)}) than the one serving ({_observation(old)}); "
            "nothing was changed"
        )
    if new.frame_history != old.frame_history:
        raise PolicyError(
            f"the new policy reads the frames of {new.frame_history} observation step(s), not "
            f"{old.frame_history} as the one serving, whose robots' sessions keep that many; "
            "nothing was changed"
        )
    if new.chunk_size != old.chunk_size:
        raise PolicyError(
            f"the new policy predicts chunks of {new.chunk_size} actions, not "
            f"{old.chunk_size} as the one serving; nothing was changed"
        )
    if (new.prompt is None) != (old.prompt is None):
        reads = "reads a prompt" if new.prompt is not None else "reads no prompt"
        raise PolicyError(f"the new policy {reads}, unlike the one serving; nothing was changed")
    # What the daemon worked out from the old checkpoint and keeps using for these robots: the
    # robots' token ids, the range their states are checked against, how chunks are played.
    if new.prompt and old.prompt and _prompt_key(new.prompt) != _prompt_key(old.prompt):
        raise PolicyError(
            "the new policy tokenizes prompts differently (another tokenizer, vocabulary, "
            "length or template) from the one serving; nothing was changed"
        )
    if not _within(old.state_bounds, new.state_bounds):
        raise PolicyError(
            "the new policy accepts a narrower range of states than the one serving, against "
            "whose range the robots' states are checked; nothing was changed"
        )
    if new.execution != old.execution:
        raise PolicyError(
            f"the new policy's execution settings ({new.execution}) differ from those of the "
            f"one serving ({old.execution}); nothing was changed"
        )


def _within(
    checked: tuple[tuple[float, float], ...] | None,
    accepted: tuple[tuple[float, float], ...] | None,
) -> bool:
    """Whether every state that passes `checked` (None: any finite one) is within `accepted`."""
    if accepted is None:
        return True
    if checked is None:
        return False
    pairs = zip(checked, accepted, strict=True)
    return all(a_lo <= c_lo and c_hi <= a_hi for (c_lo, c_hi), (a_lo, a_hi) in pairs)


def _prompt_key(prompt: PromptSpec) -> tuple[Any, ...]:
    """A prompt spec without its tokenizer's path, with the tokenizer file's contents."""
    fields = prompt.model_dump(exclude={"tokenizer"})
    try:  # the bounded reader: a FIFO named as the tokenizer is refused, not waited on
        data = read_bytes(Path(prompt.tokenizer), MAX_TOKENIZER_BYTES, PolicyError, "tokenizer")
        digest = hashlib.sha256(data).hexdigest()
    except PolicyError as exc:
        digest = f"unreadable: {exc}"
    return tuple(sorted(fields.items())), digest


def _observation(spec: PolicySpec) -> str:
    cameras = ", ".join(f"{c.name} {c.height}x{c.width}" for c in spec.cameras) or "no cameras"
    return f"{cameras}; state {spec.state_history}x{spec.state_size}"
