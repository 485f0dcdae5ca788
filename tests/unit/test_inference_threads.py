"""supervision.inference_threads: the policy's torch threads leave the control loop a core."""

from __future__ import annotations

import torch

from controller.config import load_config
from controller.inference.threads import apply_inference_threads, inference_threads


def test_by_default_one_core_is_left_for_the_control_loop() -> None:
    assert inference_threads(None, cores=2) == 1
    assert inference_threads(None, cores=16) == 15
    assert inference_threads(None, cores=1) == 1  # never none
    assert inference_threads(3, cores=2) == 3  # a setting wins


def test_the_setting_reaches_torch() -> None:
    before = torch.get_num_threads()
    try:
        config = load_config(None, ["supervision.inference_threads=1"])
        assert apply_inference_threads(config.supervision.inference_threads) == 1
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
