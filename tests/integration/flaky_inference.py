"""`tempo inference-process ARGS`, except that while the file MARKER exists (it is deleted) the
process dies inside its start-up parity check: an inference process that fails while starting.

    python flaky_inference.py MARKER inference-process --config-json FILE --channel-fd FD
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    marker = sys.argv[1]
    import controller.inference.tier_checks as checks_module

    check_parity = checks_module.check_parity

    def die_while_marked(*args: object, **kwargs: object) -> object:
        # Looked at when the check runs, not when the process starts: a standby process is
        # started long before it builds.
        if os.path.exists(marker):
            os.unlink(marker)
            os._exit(5)
        return check_parity(*args, **kwargs)

    checks_module.check_parity = die_while_marked  # type: ignore[assignment]
    from controller.cli import main

    sys.exit(main(sys.argv[2:]))
