"""`tempo config show`: the effective config as YAML, then, for each policy whose checkpoint
fixes its cameras and joints, those (as YAML comments, so the output still loads): its
robot.cameras and policy.joint_names are not what is served then.

Read from the checkpoint's config.json alone (policies.checkpoints.fixed_inputs), no torch.
"""

from __future__ import annotations

from controller.config import TempoConfig, dump_config, policy_views
from controller.errors import CheckpointError
from policies.checkpoints.fixed_inputs import fixed_inputs


def show_config(config: TempoConfig) -> str:
    """The YAML, and what each policy's checkpoint fixes, marked as coming from it."""
    text = dump_config(config)
    for name, view in policy_views(config):
        path = view.policy.path
        if path is None:
            continue
        try:
            fixed = fixed_inputs(path)
        except CheckpointError as exc:  # said here; serving says it again, with the fix
            text += f"# policy {name}: checkpoint {path} unreadable: {exc}\n"
            continue
        if fixed is None:
            continue
        text += (
            f"# policy {name}: from the checkpoint {path} (served instead of robot.cameras "
            "and policy.joint_names above):\n"
        )
        text += "".join(f"#   {line}\n" for line in fixed.lines())
    return text
