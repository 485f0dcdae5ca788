"""One episode's rollout as an MP4 (H.264 through PyAV, as `tempo export-lerobot` writes its
videos), written frame by frame as the episode runs, so a long episode is never held in memory.
PyAV missing is one sentence naming the `sim` extra."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import numpy as np

from controller.errors import ConfigError

CODEC = "libx264"
OPTIONS = {"crf": "23", "preset": "veryfast"}


def check_video_installed() -> None:
    try:
        import av  # noqa: F401
    except ModuleNotFoundError:
        raise ConfigError(
            "a rollout video needs PyAV (av), which is not installed: "
            "pip install 'tempo-controller[sim]'"
        ) from None


class RolloutVideo:
    """Frames (height, width, 3 uint8, all one size) into `path` at `fps`."""

    def __init__(self, path: Path, fps: float) -> None:
        check_video_installed()
        self.path = path
        self.fps = fps
        self.frames = 0
        self._container: Any = None
        self._stream: Any = None

    def add(self, frame: np.ndarray) -> None:
        import av

        image = np.ascontiguousarray(frame, dtype=np.uint8)
        if self._container is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._container = av.open(str(self.path), "w")
            rate = max(1, round(self.fps))
            stream = self._container.add_stream(CODEC, rate=rate, options=OPTIONS)
            self._stream = cast("av.VideoStream", stream)
            height, width = image.shape[:2]
            self._stream.width, self._stream.height = width, height
            # 4:2:0 chroma needs even sizes; an odd-sized frame keeps full chroma.
            self._stream.pix_fmt = "yuv420p" if height % 2 == 0 and width % 2 == 0 else "yuv444p"
        video_frame = av.VideoFrame.from_ndarray(image, format="rgb24")
        video_frame.pts = self.frames
        self.frames += 1
        self._container.mux(self._stream.encode(video_frame))

    def close(self) -> None:
        if self._container is not None:
            self._container.mux(self._stream.encode(None))
            self._container.close()
            self._container = None
