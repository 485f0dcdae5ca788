"""TD-MPC2 per action: the official code's eager planner beside Tempo's tiers and fast mode
(also `tempo bench --tdmpc2`; see controller/tools/bench_tdmpc2.py for what is timed).

    python scripts/bench_tdmpc2.py --device cuda
    python scripts/bench_tdmpc2.py --device cpu --sizes 1,5 --iters 5 --threads 1
"""

import sys

from controller.tools.bench_tdmpc2 import main

if __name__ == "__main__":
    sys.exit(main())
