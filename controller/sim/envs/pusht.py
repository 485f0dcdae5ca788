"""PushT (gym-pusht): push the T block onto its goal with a round agent. As LeRobot's pusht env
config maps it: `pixels` (96x96, what gym-pusht renders; LeRobot's config declares 384 but does
not pass it) is camera `image`, `agent_pos` (x, y) is the state, the action is the agent's
target (x, y), at 10 frames a second, 300 steps at most. The gym arguments are LeRobot's
(its visualization size sets only what `render` draws)."""

from __future__ import annotations

from controller.sim.envs.adapter import EnvLayout

PUSHT = EnvLayout(
    name="pusht",
    gym_id="gym_pusht/PushT-v0",
    gym_kwargs={
        "obs_type": "pixels_agent_pos",
        "render_mode": "rgb_array",
        "visualization_width": 384,
        "visualization_height": 384,
        "max_episode_steps": 300,
    },
    fps=10.0,
    max_steps=300,
    joints=("x", "y"),
    cameras={"image": (("pixels",), (96, 96))},
    state_key="agent_pos",
    state_size=2,
    task="Push the T-shaped block onto the T-shaped target.",
)
