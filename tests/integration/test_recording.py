"""The flight recorder in a real daemon (in this process): what it writes, in which files,
that it never holds up the tick, and marks."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mcap.reader import make_reader

from controller.errors import ProtocolError
from controller.record import image_cdr
from controller.record.reading import read_recording
from controller.record.schemas import SCHEMAS
from controller.record.writer import Recorder
from controller.wire.client import TempoClient
from controller.wire.header_schema import check_fields
from tests.conftest import ipc_config, running_daemon, wait_for

JOINTS = [f"joint_{i}" for i in range(6)]
CAMERAS = {"front": (96, 128)}
# The topics docs/recording.md lists, under /<robot>/.
DOCUMENTED = {
    "camera/front",
    "observation",
    "session",
    "episode",
    "inference_request",
    "chunk",
    "command",
    "mark",
}


def client(config: Any, robot: str = "arm0") -> TempoClient:
    return TempoClient(config.server.bind, robot, JOINTS, CAMERAS, 6)


def send(c: TempoClient, n: int, noise: bool = False, **kwargs: Any) -> list[Any]:
    """n observations (random frames with `noise`: nothing compresses), the commands back."""
    rng = np.random.default_rng(0)
    commands = []
    for i in range(n):
        if noise:
            frame = rng.integers(0, 256, (96, 128, 3), dtype=np.uint8)
        else:
            frame = np.full((96, 128, 3), i % 256, dtype=np.uint8)
        c.send_observation({"front": frame}, np.zeros(6, np.float32), **(kwargs if i == 0 else {}))
        commands.append(c.receive(timeout_s=0.01))
    return commands


def recordings(directory: Path, prefix: str = "") -> list[Path]:
    return sorted(directory.glob(f"{prefix}*.mcap"))


def test_continuous_recording_has_the_documented_topics_and_reads_back(tmp_path) -> None:
    rec = tmp_path / "rec"
    config = ipc_config(tmp_path, "control.rate_hz=100", "record.mode=continuous",
                        f"record.dir={rec}")  # fmt: skip
    with running_daemon(config) as daemon, client(config) as c:
        assert c.frames_shared  # frames in place: recorded from the driver's ring
        send(c, 60, episode_start=True)
        c.mark("operator saw a wobble")
        wait_for(lambda: daemon.status()["recording"]["written"] > 200)
    files = recordings(rec, "tempo-")
    assert len(files) == 1
    # The mcap package's own (indexed) reader reads it, with every schema declared.
    with open(files[0], "rb") as stream:
        reader = make_reader(stream)
        summary = reader.get_summary()
        assert summary is not None
        schemas = {s.name: s for s in summary.schemas.values()}
        # Frames: ROS 2 images in CDR (what Foxglove reads natively); the rest JSON.
        image = schemas.pop(image_cdr.SCHEMA)
        assert image.encoding == "ros2msg" and image.data == image_cdr.DEFINITION.encode()
        assert all(s.encoding == "jsonschema" for s in schemas.values())
        assert set(schemas) <= set(SCHEMAS)
        topics = {channel.topic for channel in summary.channels.values()}
        encodings = {ch.topic: ch.message_encoding for ch in summary.channels.values()}
        assert encodings.pop("/arm0/camera/front") == "cdr"
        assert set(encodings.values()) == {"json"}
    assert topics == {f"/arm0/{name}" for name in DOCUMENTED}
    recording = read_recording(files[0])
    assert recording.problem is None
    by_name = collections.defaultdict(list)
    for message in recording.messages:
        by_name[message.name].append(message.data)
    assert len(by_name["observation"]) == 60 == len(by_name["camera/front"])
    # Each frame as it was sent (observation i: every pixel i), though the driver reused
    # its ring's slots many times since.
    from controller.record.image_cdr import frame_of

    for i, image in enumerate(by_name["camera/front"]):
        assert (frame_of(image) == i).all()
    assert (
        by_name["camera/front"][5]["width"] == 128
        and by_name["camera/front"][5]["encoding"] == "rgb8"
    )
    session = by_name["session"][0]["session"]  # every record names the session it came from
    assert by_name["mark"] == [{"session": session, "reason": "operator saw a wobble"}]
    kinds = ("observation", "command", "chunk")
    assert {m["session"] for name in kinds for m in by_name[name]} == {session}
    assert by_name["episode"][0]["episode"] == 1
    chunk = by_name["chunk"][0]
    assert np.asarray(chunk["actions"]).shape == (20, 6) and chunk["tier"] == "eager_fp32"
    sent = [c for c in by_name["command"] if c["kind"] == "action"]
    assert sent and len(sent[0]["action"]) == 6


def _paired_by_step(
    a: list[tuple[int, np.ndarray]], b: list[tuple[int, np.ndarray]]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The rows both runs played, paired by their place in the chunk: the runs are aligned on
    the first row both played (the reach policy's rows all differ), then paired by step, so a
    tick one run missed under load (its row never sent) shifts nothing."""
    for step_a, row_a in a:
        shift = next((s - step_a for s, row in b if np.array_equal(row, row_a)), None)
        if shift is not None:
            played = dict(b)
            return [(row, played[s + shift]) for s, row in a if s + shift in played]
    return []  # nothing in common: the comparison fails


def _served(tmp_path: Path, name: str, *overrides: str) -> list[tuple[int, np.ndarray]]:
    """The (step, action) the reach policy sends for one observation (the robot sends no
    other)."""
    (tmp_path / name).mkdir()
    config = ipc_config(
        tmp_path / name,
        "control.rate_hz=100",
        "execution.ensemble=newest",
        "policy.reach.target=[1, 1, 1, 1, 1, 1]",
        "guards.hold_after_ms=2000",
        "guards.stop_after_ms=4000",
        *overrides,
    )
    with running_daemon(config), client(config) as c:
        c.send_observation({"front": np.zeros((96, 128, 3), np.uint8)}, np.zeros(6, np.float32))
        actions: list[tuple[int, np.ndarray]] = []

        def chunk_played() -> bool:
            command = c.receive(timeout_s=0.01)
            if command.kind == "action" and (not actions or command.step != actions[-1][0]):
                actions.append((command.step, np.array(command.action)))
            return bool(actions) and command.kind == "hold" and command.reason == "no_action"

        wait_for(chunk_played, timeout=30)
    return actions


def test_jpeg_frames_are_compressed_images_that_read_back_close_to_those_sent(tmp_path) -> None:
    pytest.importorskip("av")
    from controller.record import jpeg_frames

    rec = tmp_path / "rec"
    config = ipc_config(tmp_path, "control.rate_hz=100", "record.mode=continuous",
                        f"record.dir={rec}", "record.frames=jpeg")  # fmt: skip
    with running_daemon(config) as daemon, client(config) as c:
        send(c, 20)
        wait_for(lambda: daemon.status()["recording"]["written"] >= 40)
    (file,) = recordings(rec, "tempo-")
    with open(file, "rb") as stream:
        summary = make_reader(stream).get_summary()
        assert summary is not None
        schemas = {s.name: s for s in summary.schemas.values()}
        assert image_cdr.SCHEMA not in schemas  # no raw frame
        compressed = schemas[jpeg_frames.SCHEMA]
        assert compressed.encoding == "ros2msg"
        assert compressed.data == jpeg_frames.DEFINITION.encode()
    recording = read_recording(file)
    assert recording.problem is None and recording.metadata["frames"] == "jpeg"
    images = [m.data for m in recording.messages if m.name == "camera/front"]
    assert len(images) == 20
    for i, image in enumerate(images):  # observation i: every pixel i, flat: JPEG keeps it
        assert image["format"] == "jpeg" and image["frame_id"] == "front"
        assert np.abs(jpeg_frames.pixels_of(image).astype(int) - i).max() <= 2


def test_recording_on_and_off_serve_the_same(tmp_path) -> None:
    off = _served(tmp_path, "off")
    on = _served(tmp_path, "on", "record.mode=continuous", f"record.dir={tmp_path}/rec")
    assert recordings(tmp_path / "rec")
    # One chunk each, identical row for row where both played it. How many rows were already
    # late at the start, expired at the robot at the end, or missed on the way depends on the
    # machine's load: the rows are paired by their step, not by their order.
    pairs = _paired_by_step(off, on)
    assert len(pairs) >= 5
    for row_off, row_on in pairs:
        np.testing.assert_array_equal(row_off, row_on)


def test_a_full_queue_drops_and_counts_and_the_ticks_go_on(tmp_path, monkeypatch) -> None:
    # The writer never starts: the queue fills, and every record after that is dropped.
    monkeypatch.setattr(Recorder, "start", lambda self: None)
    config = ipc_config(tmp_path, "control.rate_hz=100", "record.mode=continuous",
                        f"record.dir={tmp_path}/rec", "record.queue=16")  # fmt: skip
    with running_daemon(config) as daemon, client(config) as c:
        commands = send(c, 150)
        status = daemon.status()
    recording = status["recording"]
    assert recording["queue_length"] == 16 == recording["queued"]
    dropped = recording["dropped"]
    assert dropped["observation"] > 0 and dropped["command"] > 0 and dropped["request"] > 0
    # The ticks went on: actions were sent all along, no tick failed, the robot acted.
    assert status["tick_failures"] == 0
    assert sum(c.kind == "action" for c in commands) > 20
    assert status["robots"][0]["counters"]["observations"] == 150
    from controller.observe.status_view import render_status

    assert f"{sum(dropped.values())} dropped" in render_status(status)


def test_continuous_files_rotate_at_the_size_cap(tmp_path) -> None:
    rec = tmp_path / "rec"
    config = ipc_config(tmp_path, "control.rate_hz=100", "record.mode=continuous",
                        f"record.dir={rec}", "record.max_file_mb=1")  # fmt: skip
    with running_daemon(config) as daemon, client(config) as c:
        send(c, 120, noise=True)  # ~ 120 x 37 KB of raw frames: several files
        wait_for(lambda: daemon.status()["recording"]["queue_length"] == 0)
    files = recordings(rec, "tempo-")
    assert len(files) >= 3
    frames = 0
    for path in files:
        assert path.stat().st_size <= 1024 * 1024
        recording = read_recording(path)
        assert recording.problem is None
        frames += sum(m.name == "camera/front" for m in recording.messages)
    assert frames == 120  # every frame in exactly one file


def test_ring_is_written_on_a_mark_and_on_a_guard_stop(tmp_path) -> None:
    rec = tmp_path / "rec"
    config = ipc_config(
        tmp_path,
        "control.rate_hz=100",
        "record.mode=ring",
        f"record.dir={rec}",
        "record.ring_seconds=60",
        "guards.hold_after_ms=100",
        "guards.stop_after_ms=300",
    )
    with running_daemon(config) as daemon, client(config) as c:
        send(c, 40)
        assert recordings(rec) == []  # nothing written before an incident
        c.mark("gripper slipped")
        wait_for(lambda: daemon.status()["recording"]["incidents"] == 1)
        # No observation for 300 ms: the watchdog stops the robot; its ring is written.
        wait_for(lambda: daemon.status()["recording"]["incidents"] == 2, timeout=10)
    marked = recordings(rec, "incident-")
    assert [p.name.split("-")[2] for p in marked] == ["mark", "guard_stop"]
    first = read_recording(marked[0])
    names = collections.Counter(m.name for m in first.messages)
    assert names["observation"] == 40 and names["mark"] == 1
    second = read_recording(marked[1])
    reasons = [m.data["reason"] for m in second.messages if m.name == "command"]
    assert reasons[-1] == "stopped"
    assert [m.data["reason"] for m in second.messages if m.name == "mark"] == [
        "gripper slipped",
        "guard stop",
    ]


def test_marks_are_checked_and_rate_limited(tmp_path) -> None:
    config = ipc_config(tmp_path, "control.rate_hz=100", "record.mode=ring",
                        f"record.dir={tmp_path}/rec")  # fmt: skip
    with running_daemon(config) as daemon, client(config) as c:
        send(c, 5)
        with pytest.raises(ValueError, match="at most 200"):
            c.mark("x" * 201)
        with pytest.raises(ValueError, match="some text"):
            c.mark("  ")
        c.mark("first")
        c.mark("second, too soon")
        wait_for(lambda: daemon.status()["protocol_errors"].get("not_allowed", 0) == 1)
        counters = daemon.status()["robots"][0]["counters"]
        assert counters["marks"] == 1 and counters["marks_refused"] == 1


def test_an_operators_mark_writes_the_named_robots_ring_or_every_robots(tmp_path) -> None:
    """`tempo mark`'s command, asked from another thread as the status socket's is: kept on the
    loop's thread, with the same checks and limit as a driver's mark."""
    rec = tmp_path / "rec"
    config = ipc_config(tmp_path, "control.rate_hz=100", "record.mode=ring", f"record.dir={rec}",
                        "record.ring_seconds=60")  # fmt: skip
    with running_daemon(config) as daemon, client(config) as a, client(config, "arm1") as b:
        send(a, 10)
        send(b, 10)
        marks = daemon.operator_marks
        assert marks.command({"robot": "arm1", "reason": "arm1 bumped the table"}) == {
            "mark": {"kept": ["arm1"], "refused": {}}
        }
        # Every robot, at once: arm1 marked less than a second ago is refused, arm0 keeps it.
        reply = marks.command({"robot": None, "reason": None})
        assert reply["mark"]["kept"] == ["arm0"]
        assert "at most one moment a second" in reply["mark"]["refused"]["arm1"]
        wait_for(lambda: daemon.status()["recording"]["incidents"] == 2)
        assert "no robot named 'arm9'" in marks.command({"robot": "arm9"})["error"]
        assert "robot's name" in marks.command({"robot": ""})["error"]
        assert "some text" in marks.command({"reason": "  "})["error"]
        assert "must be a string" in marks.command({"reason": 7})["error"]
    # Only the marks' incidents: once the sends end, each robot's watchdog stop (after
    # guards.stop_after_ms) writes a guard_stop incident too, sooner on a loaded machine.
    marked = [p for p in recordings(rec, "incident-") if "-mark-" in p.name]
    assert sorted(p.name.split("-")[-1] for p in marked) == ["arm0.mcap", "arm1.mcap"]
    # An incident file holds the whole ring (every robot's records), named by the robot marked.
    reasons = {p.name.split("-")[-1]: [m.data["reason"] for m in read_recording(p).messages
                                       if m.name == "mark"] for p in marked}  # fmt: skip
    assert reasons == {"arm1.mcap": ["arm1 bumped the table"],
                       "arm0.mcap": ["arm1 bumped the table", "operator mark"]}  # fmt: skip


def test_a_mark_is_refused_when_nothing_is_recorded(tmp_path) -> None:
    config = ipc_config(tmp_path, "control.rate_hz=100")
    with running_daemon(config) as daemon, client(config) as c:
        send(c, 5)
        c.mark("nobody records")
        wait_for(lambda: daemon.status()["protocol_errors"].get("not_allowed", 0) == 1)
        assert daemon.status()["recording"] is None


@pytest.mark.parametrize(
    "reason, fragment",
    [("", "some text"), ("é" * 101, "202 bytes"), (7, "must be a string")],
)
def test_the_header_schema_refuses_a_bad_mark(reason: Any, fragment: str) -> None:
    header = {"version": 2, "kind": "mark", "robot": "r", "seq": 1, "time_ns": 1,
              "arrays": [], "session": "s", "reason": reason}  # fmt: skip
    with pytest.raises(ProtocolError, match=fragment):
        check_fields(header)


def test_tempo_mark_asks_a_running_daemon_on_its_status_socket(tmp_path, capsys) -> None:
    """The command end to end: `tempo serve` in its own process, a driver, `tempo mark`."""
    from controller.cli import main
    from tests.conftest import StreamingDriver, daemon_process

    rec = tmp_path / "rec"
    status_at = f"ipc://{tmp_path}/status.sock"
    with daemon_process(tmp_path, "record.mode=ring", f"record.dir={rec}"):
        driver = StreamingDriver(f"ipc://{tmp_path}/tempo.sock", robot="arm0").start()
        try:
            wait_for(lambda: sum(r.kind == "action" for r in driver.records) >= 5, 30)
            code = main(["mark", "--connect", status_at, "--robot", "arm0", "the arm shook"])
            out, err = capsys.readouterr()
            assert code == 0 and out.strip() == "tempo mark: kept for arm0", out + err
            wait_for(lambda: len(recordings(rec, "incident-")) == 1, 10)
            code = main(["mark", "--connect", status_at, "--robot", "arm7"])
            out, err = capsys.readouterr()
            assert code == 2 and "no robot named 'arm7' is connected" in err, out + err
        finally:
            driver.stop()
    (incident,) = recordings(rec, "incident-")  # complete: the daemon has stopped
    reasons = [m.data["reason"] for m in read_recording(incident).messages if m.name == "mark"]
    assert reasons == ["the arm shook"]
