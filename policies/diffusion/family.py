"""The diffusion family: Diffusion Policy (a ResNet per camera, a conditional 1-D U-Net, DDPM
or DDIM), from LeRobot `"type": "diffusion"` directories and Tempo checkpoints.

Standard library only at import (see policies.registry); each part imports what it needs when
it is used.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from policies.registry import CheckpointFamily, DemoPolicy, FamilySettings, PolicyFamily

if TYPE_CHECKING:
    from policies.diffusion.settings import DiffusionSettings
    from policies.settings import PolicySettings
    from policies.tensor_policy import TensorPolicy


def _settings_model() -> type[DiffusionSettings]:
    from policies.diffusion.settings import DiffusionSettings

    return DiffusionSettings


DIFFUSION_SETTINGS = FamilySettings(section="diffusion", model=_settings_model)


def _checkpoint() -> CheckpointFamily:
    from policies.diffusion.checkpoint import CHECKPOINT

    return CHECKPOINT


def serve_noise_setting(policy: TensorPolicy, settings: PolicySettings) -> TensorPolicy:
    """`policy` drawing its noise as policy.diffusion.noise says; `fixed` for a policy that is
    not a Diffusion Policy is refused."""
    if settings.section("diffusion").noise == "fresh":
        return policy
    from controller.errors import ConfigError
    from policies.diffusion.codec import with_fixed_noise

    try:
        return with_fixed_noise(policy)
    except ValueError:
        raise ConfigError(
            f"policy.diffusion applies to Diffusion Policy checkpoints; {settings.path} holds "
            "another policy (leave policy.diffusion at its defaults)"
        ) from None


def demo_settings(cache: Path) -> list[str]:
    """`tempo demo --policy diffusion`: a tiny Diffusion Policy (random weights, written on the
    first run: a ResNet-18 per camera, a U-Net of widths 32 and 64, DDIM 10 steps, two
    observation steps), its chunks played as LeRobot plays them (8 actions each)."""
    import sys

    print(
        "tempo demo: a tiny Diffusion Policy with random weights: U-Net widths 32 and 64 (the "
        "real one's are 512, 1024, 2048), DDIM 10 steps (LeRobot's default is DDPM 100), two "
        "observation steps; the model path is real, the behaviour untrained",
        file=sys.stderr,
        flush=True,
    )
    directory = cache / "demo-diffusion"
    if not (directory / "config.json").exists():
        from policies.diffusion.demo import write_demo_checkpoint

        write_demo_checkpoint(directory, scheduler="DDIM", steps=10)
    return ["policy.kind=checkpoint", f"policy.path={directory}"]


FAMILY = PolicyFamily(
    name="diffusion",
    title="Diffusion Policy",
    summary="Diffusion Policy: ResNet keypoints per camera, a FiLM 1-D U-Net, DDPM or DDIM "
    "(LeRobot or Tempo checkpoints)",
    checkpoint=_checkpoint,
    serve_settings=serve_noise_setting,
    settings=(DIFFUSION_SETTINGS,),
    demo=DemoPolicy(
        help="a tiny Diffusion Policy (reduced U-Net widths, DDIM 10 steps, random weights)",
        settings=demo_settings,
    ),
)
