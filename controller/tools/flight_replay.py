"""`tempo replay FILE`: every inference request of a flight recording (controller.record) run
again through a policy, with the frames and the context the served policy got, and each
replayed chunk compared with the chunk that was served.

    result = replay(read_recording(path), policy)      # policy: any policies.base.Policy
    print(render(result, top=5))

The policy is built by the one builder (controller.inference.build), in eager FP32 unless a
tier is named: replaying the checkpoint that served, in eager FP32, reproduces what an eager
FP32 daemon served (a flow policy's noise is seeded by the observation's step). A recording
cut short is replayed as far as it can be read, and says so in one sentence.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from controller.errors import ConfigError
from controller.record.jpeg_frames import pixels_of
from controller.record.reading import RecordedMessage, Recording, RecordingError, read_recording
from policies.base import Plan, Policy, PromptTokens, RobotContext


@dataclass(frozen=True)
class RecordedRequest:
    """One inference request as it was served: its frames, its context, its chunk."""

    robot: str
    obs_seq: int
    episode: int
    images: dict[str, np.ndarray]
    context: RobotContext
    served: np.ndarray | None  # the chunk the policy returned (None: none was recorded)
    tier: str | None
    checkpoint: str | None = None  # the policy.path that served it (None: not recorded)


@dataclass(frozen=True)
class StepDifference:
    """A replayed chunk against the served one: per chunk row, the largest |difference|."""

    robot: str
    obs_seq: int
    step: int
    tier: str | None
    rows: np.ndarray  # (chunk_size,) max over the action's joints
    checkpoint: str | None = None

    @property
    def largest(self) -> float:
        return float(self.rows.max()) if len(self.rows) else 0.0

    @property
    def worst_row(self) -> int:
        return int(np.argmax(self.rows)) if len(self.rows) else 0


@dataclass
class ReplayResult:
    steps: list[StepDifference] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)  # why requests were not replayed
    # Chunks served by a checkpoint other than the one replayed (a swap's): path -> count.
    other_checkpoints: dict[str, int] = field(default_factory=dict)
    problem: str | None = None  # the recording was cut short or damaged

    @property
    def largest(self) -> float:
        return max((s.largest for s in self.steps), default=0.0)


def _context(data: Mapping[str, Any]) -> RobotContext:
    plan = data.get("previous_plan")
    prompt = data.get("prompt")
    memory = {
        name: np.asarray(value["data"], dtype=value["dtype"]).reshape(value["shape"])
        for name, value in (data.get("memory") or {}).items()
    }
    return RobotContext(
        step=int(data["step"]),
        episode_start=bool(data["episode_start"]),
        state_history=np.asarray(data["state_history"], dtype=np.float32),
        previous_plan=None
        if plan is None
        else Plan(int(plan["start_step"]), np.asarray(plan["actions"], dtype=np.float32)),
        inference_delay=int(data["inference_delay"]),
        memory=memory,
        prompt=None
        if prompt is None
        else PromptTokens(np.asarray(prompt["ids"], np.int64), np.asarray(prompt["mask"], bool)),
    )


def recorded_requests(
    recording: Recording, skipped: dict[str, int] | None = None
) -> Iterator[RecordedRequest]:
    """The recording's inference requests, in order, each with its observation's frames and
    the chunk served for it; those whose frames were not recorded are counted in `skipped`."""
    if recording.metadata.get("frames", "raw") != "raw":
        raise RecordingError(
            f"{recording.path} was recorded with record.frames: "
            f"{recording.metadata.get('frames')}; a replay needs the frames as received (raw)"
        )
    skipped = {} if skipped is None else skipped
    frames: dict[tuple[str, int], dict[str, np.ndarray]] = {}
    chunks: dict[tuple[str, int], RecordedMessage] = {}
    requests: list[RecordedMessage] = []
    for message in recording.messages:
        name = message.name
        if name.startswith("camera/"):
            key = (message.robot, message.publish_ns)
            frames.setdefault(key, {})[name.removeprefix("camera/")] = pixels_of(message.data)
        elif name == "chunk":
            chunks[(message.robot, message.data["obs_received_ns"])] = message
        elif name == "inference_request":
            requests.append(message)
    for message in requests:
        key = (message.robot, message.data["received_ns"])
        images = frames.get(key)
        if images is None:
            skipped["frames not recorded"] = skipped.get("frames not recorded", 0) + 1
            continue
        chunk = chunks.get(key)
        yield RecordedRequest(
            robot=message.robot,
            obs_seq=int(message.data["obs_seq"]),
            episode=int(message.data["episode"]),
            images=images,
            context=_context(message.data),
            served=None if chunk is None else np.asarray(chunk.data["actions"], np.float32),
            tier=None if chunk is None else chunk.data.get("tier"),
            checkpoint=None if chunk is None else chunk.data.get("checkpoint"),
        )


PROGRESS_EVERY_S = 5.0  # a replay of a long recording on a CPU runs for minutes


def same_checkpoint(recorded: str | None, replayed: str | None) -> bool:
    """Whether a chunk served by `recorded` is the replayed checkpoint's to compare: unknown
    on either side (an older recording, a policy written in code) compares."""
    if recorded is None or replayed is None:
        return True
    return recorded == replayed or Path(recorded).resolve() == Path(replayed).resolve()


def replay(
    recording: Recording,
    policy: Policy,
    say: Callable[[str], None] | None = None,
    checkpoint: str | None = None,
) -> ReplayResult:
    """Every recorded request through `policy`, each chunk against the one served; `say` hears
    how far it got every PROGRESS_EVERY_S seconds. `checkpoint`: the policy.path replayed;
    chunks served by another (before or after a swap) are counted, not compared."""
    result = ReplayResult(problem=recording.problem)
    spec = policy.spec
    started = last_said = time.monotonic()
    for request in recorded_requests(recording, result.skipped):
        if say is not None and time.monotonic() - last_said >= PROGRESS_EVERY_S:
            last_said = time.monotonic()
            say(f"replayed {len(result.steps)} requests ({last_said - started:.0f} s)")
        for camera in spec.cameras:
            frame = request.images.get(camera.name)
            if frame is None or frame.shape != camera.shape:
                raise RecordingError(
                    f"{recording.path}: robot {request.robot}'s camera {camera.name!r} was "
                    f"recorded as {None if frame is None else list(frame.shape)}, but the "
                    f"policy reads {list(camera.shape)}: replay it through a policy of the "
                    "same cameras"
                )
        if request.served is None:  # a newer request replaced it, or it was still running
            why = "no chunk served for it"
            result.skipped[why] = result.skipped.get(why, 0) + 1
            continue
        if not same_checkpoint(request.checkpoint, checkpoint):
            other = str(request.checkpoint)
            result.other_checkpoints[other] = result.other_checkpoints.get(other, 0) + 1
            continue
        actions = np.asarray(policy.predict(request.images, request.context).actions)
        if request.served.shape != actions.shape:
            raise RecordingError(
                f"{recording.path}: the served chunks are {list(request.served.shape)}, the "
                f"policy's {list(actions.shape)}: replay it through a policy of the same "
                "chunk and joints"
            )
        rows = np.abs(actions.astype(np.float64) - request.served).max(axis=1)
        result.steps.append(
            StepDifference(
                request.robot,
                request.obs_seq,
                request.context.step,
                request.tier,
                rows,
                request.checkpoint,
            )
        )
    return result


def render(result: ReplayResult, top: int = 5, every_step: bool = True) -> str:
    """Per step, the largest difference and its chunk row; then where they diverge most."""
    lines = []
    if result.problem:
        lines.append(f"note: {result.problem}")
    if every_step:
        lines.append(f"{'robot':<16} {'step':>8} {'obs_seq':>8} {'max |diff|':>12} {'row':>4}")
        for s in result.steps:
            lines.append(
                f"{s.robot:<16} {s.step:>8} {s.obs_seq:>8} {s.largest:>12.3g} {s.worst_row:>4}"
            )
    lines.append(
        f"{len(result.steps)} chunks compared; largest difference {result.largest:.3g}"
        + "".join(f"; {n} skipped ({why})" for why, n in sorted(result.skipped.items()))
    )
    for path, n in sorted(result.other_checkpoints.items()):
        lines.append(f"{n} chunks served by another checkpoint ({path}) were not compared")
    worst = sorted(result.steps, key=lambda s: s.largest, reverse=True)[:top]
    if worst and worst[0].largest > 0:
        lines.append("diverging most:")
        for s in worst:
            lines.append(
                f"  robot {s.robot} step {s.step} (obs {s.obs_seq}, served by "
                f"{s.tier or '?'} of checkpoint {s.checkpoint or 'unknown'}): "
                f"{s.largest:.3g} at chunk row {s.worst_row}"
            )
    return "\n".join(lines)


def plot(result: ReplayResult, out: Path) -> Path:
    """The largest difference per step, per robot, as a PNG (needs matplotlib: the plot extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ModuleNotFoundError:
        raise ConfigError("--plot needs matplotlib: pip install 'tempo-controller[plot]'") from None
    figure, axes = plt.subplots(figsize=(10, 4))
    for robot in sorted({s.robot for s in result.steps}):
        steps = [s for s in result.steps if s.robot == robot]
        axes.plot([s.step for s in steps], [s.largest for s in steps], label=robot)
    axes.set_xlabel("control step of the observation")
    axes.set_ylabel("max |replayed - served|")
    axes.legend()
    figure.savefig(out)
    plt.close(figure)
    return out


# -- the command ------------------------------------------------------------------------------


def run_replay(args: argparse.Namespace, config: Any) -> int:
    """`tempo replay` with the loaded config (the policy: --config, --set, --policy.path)."""
    from controller.inference.build import build_policy
    from controller.inference.progress import to_stderr

    say = to_stderr("replay")  # progress on stderr: stdout holds only the comparison

    recording = read_recording(args.file)  # before the policy loads: a bad file fails fast
    # No step budget: a replay has no control period to keep, so the serving-only budget's
    # warnings and overrun demotions would say nothing about the recording.
    runner = config.runner.model_copy(update={"top_tier": args.tier, "step_budget_ms": None})
    say(f"building the policy (up to tier {args.tier})")
    policy = build_policy(config.policy, config.robot, runner)
    say("replaying the recorded requests")
    result = replay(
        recording,
        policy,
        say,
        checkpoint=None if config.policy.path is None else str(config.policy.path),
    )
    print(render(result, top=args.top, every_step=not args.summary))
    if args.plot is not None:
        print(f"plot written to {plot(result, args.plot)}")
    return 0
