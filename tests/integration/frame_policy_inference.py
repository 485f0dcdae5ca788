"""An inference process serving `FramePolicy`, whose actions are a function of the camera frame
(so a wrong or torn frame shows in the actions); a frame whose pixels are all SLOW_PIXEL makes
it wait first, until the file named by $FRAME_POLICY_RELEASE exists (the test has rewritten
the frame while it is being served) or SLOW_S has passed.

    python frame_policy_inference.py --channel-fd FD     (RemotePolicy adds --channel-fd)
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import numpy as np

from policies.base import CameraSpec, PolicySpec, Prediction

SLOW_PIXEL = 77
SLOW_S = 4.0  # at most: under the supervisor's 5 s hang timeout
SPEC = PolicySpec(
    cameras=(CameraSpec(name="front", height=96, width=128),),
    state_size=6,
    joint_names=tuple(f"joint_{i}" for i in range(6)),
    chunk_size=10,
)


def expected_action(frame: np.ndarray) -> np.ndarray:
    """Per colour channel: the mean pixel and the mean of the top row, scaled to [0, 1]."""
    frame = frame.astype(np.float64)
    means = frame.reshape(-1, 3).mean(axis=0)
    top = frame[0].mean(axis=0)
    return (np.concatenate([means, top]) / 255.0).astype(np.float32)


class FramePolicy:
    spec = SPEC
    outputs: tuple[str, ...] = ()

    def predict(self, images: Any, context: Any) -> Prediction:
        frame = images["front"]
        if (frame == SLOW_PIXEL).all():
            release = os.environ.get("FRAME_POLICY_RELEASE")
            deadline = time.monotonic() + SLOW_S
            while time.monotonic() < deadline and not (release and os.path.exists(release)):
                time.sleep(0.01)
        row = expected_action(np.array(frame))
        return Prediction(np.tile(row, (SPEC.chunk_size, 1)))

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
    sys.exit(serve_control_process(FramePolicy, channel_fd))
