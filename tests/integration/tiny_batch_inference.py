"""An inference process serving the tiny policy in eager FP32 with batch sizes 1, 2 and 4 (the
test that starts it passes the same sizes to its RemotePolicy).

    python tiny_batch_inference.py --channel-fd FD     (RemotePolicy adds --channel-fd)
"""

from __future__ import annotations

import sys

BATCH_SIZES = (1, 2, 4)

if __name__ == "__main__":
    from controller.inference.process_server import serve_control_process
    from controller.runner_config import RunnerConfig
    from policies.tiny.policy import build_tiny_policy

    def build():  # type: ignore[no-untyped-def]
        from controller.inference.runner import Runner

        config = RunnerConfig(top_tier="eager_fp32", cache_dir=None, parity_observations=2)
        runner = Runner(build_tiny_policy(), config, device="cpu", batch_sizes=BATCH_SIZES)
        runner.start()
        return runner

    channel_fd = int(sys.argv[sys.argv.index("--channel-fd") + 1])
    sys.exit(serve_control_process(build, channel_fd))
