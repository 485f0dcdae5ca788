"""Benchmark a policy through the runner's tier ladder; the same as `tempo bench`.

python scripts/bench_policy.py --act-aloha [--json FILE] [--plot FILE]
"""

import sys

from controller.tools.bench_policy import main

if __name__ == "__main__":
    sys.exit(main())
