"""ALOHA transfer-cube without cameras: gym-aloha's joint-space task (the same MuJoCo scene,
actuators, cube placement per seed and reward), observed as its 14 joint positions followed by
the cube's pose (x, y, z, qw, qx, qy, qz; the ACT paper's `env_state`), 21 values in all. It
renders nothing per step: on a CPU (OSMesa) rendering the top camera costs about a second a
step, so this is the variant a policy reads from state alone (the scripted expert, a policy
trained on its state) runs in real time. The episode succeeds when the left gripper holds the
cube off the table (gym-aloha's reward 4).

Needs gym-aloha (the `sim` extra), imported when built.
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np

from controller.sim.envs.adapter import EnvLayout
from controller.sim.envs.aloha import JOINTS, TRANSFER_CUBE

CUBE_POSE = ("cube_x", "cube_y", "cube_z", "cube_qw", "cube_qx", "cube_qy", "cube_qz")
STATE_NAMES = JOINTS + CUBE_POSE
SUCCESS_REWARD = 4  # the left gripper holds the cube, which touches nothing else


class AlohaStateEnv:
    """gym-aloha's transfer-cube task stepped without rendering; the gymnasium calls SimEnv
    makes (reset, step, render, close)."""

    def __init__(self) -> None:
        from dm_control import mujoco
        from dm_control.rl import control
        from gym_aloha.constants import ASSETS_DIR, DT
        from gym_aloha.tasks import sim

        class Unrendered(sim.TransferCubeTask):  # type: ignore[misc]
            def get_observation(self, physics: Any) -> Any:
                observation = collections.OrderedDict()
                observation["state"] = np.concatenate(
                    [self.get_qpos(physics), self.get_env_state(physics)]
                )
                return observation

        self._box_pose = sim.BOX_POSE
        physics = mujoco.Physics.from_xml_path(
            str(ASSETS_DIR / "bimanual_viperx_transfer_cube.xml")
        )
        self._env = control.Environment(
            physics, Unrendered(), float("inf"), control_timestep=DT, flat_observation=False
        )

    @property
    def unwrapped(self) -> AlohaStateEnv:
        return self

    def reset(self, seed: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        from gym_aloha.utils import sample_box_pose

        # gym-aloha's own placement for this seed (a module global its task reads at reset)
        self._box_pose[0] = sample_box_pose(seed)
        step = self._env.reset()
        return {"state": step.observation["state"]}, {"is_success": False}

    def step(self, action: np.ndarray) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        step = self._env.step(np.asarray(action, dtype=np.float64))
        reward = float(step.reward or 0.0)
        success = reward >= SUCCESS_REWARD
        return {"state": step.observation["state"]}, reward, success, False, {"is_success": success}

    def render(self) -> np.ndarray:
        """The top camera at 480x640 (for a rollout video; needs a MuJoCo GL backend)."""
        return np.asarray(self._env.physics.render(height=480, width=640, camera_id="top"))

    def close(self) -> None:
        pass


def _build(layout: EnvLayout) -> AlohaStateEnv:
    return AlohaStateEnv()


TRANSFER_CUBE_STATE = EnvLayout(
    name="aloha-transfer-cube-state",
    gym_id="gym_aloha/AlohaTransferCube-v0",
    gym_kwargs={},
    fps=TRANSFER_CUBE.fps,
    max_steps=TRANSFER_CUBE.max_steps,
    joints=JOINTS,
    cameras={},
    state_key="state",
    state_size=len(STATE_NAMES),
    task=TRANSFER_CUBE.task,
    builder=_build,
)
