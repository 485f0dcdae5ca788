"""The transfer-cube expert's plan in end-effector space: where each gripper goes, and when,
from the cube's position at the start of the episode (the scripted demonstrations of the ACT
paper, Zhao et al. 2023: the right arm picks the cube, meets the left arm mid-air and hands it
over). Numpy only.

    plan = transfer_plan(cube_xyz)           # waypoints of both arms
    left, right = plan.pose_at(t)            # (x, y, z, qw, qx, qy, qz, gripper) each, at step t

Between waypoints position, quaternion (componentwise, as the paper's script does; the
simulator normalizes mocap quaternions) and gripper opening (0 closed, 1 open) are linear in
time. Steps are the simulator's 50 Hz control steps; the plan ends at PLAN_STEPS.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PLAN_STEPS = 400
# Where the end effectors start (the arms' start pose; gym-aloha's end-effector task puts the
# mocap bodies there) and the point in the air where the arms meet.
LEFT_START = np.array([-0.31718881, 0.5, 0.29525084])
RIGHT_START = np.array([0.31718881, 0.49999888, 0.29525084])
IDENTITY = np.array([1.0, 0.0, 0.0, 0.0])
MEET = np.array([0.0, 0.5, 0.25])


def axis_angle(axis: tuple[float, float, float], degrees: float) -> np.ndarray:
    """The unit quaternion (w, x, y, z) of a rotation by `degrees` about `axis`."""
    half = np.radians(degrees) / 2
    unit = np.asarray(axis, dtype=np.float64) / np.linalg.norm(axis)
    return np.concatenate([[np.cos(half)], np.sin(half) * unit])


def quat_multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The Hamilton product a * b of quaternions (w, x, y, z)."""
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return np.array(
        [
            w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
            w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
            w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
            w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
        ]
    )


@dataclass(frozen=True)
class Waypoint:
    step: int
    xyz: np.ndarray
    quat: np.ndarray
    gripper: float  # 0 closed, 1 open


def _interpolate(path: list[Waypoint], t: float) -> np.ndarray:
    """(x, y, z, qw, qx, qy, qz, gripper) at step `t` on `path` (held past its ends)."""
    if t <= path[0].step:
        a = b = path[0]
    elif t >= path[-1].step:
        a = b = path[-1]
    else:
        i = next(i for i in range(1, len(path)) if path[i].step > t)
        a, b = path[i - 1], path[i]
    f = 0.0 if a is b else (t - a.step) / (b.step - a.step)
    first = np.concatenate([a.xyz, a.quat, [a.gripper]])
    last = np.concatenate([b.xyz, b.quat, [b.gripper]])
    return first + (last - first) * f


@dataclass(frozen=True)
class TransferPlan:
    left: list[Waypoint]
    right: list[Waypoint]

    def pose_at(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """The left and the right end effector's target at step `t`."""
        return _interpolate(self.left, t), _interpolate(self.right, t)


def transfer_plan(cube_xyz: np.ndarray) -> TransferPlan:
    """Both arms' waypoints for a cube at `cube_xyz`: the right gripper, tilted 60 degrees
    about y, comes down over the cube, closes, lifts it straight up, carries it to the meeting
    point and opens as the left gripper (turned 90 degrees about x) closes on it. Unlike the
    paper's script, which swings the cube towards the meeting point as it lifts and is there at
    step 220, this one lifts first and arrives at step 260: in gym-aloha the swing shook the cube
    out of the gripper (measured: lost in every one of 6 seeds)."""
    cube = np.asarray(cube_xyz, dtype=np.float64)
    pick = quat_multiply(IDENTITY, axis_angle((0.0, 1.0, 0.0), -60.0))
    meet_left = axis_angle((1.0, 0.0, 0.0), 90.0)
    left_at_meet = MEET + np.array([0.02, 0.0, -0.02])
    left_back = MEET + np.array([-0.1, 0.0, -0.02])
    left = [
        Waypoint(0, LEFT_START, IDENTITY, 0.0),
        Waypoint(100, left_back, meet_left, 1.0),  # open, waiting beside the meeting point
        Waypoint(260, left_at_meet, meet_left, 1.0),  # to the cube in the right gripper
        Waypoint(310, left_at_meet, meet_left, 0.0),  # close on it
        Waypoint(360, left_back, IDENTITY, 0.0),  # pull it away
        Waypoint(PLAN_STEPS, left_back, IDENTITY, 0.0),
    ]
    above = cube + np.array([0.0, 0.0, 0.08])
    at_cube = cube + np.array([0.0, 0.0, -0.015])
    right = [
        Waypoint(0, RIGHT_START, IDENTITY, 0.0),
        Waypoint(90, above, pick, 1.0),  # open, above the cube
        Waypoint(130, at_cube, pick, 1.0),  # down around it
        Waypoint(170, at_cube, pick, 0.0),  # close
        Waypoint(190, above, pick, 0.0),  # lift straight up
        Waypoint(240, MEET + np.array([0.05, 0.0, 0.0]), pick, 0.0),  # towards the meeting
        Waypoint(260, MEET, pick, 0.0),
        Waypoint(310, MEET, pick, 1.0),  # let go once the left gripper holds it
        Waypoint(360, MEET + np.array([0.1, 0.0, 0.0]), pick, 1.0),  # out of the way
        Waypoint(PLAN_STEPS, MEET + np.array([0.1, 0.0, 0.0]), pick, 1.0),
    ]
    return TransferPlan(left, right)
