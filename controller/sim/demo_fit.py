"""What `tempo demo` changes so that its robot moves on the machine it runs on.

The demo's defaults (50 Hz, a chunk every step for ACT, full MPPI planning for TD-MPC2) assume
a CUDA GPU. On a CPU a step of the model takes longer than a 50 Hz control period, so the robot
would mostly hold; there the demo serves settings a CPU keeps up with, and says which and why.
Settings the user set (`--set` or the `--config` file) are left as the user set them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CpuFit:
    """Settings ("key=value") for one demo family on a CPU, and why."""

    settings: tuple[str, ...]
    why: str


# Measured on a 2-core CPU (eager_fp32): the demo ACT's step took 30-80 ms idle and 0.7-1 s
# with the machine loaded (load average 10), against 20 ms at 50 Hz. A chunk of 20 rows covers
# every step while a query every 10 steps lands within 10 steps: at 10 Hz that is a step of up
# to 1 s. A TD-MPC2 plan took seconds; its prior about 1 ms idle.
CPU_FITS: dict[str, CpuFit] = {
    "act": CpuFit(
        (
            "control.rate_hz=10",
            "execution.query_period=10",
            "execution.ensemble=newest",
            "runner.step_budget_ms=1000",
        ),
        "a CPU step of ACT takes longer than a 50 Hz control period, so the robot plays each "
        "chunk for 10 steps at 10 Hz (1 s) while the next is computed",
    ),
    "flow": CpuFit(
        ("control.rate_hz=10", "runner.step_budget_ms=1000"),
        "a CPU step of the flow policy (10 denoising steps and RTC guidance) takes longer than "
        "a 50 Hz control period, so it runs at 10 Hz, a chunk every 10 steps (1 s)",
    ),
    "diffusion": CpuFit(
        ("control.rate_hz=10", "runner.step_budget_ms=1000"),
        "a CPU step of the tiny Diffusion Policy (two frames through a ResNet-18, 10 U-Net "
        "steps) takes longer than a 50 Hz control period, so it runs at 10 Hz, a chunk every 8 "
        "steps (0.8 s), as its checkpoint plays them",
    ),
    "tdmpc2": CpuFit(
        ("policy.tdmpc2.mode=prior",),
        "a CPU plan (512 samples x 6 iterations) takes longer than its chunk lasts, so the "
        "demo serves fast mode: the policy prior's action, no planning",
    ),
}


def cpu_fit(policy: str, cuda: bool, explicit: Sequence[str] = ()) -> tuple[list[str], str | None]:
    """The settings `tempo demo --policy POLICY` adds on this machine, and a line saying what
    it picked and why (None when it adds nothing). With CUDA, nothing: the defaults fit.
    `explicit`: the setting keys ("control.rate_hz") the user set; those are not touched."""
    fit = CPU_FITS.get(policy)
    if cuda or fit is None:
        return [], None
    chosen = [s for s in fit.settings if s.split("=", 1)[0] not in set(explicit)]
    if not chosen:
        return [], None
    line = (
        f"no CUDA GPU, so the {policy} demo uses {', '.join(chosen)}: {fit.why}. On a GPU it "
        "runs the defaults; --set any of these to choose otherwise."
    )
    return chosen, line


def explicit_keys(config_path: Path | None, overrides: Sequence[str]) -> list[str]:
    """Dotted keys ("control.rate_hz") the user set in the --config file or with --set."""
    from controller.config import load_config
    from controller.policy_sections import PolicyConfig

    config = load_config(config_path, list(overrides))
    keys = [o.split("=", 1)[0].strip() for o in overrides]

    def walk(model: object, prefix: str) -> None:
        for name in getattr(model, "model_fields_set", ()):
            value = getattr(model, name)
            if isinstance(model, PolicyConfig) and name == "sections":
                for section, settings in value.items():  # spelled policy.<section>
                    walk(settings, f"{prefix}{section}.")
                continue
            keys.append(prefix + name)
            if hasattr(value, "model_fields_set"):
                walk(value, f"{prefix}{name}.")

    walk(config, "")
    return keys


def cuda_available(explicit_device: str | None = None) -> bool:
    """Whether the daemon will serve on a CUDA GPU: policy.device=cpu says no; else whether
    torch sees one (no torch: no)."""
    if explicit_device == "cpu":
        return False
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())
