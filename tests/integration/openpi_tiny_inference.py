"""The tiny policy shaped for openpi's ALOHA, DROID or LIBERO example (cameras named as the
layout's images, small frames, their state size), and an inference process serving it in eager
FP32 with batch sizes 1, 2 and 4 (tests/integration/test_openpi_clients.py):

    python openpi_tiny_inference.py LAYOUT --channel-fd FD     (RemotePolicy adds --channel-fd)
"""

from __future__ import annotations

import sys

from policies.base import CameraSpec, PolicySpec

BATCH_SIZES = (1, 2, 4)
HEIGHT, WIDTH = 48, 64
# layout -> (its images' last key parts: the policy's cameras, state size, joints)
SHAPES = {
    "aloha": (("cam_high", "cam_low", "cam_left_wrist", "cam_right_wrist"), 14, 14),
    "droid": (("exterior_image_1_left", "wrist_image_left"), 8, 8),
    "libero": (("image", "wrist_image"), 8, 7),
}
CHUNK = 10


def openpi_spec(layout: str) -> PolicySpec:
    cameras, state_size, joints = SHAPES[layout]
    return PolicySpec(
        cameras=tuple(CameraSpec(name=name, height=HEIGHT, width=WIDTH) for name in cameras),
        state_size=state_size,
        joint_names=tuple(f"joint_{i}" for i in range(joints)),
        chunk_size=CHUNK,
    )


if __name__ == "__main__":
    from controller.inference.process_server import serve_control_process
    from controller.runner_config import RunnerConfig
    from policies.tiny.policy import build_tiny_policy

    layout = sys.argv[1]

    def build():  # type: ignore[no-untyped-def]
        from controller.inference.runner import Runner

        config = RunnerConfig(top_tier="eager_fp32", cache_dir=None, parity_observations=2)
        model = build_tiny_policy(openpi_spec(layout))
        runner = Runner(model, config, device="cpu", batch_sizes=BATCH_SIZES)
        runner.start()
        return runner

    channel_fd = int(sys.argv[sys.argv.index("--channel-fd") + 1])
    sys.exit(serve_control_process(build, channel_fd))
