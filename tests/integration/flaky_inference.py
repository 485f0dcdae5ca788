"""`tempo inference-process ARGS`, except that while the file MARKER exists (it is deleted) the
process dies inside its start-up parity check: an inference process that fails while starting.

    python flaky_inference.py MARKER inference-process --config-json FILE --channel ENDPOINT
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    marker = sys.argv[1]
    if os.path.exists(marker):
        os.unlink(marker)
        import controller.inference.runner as runner_module

        def die(*_args: object, **_kwargs: object) -> None:
            os._exit(5)

        runner_module.check_parity = die  # type: ignore[assignment]
    from controller.cli import main

    sys.exit(main(sys.argv[2:]))
