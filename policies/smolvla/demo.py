"""`tempo demo --policy smolvla`: a SmolVLA of reduced width for the simulated arm, random
weights, written once as a Tempo checkpoint with its tokenizer (a byte-level BPE of the demo's
words, made here with the `tokenizers` package: the `smolvla` extra).

It runs on a CPU: a vision encoder of width 32 (2 layers, 64x64 frames in 8x8 patches, 16
tokens a camera after the pixel shuffle), a language model of width 64 cut to 4 layers, an
expert of width 48 alternating self- and cross-attention, a 16-token prompt, chunk 20 of which
10 play, 3 Euler steps. Its actions are the arm's home pose plus a bounded random motion (the
action statistics), not a trained behaviour.
"""

from __future__ import annotations

from pathlib import Path

import torch

from policies.base import CameraSpec, Execution, PolicySpec
from policies.demo_arm import ACTION_STD, DEFAULT_JOINTS, HOME_POSE
from policies.smolvla.codec import smolvla_policy
from policies.smolvla.config import TextWidths, VisionWidths, tiny_smolvla_config
from policies.smolvla.model import SmolVLAPolicy
from policies.smolvla.tokenizer import smolvla_prompt
from policies.tensor_policy import TensorPolicy

CAMERA = ("front", 96, 128)
TASKS = ("pick up the cube", "put the cube in the bin", "move the arm home", "wave")
DEMO_ACTION_STD = 0.02  # rad per unit of normalized action: chunks stay near the home pose


def train_tokenizer(path: Path) -> int:
    """A byte-level BPE tokenizer of the demo's words as `path` (tokenizer.json); returns its
    vocabulary size."""
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError:
        from controller.errors import ConfigError

        raise ConfigError(
            "the SmolVLA demo makes its tokenizer with the `tokenizers` package: pip install "
            "'tempo-controller[smolvla]'"
        ) from None
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator([t + "\n" for t in TASKS] * 4, trainer)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(path))
    return int(tokenizer.get_vocab_size(with_added_tokens=True))


def make_demo_smolvla_policy(tokenizer: Path, seed: int = 0) -> TensorPolicy:
    """The demo SmolVLA in memory (FP32, eval mode, CPU), its prompt read with `tokenizer`."""
    joints = len(DEFAULT_JOINTS)
    config = tiny_smolvla_config(
        camera_sizes=(CAMERA[1:],),
        state_size=joints,
        action_size=joints,
        vision=VisionWidths(
            width=32, depth=2, mlp_dim=64, num_heads=2, patch_size=8, image_size=64
        ),
        text=TextWidths(width=64, depth=4, mlp_dim=96, num_heads=4, num_kv_heads=2, head_dim=16),
        resize_imgs_with_padding=(64, 64),
        chunk_size=20,
        n_action_steps=10,
        tokenizer_max_length=16,
    )
    torch.manual_seed(seed)
    module = SmolVLAPolicy(config)
    home = torch.tensor([HOME_POSE[i % len(HOME_POSE)] for i in range(joints)])
    with torch.no_grad():
        module.get_parameter("vlm_with_expert.text.embed_tokens.weight").normal_(0.0, 64**-0.5)
        module.state_norm.center.copy_(home)
        module.state_norm.scale.fill_(ACTION_STD)
        module.action_norm.center.copy_(home)
        module.action_norm.scale.fill_(DEMO_ACTION_STD)
        module.action_out_proj.weight.mul_(0.1)
        module.action_out_proj.bias.zero_()
    spec = PolicySpec(
        cameras=(CameraSpec(name=CAMERA[0], height=CAMERA[1], width=CAMERA[2]),),
        state_size=joints,
        joint_names=DEFAULT_JOINTS,
        chunk_size=config.chunk_size,
        execution=Execution(
            query_period=config.n_action_steps,
            ensemble="newest",
            source=f"the SmolVLA demo: n_action_steps={config.n_action_steps}",
        ),
        prompt=smolvla_prompt(tokenizer, config).model_copy(update={"default_task": TASKS[0]}),
    )
    return smolvla_policy(module.eval(), spec)


def demo_settings(cache: Path) -> list[str]:
    """The demo's checkpoint under `cache` (written on the first run) and its settings."""
    directory = cache / "demo-smolvla"
    if not (directory / "config.json").exists():
        from policies.checkpoints.tempo_format import save_checkpoint

        work = cache / "demo-smolvla.tokenizer" / "tokenizer.json"
        train_tokenizer(work)
        save_checkpoint(directory, make_demo_smolvla_policy(work))
    return ["policy.kind=checkpoint", f"policy.path={directory}"]
