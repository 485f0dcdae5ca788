"""Check that Tempo's SmolVLA computes what LeRobot's own SmolVLAPolicy computes, on weights
LeRobot made and saved itself.

Needs LeRobot 0.6.1 (Python >= 3.12) with the transformers it pins (>= 5.4, < 5.6: with 5.24
its denoising loop fails in DynamicCache.crop) importable beside Tempo; Tempo depends on
neither. For each case it builds LeRobot's SmolVLAPolicy with random weights (norm weights
randomized too) on a SmolVLM backbone config written locally (scripts/parity/smolvla_backbone:
tiny by default, SmolVLM2-500M's real widths with --real-size), random normalization
statistics, saves it with `save_pretrained` and its pre/post-processor pipelines, reads the
directory with Tempo's `load_checkpoint` (widths and tokenizer from the same local Hugging Face
cache) and feeds both the same frames, states, tasks and noise:

    LeRobot: frames / 255, state, task -> preprocessor (newline, tokenizer, normalizer) ->
             predict_action_chunk(noise=...) -> postprocessor
    Tempo:   the control side's tokenizer (policies.prompt_tokens) -> the codec's prompt
             embedding -> module(frames uint8, state, noise, prompt, prompt_mask)

Compared: the token ids, the chunk, and the executed stream (LeRobot's `select_action` with its
action queue over `--steps` control steps, given at each new chunk the noise Tempo's codec
draws for that step, against Tempo's EagerPolicy asked every n_action_steps steps).

It prints the relative error max|tempo - lerobot| / max|lerobot| and exits 1 if any exceeds the
tolerance (FP32, 1e-4 by default). With --half it also prints (does not judge) Tempo's module
under float16 or bfloat16 autocast against LeRobot's FP32.

    PYTHONPATH=. /work/venvs/lerobot/bin/python -m scripts.parity.check_smolvla_parity
    ... -m scripts.parity.check_smolvla_parity --real-size --device cuda --half bfloat16
    ... -m scripts.parity.check_smolvla_parity --save-reference tests/data

`--save-reference DIR` writes the first (tiny) case's directory as DIR/smolvla_lerobot_tiny/,
with the backbone's config (vlm_config.json), the tokenizer (tokenizer.json), the inputs and
LeRobot's outputs (reference.safetensors): tests/unit/test_smolvla_reference.py checks Tempo
against them without LeRobot.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from safetensors.torch import save_file

from policies.smolvla.model import SmolVLAPolicy
from scripts.parity.smolvla_backbone import REPO, TEXTS, make_hub_cache, patch_processor

TINY_OPTIONS: dict[str, Any] = dict(
    num_vlm_layers=4, chunk_size=6, n_action_steps=4, max_state_dim=8, max_action_dim=8,
    num_steps=3, tokenizer_max_length=12, resize_imgs_with_padding=(32, 32),
)  # fmt: skip


@dataclass
class Case:
    name: str
    cameras: tuple[tuple[int, int], ...] = ((24, 32),)
    state_dim: int = 5
    action_dim: int = 4
    options: dict[str, Any] = field(default_factory=dict)


CASES = [
    Case(
        "2 cameras of different sizes, cross/self alternating, MEAN_STD",
        cameras=((24, 32), (40, 30)),
        options=dict(TINY_OPTIONS),
    ),
    Case(
        "1 camera at the model's size, self-attention every 3rd layer, MIN_MAX, 1 empty slot",
        cameras=((32, 32),),
        state_dim=3,
        action_dim=6,
        options={
            **TINY_OPTIONS,
            "self_attn_every_n_layers": 3,
            "empty_cameras": 1,
            "normalization_mapping": {
                "VISUAL": "IDENTITY",
                "STATE": "MIN_MAX",
                "ACTION": "MIN_MAX",
            },
        },  # fmt: skip
    ),
    Case(
        "self_attn mode (every expert layer self-attends), prompt truncated",
        options={**TINY_OPTIONS, "attention_mode": "self_attn", "tokenizer_max_length": 5},
    ),
]
REAL_CASE = Case(
    "real size: SmolVLM2-500M cut to 16 layers, 3 cameras 480x640, 6 joints",
    cameras=((480, 640),) * 3,
    state_dim=6,
    action_dim=6,
    options={},
)


def build_lerobot(case: Case, seed: int, device: str) -> tuple[Any, Any, Any, dict[str, Any]]:
    """A LeRobot SmolVLAPolicy with random weights and statistics, and its processors."""
    from lerobot.configs.types import FeatureType, NormalizationMode, PolicyFeature
    from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig
    from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy
    from lerobot.policies.smolvla.processor_smolvla import make_smolvla_pre_post_processors

    torch.manual_seed(seed)
    inputs = {
        f"observation.images.cam{i}": PolicyFeature(type=FeatureType.VISUAL, shape=(3, h, w))
        for i, (h, w) in enumerate(case.cameras)
    }
    inputs["observation.state"] = PolicyFeature(type=FeatureType.STATE, shape=(case.state_dim,))
    outputs = {"action": PolicyFeature(type=FeatureType.ACTION, shape=(case.action_dim,))}
    options = dict(case.options)
    mapping = options.pop("normalization_mapping", None)
    if mapping is not None:
        options["normalization_mapping"] = {k: NormalizationMode(v) for k, v in mapping.items()}
    config = SmolVLAConfig(
        input_features=inputs, output_features=outputs, vlm_model_name=REPO, device=device,
        push_to_hub=False, **options,
    )  # fmt: skip
    policy = SmolVLAPolicy(config)
    with torch.no_grad():  # weights whose every part moves the chunk (not 0.02-std ones)
        for name, parameter in policy.named_parameters():
            if "norm" in name and name.endswith("weight"):
                parameter.uniform_(0.5, 1.5)
            elif parameter.ndim >= 2:
                parameter.normal_(0.0, (parameter.numel() / parameter.shape[0]) ** -0.5)
            else:
                parameter.normal_(0.0, 0.1)
    stats = {
        "observation.state": random_stats(case.state_dim),
        "action": random_stats(case.action_dim),
    }
    pre, post = make_smolvla_pre_post_processors(config, dataset_stats=stats)
    return policy.to(device).eval(), pre, post, stats


def random_stats(size: int) -> dict[str, torch.Tensor]:
    low = torch.rand(size) * -2.0
    high = low + 0.5 + torch.rand(size) * 2.0
    return {
        "mean": (low + high) / 2 + torch.randn(size) * 0.05, "std": (high - low) / 4,
        "min": low, "max": high,
    }  # fmt: skip


def relative_error(ours: torch.Tensor, reference: torch.Tensor) -> float:
    ours, reference = ours.float().cpu(), reference.float().cpu()
    return float((ours - reference).abs().max() / reference.abs().max())


def lerobot_batch(
    frames: list[torch.Tensor], state: torch.Tensor, tasks: list[str]
) -> dict[str, Any]:
    """LeRobot's raw observations: frames, a list of uint8 (B, H, W, 3) per camera."""
    batch: dict[str, Any] = {"observation.state": state.clone(), "task": list(tasks)}
    for i, frame in enumerate(frames):
        batch[f"observation.images.cam{i}"] = frame.movedim(-1, -3).float() / 255
    return batch


def tempo_inputs(
    tempo: Any, tasks: list[str], device: str
) -> tuple[list[Any], torch.Tensor, torch.Tensor]:
    """Tempo's prompt tokens per task (the control side's tokenizer), embedded by the codec."""
    from policies.prompt_tokens import PromptTokenizer

    prompt = tempo.spec.prompt
    tokenizer = PromptTokenizer(
        Path(prompt.tokenizer), prompt.max_length, prompt.vocab_size, prompt.template
    )
    tokens = [tokenizer.encode(task) for task in tasks]
    codec = tempo.inputs
    embedded = torch.from_numpy(np.stack([codec.embedder.embed(t.ids) for t in tokens]))
    mask = torch.from_numpy(np.stack([t.mask for t in tokens]).astype(np.float32))
    return tokens, embedded.to(device), mask.to(device)


def frame_groups(tempo: Any, frames: list[torch.Tensor]) -> list[torch.Tensor]:
    """Per-camera frames (B, H, W, 3) as Tempo's module takes them: one tensor per size."""
    from policies.inputs import frame_groups as groups

    index = {camera.name: i for i, camera in enumerate(tempo.spec.cameras)}
    return [
        torch.stack([frames[index[name]] for name in g.cameras], dim=1) for g in groups(tempo.spec)
    ]


@torch.no_grad()
def run_case(
    case: Case, seed: int, args: argparse.Namespace, save: Path | None
) -> dict[str, float]:
    from policies.checkpoints.load import load_checkpoint
    from policies.flow.codec import NOISE_SEED, fill_noise
    from policies.tensor_policy import EagerPolicy

    device = args.device
    policy, pre, post, stats = build_lerobot(case, seed, device)
    work = Path(tempfile.mkdtemp(prefix="tempo_smolvla_parity_"))
    policy.save_pretrained(work)
    pre.save_pretrained(work)
    post.save_pretrained(work)
    tempo = load_checkpoint(work)
    module = cast(SmolVLAPolicy, tempo.module.to(device).eval())
    config = module.config

    gen = torch.Generator().manual_seed(seed + 1)
    batch, total = 2, args.steps
    frames = [
        torch.randint(0, 256, (batch, total, h, w, 3), generator=gen).to(torch.uint8)
        for h, w in case.cameras
    ]
    low, high = stats["observation.state"]["min"], stats["observation.state"]["max"]
    states = low + (high - low) * torch.rand(batch, total, case.state_dim, generator=gen)
    tasks = [TEXTS[seed % len(TEXTS)], TEXTS[(seed + 2) % len(TEXTS)] + " now"]
    noise = torch.randn(batch, config.chunk_size, config.max_action_dim, generator=gen)

    # 1. One chunk (LeRobot's predict_action_chunk), and the token ids on the way.
    raw = lerobot_batch([f[:, 0].to(device) for f in frames], states[:, 0].to(device), tasks)
    processed = pre(raw)
    reference = post(policy.predict_action_chunk(processed, noise=noise.to(device))).cpu()
    tokens, prompt, mask = tempo_inputs(tempo, tasks, device)
    lerobot_ids = processed["observation.language.tokens"].cpu()
    lerobot_mask = processed["observation.language.attention_mask"].cpu()
    for row, token in enumerate(tokens):
        theirs = lerobot_ids[row][lerobot_mask[row]].tolist()
        if token.ids[token.mask].tolist() != theirs:
            raise AssertionError(f"token ids differ: Tempo {token.ids.tolist()}, LeRobot {theirs}")
    groups = [g.to(device) for g in frame_groups(tempo, [f[:, 0] for f in frames])]
    state = states[:, :1].to(device)
    ours = module(*groups, state, noise.to(device), prompt, mask).cpu()
    errors = {"chunk": relative_error(ours, reference)}
    for half in args.half or ():
        dtype = torch.float16 if half == "float16" else torch.bfloat16
        with torch.autocast(device_type=torch.device(device).type, dtype=dtype):
            low_precision = module(*groups, state, noise.to(device), prompt, mask).cpu()
        error = relative_error(low_precision, reference)
        print(f"  Tempo under {half} autocast against LeRobot FP32: {error:.2e}")
    if save is not None:
        save_reference(
            save, work, frames, states, tasks, noise, reference, lerobot_ids, lerobot_mask
        )

    # 2. The executed stream of robot 0: LeRobot's action queue against Tempo asked every
    #    n_action_steps steps, both given the noise Tempo's codec draws for the asking step.
    from policies.base import RobotContext

    eager = EagerPolicy(tempo, device=device)
    policy.reset()
    theirs_stream, ours_stream = [], []
    plan: np.ndarray | None = None
    period = config.n_action_steps
    step_noise = np.empty((config.chunk_size, config.max_action_dim), dtype=np.float32)
    for t in range(total):
        obs = lerobot_batch(
            [f[:1, t].to(device) for f in frames], states[:1, t].to(device), tasks[:1]
        )
        fill_noise(NOISE_SEED, t - t % period, step_noise)
        given = torch.from_numpy(step_noise)[None].to(device)
        theirs_stream.append(post(policy.select_action(pre(obs), noise=given))[0].cpu())
        if t % period == 0:
            context = RobotContext(
                step=t, episode_start=t == 0, state_history=states[0, t : t + 1].numpy(),
                prompt=tokens[0],
            )  # fmt: skip
            images = {c.name: frames[i][0, t].numpy() for i, c in enumerate(tempo.spec.cameras)}
            plan = eager.predict(images, context).actions
        if plan is None:
            raise AssertionError("no plan at step 0")
        ours_stream.append(torch.from_numpy(plan[t % period]))
    errors["stream"] = relative_error(torch.stack(ours_stream), torch.stack(theirs_stream))
    errors["max abs (chunk)"] = float((ours - reference).abs().max())
    shutil.rmtree(work, ignore_errors=True)
    return errors


def save_reference(
    root: Path, work: Path, frames: list[torch.Tensor], states: torch.Tensor, tasks: list[str],
    noise: torch.Tensor, chunk: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor,
) -> None:  # fmt: skip
    """The LeRobot directory with the backbone config and tokenizer, the inputs and outputs."""
    from scripts.parity.smolvla_backbone import snapshot_dir

    target = root / "smolvla_lerobot_tiny"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(work, target)
    snapshot = snapshot_dir(Path(os.environ["HF_HUB_CACHE"]))
    shutil.copyfile(snapshot / "config.json", target / "vlm_config.json")
    shutil.copyfile(snapshot / "tokenizer.json", target / "tokenizer.json")
    tensors = {f"frames_cam{i}": f[:, 0].contiguous() for i, f in enumerate(frames)}
    tensors.update(
        state=states[:, :1].contiguous(),  # (B, 1, state_dim)
        noise=noise.contiguous(),  # (B, chunk_size, max_action_dim)
        lerobot_actions=chunk.contiguous(),  # (B, chunk_size, action_dim)
        lerobot_token_ids=ids.contiguous(),  # padded to the longest task
        lerobot_token_mask=mask.to(torch.uint8).contiguous(),
    )
    save_file(tensors, str(target / "reference.safetensors"), metadata={"tasks": "\n".join(tasks)})
    print(f"saved the reference to {target}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=10, help="control steps of the stream")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--real-size", action="store_true", help="SmolVLM2-500M's widths")
    parser.add_argument("--half", nargs="*", choices=("float16", "bfloat16"))
    parser.add_argument("--save-reference", type=Path, help="write the first case's files here")
    args = parser.parse_args(argv)
    make_hub_cache(Path(tempfile.mkdtemp(prefix="tempo_smolvla_hub_")), args.real_size)
    try:
        import lerobot
    except ImportError:
        print("lerobot is not importable; install lerobot==0.6.1 (with transformers) to run this")
        return 2
    print(f"lerobot {getattr(lerobot, '__version__', '?')}, torch {torch.__version__}")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    patch_processor()
    worst = 0.0
    for index, case in enumerate([REAL_CASE] if args.real_size else CASES):
        save = args.save_reference if index == 0 and not args.real_size else None
        errors = run_case(case, args.seed + 10 * index, args, save)
        worst = max(worst, *(v for k, v in errors.items() if not k.startswith("max abs")))
        figures = ", ".join(f"{name} {value:.2e}" for name, value in errors.items())
        print(f"{case.name}: {figures}", flush=True)
    verdict = "PASS" if worst <= args.tolerance else "FAIL"
    print(f"{verdict}: worst relative error {worst:.2e} (tolerance {args.tolerance:.0e})")
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
