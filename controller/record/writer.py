"""The recorder: the queue the tick path puts records on, and the thread that writes them.

    recorder = Recorder(config.record, joints, control_hz, tier=lambda: ...)
    recording = recorder.robot("arm0", session_id)     # a session's handle (queue.RobotRecording)
    lane = recorder.policy("pi0", joints, tier)        # another policy's robots: theirs
    recorder.start(); ...; recorder.stop()             # stop writes what is queued, then closes

continuous: every record goes to the current file, which ends once it reaches `max_file_mb`
(files named by the time they began); with `max_total_mb`, the oldest files this recorder
finished are deleted as each file ends, so that they and the next file fit. ring: records of
the last `ring_seconds` (and at most `ring_max_mb`) are kept in memory; a driver's `mark`, or a
robot's guard stop (its first `stopped` hold), writes them all to a file of their own; past
`max_incidents_mb` of them the oldest incident files go (controller.record.file_budget).

A write error (a full disk) pauses recording (controller.record.write_pause): records are
dropped and counted (ring mode keeps its ring in memory) until record.dir can be written
again; then recording goes on in a new file.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from controller.errors import ConfigError
from controller.record import image_cdr
from controller.record.file_budget import FileBudget
from controller.record.file_client import RecordingFile, RecordingFiles
from controller.record.frame_pool import FramePool
from controller.record.jpeg_frames import check_available
from controller.record.mark_budget import MarkBudget
from controller.record.mcap_file import CHUNK_BYTES, metadata_of
from controller.record.memory_ring import MemoryRing
from controller.record.packed_json import pack
from controller.record.private_files import make_private_dir
from controller.record.queue import PolicyRecording, Record, RecordQueue, RobotRecording, Tier
from controller.record.record_files import file_part, frames_of, nbytes, stamp
from controller.record.schemas import TOPICS, camera_topic, record_json, topic
from controller.record.write_pause import RETRY_S, WRITE_ERRORS, WritePause
from controller.record_config import RecordConfig

log = logging.getLogger(__name__)

IDLE_WAIT_S = 0.005  # the writer's nap when the queue is empty
STOP_REASON = "stopped"  # the hold reason of a guard stop (controller.daemon.session)


class Recorder:
    def __init__(
        self,
        config: RecordConfig,
        joints: Sequence[str],
        control_hz: float,
        tier: Tier = lambda: None,
    ) -> None:
        """`joints`, `tier`: the default policy's joints and serving tier now (read by the
        writer thread as chunks come); other policies' robots record theirs (`policy`)."""
        self.config = config
        self.joints = list(joints)
        self.queue = RecordQueue(config.queue)
        # Marks of every policy's robots, within record.marks_per_minute(_all).
        self.marks = MarkBudget(config.marks_per_minute, config.marks_per_minute_all)
        self._default = PolicyRecording(self.queue, None, joints, tier, self.marks)
        self._scale = config.scale if config.frames == "downscale" else 1
        jpeg_qscale = config.jpeg_qscale if config.frames == "jpeg" else None
        self._metadata = metadata_of(
            {
                "frames": config.frames,
                "scale": self._scale,
                "jpeg_qscale": jpeg_qscale,
                "joints": self.joints,
                "control_hz": control_hz,
                "mode": config.mode,
            }
        )
        self._wall_offset_ns = time.time_ns() - time.monotonic_ns()
        self._jpeg_qscale = jpeg_qscale
        self._files = RecordingFiles(jpeg_qscale)  # the process that writes them
        self._file: RecordingFile | None = None
        self._last_reason: dict[str, str | None] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.written = 0  # records written to a file
        self.files: list[str] = []
        # The files this recorder finished: the only ones its caps delete.
        self._rotated = FileBudget(config.max_total_mb, "record.max_total_mb")
        self._incident_files = FileBudget(config.max_incidents_mb, "record.max_incidents_mb")
        self._pause = WritePause(config.dir)
        self._unwritten: list[Record] = []  # a failed batch's records after the failed one
        self.incidents = 0
        self.incidents_not_written = 0  # marks and guard stops while paused
        self.torn_frames = 0  # observations whose frames the driver wrote over before the copy
        self.not_json = 0  # records left out: a value JSON cannot hold (a NaN in memory)
        self.error: str | None = None
        self._frames = FramePool()
        self._ring = MemoryRing(config.ring_seconds, config.ring_max_mb, self._frames)

    def robot(self, robot: str, session: str) -> RobotRecording:
        return self._default.robot(robot, session)

    def policy(self, name: str, joints: Sequence[str], tier: Tier) -> PolicyRecording:
        """The recorder for the robots of the named policy `name`."""
        return PolicyRecording(self.queue, name, joints, tier, self.marks)

    def _policy_of(self, record: Record) -> PolicyRecording:
        return record.fields.get("_policy") or self._default

    # -- the thread ---------------------------------------------------------------------------

    def start(self) -> None:
        """Make `dir` (ConfigError when it cannot be, or when JPEG frames need PyAV) and start
        the writer thread."""
        check_available(self.config)
        try:
            make_private_dir(self.config.dir)  # 0700 when made here: frames are private
        except OSError as exc:
            raise ConfigError(
                f"record.dir {self.config.dir} cannot be created ({exc.strerror}); set "
                "record.dir to a directory the daemon may write"
            ) from None
        self._thread = threading.Thread(target=self._run, name="tempo-recorder", daemon=True)
        self._thread.start()

    @property
    def frame_pool(self) -> FramePool:
        """The buffers the writer copies slot frames into, used again once written."""
        return self._frames

    @property
    def ring(self) -> MemoryRing:
        """What ring mode keeps in memory for the next incident."""
        return self._ring

    @property
    def thread(self) -> threading.Thread | None:
        """The writer thread, once started."""
        return self._thread

    def stop(self, timeout: float = 5.0) -> None:
        """Write what is queued (continuous), close the file, end the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():  # a backlog (compression slower than the cameras)
                log.warning(
                    "the recorder had %d records left to write after %.0f s; the file being "
                    "written may end early (what was written is readable)",
                    len(self.queue), timeout,
                )  # fmt: skip
                return
        self._files.stop()

    def _run(self) -> None:
        try:
            while True:
                try:
                    self._write_until_stopped()
                    self.close_file()  # a full disk can first show when the last chunk is
                    return
                except WRITE_ERRORS as exc:  # a full disk: paused, said once, no traceback
                    self._lost_file()
                    self._pause.pause(exc)
                if self._paused_until_writable():
                    return  # stopped while paused
        except Exception as exc:  # a bug of ours: say so once, in the log and in status
            self.error = f"{type(exc).__name__}: {exc}"
            log.exception("the recorder stopped writing; records are dropped from now on")
        self._file = None  # the file process failed with it: nothing to close
        # Past the except block: its exception, whose traceback held the failed batch (and
        # any slot not yet copied), is gone.
        queue = self.queue
        while True:
            stopping = self._stop.wait(IDLE_WAIT_S)
            for record in queue.take_all():  # also what came just before the stop
                queue.dropped[record.kind] += 1
            if stopping:
                return

    def _lost_file(self) -> None:
        """A write failed: the file process ended with it (a new one is started for the next
        file); the file cut short stays, readable to where it got, under the caps."""
        file, self._file = self._file, None
        if file is not None:
            budget = self._rotated if self.config.mode == "continuous" else self._incident_files
            budget.finished(file.path)
        files, self._files = self._files, RecordingFiles(self._jpeg_qscale)
        files.stop()

    def _paused_until_writable(self) -> bool:
        """Take records while paused (dropped; ring: kept in the ring) until record.dir can be
        written again (False) or the recorder stops (True)."""
        next_try = time.monotonic() + RETRY_S
        unwritten, self._unwritten = self._unwritten, []
        for record in unwritten:  # the failed batch's rest
            self._take_paused(record)
        while True:
            stopping = self._stop.wait(IDLE_WAIT_S)
            for record in self.queue.take_all():
                self._take_paused(record)
            if stopping:
                return True
            if time.monotonic() >= next_try:
                if self._pause.try_resume():
                    return False
                next_try = time.monotonic() + RETRY_S

    def _take_paused(self, record: Record) -> None:
        if record.kind == "observation":
            self._own_frames(record)
        if self.config.mode == "continuous":
            self.queue.dropped[record.kind] += 1
            self._frames.give_back(record.pooled_frames())
            return
        if record.kind == "mark":
            self.incidents_not_written += 1
        tier = self._policy_of(record).tier() if record.kind == "chunk" else None
        self._keep(record, tier)

    def _write_until_stopped(self) -> None:
        queue = self.queue
        while True:
            records = queue.take_all()
            if not records:
                self._files.check()  # a file process that ended is said at once, not later
                if self._stop.is_set():
                    return
                time.sleep(IDLE_WAIT_S)
                continue
            self._write_batch(records)

    def write_queued(self) -> None:
        """Write what is queued now, as the writer thread writes each batch (for a caller that
        drives the recorder without its thread)."""
        self._write_batch(self.queue.take_all())

    def _write_batch(self, records: list[Record]) -> None:
        # Frames still in drivers' slots first, for every record, so that the encoding below
        # holds no slot: a driver whose slots are all held sends its frames on the socket.
        for record in records:
            if record.kind == "observation":
                self._own_frames(record)
        for index, record in enumerate(records):
            try:
                self.write(record)
            except WRITE_ERRORS:
                self._not_written(record)
                self._unwritten = records[index + 1 :]  # taken as paused (_paused_until_..)
                raise
            except Exception:
                for lost in records[index:]:  # this batch's rest is never written
                    self.queue.dropped[lost.kind] += 1
                raise

    def _not_written(self, record: Record) -> None:
        """The record whose write failed: dropped (continuous), or, in ring mode, kept in the
        ring with the incident it began not written."""
        if self.config.mode == "continuous":
            self.queue.dropped[record.kind] += 1
            self._frames.give_back(record.pooled_frames())
        else:
            self.incidents_not_written += 1

    def write(self, record: Record) -> None:
        """One record, as the writer thread writes each (a caller that drives the recorder
        without its thread, a test, calls this and close_file itself)."""
        if record.kind == "observation":
            self._own_frames(record)
        tier = self._policy_of(record).tier() if record.kind == "chunk" else None
        if self.config.mode == "continuous":
            self._write_continuous(record, tier)
            return
        self._keep(record, tier)
        if record.kind == "mark":
            self._write_ring("mark", record.robot)
        elif record.kind == "command":
            reason = record.fields["reason"]
            stopped = reason == STOP_REASON and self._last_reason.get(record.robot) != STOP_REASON
            self._last_reason[record.robot] = reason
            if stopped:
                mark = Record(
                    "mark", record.robot, record.time_ns, {"reason": "guard stop"}, record.session
                )
                self._keep(mark, None)
                self._write_ring("guard_stop", record.robot)

    def _own_frames(self, record: Record) -> None:
        if not self._frames.own_slot_frames(record.fields):
            self.torn_frames += 1

    # -- continuous ---------------------------------------------------------------------------

    def _write_continuous(self, record: Record, tier: str | None) -> None:
        message = self._packed(record, tier)
        if message is None:
            return
        file = self._file
        next_bytes = 2 * nbytes(record) + message[1]  # frames twice over, its JSON's bound
        if file is not None and file.size + next_bytes >= self._max_file_bytes:
            self.close_file()
            # Here, on the writer thread: the tick path never waits for it. The next file (at
            # most max_file_mb) is reserved for.
            self._rotated.make_room(self.config.max_file_mb * 1024 * 1024)
            file = None
        if file is None:
            file = self._file = self._open(f"tempo-{stamp(self._wall(record.time_ns))}.mcap")
        frames = frames_of(record)
        self._write_entry(file, record.time_ns, record.robot, record.kind, message, frames)
        self._frames.give_back(record.pooled_frames())

    @property
    def _max_file_bytes(self) -> int:
        return self.config.max_file_mb * 1024 * 1024 - CHUNK_BYTES

    def _open(self, name: str) -> RecordingFile:
        path = self.config.dir / name
        n = 1
        while path.exists():  # two files within a microsecond: never overwrite one
            path = self.config.dir / f"{Path(name).stem}-{n}.mcap"
            n += 1
        file = self._files.open(path, self._metadata, self.config.compression)
        self.files.append(str(path))
        return file

    def close_file(self) -> None:
        """Close the file being written, if any (the writer thread does when it stops)."""
        if self._file is not None:
            file, self._file = self._file, None
            file.close()  # returns once the file is complete on disk: its size is final
            log.info("recording %s written (%d messages)", file.path, file.messages)
            self._rotated.finished(file.path)

    # -- ring -----------------------------------------------------------------------------------

    def _keep(self, record: Record, tier: str | None) -> None:
        packed = self._packed(record, tier)
        if packed is not None:
            self._ring.keep(record, packed)

    def _write_ring(self, trigger: str, robot: str) -> None:
        """Every record in the ring to a file of its own (the ring keeps them too: the next
        incident's file has its own last seconds)."""
        now = self._wall(time.monotonic_ns())
        file = self._open(f"incident-{stamp(now)}-{trigger}-{file_part(robot)}.mcap")
        self._file = file  # a write error finds it here (_lost_file)
        for at, robot_of, kind, message, bound, frames, *_ in self._ring:
            self._write_entry(file, at, robot_of, kind, (message, bound), frames)
        file.close()  # not after a failure: the file process has ended, having said why
        self._file = None
        self.incidents += 1
        self._incident_files.finished(file.path)
        deleted = self._incident_files.files_deleted
        self._incident_files.make_room(quiet=True)
        if self._incident_files.files_deleted > deleted == 0:  # the first time only
            log.warning("recording: record.max_incidents_mb (%d) reached; the oldest incident "
                        "files are deleted from now on (counted in status)",
                        self.config.max_incidents_mb)  # fmt: skip
        # A robot's name is plain ASCII (checked at hello): safe in a log line as it is.
        log.warning("recording: %s of robot %s, the last %.1f s written to %s", trigger,
                    robot, self.config.ring_seconds, file.path)  # fmt: skip

    # -- one record -----------------------------------------------------------------------------

    def _wall(self, monotonic_ns: int) -> int:
        return monotonic_ns + self._wall_offset_ns

    def _packed(self, record: Record, tier: str | None) -> tuple[bytes, int] | None:
        """The record's message packed, or None where it holds what JSON cannot (said once,
        counted in status): that record is left out and recording goes on."""
        try:
            return pack(record_json(record, self._policy_of(record).joints, tier))
        except (ValueError, TypeError) as exc:
            if not self.not_json:
                log.warning("recording: a %s record of robot %s left out (%s); later ones "
                            "are counted in status", record.kind, record.robot, exc)  # fmt: skip
            self.not_json += 1
            self._frames.give_back(record.pooled_frames())
            return None

    def _write_entry(
        self,
        file: RecordingFile,
        at: int,
        robot: str,
        kind: str,
        message: tuple[bytes, int],
        frames: tuple[tuple[str, Any], ...],
    ) -> None:
        wall = self._wall(at)
        for camera, frame in frames:
            parts = image_cdr.image_parts(frame, camera, wall, self._scale)
            file.write_frame(camera_topic(robot, camera), wall, at, parts)
        name, schema = TOPICS[kind]
        file.write_json(topic(robot, name), schema, wall, at, message)
        self.written += 1

    # -- status ---------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """For `tempo status` and /metrics (read from another thread: plain reads)."""
        current = self._file
        return {
            "mode": self.config.mode,
            "dir": str(self.config.dir),
            "queued": self.queue.queued,
            "written": self.written,
            "dropped": dict(self.queue.dropped),
            "queue_length": len(self.queue),
            "queue_capacity": self.queue.capacity,
            "files": len(self.files),
            "current_file": str(current.path) if current is not None else None,
            "incidents": self.incidents,
            "incidents_deleted": self._incident_files.files_deleted,
            "incidents_not_written": self.incidents_not_written,
            "files_deleted": self._rotated.files_deleted,
            "bytes_deleted": self._rotated.bytes_deleted + self._incident_files.bytes_deleted,
            "paused": self._pause.reason,  # None, or why writes fail now (retried)
            "torn_frames": self.torn_frames,
            "not_json": self.not_json,
            "error": self.error,
        }
