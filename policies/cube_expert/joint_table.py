"""The expert's plan turned into joint targets, as the ACT paper made its demonstrations: the
end-effector plan (policies.cube_expert.waypoints) is run in gym-aloha's end-effector
(mocap) simulation, whose arms follow the mocap bodies; the joint positions it passes through,
with each gripper's commanded opening in place of its measured one, are the joint-space
targets. Nothing is rendered.

    trajectory = joint_trajectory(cube_xy)        # (PLAN_STEPS, 14) float32
    table = trajectory_table(xs, ys)              # (len(xs), len(ys), PLAN_STEPS, 14)

Needs gym-aloha (the `sim` extra), imported when called.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

import numpy as np

from policies.cube_expert.waypoints import PLAN_STEPS, transfer_plan

CUBE_Z = 0.05  # gym-aloha's cube rests on the table at this height
JOINTS = 14


def _end_effector_env(cube_xy: Sequence[float]) -> Any:
    """gym-aloha's end-effector transfer-cube simulation with the cube at `cube_xy` and no
    cameras rendered."""
    from dm_control import mujoco
    from dm_control.rl import control
    from gym_aloha.constants import ASSETS_DIR, DT
    from gym_aloha.tasks.sim_end_effector import TransferCubeEndEffectorTask

    cube = np.array([cube_xy[0], cube_xy[1], CUBE_Z, 1.0, 0.0, 0.0, 0.0])

    class PlacedCube(TransferCubeEndEffectorTask):  # type: ignore[misc]
        def initialize_episode(self, physics: Any) -> None:
            self.initialize_robots(physics)
            joint = physics.model.name2id("red_box_joint", "joint")
            start = physics.model.jnt_qposadr[joint]
            physics.data.qpos[start : start + 7] = cube
            super(TransferCubeEndEffectorTask, self).initialize_episode(physics)

        def get_observation(self, physics: Any) -> Any:
            observation = collections.OrderedDict()
            observation["qpos"] = self.get_qpos(physics)
            observation["gripper_ctrl"] = physics.data.ctrl.copy()
            return observation

    xml = ASSETS_DIR / "bimanual_viperx_end_effector_transfer_cube.xml"
    physics = mujoco.Physics.from_xml_path(str(xml))
    return control.Environment(
        physics,
        PlacedCube(),
        float("inf"),
        control_timestep=DT,
        n_sub_steps=None,
        flat_observation=False,
    )


def joint_trajectory(cube_xy: Sequence[float]) -> np.ndarray:
    """The joint targets (PLAN_STEPS, 14) of the expert for a cube at `cube_xy`: row t is where
    the end-effector simulation's joints were after t steps of the plan, each gripper's value
    its commanded opening then (normalized, 0 closed, 1 open)."""
    from gym_aloha.constants import normalize_puppet_gripper_position

    plan = transfer_plan(np.array([cube_xy[0], cube_xy[1], CUBE_Z]))
    env = _end_effector_env(cube_xy)
    step = env.reset()
    rows = []
    try:
        for t in range(PLAN_STEPS):
            row = np.array(step.observation["qpos"], dtype=np.float64)
            ctrl = step.observation["gripper_ctrl"]
            row[6] = normalize_puppet_gripper_position(ctrl[0])
            row[13] = normalize_puppet_gripper_position(ctrl[2])
            rows.append(row)
            left, right = plan.pose_at(t)
            step = env.step(np.concatenate([left, right]))
    finally:
        env.physics.free()
    return np.stack(rows).astype(np.float32)


def trajectory_table(xs: Sequence[float], ys: Sequence[float]) -> np.ndarray:
    """joint_trajectory at every grid point (len(xs), len(ys), PLAN_STEPS, 14)."""
    return np.stack([np.stack([joint_trajectory((x, y)) for y in ys]) for x in xs])
