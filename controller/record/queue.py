"""The recorder's side of the tick path: a bounded queue of small records, and each robot's
handle that puts them there (RobotRecording).

Every put is from the control loop's thread (the dispatcher, the feed's requests and the tick
all run there) and never waits: past `capacity` a record is dropped and counted by kind. A
record holds references to what the daemon already has (the received frames, the request's
context) wherever those are not reused afterwards; only the buffers the tick reuses (the
command) are copied. Frames written in place stay in the driver's slot, held (the driver writes
only slots nobody holds, else sends frames on the socket) until the writer thread
(controller.record.writer), which takes records from the other end, has copied them into
its pool (controller.record.frame_pool): no frame is copied on the loop thread.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from controller.record.mark_budget import MarkBudget

# The kinds of record, in the order of an observation's path (also the drop counters' names).
KINDS = ("session", "observation", "episode", "request", "chunk", "command", "mark")


@dataclass(frozen=True, slots=True)
class Record:
    """One thing that happened to robot `robot` at `time_ns` (the daemon's monotonic clock),
    in its session `session` (the id its welcome gave: every record names the session it came
    from). An observation's `pooled` field is True once the writer has copied its frames into
    its pool (to give back when written)."""

    kind: str
    robot: str
    time_ns: int
    fields: Mapping[str, Any]
    session: str = ""

    def pooled_frames(self) -> list[Any]:
        """The frames this record borrowed from the writer's pool (none for most records)."""
        if self.kind != "observation" or not self.fields.get("pooled"):
            return []
        return list(self.fields["images"].values())


class RecordQueue:
    """Bounded and lock-free for its one producer (the loop thread) and one consumer (the
    writer thread): deque append and popleft are atomic."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._records: collections.deque[Record] = collections.deque()
        self.dropped: dict[str, int] = dict.fromkeys(KINDS, 0)
        self.queued = 0

    def put(self, record: Record) -> bool:
        """Queue `record`, or drop and count it when the queue is full; never waits."""
        if len(self._records) >= self.capacity:
            self.dropped[record.kind] += 1
            return False
        self._records.append(record)
        self.queued += 1
        return True

    def take(self) -> Record | None:
        """The oldest record, or None when there is none (the writer's end)."""
        try:
            return self._records.popleft()
        except IndexError:
            return None

    def take_all(self) -> list[Record]:
        """Every record queued now, oldest first (the writer's end)."""
        records = []
        while (record := self.take()) is not None:
            records.append(record)
        return records

    def __len__(self) -> int:
        return len(self._records)


Tier = Callable[[], "str | None"]  # the serving tier of a robot's policy now


class PolicyRecording:
    """The recorder as one policy's sessions use it (a daemon of several policies has one per
    policy): their robots' records name that policy's joints and its serving tier."""

    def __init__(
        self,
        queue: RecordQueue,
        policy: str | None,
        joints: Sequence[str],
        tier: Tier,
        marks: MarkBudget | None = None,
    ) -> None:
        """`marks`: the recorder's budget of marks, shared by every policy's robots."""
        self.queue = queue
        self.marks = marks
        self.policy = policy
        self.joints = list(joints)
        self.tier = tier

    def robot(self, robot: str, session: str) -> RobotRecording:
        return RobotRecording(self.queue, robot, session, self)


class RobotRecording:
    """What one robot's session, its requests and its ticks put on the queue."""

    __slots__ = ("_queue", "_policy", "robot", "session")

    def __init__(
        self, queue: RecordQueue, robot: str, session: str, policy: PolicyRecording | None = None
    ) -> None:
        self._queue = queue
        self._policy = policy
        self.robot = robot
        self.session = session

    def _put(self, kind: str, time_ns: int, fields: dict[str, Any]) -> None:
        self._queue.put(Record(kind, self.robot, time_ns, fields, self.session))

    def hello(self, task: str | None) -> None:
        """The robot's session began (with its task, for a prompt-reading policy)."""
        fields: dict[str, Any] = {"session": self.session, "task": task}
        if self._policy is not None:
            fields.update(policy=self._policy.policy, joints=self._policy.joints)
        self._put("session", time.monotonic_ns(), fields)

    def observation(
        self,
        obs_seq: int,
        step: int,
        received_ns: int,
        driver_time_ns: int,
        images: Mapping[str, np.ndarray],
        state: np.ndarray,
        teleop: np.ndarray | None,
        episode: int,
    ) -> None:
        """An accepted observation. Frames written in place (SlotFrames) are held in their slot
        until the writer copies them; frames received on the socket are the message's own,
        never written."""
        self._put(
            "observation",
            received_ns,
            {
                "obs_seq": obs_seq,
                "step": step,
                "driver_time_ns": driver_time_ns,
                "images": images,
                "state": state,
                "teleop": teleop,
                "episode": episode,
                "pooled": False,
            },
        )

    def episode(self, episode: int, step: int, task: str | None) -> None:
        """An episode began at control step `step` (with the robot's task, if any)."""
        self._put("episode", time.monotonic_ns(), {"episode": episode, "step": step, "task": task})

    def request(self, request: Any) -> None:
        """An inference request (controller.feed.inference_feed.InferenceRequest): its
        context as the policy gets it; the frames are its observation's, recorded with it."""
        self._put(
            "request",
            time.monotonic_ns(),
            {
                "obs_seq": request.obs_seq,
                "received_ns": request.received_ns,
                "episode": request.episode,
                "context": request.context,
            },
        )

    def chunk(self, chunk: Any, step: int, late_steps: int | None) -> None:
        """A chunk (controller.feed.inference_feed.Chunk) that came back, at control step
        `step`; `late_steps`: its rows already past, None when its episode had ended."""
        self._put(
            "chunk",
            time.monotonic_ns(),
            {
                "obs_seq": chunk.obs_seq,
                "start_step": chunk.start_step,
                "episode": chunk.episode,
                "landed_step": step,
                "obs_received_ns": chunk.obs_received_ns,
                "inference_ns": chunk.inference_ns,
                "late_steps": late_steps,
                "checkpoint": getattr(chunk, "checkpoint", None),  # None: unknown
                "actions": chunk.actions,  # the feed's own array, never written again
                "_policy": self._policy,  # its tier is read by the writer as the chunk comes
            },
        )

    def command(
        self,
        step: int,
        now_ns: int,
        reason: str | None,
        proposed: np.ndarray | None,
        command: np.ndarray | None,
        teleop_joints: Sequence[str],
    ) -> None:
        """This tick's `action` (reason None: the guarded `command`, and the `proposed` action
        the guards saw, teleop mixed in) or `hold` with its reason. The pipeline reuses both
        buffers every tick: they are copied (a few floats)."""
        self._put(
            "command",
            now_ns,
            {
                "step": step,
                "reason": reason,
                "proposed": None if proposed is None else proposed.copy(),
                "command": None if command is None else command.copy(),
                "teleop_joints": teleop_joints,  # a tuple, replaced (not changed) on teleop
                "_policy": self._policy,
            },
        )

    def mark_refused(self, now_ns: int) -> str | None:
        """Why a mark of this robot now is not kept (past its or all robots' budget), or None
        (then counted: `mark` follows)."""
        budget = self._policy.marks if self._policy is not None else None
        return None if budget is None else budget.take(self.robot, now_ns)

    def mark(self, reason: str, now_ns: int) -> None:
        """The driver marked this moment (in ring mode: the ring is written out)."""
        self._put("mark", now_ns, {"reason": reason})
