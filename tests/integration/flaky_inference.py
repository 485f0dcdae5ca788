"""`tempo inference-process ARGS`, except that while the file MARKER exists (it is deleted) the
process dies inside its start-up checks (in the FP32 reference pass every start runs first): an
inference process that fails while starting.

    python flaky_inference.py MARKER inference-process --config-json FILE --channel-fd FD
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    marker = sys.argv[1]
    import controller.inference.tier_checks as checks_module

    reference_outputs = checks_module.reference_outputs

    def die_while_marked(*args: object, **kwargs: object) -> object:
        # Looked at when the check runs, not when the process starts: a standby process is
        # started long before it builds.
        if os.path.exists(marker):
            os.unlink(marker)
            os._exit(5)
        return reference_outputs(*args, **kwargs)

    checks_module.reference_outputs = die_while_marked  # type: ignore[assignment]
    from controller.cli import main

    sys.exit(main(sys.argv[2:]))
