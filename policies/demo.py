"""Every family's demo and benchmark policies with random weights, by the names they had when
they all lived here: the makers themselves are in policies/act/demo.py, policies/flow/demo.py
and policies/tdmpc2/demo.py, the simulated arm they are shaped for in policies.demo_arm.
"""

from __future__ import annotations

from policies.act.demo import (
    aloha_spec,
    make_aloha_policy,
    make_demo_checkpoint,
    make_demo_policy,
)
from policies.demo_arm import (
    ACTION_REACH,
    ACTION_STD,
    DEFAULT_JOINTS,
    HOME_POSE,
    IMAGENET_MEAN,
    IMAGENET_STD,
)
from policies.flow.demo import (
    FLOW_ACTION_STD,
    FLOW_VELOCITY_BOUND,
    make_demo_flow_policy,
    make_flow_aloha_policy,
)
from policies.tdmpc2.demo import make_demo_tdmpc2_checkpoint

__all__ = [
    "ACTION_REACH",
    "ACTION_STD",
    "DEFAULT_JOINTS",
    "FLOW_ACTION_STD",
    "FLOW_VELOCITY_BOUND",
    "HOME_POSE",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "aloha_spec",
    "make_aloha_policy",
    "make_demo_checkpoint",
    "make_demo_flow_policy",
    "make_demo_tdmpc2_checkpoint",
    "make_demo_policy",
    "make_flow_aloha_policy",
]
