"""Records and helpers of the tier ladder: what happened at start-up, demotions, timing."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np

from policies.base import PolicySpec, RobotContext, window_context
from policies.inputs import InputCodec, example_frames
from policies.tensor_policy import ParityMeasure, ReferenceChunks

if TYPE_CHECKING:
    from controller.inference.step_path import StepPath
    from controller.inference.tiers import Tier

Progress = Callable[[str], None]
Observation = tuple[dict[str, np.ndarray], np.ndarray]  # frames and a state window
Example = tuple[dict[str, np.ndarray], RobotContext]  # frames and a robot's context


@dataclass
class TierReport:
    """How one tier fared at start-up (and since)."""

    name: str
    precision: str
    state: str = "pending"  # pending | ready | skipped
    reason: str = ""
    build_s: float | None = None
    parity_error: float | None = None  # largest relative error over the parity observations
    step_s: float | None = None  # median predict path time during the parity check
    reference_error: float | None = None  # against the policy's ReferenceChunks, if it has any
    served_steps: int = 0

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Demotion:
    """One step down (or, with `promotion`, back up) the ladder."""

    time: float  # wall clock (time.time()), for people reading status
    from_tier: str
    to_tier: str
    cause: str  # exception | non_finite | overrun | repromoted
    detail: str

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def random_observation(spec: PolicySpec, seed: int) -> Observation:
    """A random observation shaped for `spec`: uniform frames, a normal state window."""
    rng = np.random.default_rng(seed)
    state = rng.standard_normal((spec.state_history, spec.state_size)).astype(np.float32)
    return example_frames(spec, seed), state


def random_example(spec: PolicySpec, codec: InputCodec, seed: int) -> Example:
    """Random frames and the codec's random context (parity checks use a different one each)."""
    return example_frames(spec, seed), codec.example(seed)


def reference_examples(spec: PolicySpec, reference: ReferenceChunks) -> list[Example]:
    """The observations of a policy's ReferenceChunks as examples (frames, a state-window
    context): reference chunks exist for policies whose inputs are the default codec's."""
    return [
        (
            {c.name: reference.images[i, k] for k, c in enumerate(spec.cameras)},
            window_context(reference.state[i]),
        )
        for i in range(reference.chunks.shape[0])
    ]


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """||out - ref|| / ||ref|| in float64 (absolute error when the reference is all zeros)."""
    diff = np.linalg.norm(out.astype(np.float64) - ref.astype(np.float64))
    norm = np.linalg.norm(ref.astype(np.float64))
    return float(diff / norm) if norm > 0 else float(diff)


@contextlib.contextmanager
def heartbeat(say: Progress, message: str, every_s: float = 5.0) -> Iterator[None]:
    """Say `message`, then repeat it with the elapsed time every `every_s` until the block ends
    (a cold compile gives no sign of life for minutes). `say` is called from a helper thread."""
    say(message)
    started = time.monotonic()
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every_s):
            say(f"{message} ({time.monotonic() - started:.0f} s)")

    thread = threading.Thread(target=beat, name="tempo-runner-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def first_line(exc: BaseException, limit: int = 300) -> str:
    """A one-line cause for logs and status (torch errors can span pages)."""
    text = str(exc).strip().splitlines()
    line = text[0] if text else ""
    line = f"{type(exc).__name__}: {line}" if line else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


class NonFiniteOutput(RuntimeError):
    """A tier returned NaN or Inf."""


def all_finite(outputs: list[np.ndarray]) -> bool:
    for out in outputs:  # a plain loop: the serving step runs this on every output
        if not np.isfinite(out).all():
            return False
    return True


def reference_outputs(
    path: StepPath, reference: Tier, examples: list[Example]
) -> list[list[np.ndarray]]:
    """eager_fp32 outputs for `examples`; a non-finite one means the model is broken."""
    references = []
    for images, context in examples:
        ref = path.execute(reference, images, context)
        if not all_finite(ref):
            raise NonFiniteOutput(
                "the eager FP32 reference returned NaN or Inf on a random observation: the "
                "model or its weights are broken, so no tier can be checked"
            )
        references.append(ref)
    return references


def check_parity(
    path: StepPath,
    tier: Tier,
    examples: list[Example],
    references: list[list[np.ndarray]],
    rtol: float,
    setting: str = "parity_rtol",
    measure: ParityMeasure | None = None,
) -> tuple[float, float]:
    """Largest relative error against the references (over every output: the chunk and any
    extras), and the median step time (upload, run, download). Raises at the first non-finite
    output or error above `rtol` (the message names `setting`, the option that set it). With
    the policy's own `measure`, its error and tolerance replace the relative error and `rtol`."""
    what = "parity error"
    if measure is not None:
        rtol, what = measure.tolerance, measure.name
        setting = getattr(measure, "setting", f"the policy's {measure.name} tolerance")
    errors, times = [], []
    for index, ((images, context), ref) in enumerate(zip(examples, references, strict=True)):
        began = time.perf_counter()
        out = path.execute(tier, images, context)
        times.append(time.perf_counter() - began)
        if not all_finite(out):
            raise NonFiniteOutput(f"non-finite output on parity observation {index}")
        if measure is not None:
            errors.append(measure.error(context, out, ref))
        else:
            errors.append(max(relative_error(o, r) for o, r in zip(out, ref, strict=True)))
        if errors[-1] > rtol:
            raise ValueError(
                f"{what} {errors[-1]:.2e} exceeds {setting} {rtol:.2g} on observation {index}"
            )
    return max(errors), float(np.median(times))
