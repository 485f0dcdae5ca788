"""The flight recorder's section of the config (`record:`), beside the other sections as the
runner's is (controller.runner_config): plain pydantic, importing nothing of Tempo."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class RecordConfig(BaseModel):
    """The flight recorder (`record:`, controller.record): every robot's observations, the
    policy's requests and chunks and the commands sent, written to MCAP off the tick path."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Literal["off", "continuous", "ring"] = Field(
        default="off",
        description="off; continuous: every record to rotating files in `dir`; ring: the last "
        "`ring_seconds` kept in memory and written to a file on a driver's mark or a guard stop.",
    )
    dir: Path = Field(
        default=Path("recordings"), description="Where recordings are written (created if needed)."
    )
    max_file_mb: int = Field(
        default=1024,
        ge=1,
        le=1_000_000,
        description="continuous: a file ends and the next begins once it reaches about this size.",
    )
    max_total_mb: int = Field(
        default=0,
        ge=0,
        le=100_000_000,
        description="continuous: as a file ends, the oldest files this run wrote are deleted "
        "until those left and the next file (max_file_mb) fit in this much; at least twice "
        "max_file_mb. 0: no limit.",
    )
    max_incidents_mb: int = Field(
        default=4096,
        ge=0,
        le=100_000_000,
        description="ring: as an incident file is written, the oldest incident files this run "
        "wrote are deleted until those left fit in this much (the newest is always kept), so "
        "marks cannot fill the disk. 0: no limit.",
    )
    marks_per_minute: int = Field(
        default=6,
        ge=1,
        le=600,
        description="At most this many marks a minute per robot, whoever asks (a driver or an "
        "operator; at most one a second); more are refused with a sentence.",
    )
    marks_per_minute_all: int = Field(
        default=20,
        ge=1,
        le=6000,
        description="At most this many marks a minute of all robots together; more are refused "
        "with a sentence.",
    )
    ring_seconds: float = Field(
        default=30.0, gt=0, le=3600, description="ring: how many seconds of records are kept."
    )
    ring_max_mb: int = Field(
        default=2048,
        ge=1,
        le=1_000_000,
        description="ring: at most this much memory of records; the oldest go first past it.",
    )
    queue: int = Field(
        default=4096,
        ge=16,
        le=1_000_000,
        description="Records waiting for the writer thread; past this a record is dropped and "
        "counted (by kind, in status and /metrics), so the tick never waits for the disk.",
    )
    frames: Literal["raw", "downscale", "jpeg"] = Field(
        default="raw",
        description="Camera frames as received (raw), every `scale`-th pixel of every "
        "`scale`-th row (downscale), or JPEG (sensor_msgs/msg/CompressedImage, encoded by the "
        "recorder's file process with PyAV: pip install 'tempo-controller[export]'). A JPEG "
        "is lossy: a replay of it does not see the frames the policy saw.",
    )
    scale: int = Field(default=2, ge=2, le=16, description="downscale: the factor.")
    jpeg_qscale: int = Field(
        default=3,
        ge=2,
        le=31,
        description="jpeg: FFmpeg's quantiser scale, 2 (best, largest) to 31 (smallest).",
    )
    compression: Literal["lz4", "zstd", "none"] = Field(
        default="lz4",
        description="How the files' chunks are compressed. Camera frames are raw bytes (CDR), "
        "which lz4 shrinks little and zstd by about a quarter, at a price: 90 640x480 frames "
        "(3 cameras for 1 s at 30 Hz) took 0.67 s of one core with zstd, 0.15 s with lz4 and "
        "0.10 s with none on a 2-core machine. lz4 shrinks the other records at little cost.",
    )

    @model_validator(mode="after")
    def _total_holds_two_files(self) -> RecordConfig:
        # The newest finished file stays beside the open one: a smaller cap could not keep it.
        # Only continuous mode rotates files; ring mode keeps every incident file.
        if self.mode != "continuous":
            return self
        if self.max_total_mb and self.max_total_mb < 2 * self.max_file_mb:
            raise ValueError(
                f"record.max_total_mb {self.max_total_mb} is below twice record.max_file_mb "
                f"({self.max_file_mb}): set it to 0 (no limit) or at least "
                f"{2 * self.max_file_mb}, room for a finished file beside the one being written"
            )
        return self
