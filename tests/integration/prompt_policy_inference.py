"""An inference process serving `PromptLogger`: a policy that reads a prompt (its tokenizer is
the file $PROMPT_TOKENIZER) and appends, per request, the newest state's first value and the
prompt's token ids to the file $PROMPT_LOG, so the test sees what reached this process.

    python prompt_policy_inference.py --channel-fd FD     (RemotePolicy adds --channel-fd)
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from policies.base import CameraSpec, PolicySpec, Prediction, PromptSpec, RobotContext

VOCAB_SIZE = 200  # tests.prompt_fixtures.VOCAB_SIZE (this script runs without tests/ importable)
MAX_LENGTH = 24


def spec() -> PolicySpec:
    return PolicySpec(
        cameras=(CameraSpec(name="front", height=32, width=48),),
        state_size=3,
        joint_names=("a", "b", "c"),
        chunk_size=8,
        prompt=PromptSpec(
            tokenizer=os.environ["PROMPT_TOKENIZER"], max_length=MAX_LENGTH, vocab_size=VOCAB_SIZE
        ),
    )


class PromptLogger:
    spec = spec() if "PROMPT_TOKENIZER" in os.environ else None
    outputs: tuple[str, ...] = ()

    def predict(self, images: Any, context: RobotContext) -> Prediction:
        prompt = context.prompt
        ids = [] if prompt is None else prompt.ids[: prompt.length].tolist()
        with open(os.environ["PROMPT_LOG"], "a") as log:
            log.write(f"{float(context.state[0]):.4f} {' '.join(map(str, ids))}\n")
        return Prediction(np.tile(context.state, (8, 1)).astype(np.float32))

    def reset(self) -> None:
        pass

    def status(self) -> dict[str, Any]:
        return {"device": "cpu", "tiers": []}

    def add_pinned_region(self, address: int, size: int) -> None:
        pass

    def remove_pinned_region(self, address: int, size: int) -> None:
        pass


if __name__ == "__main__":
    from controller.inference.process_server import serve_control_process

    channel_fd = int(sys.argv[sys.argv.index("--channel-fd") + 1])
    sys.exit(serve_control_process(PromptLogger, channel_fd))
