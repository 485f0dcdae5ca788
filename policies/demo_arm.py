"""The simulated arm every demo policy is shaped for (`tempo demo`, `tempo sim-robot`): its joint
names and home pose, how far actions may stray, and the image statistics demo policies
normalize with. Constants only; each family's demo maker (policies/<family>/demo.py) uses them.
"""

from __future__ import annotations

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
HOME_POSE = (0.0, -0.6, 0.9, 0.0, 0.5, 0.0)  # rad, repeated/truncated to the joint count
ACTION_STD = 0.25  # rad per unit of normalized action
ACTION_REACH = 0.75  # rad: largest distance of any action from the home pose
DEFAULT_JOINTS = ("joint_0", "joint_1", "joint_2", "joint_3", "joint_4", "joint_5")
