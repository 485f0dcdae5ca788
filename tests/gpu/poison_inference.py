"""`tempo inference-process ARGS` whose 5th step runs a kernel that fails a device-side assert
(an out-of-range index on the GPU): the CUDA context is poisoned, as a real kernel fault would.

    python poison_inference.py inference-process --config-json FILE --channel-fd FD
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    import torch

    import controller.inference.runner as runner_module

    served = [0]
    predict = runner_module.Runner.predict

    def poisoned(self, images, context):  # type: ignore[no-untyped-def]
        served[0] += 1
        if served[0] == 5:
            table = torch.zeros(4, device="cuda")
            table[torch.tensor([1 << 20], device="cuda")].sum().item()
        return predict(self, images, context)

    runner_module.Runner.predict = poisoned  # type: ignore[method-assign]
    from controller.cli import main

    sys.exit(main(sys.argv[1:]))
