"""The simulated robot's run counts its seconds from its first action, so a first policy step
that takes longer than the run (a loaded CPU) still ends with a robot that moved
(controller.sim.sim_robot.run_driver)."""

from __future__ import annotations

import time

import numpy as np

from controller.sim.sim_robot import SimulatedArm, run_driver
from controller.wire.commands import ClientCounters, Command


class SlowFirstStep:
    """A client whose daemon sends holds for `first_action_after_s`, then actions."""

    def __init__(self, first_action_after_s: float) -> None:
        self.counters = ClientCounters()
        self._first = time.monotonic() + first_action_after_s
        self._seq = 0

    def receive(self) -> Command:
        if time.monotonic() < self._first:
            return Command("hold", reason="no_action")
        return Command("action", np.full(2, 0.5, np.float32), step=1, obs_seq=self._seq)

    def send_observation(self, frames: object, state: object) -> int:
        self._seq += 1
        return self._seq


def test_a_first_action_later_than_the_run_still_moves_the_robot() -> None:
    arm = SimulatedArm(["a", "b"], {})
    start = arm.position.copy()
    summary = run_driver(SlowFirstStep(0.6), arm, seconds=0.2)  # type: ignore[arg-type]
    assert summary["actions_applied"] > 0 and summary["holds"] > 0
    assert summary["travel_rad"] > 1e-3 and not np.allclose(arm.position, start)


def test_no_action_at_all_ends_after_the_wait() -> None:
    summary = run_driver(
        SlowFirstStep(60.0),  # type: ignore[arg-type]
        SimulatedArm(["a"], {}),
        seconds=0.1,
        first_action_wait_s=0.2,
    )
    assert summary["actions_applied"] == 0 and summary["travel_rad"] == 0.0
    assert summary["elapsed_s"] < 5.0


def test_textured_frames_compress_as_a_cameras_do_and_keep_the_bars() -> None:
    """Flat bars compress to almost nothing and hid the recorder's compression cost."""
    import zlib

    from controller.sim.sim_robot import SimulatedArm

    cameras = {"front": (48, 64)}
    flat = SimulatedArm(["a", "b"], cameras).render()["front"]
    textured_arm = SimulatedArm(["a", "b"], cameras, textured=True)
    textured = textured_arm.render()["front"]
    assert np.array_equal(textured, textured_arm.render()["front"])  # one scene, one frame
    assert np.all((textured ^ flat) < 32)  # the bars are there, under the noise
    assert len(zlib.compress(textured.tobytes())) > 10 * len(zlib.compress(flat.tobytes()))
