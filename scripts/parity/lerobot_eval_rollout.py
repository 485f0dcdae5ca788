"""LeRobot's side of the lockstep parity check (scripts/parity/check_eval_parity.py): runs in a
LeRobot 0.6.1 environment (Python >= 3.12, lerobot, diffusers, gym-pusht, gym-aloha) and imports
nothing of Tempo's, so it runs there as it is.

    python lerobot_eval_rollout.py make    --env pusht --family act --out DIR [--seed 0] [--sparse]
    python lerobot_eval_rollout.py rollout --env pusht --out DIR --seeds 0,1,2 --steps 20 \
        [--noise NOISE.safetensors]

`make` builds a LeRobot policy of reduced widths with random weights (random frozen batch-norm
statistics too) and random normalization statistics whose ranges suit the environment, and
saves it with LeRobot's own `save_pretrained` and its processor pipelines into DIR/checkpoint.
Every such policy queries every step (n_action_steps 1, no temporal ensembling): that is what
an eval loop waiting for each action computes, and what Tempo's lockstep clock compares with.
`--sparse` zeroes the ResNet's block convolutions but the stem and the downsampling shortcuts,
so the checkpoint compresses to a few hundred kilobytes (the references under tests/data) while
every feature still depends on the frames.

`rollout` runs LeRobot's own eval loop (`lerobot.scripts.lerobot_eval.rollout`, on the vector
env `lerobot.envs.factory.make_env` builds from LeRobot's env config, episode_length = --steps)
once per seed, and writes DIR/lerobot_rollout.safetensors: per seed the actions it applied
(seedN.action, (steps, A)), the states it saw (seedN.state, (steps + 1, S)) and the frames
(seedN.frames, uint8 (steps + 1, H, W, 3), LeRobot's float images times 255, rounded).

Diffusion Policy draws noise. `--noise FILE` holds Tempo's fixed noise bank (`noise`, (draws,
horizon, action_dim)): every call of torch.randn during the rollout returns the bank's next draw
(cyclically: one sampling uses all of them, in the order Tempo's sampler draws them), which is
what a Tempo daemon serving with `policy.diffusion.noise: fixed` uses for every chunk.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

ENVS = {
    # name: (LeRobot env type, its config's options, camera feature, frame (H, W), state, action)
    "pusht": ("pusht", {}, "observation.image", (96, 96), 2, 2),
    "aloha-transfer-cube": (
        "aloha",
        {"task": "AlohaTransferCube-v0"},
        "observation.images.top",
        (480, 640),
        14,
        14,
    ),
    "aloha-insertion": (
        "aloha",
        {"task": "AlohaInsertion-v0"},
        "observation.images.top",
        (480, 640),
        14,
        14,
    ),
}
# Ranges of state and action per environment: PushT's agent works in 0..512 units, ALOHA's
# joints within about +-1.5 rad (the grippers 0..1).
RANGES = {"pusht": (60.0, 450.0), "aloha": (-0.8, 0.8)}

ACT_OPTIONS = dict(
    dim_model=32, n_heads=2, dim_feedforward=64, n_encoder_layers=1, n_decoder_layers=1,
    n_vae_encoder_layers=1, latent_dim=8, chunk_size=5, n_action_steps=1,
)  # fmt: skip
DIFFUSION_OPTIONS = dict(
    down_dims=(16, 32), n_groups=4, kernel_size=3, diffusion_step_embed_dim=16,
    spatial_softmax_num_keypoints=4, horizon=8, n_obs_steps=2, n_action_steps=1,
    noise_scheduler_type="DDIM", num_inference_steps=8, crop_is_random=False,
)  # fmt: skip


def stats_for(kind: str, shape: tuple[int, ...], env: str, gen: torch.Generator) -> dict:
    """Random normalization statistics of one feature, spanning the environment's range."""
    size = shape[0]
    if kind == "VISUAL":
        mean = 0.4 + 0.2 * torch.rand(size, generator=gen)
        std = 0.2 + 0.1 * torch.rand(size, generator=gen)
        low, high = torch.zeros(size), torch.ones(size)
        view: tuple[int, ...] = (size, 1, 1)
    else:
        lo, hi = RANGES[ENVS[env][0]]
        span = hi - lo
        low = lo + 0.1 * span * torch.rand(size, generator=gen)
        high = hi - 0.1 * span * torch.rand(size, generator=gen)
        mean = (low + high) / 2
        std = (high - low) / 4
        view = (size,)
    return {k: v.reshape(view) for k, v in dict(mean=mean, std=std, min=low, max=high).items()}


def make(env: str, family: str, out: Path, seed: int, sparse: bool) -> None:
    from lerobot.configs.types import FeatureType, PolicyFeature

    env_type, _, camera, (height, width), state, action = ENVS[env]
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    inputs = {
        camera: PolicyFeature(type=FeatureType.VISUAL, shape=(3, height, width)),
        "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(state,)),
    }
    outputs = {"action": PolicyFeature(type=FeatureType.ACTION, shape=(action,))}
    kinds = {camera: "VISUAL", "observation.state": "STATE", "action": "ACTION"}
    stats = {
        key: stats_for(kinds[key], feature.shape, env, gen)
        for key, feature in {**inputs, **outputs}.items()
    }
    common = dict(
        input_features=inputs,
        output_features=outputs,
        device="cpu",
        pretrained_backbone_weights=None,
        push_to_hub=False,
    )
    if family == "act":
        from lerobot.policies.act.configuration_act import ACTConfig
        from lerobot.policies.act.modeling_act import ACTPolicy
        from lerobot.policies.act.processor_act import make_act_pre_post_processors

        config: Any = ACTConfig(**common, **ACT_OPTIONS)
        policy: Any = ACTPolicy(config)
        processors = make_act_pre_post_processors(config, dataset_stats=stats)
    else:
        from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
        from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy
        from lerobot.policies.diffusion.processor_diffusion import (
            make_diffusion_pre_post_processors,
        )

        # ALOHA's 480x640 frames are resized first, as a policy for them would be.
        options = {**DIFFUSION_OPTIONS, **({"resize_shape": (96, 128)} if height > 96 else {})}
        config = DiffusionConfig(**common, **options)
        policy = DiffusionPolicy(config)
        processors = make_diffusion_pre_post_processors(config, dataset_stats=stats)
    with torch.no_grad():
        for name, buffer in policy.named_buffers():  # batch norm statistics that do something
            if name.endswith("running_var"):
                buffer.uniform_(0.5, 1.5)
            elif name.endswith("running_mean"):
                buffer.normal_(0.0, 0.1)
        if sparse:
            sparsify_backbone(policy)
    target = out / "checkpoint"
    target.mkdir(parents=True, exist_ok=True)
    policy.save_pretrained(target)
    for processor in processors:
        processor.save_pretrained(target)
    (out / "made.json").write_text(json.dumps({"env": env, "family": family, "seed": seed}))
    print(f"saved LeRobot {family} for {env} to {target}")


def sparsify_backbone(policy: torch.nn.Module) -> None:
    """Zero every ResNet block convolution (BLOCK.conv1, BLOCK.conv2: `layer1.0.conv1` in ACT's
    backbone, `backbone.4.0.conv1` in Diffusion Policy's): what is left is the stem and the 1x1
    downsampling shortcuts, a random function of the frames that is small once compressed."""
    block_conv = re.compile(r"\.\d+\.conv[12]\.weight$")
    zeroed = 0
    with torch.no_grad():
        for name, parameter in policy.named_parameters():
            if parameter.dim() == 4 and block_conv.search(name):
                parameter.zero_()
                zeroed += 1
    if zeroed != 16:  # ResNet-18: 8 blocks of 2
        raise AssertionError(f"zeroed {zeroed} block convolutions, expected 16")


@contextmanager
def replayed_noise(bank: torch.Tensor) -> Iterator[list[int]]:
    """torch.randn returns the bank's draws cyclically, each over the batch; the list yielded
    counts the calls."""
    original = torch.randn
    calls: list[int] = []

    def randn(*size: Any, **kwargs: Any) -> torch.Tensor:
        shape = tuple(kwargs.get("size") or (size[0] if len(size) == 1 else size))
        draw = bank[len(calls) % len(bank)]
        if tuple(shape[1:]) != tuple(draw.shape):
            raise AssertionError(
                f"randn call {len(calls)} asked for {shape}, the bank has {draw.shape}"
            )
        calls.append(1)
        return draw.expand(shape).clone().to(kwargs.get("dtype") or torch.float32)

    torch.randn = randn  # type: ignore[assignment]
    try:
        yield calls
    finally:
        torch.randn = original


def rollout(env: str, out: Path, seeds: list[int], steps: int, noise: Path | None) -> None:
    from lerobot.envs.configs import EnvConfig
    from lerobot.envs.factory import make_env, make_env_pre_post_processors
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors
    from lerobot.scripts.lerobot_eval import rollout as lerobot_rollout

    env_type, options, camera, _, _, _ = ENVS[env]
    checkpoint = out / "checkpoint"
    family = json.loads((checkpoint / "config.json").read_text())["type"]
    policy = get_policy_class(family).from_pretrained(checkpoint).eval()
    # As lerobot_eval's eval_main loads them.
    preprocessor, postprocessor = make_pre_post_processors(
        policy_cfg=policy.config,
        pretrained_path=str(checkpoint),
        preprocessor_overrides={"device_processor": {"device": "cpu"}},
    )
    env_config = EnvConfig.get_choice_class(env_type)(episode_length=steps, **options)
    vector_env = next(iter(make_env(env_config, n_envs=1).values()))[0]
    env_pre, env_post = make_env_pre_post_processors(env_config, policy.config)
    bank = load_file(str(noise))["noise"] if noise is not None else None
    tensors: dict[str, torch.Tensor] = {}
    try:
        for seed in seeds:
            noise_draws = replayed_noise(bank) if bank is not None else _nothing()
            with torch.no_grad(), noise_draws as calls:
                result = lerobot_rollout(
                    vector_env, policy, env_pre, env_post, preprocessor, postprocessor,
                    seeds=[seed], return_observations=True,
                )  # fmt: skip
            if bank is not None and len(calls) != steps * len(bank):
                raise AssertionError(f"{len(calls)} noise draws for {steps} steps")
            observations = result["observation"]
            frames = (observations[camera][0] * 255).round().clamp(0, 255).to(torch.uint8)
            tensors[f"seed{seed}.action"] = result["action"][0].float().contiguous()
            tensors[f"seed{seed}.state"] = observations["observation.state"][0].contiguous()
            tensors[f"seed{seed}.frames"] = frames.permute(0, 2, 3, 1).contiguous()
            print(f"LeRobot rollout {env} seed {seed}: {result['action'].shape[1]} steps")
    finally:
        vector_env.close()
    save_file(tensors, str(out / "lerobot_rollout.safetensors"))


@contextmanager
def _nothing() -> Iterator[list[int]]:
    yield []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("command", choices=("make", "rollout"))
    parser.add_argument("--env", choices=list(ENVS), required=True)
    parser.add_argument("--family", choices=("act", "diffusion"), default="act")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0, help="make: the weights' seed")
    parser.add_argument("--sparse", action="store_true", help="make: a compressible backbone")
    parser.add_argument("--seeds", default="0,1,2", help="rollout: the episodes' seeds")
    parser.add_argument("--steps", type=int, default=20, help="rollout: steps per episode")
    parser.add_argument("--noise", type=Path, help="rollout: Tempo's noise bank (diffusion)")
    args = parser.parse_args(argv)
    if args.command == "make":
        make(args.env, args.family, args.out, args.seed, args.sparse)
    else:
        seeds = [int(s) for s in args.seeds.split(",")]
        rollout(args.env, args.out, seeds, args.steps, args.noise)
    return 0


if __name__ == "__main__":
    torch.set_num_threads(1)  # as Tempo's inference process on a 2-core machine (cores - 1)
    sys.exit(main())
