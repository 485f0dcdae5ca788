"""How many CPU threads torch runs the policy on (`supervision.inference_threads`).

By default one fewer than the host's cores: on a 2-core host, a policy on the CPU with torch's
default (one thread per core) kept both cores busy while it ran, and the control loop's thread
waited for a CPU for 55-70% of the intervals with missed ticks (demo ACT at 100 Hz, one busy
process beside it). One core left free is the loop's.
"""

from __future__ import annotations

import logging
import os

import torch

log = logging.getLogger(__name__)


def inference_threads(setting: int | None, cores: int | None = None) -> int:
    """The thread count for `setting` (None: one fewer than `cores`, at least 1)."""
    if setting is not None:
        return setting
    available = cores if cores is not None else (os.cpu_count() or 1)
    return max(1, available - 1)


def apply_inference_threads(setting: int | None) -> int:
    """Set torch's operator threads for the policy; returns the count (logged)."""
    count = inference_threads(setting)
    torch.set_num_threads(count)
    log.info("policy operators on %d CPU thread(s) (supervision.inference_threads)", count)
    return count
