"""`tempo inference-process ARGS` serving a policy whose every tier, the FP32 reference
included, returns NaN when the first state value exceeds 1000 (tests/integration/test_faults.py's
NanAbove1000): an input fault, seen through the inference process.

    python nan_inference.py inference-process --config-json FILE --channel-fd FD
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from controller.inference import build as build_module
    from controller.policy_sections import PolicyConfig
    from controller.runner_config import RunnerConfig
    from policies.tensor_policy import TensorPolicy
    from tests.integration.test_faults import NanAbove1000

    build = build_module.build_policy  # the real one, before it is swapped below

    def nan_policy(policy, robot, runner, progress=None, model=None):  # type: ignore[no-untyped-def]
        spec = build(policy, robot, runner).spec
        nan = TensorPolicy(spec, NanAbove1000.build())
        eager = RunnerConfig(top_tier="eager_fp32", step_budget_ms=None)
        return build(PolicyConfig(device="cpu"), robot, eager, progress, nan)

    build_module.build_policy = nan_policy  # type: ignore[assignment]
    from controller.cli import main

    sys.exit(main(sys.argv[1:]))
