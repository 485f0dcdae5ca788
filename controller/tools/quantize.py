"""`tempo quantize CHECKPOINT OUT --observations N`: calibrate and write a W4A8 checkpoint.

1. Load the FP32 checkpoint (Tempo or LeRobot ACT; LeRobot or openpi pi0 / pi0.5).
2. Record the FP32 model's chunks on a few observations of their own: the quantized checkpoint
   carries them, and the runner checks every tier against them at start-up
   (`reference_parity_rtol`).
3. Calibrate on N observations, synthesized from the spec (random frames and states, seeded) or
   recorded ones (`--recorded FILE.npz`: a replay file as `tempo profile --replay` reads it
   (controller.tools.replay), or one with `images` uint8 (n, cameras, H, W, 3) and `state`
   float32 (n, state_history, state_size), read with allow_pickle=False); recorded ones give
   the activation statistics the robot will really produce. A policy that reads a prompt
   (pi0, pi0.5) gets one with every observation: `--task`, else its default task.
4. Quantize (policies.quant.apply, with the family's QuantTarget) and write the checkpoint
   (policies.quant.checkpoint).

Serve the result with `tempo serve --policy.path OUT`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from controller.errors import CheckpointError, ConfigError
from controller.inference.examples import random_observation
from controller.inference.parity import relative_error
from controller.inference.progress import Progress, heartbeat
from controller.tools.replay import load_replay
from policies.base import PolicySpec, PromptTokens, RobotContext
from policies.checkpoints.load import load_checkpoint
from policies.quant.apply import quantize_module
from policies.quant.checkpoint import save_quantized_checkpoint
from policies.quant.config import LayerLayout, Quantization, QuantSettings
from policies.quant.layer import memory_bytes
from policies.quant.pi0_packs import import_pi0_packs
from policies.quant.target import QuantTarget
from policies.tensor_policy import EagerPolicy, ReferenceChunks, TensorPolicy

log = logging.getLogger(__name__)

_CALIBRATION_SEED = 7_000_003
_REFERENCE_SEED = 9_000_011

Observations = tuple[np.ndarray, np.ndarray, tuple[PromptTokens, ...] | None]


@dataclass(frozen=True)
class QuantizeReport:
    directory: Path
    layers: int
    calibration_s: float
    error_vs_fp32: float  # largest relative error of the fake-quant reference on the reference set
    weight_ratio: float  # quantized layers' weights (codes + scales) / the same in FP16
    transform_ratio: float  # their rotations, permutations and scales / FP16 weights

    def lines(self) -> list[str]:
        return [
            f"wrote a quantized checkpoint to {self.directory} ({self.layers} W4A8 layers, "
            f"calibrated in {self.calibration_s:.1f} s)",
            f"action error of the FP32 fake-quant model against FP32: {self.error_vs_fp32:.2e} "
            "(relative, largest over the reference observations)",
            f"memory of the quantized layers: weights {self.weight_ratio:.3f}x FP16, transforms "
            f"{self.transform_ratio:.3f}x",
            f"serve it with `tempo serve --policy.path {self.directory}`",
        ]


def stacked_observations(spec: PolicySpec, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`count` random observations of `spec` (the runner's generator), stacked: images uint8
    (n, cameras, H, W, 3) in spec order, state float32 (n, state_history, state_size)."""
    return _stacked([random_observation(spec, seed + i) for i in range(count)], spec)


def read_recorded(path: Path, spec: PolicySpec) -> tuple[np.ndarray, np.ndarray]:
    """Recorded observations from an .npz file (no pickle), checked against the spec: a replay
    file (one array per camera and `state`, controller.tools.replay) or stacked `images` and
    `state`."""
    try:
        with np.load(path, allow_pickle=False) as data:
            names = set(data.files)
            if "images" not in names:
                return _stacked(load_replay(path, spec), spec)
            images, state = data["images"], data["state"]
    except (OSError, ValueError, KeyError, AttributeError) as exc:
        raise ConfigError(
            f"--recorded {path}: not a replay .npz nor one with arrays 'images' and 'state' ({exc})"
        ) from None
    height, width = (spec.cameras[0].height, spec.cameras[0].width) if spec.cameras else (1, 1)
    want_images = (len(spec.cameras), height, width, 3)
    want_state = (spec.state_history, spec.state_size)
    if images.dtype != np.uint8 or images.ndim != 5 or images.shape[1:] != want_images:
        raise ConfigError(
            f"--recorded {path}: images must be uint8 (n, {', '.join(map(str, want_images))}), "
            f"got {images.dtype} {images.shape}"
        )
    if state.ndim != 3 or state.shape[1:] != want_state or state.shape[0] != images.shape[0]:
        raise ConfigError(
            f"--recorded {path}: state must be ({images.shape[0]}, "
            f"{', '.join(map(str, want_state))}), got {state.shape}"
        )
    return images, state.astype(np.float32)


def _stacked(
    observations: Sequence[tuple[dict[str, np.ndarray], np.ndarray]], spec: PolicySpec
) -> tuple[np.ndarray, np.ndarray]:
    """(frames by camera, state window) pairs stacked: images uint8 (n, cameras, H, W, 3) in
    spec order, state float32 (n, state_history, state_size)."""
    count = len(observations)
    height, width = (spec.cameras[0].height, spec.cameras[0].width) if spec.cameras else (1, 1)
    images = np.zeros((count, len(spec.cameras), height, width, 3), dtype=np.uint8)
    for i, (frames, _) in enumerate(observations):
        for k, camera in enumerate(spec.cameras):
            images[i, k] = frames[camera.name]
    return images, np.stack([state for _, state in observations]).astype(np.float32)


def run_module(
    module: torch.nn.Module, images: np.ndarray, state: np.ndarray, device: torch.device
) -> np.ndarray:
    """The module's chunks on stacked observations, one at a time (batch 1, as served)."""
    out = []
    with torch.no_grad():
        for i in range(images.shape[0]):
            image_t = torch.from_numpy(images[i : i + 1]).to(device)
            state_t = torch.from_numpy(state[i : i + 1]).to(device)
            out.append(module(image_t, state_t)[0].float().cpu().numpy())
    return np.stack(out)


def run_policy(
    policy: TensorPolicy, observations: Observations, device: torch.device
) -> np.ndarray:
    """The policy's chunks on stacked observations, one at a time through its codec (batch 1,
    context step 0, as the runner's start-up reference check runs them)."""
    images, state, prompts = observations
    eager = EagerPolicy(policy, device)
    out = []
    for i in range(images.shape[0]):
        frames = {c.name: images[i, k] for k, c in enumerate(policy.spec.cameras)}
        prompt = None if prompts is None else prompts[i]
        context = RobotContext(step=0, episode_start=True, state_history=state[i], prompt=prompt)
        out.append(eager.predict(frames, context).actions)
    return np.stack(out)


def task_prompts(spec: PolicySpec, task: str | None, count: int) -> tuple[PromptTokens, ...] | None:
    """The prompt of each of `count` observations for a policy that reads one (`task`, else its
    default task), tokenized as the control process does; None for a policy that reads none."""
    if spec.prompt is None:
        return None
    from policies.prompt_tokens import PromptTokenizer

    task = task or spec.prompt.default_task
    if task is None:
        raise ConfigError(
            "this policy reads a prompt and has no default task: give the task to calibrate "
            "with as --task"
        )
    prompt = spec.prompt
    tokenizer = PromptTokenizer(
        Path(prompt.tokenizer), prompt.max_length, prompt.vocab_size, prompt.template
    )
    return (tokenizer.encode(task),) * count


def quant_target(policy: TensorPolicy, source: Path) -> QuantTarget:
    """The QuantTarget of the policy's family: ACT, pi0 and pi0.5 are quantized."""
    from policies.act.model import ACT
    from policies.pi0.step import Pi0Step

    if isinstance(policy.module, ACT):
        from policies.quant.act import ACT_TARGET

        return ACT_TARGET
    if isinstance(policy.module, Pi0Step):
        from policies.pi0.quantized import PI0_TARGET
        from policies.pi0.quantized_pi05 import PI05_TARGET

        return PI0_TARGET if policy.module.uses_state else PI05_TARGET
    raise ConfigError(
        f"tempo quantize quantizes ACT, pi0 and pi0.5 checkpoints; {source} holds a "
        f"{type(policy.module).__name__}"
    )


def quantize_checkpoint(
    source: Path,
    destination: Path,
    observations: int,
    settings: QuantSettings,
    *,
    reference_observations: int = 4,
    recorded: Path | None = None,
    pi0_packs: Path | None = None,
    task: str | None = None,
    tokenizer: Path | None = None,
    device: str = "cpu",
    progress: Progress | None = None,
) -> QuantizeReport:
    """Quantize the FP32 checkpoint `source` into `destination` (see the module docstring).
    With `pi0_packs`, the transforms come from the pi0 DuQuant port's per-layer .npz packs
    (matched by layer name) instead of calibration, with per-token activation scales.
    `tokenizer`: a pi0 checkpoint's tokenizer file, for one that ships none (openpi's)."""
    say = progress or (lambda message: log.info("%s", message))
    if observations < 1:
        raise ConfigError("--observations must be at least 1")
    if Path(destination).resolve() == Path(source).resolve():
        raise ConfigError(
            "the quantized checkpoint must go to a different directory than its source"
        )
    torch_device = torch.device(device)
    with heartbeat(say, f"loading {source}"):
        policy = load_checkpoint(source, device=torch_device)
    if any(type(m).__name__ == "QuantLinear" for m in policy.module.modules()):
        raise CheckpointError(f"{source} is already quantized; quantize the FP32 checkpoint")
    target = quant_target(policy, source)
    if tokenizer is not None:
        from policies.pi0.policy import with_prompt_settings

        policy = with_prompt_settings(policy, tokenizer, None)
    if policy.spec.prompt is None and target.title == "pi0":
        raise ConfigError(
            f"{source} ships no tokenizer (tokenizer/tokenizer.model): give PaliGemma's "
            "SentencePiece model file as --tokenizer"
        )
    spec, module = policy.spec, policy.module.eval()
    ref_images, ref_state = stacked_observations(spec, reference_observations, _REFERENCE_SEED)
    reference_set = (ref_images, ref_state, task_prompts(spec, task, reference_observations))
    with heartbeat(
        say, f"running the FP32 model on {reference_observations} reference observations"
    ):
        fp32_chunks = run_policy(policy, reference_set, torch_device)
    started = time.perf_counter()
    if pi0_packs is not None:
        target.prepare(module)
        try:
            layouts = import_pi0_packs(
                module, pi0_packs, settings.compiled_path, root=target.pack_root
            )
        except ValueError as exc:
            raise CheckpointError(f"--pi0-packs: {exc}") from None
        settings = settings.model_copy(update={"activations": "dynamic"})
        say(f"imported {len(layouts)} DuQuant packs from {pi0_packs}")
        source_kind: Literal["calibrated", "pi0-duquant-packs"] = "pi0-duquant-packs"
        used = 0
    else:
        if recorded is not None:
            images, state = read_recorded(recorded, spec)
            images, state = images[:observations], state[:observations]
            say(f"calibrating on {images.shape[0]} recorded observations from {recorded}")
        else:
            images, state = stacked_observations(spec, observations, _CALIBRATION_SEED)
            say(f"calibrating on {observations} observations synthesized from the spec")
        calibration = (images, state, task_prompts(spec, task, int(images.shape[0])))

        def run_calibration() -> None:
            run_policy(policy, calibration, torch_device)

        try:
            with heartbeat(say, "calibrating and quantizing the layers"):
                layouts = quantize_module(module, settings, run_calibration, target)
        except ValueError as exc:
            raise ConfigError(f"tempo quantize: {exc}") from None
        source_kind, used = "calibrated", int(images.shape[0])
    return _finish(
        destination,
        policy,
        target,
        settings,
        layouts,
        source_kind,
        used,
        (reference_set, fp32_chunks),
        time.perf_counter() - started,
        torch_device,
        say,
    )


def _finish(
    destination: Path,
    policy: TensorPolicy,
    target: QuantTarget,
    settings: QuantSettings,
    layouts: dict[str, LayerLayout],
    source: Literal["calibrated", "pi0-duquant-packs"],
    observations: int,
    reference_set: tuple[Observations, np.ndarray],
    calibration_s: float,
    torch_device: torch.device,
    say: Progress,
) -> QuantizeReport:
    """Measure the quantized model against the FP32 chunks, then write the checkpoint."""
    observations_set, fp32_chunks = reference_set
    with heartbeat(say, "measuring the quantized model against FP32"):
        quantized_chunks = run_policy(policy, observations_set, torch_device)
    error = max(relative_error(q, r) for q, r in zip(quantized_chunks, fp32_chunks, strict=True))
    ref_images, ref_state, prompts = observations_set
    reference = ReferenceChunks(
        images=ref_images, state=ref_state, chunks=fp32_chunks, prompts=prompts
    )
    record = Quantization(
        source=source,
        settings=settings,
        observations=observations,
        layers=layouts,
        fp32_reference_observations=int(fp32_chunks.shape[0]),
    )
    policy.reference = reference
    say(f"writing {destination}")
    written = save_quantized_checkpoint(destination, policy, record, target.policy_type)
    memory = memory_bytes(policy.module)
    return QuantizeReport(
        directory=written,
        layers=len(layouts),
        calibration_s=calibration_s,
        error_vs_fp32=error,
        weight_ratio=memory["weights"] / memory["fp16"],
        transform_ratio=memory["transform"] / memory["fp16"],
    )
