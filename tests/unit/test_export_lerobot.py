"""`tempo export-lerobot`: a recording written by the recorder's own writer, exported, and read
back by a small reader of the LeRobotDataset v3 layout written here (pyarrow + PyAV), and by
LeRobot itself where it is installed."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from controller.cli import main
from controller.record.reading import Recording, read_recording
from controller.record.writer import Recorder
from controller.record_config import RecordConfig
from controller.tools.export_lerobot import recorded_episodes

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
av = pytest.importorskip("av")

JOINTS = ["shoulder", "elbow", "wrist"]
FPS = 30
PERIOD_NS = 1_000_000_000 // FPS
HEIGHT, WIDTH = 48, 64
# Noise (incompressible) on the wrist camera: the file spans several MCAP chunks, to cut.
WRIST = (96, 128, 3)


def frame(value: int) -> np.ndarray:
    return np.full((HEIGHT, WIDTH, 3), value, np.uint8)


def record(directory: Path) -> tuple[Path, list[dict[str, Any]]]:
    """Two episodes of robot arm0 (and a few observations of arm1) through the recorder's
    writer: per observation, what the exported frame must hold."""
    recorder = Recorder(RecordConfig(mode="continuous", dir=directory), JOINTS, 100.0)
    recorder.start()
    arm = recorder.robot("arm0", "s1")
    other = recorder.robot("arm1", "s2")
    arm.hello("pick the cube")
    other.hello(None)
    expected: list[dict[str, Any]] = []
    t = 10_000_000_000
    step = 0
    last_action = None
    noise = np.random.default_rng(0)
    for episode, length, task in ((1, 6, "pick the cube"), (2, 4, "place it")):
        arm.episode(episode, step, task)
        last_action = None
        for i in range(length):
            state = np.array([episode, i, 0.5], np.float32)
            images = {"front": frame(40 * i), "wrist": noise.integers(0, 256, WRIST, np.uint8)}
            arm.observation(i, step, t, t, images, state, None, episode)
            other.observation(i, step, t, t, {}, np.zeros(2, np.float32), None, 0)
            owned = ("elbow",) if i == 3 else ()
            if i in (0, 4):  # a hold: nothing new sent
                arm.command(step, t + 1, "no_action", None, None, owned)
                action = state if last_action is None else last_action
                held = True
            else:
                action = np.array([i, -i, 0.25], np.float32)
                arm.command(step, t + 1, None, action, action, owned)
                held = False
            # A second tick in the same frame: not the frame's command.
            arm.command(step + 1, t + 2, None, action + 100, action + 100, ())
            last_action = action + 100
            expected.append({"state": state, "action": action, "held": held,
                             "owned": owned, "episode": episode - 1, "pixel": 40 * i,
                             "task": task})  # fmt: skip
            step += 2
            t += PERIOD_NS
    recorder.stop()
    (path,) = sorted(directory.glob("*.mcap"))
    return path, expected


def refusals(err: str) -> list[str]:
    """stderr's lines less the export's progress lines."""
    return [line for line in err.splitlines() if not line.startswith("tempo export-lerobot: ")]


def read_v3(root: Path) -> dict[str, Any]:
    """A LeRobotDataset v3 directory as plain values: info, stats, rows, tasks, episodes and
    each video's decoded frames (paths from info.json's templates)."""
    info = json.loads((root / "meta" / "info.json").read_text())
    stats = json.loads((root / "meta" / "stats.json").read_text())
    episodes = pq.read_table(root / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    episodes = episodes.to_pylist()
    data_files = {
        info["data_path"].format(chunk_index=e["data/chunk_index"], file_index=e["data/file_index"])
        for e in episodes
    }
    rows = pa.concat_tables([pq.read_table(root / f) for f in sorted(data_files)]).to_pylist()
    tasks_table = pq.read_table(root / "meta" / "tasks.parquet")
    tasks = dict(
        zip(tasks_table["task"].to_pylist(), tasks_table["task_index"].to_pylist(), strict=True)
    )
    assert json.loads(tasks_table.schema.metadata[b"pandas"])["index_columns"] == ["task"]
    videos = {}
    for key, feature in info["features"].items():
        if feature["dtype"] != "video":
            continue
        path = root / info["video_path"].format(video_key=key, chunk_index=0, file_index=0)
        with av.open(str(path)) as container:
            decoded = [(float(f.time), f.to_ndarray(format="rgb24"))
                       for f in container.decode(video=0)]  # fmt: skip
        videos[key] = decoded
    return {"info": info, "stats": stats, "episodes": episodes, "rows": rows, "tasks": tasks,
            "videos": videos}  # fmt: skip


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[dict[str, Any], list[dict[str, Any]], Path]:
    tmp = tmp_path_factory.mktemp("export")
    path, expected = record(tmp / "rec")
    assert main(["export-lerobot", str(path), str(tmp / "out"), "--robot", "arm0"]) == 0
    return read_v3(tmp / "out"), expected, path


def test_rows_hold_the_recorded_states_actions_holds_and_teleop(exported) -> None:
    dataset, expected, _ = exported
    rows = dataset["rows"]
    assert len(rows) == len(expected) == 10
    for n, (row, want) in enumerate(zip(rows, expected, strict=True)):
        np.testing.assert_array_equal(np.float32(row["observation.state"]), want["state"])
        np.testing.assert_array_equal(np.float32(row["action"]), want["action"])
        assert row["action.held"] == want["held"]
        assert row["teleop"] == bool(want["owned"])
        assert row["teleop.joints"] == [j in want["owned"] for j in JOINTS]
        assert row["episode_index"] == want["episode"] and row["index"] == n
        assert row["task_index"] == dataset["tasks"][want["task"]]
    assert [r["frame_index"] for r in rows] == [*range(6), *range(4)]
    assert rows[7]["timestamp"] == pytest.approx(1 / FPS)
    assert dataset["tasks"] == {"pick the cube": 0, "place it": 1}


def test_episodes_and_info_describe_the_data(exported) -> None:
    dataset, _, _ = exported
    info, episodes = dataset["info"], dataset["episodes"]
    assert info["codebase_version"] == "v3.0" and info["fps"] == FPS  # estimated from the file
    assert info["total_episodes"] == 2 and info["total_frames"] == 10 and info["total_tasks"] == 2
    features = info["features"]
    assert features["observation.state"] == {"dtype": "float32", "shape": [3], "names": JOINTS}
    assert features["action"]["names"] == JOINTS and features["teleop"]["dtype"] == "bool"
    assert features["observation.images.front"]["shape"] == [HEIGHT, WIDTH, 3]
    assert features["observation.images.front"]["info"]["video.fps"] == FPS
    for name in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
        assert features[name]["shape"] == [1]
    assert [e["length"] for e in episodes] == [6, 4]
    assert [(e["dataset_from_index"], e["dataset_to_index"]) for e in episodes] == [(0, 6), (6, 10)]
    assert [e["tasks"] for e in episodes] == [["pick the cube"], ["place it"]]
    second = episodes[1]
    assert second["videos/observation.images.front/from_timestamp"] == pytest.approx(6 / FPS)
    assert second["videos/observation.images.front/to_timestamp"] == pytest.approx(10 / FPS)
    stats = dataset["stats"]
    assert stats["observation.state"]["max"] == [2.0, 5.0, 0.5]
    assert stats["index"]["count"] == [10]
    assert np.asarray(stats["observation.images.wrist"]["mean"]).shape == (3, 1, 1)


def test_every_camera_is_a_video_of_every_frame(exported) -> None:
    dataset, expected, _ = exported
    front = dataset["videos"]["observation.images.front"]
    wrist = dataset["videos"]["observation.images.wrist"]
    assert len(front) == len(wrist) == len(expected)
    for n, ((time, image), want) in enumerate(zip(front, expected, strict=True)):
        assert image.shape == (HEIGHT, WIDTH, 3)
        assert time == pytest.approx(n / FPS)
        assert abs(float(image.mean()) - want["pixel"]) < 3  # H.264 keeps a flat frame's value


def test_every_robot_without_robot_needs_one_layout(exported, tmp_path, capsys) -> None:
    _, _, path = exported
    assert main(["export-lerobot", str(path), str(tmp_path / "out")]) == 2
    (message,) = refusals(capsys.readouterr().err)
    assert "different joints or cameras" in message and "--robot" in message
    assert "\n" not in message and "Traceback" not in message


def test_a_cut_recording_exports_what_is_readable(exported, tmp_path, capsys) -> None:
    _, _, path = exported
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size * 2 // 3])
    assert main(["export-lerobot", str(cut), str(tmp_path / "out"), "--robot", "arm0",
                 "--fps", "15"]) == 0  # fmt: skip
    err = capsys.readouterr().err
    assert "cut short or damaged" in err
    dataset = read_v3(tmp_path / "out")
    assert 0 < len(dataset["rows"]) < 10 and dataset["info"]["fps"] == 15
    assert len(dataset["videos"]["observation.images.front"]) == len(dataset["rows"])


def test_progress_goes_to_stderr_and_stdout_holds_the_summary_only(exported, tmp_path, capsys):
    _, _, path = exported
    assert main(["export-lerobot", str(path), str(tmp_path / "out"), "--robot", "arm0"]) == 0
    captured = capsys.readouterr()
    (summary,) = captured.out.splitlines()
    assert summary.startswith("2 episodes, 10 frames at 30 fps")
    steps = [line.removeprefix("tempo export-lerobot: ") for line in captured.err.splitlines()]
    wanted = [f"reading {path} (1 of 1)", "camera front: episode 1 of 2",
              "camera front: episode 2 of 2", "camera wrist: episode 2 of 2",
              "writing 2 episodes' rows and metadata"]  # fmt: skip
    assert [s for s in steps if s in wanted] == wanted


def test_a_file_that_is_no_recording_is_one_sentence(tmp_path, capsys) -> None:
    junk = tmp_path / "junk.mcap"
    junk.write_bytes(b"not an mcap file at all")
    assert main(["export-lerobot", str(junk), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "not a readable MCAP recording" in err and "nothing to export" in err
    assert "Traceback" not in err


# Run in LeRobot's Python: LeRobot's own loader on the export, everything a training run reads
# of each frame as JSON (the image as its mean per channel, in 0..1 as LeRobot gives it).
READ_WITH_LEROBOT = """
import json, sys
from lerobot.datasets.lerobot_dataset import LeRobotDataset
dataset = LeRobotDataset("local/tempo-export", root=sys.argv[1])
items = []
for n in range(len(dataset)):
    item = dataset[n]
    items.append({
        "episode": int(item["episode_index"]), "frame": int(item["frame_index"]),
        "index": int(item["index"]), "timestamp": float(item["timestamp"]),
        "state": item["observation.state"].tolist(), "action": item["action"].tolist(),
        "held": bool(item["action.held"]), "teleop": bool(item["teleop"]),
        "task": item["task"], "image_shape": list(item["observation.images.front"].shape),
        "image_mean": item["observation.images.front"].mean(dim=(1, 2)).tolist(),
    })
print(json.dumps({"episodes": dataset.num_episodes, "fps": dataset.fps,
                  "features": sorted(dataset.features), "items": items}))
"""


def test_lerobot_loads_the_export(exported, tmp_path) -> None:
    """LeRobot's own LeRobotDataset reads the export: episodes, fps, features, every frame's
    state, action, hold and teleop flags and task, the frames in order. LeRobot 0.6.1 wants
    Python >= 3.12 and its own torch, so it runs in TEMPO_LEROBOT_PYTHON (README, "LeRobot's
    loader on an export"), or in this interpreter when it has LeRobot."""
    python = lerobot_python()
    if python is None:
        pytest.skip("LeRobot is not installed here; set TEMPO_LEROBOT_PYTHON to a Python with it")
    _, expected, path = exported
    out = tmp_path / "out"
    assert main(["export-lerobot", str(path), str(out), "--robot", "arm0"]) == 0
    read = subprocess.run(
        [python, "-c", READ_WITH_LEROBOT, str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert read.returncode == 0, read.stderr[-3000:]
    dataset = json.loads(read.stdout.strip().splitlines()[-1])
    assert dataset["episodes"] == 2 and dataset["fps"] == FPS
    features = {"observation.state", "action", "action.held", "teleop", "teleop.joints"}
    features |= {"observation.images.front", "observation.images.wrist"}
    assert features <= set(dataset["features"])
    items = dataset["items"]
    assert len(items) == len(expected)
    frames = [*range(6), *range(4)]
    assert [(i["episode"], i["frame"]) for i in items] == [
        (w["episode"], f) for w, f in zip(expected, frames, strict=True)
    ]
    assert [i["index"] for i in items] == list(range(len(expected)))
    for item, want in zip(items, expected, strict=True):
        np.testing.assert_array_equal(np.float32(item["state"]), want["state"])
        np.testing.assert_array_equal(np.float32(item["action"]), want["action"])
        assert item["held"] == want["held"] and item["teleop"] == bool(want["owned"])
        assert item["task"] == want["task"]
        assert item["image_shape"] == [3, HEIGHT, WIDTH]
        # The flat frame of value 40 i, through H.264: within a few levels.
        assert np.allclose(item["image_mean"], want["pixel"] / 255, atol=3 / 255), item
    assert items[7]["timestamp"] == pytest.approx(1 / FPS)


def lerobot_python() -> str | None:
    """TEMPO_LEROBOT_PYTHON, else this interpreter when it has LeRobot, else None."""
    given = os.environ.get("TEMPO_LEROBOT_PYTHON")
    if given:
        return given
    return sys.executable if importlib.util.find_spec("lerobot") is not None else None


def test_a_missing_extra_is_one_sentence_naming_it(exported, tmp_path, capsys, monkeypatch) -> None:
    _, _, path = exported
    monkeypatch.setitem(sys.modules, "av", None)  # `import av` fails as if not installed
    assert main(["export-lerobot", str(path), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("needs av, which is not installed: pip install 'tempo-controller[export]'")
    assert "\n" not in err and not (tmp_path / "out").exists()


def test_a_frame_rate_below_one_is_refused(exported, tmp_path, capsys) -> None:
    _, _, path = exported
    assert main(["export-lerobot", str(path), str(tmp_path / "out"), "--fps", "0"]) == 2
    assert "--fps 0 is not a frame rate" in capsys.readouterr().err


def test_an_episode_cut_by_a_rotation_goes_on_in_the_next_file(exported) -> None:
    _, _, path = exported
    whole = read_recording(path)
    messages = whole.messages
    # Cut inside episode 1, between an observation and its command.
    cut = [i for i, m in enumerate(messages) if m.name == "observation"][3] + 1
    first = Recording(path, messages[:cut], whole.metadata)
    second = Recording(path, messages[cut:], whole.metadata)
    one, _ = recorded_episodes([whole], "arm0")
    two, _ = recorded_episodes([first, second], "arm0")
    assert [len(e) for e in two] == [len(e) for e in one] == [6, 4]
    for a, b in zip(one, two, strict=True):
        np.testing.assert_array_equal(np.stack(a.action), np.stack(b.action))  # type: ignore[arg-type]
        assert a.held == b.held and a.task == b.task
    # A later run's file (its observations long after): episodes of its own.
    later = [
        replace(
            m,
            publish_ns=m.publish_ns + 10**12,
            data={**m.data, "received_ns": m.data["received_ns"] + 10**12},
        )
        if m.name == "observation"
        else replace(m, publish_ns=m.publish_ns + 10**12)
        for m in messages
    ]
    twice, _ = recorded_episodes([whole, Recording(path, later, whole.metadata)], "arm0")
    assert [len(e) for e in twice] == [6, 4, 6, 4]


def test_the_export_names_a_robots_joints_from_its_session_record() -> None:
    from controller.record.reading import RecordedMessage
    from controller.tools.export_lerobot import _joints
    from controller.tools.lerobot_v3 import Episode

    def session(robot: str, joints: list[str]) -> RecordedMessage:
        return RecordedMessage(f"/{robot}/session", "tempo.Session", 0, 0,
                               {"session": "s", "policy": "p", "joints": joints})  # fmt: skip

    recording = Recording(Path("x.mcap"), [session("arm", ["a", "b", "c", "d"]),
                                           session("grip", ["x", "y", "z"])],
                          {"joints": ["j0", "j1", "j2"]})  # fmt: skip
    episode = Episode("grip", 0, "", state=[np.zeros(3, np.float32)])
    assert _joints([recording], [episode], 3) == ["x", "y", "z"]  # not the default policy's
    no_sessions = Recording(Path("y.mcap"), [], {"joints": ["j0", "j1", "j2"]})
    assert _joints([no_sessions], [episode], 3) == ["j0", "j1", "j2"]


def test_env_state_entries_become_observation_environment_state(exported, tmp_path) -> None:
    _, expected, path = exported
    out = tmp_path / "out"
    assert main(["export-lerobot", str(path), str(out), "--robot", "arm0", "--env-state", "1"]) == 0
    dataset = read_v3(out)
    features = dataset["info"]["features"]
    assert features["observation.state"]["shape"] == [2]
    assert features["observation.environment_state"]["shape"] == [1]
    assert features["action"]["shape"] == [3] and features["action"]["names"] == JOINTS
    for row, want in zip(dataset["rows"], expected, strict=True):
        np.testing.assert_array_equal(np.float32(row["observation.state"]), want["state"][:2])
        np.testing.assert_array_equal(
            np.float32(row["observation.environment_state"]), want["state"][2:]
        )
    assert dataset["stats"]["observation.environment_state"]["count"] == [len(expected)]


def test_env_state_leaving_no_robot_state_is_refused(exported, tmp_path, capsys) -> None:
    _, _, path = exported
    args = ["export-lerobot", str(path), str(tmp_path / "o"), "--robot", "arm0", "--env-state", "3"]
    assert main(args) == 2
    assert "--env-state 3 leaves no robot state" in capsys.readouterr().err
