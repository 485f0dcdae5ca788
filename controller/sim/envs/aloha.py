"""ALOHA (gym-aloha, MuJoCo): the ACT paper's bimanual insertion and transfer-cube tasks in
joint space. As LeRobot's aloha env config maps them: `pixels/top` (480x640) is camera `top`,
`agent_pos` (14 joint positions) the state, the action 14 joint targets (per arm: waist,
shoulder, elbow, forearm roll, wrist angle, wrist rotate, gripper), at 50 frames a second,
400 steps (LeRobot's episode_length)."""

from __future__ import annotations

from controller.sim.envs.adapter import EnvLayout

ARM = ("waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate", "gripper")
JOINTS = tuple(f"{side}_{joint}" for side in ("left", "right") for joint in ARM)


def _aloha(name: str, gym_id: str, task: str) -> EnvLayout:
    return EnvLayout(
        name=name,
        gym_id=gym_id,
        gym_kwargs={"obs_type": "pixels_agent_pos", "max_episode_steps": 400},
        fps=50.0,
        max_steps=400,
        joints=JOINTS,
        cameras={"top": (("pixels", "top"), (480, 640))},
        state_key="agent_pos",
        state_size=14,
        task=task,
    )


INSERTION = _aloha(
    "aloha-insertion",
    "gym_aloha/AlohaInsertion-v0",
    "Insert the peg into the socket.",
)
TRANSFER_CUBE = _aloha(
    "aloha-transfer-cube",
    "gym_aloha/AlohaTransferCube-v0",
    "Pick up the cube with the right arm and transfer it to the left arm.",
)
