"""`tempo export-lerobot FILE... OUT`: flight recordings (controller.record) as a LeRobotDataset
(v3 layout, written by controller.tools.lerobot_v3).

    episodes, notes = recorded_episodes([read_recording(p) for p in paths], robot=None)

One dataset frame per accepted observation: its state, its frames, and the command the tick sent
for the observation's control step (the first command of that step or later, before the next
observation). A hold sends nothing new: its frame gets the last action sent in the episode (the
observed state before any) and `action.held`. `teleop` says the operator owned a joint then,
`teleop.joints` which. Episodes are the recording's (`obs.episode_start`); a robot that never
started one is one episode. Each session of a robot name is walked apart (every record names
its session): one session's commands never answer another's observations, and no episode holds
two sessions' frames. An episode cut by a file's rotation continues in the next file.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from controller.inference.progress import PacedProgress, to_stderr
from controller.record.reading import Recording, RecordingError, read_recording
from controller.record.recorded_names import UnsafeNameError, is_safe_name
from controller.tools.lerobot_v3 import Episode, ExportError, check_installed, write_dataset

# A robot's episode goes on in the next file when its observations do within this (a rotation);
# a command answers an observation only within this of its receipt.
ROTATION_GAP_NS = 1_000_000_000
PROGRESS_EVERY_S = 3.0


@dataclass
class ExportNotes:
    """What the export left out or could not read: each a sentence for the user."""

    problems: list[str] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1


class _RobotWalk:
    """One robot session's messages, file after file, in order: observations become frames,
    commands fill in their action."""

    def __init__(self, robot: str, session: str) -> None:
        self.robot = robot
        self.session_id = session  # "": a recording older than session ids (one walk a robot)
        self.episode: Episode | None = None
        self.pending: tuple[Episode, int, int] | None = None  # (episode, frame, its step)
        self.last_action: np.ndarray | None = None
        self.owned: frozenset[str] = frozenset()
        self.task = ""
        self.tasks: dict[int, str] = {}
        self.first = True  # the next observation is its file's first of the robot
        # The commanded joints (the session record's): a hold before any command holds the
        # state's first entries, those of the joints (the rest may be an object's pose).
        self.joints: int | None = None

    def session(self, data: dict[str, Any]) -> None:
        """A new session (a driver's hello) begins a new episode."""
        self.close_pending()
        self.task = data.get("task") or ""
        self.episode = None
        joints = data.get("joints")
        self.joints = len(joints) if isinstance(joints, list) and joints else None

    def observation(
        self,
        data: dict[str, Any],
        frames: dict[str, Any] | None,
        notes: ExportNotes,
        done: list[Episode],
    ) -> None:
        self.close_pending()
        cameras = data.get("cameras") or []
        if not isinstance(cameras, list) or not all(
            isinstance(c, str) and is_safe_name(c) for c in cameras
        ):
            notes.skip("an observation named a camera that is not a camera's name")
            return
        if any(c not in (frames or {}) for c in cameras):
            notes.skip("an observation's frames were not recorded")
            return
        number = int(data["episode"])
        episode = self.episode
        received = int(data["received_ns"])
        continued = self.first and episode is not None
        self.first = False
        if (
            episode is None
            or episode.number != number
            or received <= episode.last_ns
            or continued
            and received - episode.last_ns > ROTATION_GAP_NS
        ):
            task = self.tasks.get(number) or self.task
            episode = Episode(self.robot, number, task, self.session_id)
            done.append(episode)
            self.episode = episode
            self.last_action = None
        episode.state.append(np.asarray(data["state"], np.float32))
        episode.action.append(None)
        episode.held.append(False)
        episode.teleop_joints.append(self.owned)
        episode.received_ns.append(received)
        episode.last_ns = received
        for camera in cameras:
            episode.frames.setdefault(camera, []).append(frames[camera])  # type: ignore[index]
        self.pending = (episode, len(episode) - 1, int(data["step"]))

    def command(self, data: dict[str, Any], publish_ns: int) -> None:
        self.owned = frozenset(data.get("teleop_joints") or ())
        pending = self.pending
        if pending is not None and publish_ns - pending[0].last_ns > ROTATION_GAP_NS:
            self.close_pending()  # the next file is another run's
            pending = None
        if pending is not None and int(data["step"]) >= pending[2]:
            episode, index, _ = pending
            episode.teleop_joints[index] = self.owned
            if data["kind"] == "action" and data.get("action") is not None:
                episode.action[index] = np.asarray(data["action"], np.float32)
            else:
                self._hold(episode, index)
            self.pending = None
        if data["kind"] == "action" and data.get("action") is not None:
            self.last_action = np.asarray(data["action"], np.float32)

    def _hold(self, episode: Episode, index: int) -> None:
        episode.held[index] = True
        episode.action[index] = (
            episode.state[index][: self.joints] if self.last_action is None else self.last_action
        )

    def close_pending(self) -> None:
        """An observation no tick answered before the next one (or the file's end): held."""
        if self.pending is not None:
            episode, index, _ = self.pending
            self._hold(episode, index)
            self.pending = None


def recorded_episodes(
    recordings: list[Recording], robot: str | None = None
) -> tuple[list[Episode], ExportNotes]:
    """Every robot's (or only `robot`'s) episodes in the recordings, in order."""
    notes = ExportNotes()
    episodes: list[Episode] = []
    walks: dict[tuple[str, str], _RobotWalk] = {}  # a robot session's, from file to file
    for recording in recordings:
        for going_on in walks.values():
            going_on.first = True
        if recording.problem:
            notes.problems.append(recording.problem)
        frames: dict[tuple[str, int], dict[str, Any]] = {}
        for message in recording.messages:
            if message.name.startswith("camera/") and robot in (None, message.robot):
                camera = message.name.removeprefix("camera/")
                frames.setdefault((message.robot, message.publish_ns), {})[camera] = message.data
        for message in recording.messages:
            if robot is not None and message.robot != robot:
                continue
            name, data = message.name, message.data
            if name.startswith("camera/"):
                continue  # joined to their observation above
            session = data.get("session")
            whose = (message.robot, session if isinstance(session, str) else "")
            walk = walks.get(whose)
            if walk is None:
                walk = walks[whose] = _RobotWalk(*whose)
            if name == "observation":
                key = (message.robot, message.publish_ns)
                walk.observation(data, frames.get(key), notes, episodes)
            elif name == "command":
                walk.command(data, message.publish_ns)
            elif name == "episode":
                walk.tasks[int(data["episode"])] = data.get("task") or ""
            elif name == "session":
                walk.session(data)
    for going_on in walks.values():
        going_on.close_pending()
    return [e for e in episodes if len(e)], notes


def estimated_fps(episodes: list[Episode]) -> int:
    """The observations' rate: the median interval between an episode's observations."""
    gaps = np.concatenate([np.diff(e.received_ns) for e in episodes] or [np.zeros(0, np.int64)])
    gaps = gaps[gaps > 0]
    if not len(gaps):
        return 30  # one observation per episode: any rate reads it
    return max(1, round(1e9 / float(np.median(gaps))))


# -- the command ------------------------------------------------------------------------------


def _read_all(paths: list[Path], notes: list[str], progress: PacedProgress) -> list[Recording]:
    recordings = []
    for number, path in enumerate(paths, 1):
        progress(f"reading {path} ({number} of {len(paths)})", number in (1, len(paths)))
        try:
            recordings.append(read_recording(path))
        except UnsafeNameError:
            raise  # a file naming paths is refused, not skipped: the export writes by names
        except RecordingError as exc:
            notes.append(str(exc))
    return recordings


def run_export(args: argparse.Namespace) -> int:
    """`tempo export-lerobot FILE... OUT [--fps N] [--robot NAME] [--env-state K]`."""
    check_installed()
    if args.fps is not None and args.fps < 1:
        raise ExportError(f"--fps {args.fps} is not a frame rate; give a whole number from 1")
    env_state = getattr(args, "env_state", 0)
    if env_state < 0:
        raise ExportError(f"--env-state {env_state} is not a count; give 0 or more entries")
    out: Path = args.out
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out} already exists and is not empty; name a new directory")
    # Progress on stderr every few seconds: stdout holds only the summary line.
    progress = PacedProgress(to_stderr("export-lerobot"), every_s=PROGRESS_EVERY_S)
    unreadable: list[str] = []
    recordings = _read_all(args.files, unreadable, progress)
    episodes, notes = recorded_episodes(recordings, args.robot)
    for sentence in unreadable + notes.problems:
        print(f"note: {sentence}", file=sys.stderr)
    if not episodes:
        who = f"robot {args.robot!r}" if args.robot else "any robot"
        raise ExportError(f"the recordings hold no observation of {who}; nothing to export")
    fps = args.fps or estimated_fps(episodes)
    width = len(episodes[0].state[0])
    if env_state >= width:
        raise ExportError(
            f"--env-state {env_state} leaves no robot state: the recorded states hold {width} "
            "values"
        )
    actions = next(a for e in episodes for a in e.action if a is not None)
    joints = _joints(recordings, episodes, len(actions))
    summary = write_dataset(out, episodes, fps, joints, env_state, progress)
    skipped = "".join(f"; {n} left out ({why})" for why, n in sorted(notes.skipped.items()))
    print(
        f"{summary.episodes} episodes, {summary.frames} frames at {fps} fps, cameras "
        f"{', '.join(summary.cameras) or 'none'} written to {out}{skipped}"
    )
    return 0


def _joints(recordings: list[Recording], episodes: list[Episode], width: int) -> list[str]:
    """The names of the `width` commanded joints: the exported robots' own (their session
    records, which name their policy's joints), else the recordings' metadata (the default
    policy's), else joint_<i>."""
    robots = {episode.robot for episode in episodes}
    for recording in recordings:
        for message in recording.messages:
            joints = message.data.get("joints") if message.name == "session" else None
            if message.robot in robots and isinstance(joints, list) and len(joints) == width:
                return [str(j) for j in joints]
    for recording in recordings:
        joints = recording.metadata.get("joints")
        if isinstance(joints, list) and len(joints) == width:
            return [str(j) for j in joints]
    return [f"joint_{i}" for i in range(width)]
