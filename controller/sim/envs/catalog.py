"""The environments `--env` names, and building one: an unknown name or a missing package is
one sentence (ConfigError), naming the choices or the `sim` extra."""

from __future__ import annotations

import dataclasses
import importlib
import os
from typing import Any

from controller.errors import ConfigError
from controller.sim.envs.adapter import EnvLayout, SimEnv
from controller.sim.envs.aloha import INSERTION, TRANSFER_CUBE
from controller.sim.envs.aloha_state import TRANSFER_CUBE_STATE
from controller.sim.envs.pusht import PUSHT

LAYOUTS = {layout.name: layout for layout in (PUSHT, INSERTION, TRANSFER_CUBE, TRANSFER_CUBE_STATE)}
ENV_NAMES = tuple(LAYOUTS)
# The package each environment's gym id registers from (pyproject's `sim` extra).
PACKAGES = {"gym_pusht": "gym-pusht", "gym_aloha": "gym-aloha"}


def layout_of(name: str) -> EnvLayout:
    try:
        return LAYOUTS[name]
    except KeyError:
        raise ConfigError(
            f"unknown environment {name!r}; the environments are {', '.join(ENV_NAMES)}"
        ) from None


def make_env(name: str | EnvLayout, **wiring: Any) -> SimEnv:
    """The environment `name` (or a layout), with `wiring` replacing layout fields (tests)."""
    layout = layout_of(name) if isinstance(name, str) else name
    if wiring:
        layout = dataclasses.replace(layout, **wiring)
    module = layout.gym_id.split("/")[0]
    if module == "gym_aloha" and "MUJOCO_GL" not in os.environ and "DISPLAY" not in os.environ:
        # headless and GPU-free; set MUJOCO_GL=egl on a GPU. A variant without cameras renders
        # nothing, and needs no GL library at all.
        os.environ["MUJOCO_GL"] = "osmesa" if layout.cameras else "disable"

    try:
        importlib.import_module(module)
        import gymnasium
    except ModuleNotFoundError as exc:
        package = PACKAGES.get(exc.name or "", exc.name)
        raise ConfigError(
            f"environment {layout.name} needs {package}, which is not installed: "
            "pip install 'tempo-controller[sim]'"
        ) from None
    if layout.builder is not None:
        return SimEnv(layout, layout.builder(layout))
    kwargs = dict(layout.gym_kwargs)
    steps = kwargs.pop("max_episode_steps", None)
    env = gymnasium.make(layout.gym_id, max_episode_steps=steps, **kwargs)
    return SimEnv(layout, env)
