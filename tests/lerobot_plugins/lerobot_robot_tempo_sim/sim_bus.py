"""A simulated Feetech bus: the methods LeRobot's SO-101 classes call on `FeetechMotorsBus`,
over motors that follow their goal positions with a first-order lag, in real time."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

HISTORY = 500


class SimulatedBus:
    def __init__(
        self,
        motors: dict[str, Any],
        transfer_ms: float = 0.0,
        time_constant_s: float = 0.05,
        operator: Callable[[float], dict[str, float]] | None = None,
    ) -> None:
        """`operator(t)`: where a hand holds the motors at time t (a leader arm); None: they
        follow their goals (a follower)."""
        self.motors = motors
        self.calibration: dict[str, Any] = {}
        self.transfer_s = transfer_ms / 1e3
        self.time_constant_s = time_constant_s
        self.operator = operator
        self.present = dict.fromkeys(motors, 0.0)
        self.goal = dict(self.present)
        self.goal_writes = 0
        self.goal_history: list[dict[str, float]] = []  # the last HISTORY goals written
        self.goal_times: list[float] = []  # time.monotonic() of every goal write
        self.reads = 0
        self._connected = False
        self._started = 0.0
        self._last = 0.0

    @property
    def is_connected(self) -> bool:
        return self._connected

    @property
    def is_calibrated(self) -> bool:
        return True

    def connect(self, handshake: bool = True) -> None:
        self._connected = True
        self._started = self._last = time.monotonic()

    def disconnect(self, disable_torque: bool = True) -> None:
        self._connected = False

    def _transfer(self) -> None:
        if self.transfer_s:
            time.sleep(self.transfer_s)

    def _advance(self) -> None:
        now = time.monotonic()
        if self.operator is not None:
            self.present.update(self.operator(now - self._started))
        else:
            alpha = 1.0 - math.exp(-(now - self._last) / self.time_constant_s)
            for motor, goal in self.goal.items():
                self.present[motor] += (goal - self.present[motor]) * alpha
        self._last = now

    def sync_read(self, data_name: str, motors: Any = None, **_: Any) -> dict[str, float]:
        if data_name != "Present_Position":
            raise NotImplementedError(f"the simulated bus reads Present_Position, not {data_name}")
        self._transfer()
        self._advance()
        self.reads += 1
        return dict(self.present)

    def sync_write(self, data_name: str, values: dict[str, float], **_: Any) -> None:
        if data_name != "Goal_Position":
            raise NotImplementedError(f"the simulated bus writes Goal_Position, not {data_name}")
        self._transfer()
        self._advance()
        unknown = set(values) - set(self.motors)
        if unknown:
            raise KeyError(f"no motor {sorted(unknown)[0]!r} on the bus")
        self.goal.update(values)
        self.goal_writes += 1
        self.goal_history.append(dict(values))
        self.goal_times.append(time.monotonic())
        del self.goal_history[:-HISTORY]

    # Configuration LeRobot's classes write at connect time: nothing to simulate.
    def write(self, data_name: str, motor: str, value: Any, **_: Any) -> None:
        pass

    def write_calibration(self, calibration: dict[str, Any], **_: Any) -> None:
        self.calibration = dict(calibration)

    def configure_motors(self, **_: Any) -> None:
        pass

    def enable_torque(self, motors: Any = None, **_: Any) -> None:
        pass

    def disable_torque(self, motors: Any = None, **_: Any) -> None:
        pass

    @contextmanager
    def torque_disabled(self, motors: Any = None) -> Iterator[None]:
        yield
