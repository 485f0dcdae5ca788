"""Episodes (controller.tools.export_lerobot) written as a LeRobotDataset in the v3 layout:

    data/chunk-000/file-000.parquet                        one row per frame, every episode
    videos/observation.images.<camera>/chunk-000/file-000.mp4   every episode, one after another
    meta/info.json       codebase_version v3.0, fps, features (dtype, shape, names), totals
    meta/stats.json      min, max, mean, std, count per feature (images: per channel, 0..1)
    meta/tasks.parquet   task_index per task (the task string is the table's index)
    meta/episodes/chunk-000/file-000.parquet   per episode: its rows, its video span, its tasks

Video is H.264 through PyAV (the export extra, with pyarrow). Everything goes in one file of
each kind: the export is meant for a session's recordings, not for a fleet's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from controller.errors import ConfigError, TempoError
from controller.inference.progress import PacedProgress
from controller.record.jpeg_frames import pixels_of
from controller.record.recorded_names import is_safe_name

CODEBASE_VERSION = "v3.0"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
FILE = "chunk-000/file-000"
CODEC = "libx264"
# A keyframe every other frame: a training loader seeks to any frame cheaply (LeRobot's choice).
VIDEO_OPTIONS = {"g": "2", "crf": "18", "preset": "veryfast"}


class ExportError(TempoError):
    """Recordings that cannot be exported as asked."""


@dataclass
class Episode:
    """One episode of one robot, frame by frame (lists of equal length)."""

    robot: str
    number: int  # the recording's episode number
    task: str
    session: str = ""  # the recording's session id ("" in recordings older than session ids)
    state: list[np.ndarray] = field(default_factory=list)
    action: list[np.ndarray | None] = field(default_factory=list)  # None: not yet known
    held: list[bool] = field(default_factory=list)
    teleop_joints: list[frozenset[str]] = field(default_factory=list)
    frames: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # decoded frame messages
    last_ns: int = 0  # the last observation's receive time (joins files of one rotation)
    received_ns: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.state)


@dataclass(frozen=True)
class DatasetSummary:
    episodes: int
    frames: int
    cameras: list[str]


def check_installed() -> None:
    """ConfigError naming the extra when pyarrow or PyAV is missing."""
    for module in ("pyarrow", "av"):
        try:
            __import__(module)
        except ModuleNotFoundError:
            raise ConfigError(
                f"tempo export-lerobot needs {module}, which is not installed: "
                "pip install 'tempo-controller[export]'"
            ) from None


def video_key(camera: str) -> str:
    return f"observation.images.{camera}"


def _inside(out: Path, path: Path) -> Path:
    """`path` when it stays inside `out` once resolved, else ExportError: no name from a file
    makes the export write elsewhere."""
    if not path.resolve().is_relative_to(out.resolve()):
        raise ExportError(f"the export would write {path}, outside {out}; nothing written there")
    return path


def _columns(
    episodes: Sequence[Episode], fps: int, tasks: dict[str, int], env_state: int = 0
) -> dict[str, Any]:
    """Every frame's values, per column, as numpy arrays; the states' last `env_state` entries
    are observation.environment_state."""
    index = 0
    timestamp, frame_index, episode_index, task_index = [], [], [], []
    for number, episode in enumerate(episodes):
        n = len(episode)
        frame_index.append(np.arange(n, dtype=np.int64))
        timestamp.append((np.arange(n) / fps).astype(np.float32))
        episode_index.append(np.full(n, number, np.int64))
        task_index.append(np.full(n, tasks[episode.task], np.int64))
        index += n
    states = np.stack([s for e in episodes for s in e.state])
    robot = states.shape[1] - env_state
    environment = {"observation.environment_state": states[:, robot:]} if env_state else {}
    return {
        "observation.state": states[:, :robot],
        **environment,
        "action": np.stack([a for e in episodes for a in e.action]),  # type: ignore[misc]
        "action.held": np.array([h for e in episodes for h in e.held], bool),
        "timestamp": np.concatenate(timestamp),
        "frame_index": np.concatenate(frame_index),
        "episode_index": np.concatenate(episode_index),
        "index": np.arange(index, dtype=np.int64),
        "task_index": np.concatenate(task_index),
    }


def _stats(values: np.ndarray) -> dict[str, Any]:
    values = values.astype(np.float64).reshape(len(values), -1)
    return {
        "min": values.min(axis=0).tolist(),
        "max": values.max(axis=0).tolist(),
        "mean": values.mean(axis=0).tolist(),
        "std": values.std(axis=0).tolist(),
        "count": [len(values)],
    }


def _feature(dtype: str, width: int, names: list[str] | None) -> dict[str, Any]:
    return {"dtype": dtype, "shape": [width], "names": names}


def _encode_camera(
    path: Path, episodes: Sequence[Episode], camera: str, fps: int, progress: PacedProgress
) -> dict:
    """Every episode's frames of one camera into one MP4; its feature entry and stats."""
    import av

    shapes = {pixels_of(e.frames[camera][0]).shape for e in episodes}
    if len(shapes) != 1:
        raise ExportError(
            f"camera {camera!r} was recorded at several sizes {sorted(shapes)}; export the "
            "recordings of one size together (--robot, or fewer files)"
        )
    height, width, _ = shapes.pop()
    # 4:2:0 chroma needs even sizes; an odd-sized (downscaled) frame keeps full chroma.
    pix_fmt = "yuv420p" if height % 2 == 0 and width % 2 == 0 else "yuv444p"
    path.parent.mkdir(parents=True, exist_ok=True)
    total = np.zeros(3)
    squares = np.zeros(3)
    low, high = np.full(3, 255.0), np.zeros(3)
    pixels = 0
    with av.open(str(path), "w") as container:
        # A video codec's stream is a VideoStream (add_stream's type says any stream).
        stream = cast(
            "av.VideoStream", container.add_stream(CODEC, rate=fps, options=VIDEO_OPTIONS)
        )
        stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
        pts = 0
        for number, episode in enumerate(episodes, 1):
            progress(
                f"camera {camera}: episode {number} of {len(episodes)}",
                number in (1, len(episodes)),
            )
            for message in episode.frames[camera]:
                image = pixels_of(message)
                flat = image.reshape(-1, 3).astype(np.float64)
                total += flat.sum(axis=0)
                squares += (flat**2).sum(axis=0)
                low, high = np.minimum(low, flat.min(axis=0)), np.maximum(high, flat.max(axis=0))
                pixels += len(flat)
                frame = av.VideoFrame.from_ndarray(image, format="rgb24")
                frame.pts = pts
                pts += 1
                container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    mean = total / pixels
    std = np.sqrt(np.maximum(squares / pixels - mean**2, 0.0))

    def channels(values: np.ndarray) -> list[list[list[float]]]:
        return [[[float(v) / 255.0]] for v in values]

    stats = {
        "min": channels(low),
        "max": channels(high),
        "mean": channels(mean),
        "std": channels(std),
        "count": [pts],
    }
    feature = {
        "dtype": "video",
        "shape": [height, width, 3],
        "names": ["height", "width", "channels"],
        "info": {
            "video.height": height,
            "video.width": width,
            "video.codec": "h264",
            "video.pix_fmt": pix_fmt,
            "video.is_depth_map": False,
            "video.fps": fps,
            "video.channels": 3,
            "has_audio": False,
        },
    }
    return {"feature": feature, "stats": stats}


def _table(columns: dict[str, Any]) -> Any:
    """A pyarrow table: vectors as fixed-size lists (what LeRobot's features declare)."""
    import pyarrow as pa

    arrays = {}
    for name, values in columns.items():
        if isinstance(values, np.ndarray) and values.ndim == 2:
            flat = pa.array(values.reshape(-1))
            arrays[name] = pa.FixedSizeListArray.from_arrays(flat, values.shape[1])
        else:
            arrays[name] = pa.array(values)
    return pa.table(arrays)


def _tasks_table(tasks: dict[str, int]) -> Any:
    """meta/tasks.parquet: task_index, indexed by the task (pandas metadata says so)."""
    import pyarrow as pa

    table = pa.table(
        {
            "task_index": pa.array(list(tasks.values()), pa.int64()),
            "task": pa.array(list(tasks), pa.string()),
        }
    )
    pandas = {
        "index_columns": ["task"],
        "column_indexes": [],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {
                "name": "task",
                "field_name": "task",
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": None,
            },
        ],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.0",
    }
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas).encode()})


def write_dataset(
    out: Path,
    episodes: Sequence[Episode],
    fps: int,
    joints: list[str],
    env_state: int = 0,
    progress: PacedProgress | None = None,
) -> DatasetSummary:
    """Write `episodes` to the new directory `out` (see the module's docstring); the states'
    last `env_state` entries (an object's pose) go to observation.environment_state.
    `progress`: told which camera's episode is being encoded (the long part), every few s."""
    progress = progress or PacedProgress(lambda message: None)
    import pyarrow.parquet as pq

    widths = {(len(e.state[0]), tuple(sorted(e.frames))) for e in episodes}
    if len(widths) != 1:
        raise ExportError(
            "the recordings' robots have different joints or cameras "
            f"{sorted(widths)}; export one robot at a time with --robot"
        )
    cameras = sorted(episodes[0].frames)
    for camera in cameras:
        if not is_safe_name(camera):
            raise ExportError(
                f"the recordings name a camera {camera[:80]!r}, which cannot be a folder's name "
                "(letters, digits, '_', '.', '-', not starting with '.'); nothing exported"
            )
    tasks: dict[str, int] = {}
    for episode in episodes:
        tasks.setdefault(episode.task, len(tasks))
    columns = _columns(episodes, fps, tasks, env_state)
    owned = [[j in o for j in joints] for e in episodes for o in e.teleop_joints]
    columns["teleop.joints"] = np.array(owned, bool).reshape(len(owned), len(joints))
    columns["teleop"] = columns["teleop.joints"].any(axis=1)
    n = len(joints)
    robot = columns["observation.state"].shape[1]
    state_names = joints if robot == n else [f"state_{i}" for i in range(robot)]
    features: dict[str, Any] = {
        "observation.state": _feature("float32", robot, state_names),
        "action": _feature("float32", n, joints),
        "action.held": _feature("bool", 1, None),
        "teleop": _feature("bool", 1, None),
        "teleop.joints": _feature("bool", n, joints),
    }
    if env_state:
        names = [f"env_{i}" for i in range(env_state)]
        features["observation.environment_state"] = _feature("float32", env_state, names)
    stats = {name: _stats(values) for name, values in columns.items()}
    for camera in cameras:
        key = video_key(camera)
        path = _inside(out, out / VIDEO_PATH.format(video_key=key, chunk_index=0, file_index=0))
        encoded = _encode_camera(path, episodes, camera, fps, progress)
        features[key] = encoded["feature"]
        stats[key] = encoded["stats"]
    features |= {
        name: _feature(str(columns[name].dtype), 1, None)
        for name in ("timestamp", "frame_index", "episode_index", "index", "task_index")
    }

    progress(f"writing {len(episodes)} episodes' rows and metadata", True)
    data = out / DATA_PATH.format(chunk_index=0, file_index=0)
    data.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(_table(columns), data)
    meta = out / "meta"
    (meta / "episodes" / "chunk-000").mkdir(parents=True, exist_ok=True)
    pq.write_table(_tasks_table(tasks), meta / "tasks.parquet")
    pq.write_table(
        _table(_episode_rows(episodes, fps, cameras)), meta / "episodes" / f"{FILE}.parquet"
    )

    total = len(columns["index"])
    info = {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": None,
        "fps": fps,
        "features": features,
        "total_episodes": len(episodes),
        "total_frames": total,
        "total_tasks": len(tasks),
        "chunks_size": 1000,
        "data_files_size_in_mb": 100,
        "video_files_size_in_mb": 200,
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if cameras else None,
        "splits": {"train": f"0:{len(episodes)}"},
    }
    (meta / "info.json").write_text(json.dumps(info, indent=2))
    (meta / "stats.json").write_text(json.dumps(stats, indent=2))
    return DatasetSummary(len(episodes), total, cameras)


def _episode_rows(episodes: Sequence[Episode], fps: int, cameras: list[str]) -> dict[str, Any]:
    """meta/episodes: where each episode's rows and video span are, and its task."""
    rows: dict[str, list[Any]] = {
        "episode_index": [],
        "tasks": [],
        "length": [],
        "data/chunk_index": [],
        "data/file_index": [],
        "dataset_from_index": [],
        "dataset_to_index": [],
    }
    for camera in cameras:
        for column in ("chunk_index", "file_index", "from_timestamp", "to_timestamp"):
            rows[f"videos/{video_key(camera)}/{column}"] = []
    rows |= {"meta/episodes/chunk_index": [], "meta/episodes/file_index": []}
    start = 0
    for number, episode in enumerate(episodes):
        n = len(episode)
        values: dict[str, Any] = {
            "episode_index": number,
            "tasks": [episode.task],
            "length": n,
            "data/chunk_index": 0,
            "data/file_index": 0,
            "dataset_from_index": start,
            "dataset_to_index": start + n,
            "meta/episodes/chunk_index": 0,
            "meta/episodes/file_index": 0,
        }
        for camera in cameras:
            key = f"videos/{video_key(camera)}"
            values |= {
                f"{key}/chunk_index": 0,
                f"{key}/file_index": 0,
                f"{key}/from_timestamp": start / fps,
                f"{key}/to_timestamp": (start + n) / fps,
            }
        for column, value in values.items():
            rows[column].append(value)
        start += n
    return rows
