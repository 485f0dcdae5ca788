"""One robot's step on the tier ladder (controller.inference.ladder): upload the observation,
run it on the serving tier, and on trouble (the tier raises or returns NaN or Inf) demote it
and re-run the step below when the time spent so far plus that tier's measured step time fits
the budget. A non-finite chunk that the FP32 reference gives too is the observation's fault,
not the tier's: it is refused (InputFault) and nothing is demoted.

The Runner (controller.inference.runner) makes one LadderStep when it has started, over the
tiers and the step path it built, and calls it under its lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import numpy as np

from controller.errors import InputFault, PolicyError
from controller.inference.ladder import ServingLadder
from controller.inference.parity import NonFiniteOutput, all_finite
from controller.inference.progress import first_line
from controller.inference.step_counts import StepCounts
from controller.inference.step_path import StepPath
from controller.inference.tier_report import TierReport
from controller.inference.tiers import Tier
from policies.base import RobotContext

log = logging.getLogger(__name__)


class LadderStep:
    def __init__(
        self,
        path: StepPath,
        tiers: dict[str, Tier],
        reference: Tier,
        ladder: ServingLadder,
        reports: dict[str, TierReport],
        counts: StepCounts,
        clock: Callable[[], float],
    ) -> None:
        """reference: eager FP32, which tells a faulty observation from a faulty tier."""
        self._path = path
        self._tiers = tiers
        self._reference = reference
        self._ladder = ladder
        self._reports = reports
        self._counts = counts
        self._clock = clock

    def serve(
        self, images: Mapping[str, np.ndarray], context: RobotContext, started: float
    ) -> list[np.ndarray]:
        """The step's outputs, from the serving tier or one below (module doc); PolicyError
        when no tier is left or the re-run would overrun the budget, ValueError for a
        malformed observation. started: when the step began (the clock's time)."""
        with self._path.scope:  # one stream switch for upload, run and download
            outputs, name = self._serve(images, context, started)
        self._reports[name].served_steps += 1
        self._counts.served(1)
        self._ladder.record_step(self._clock() - started)
        return outputs

    def _serve(
        self, images: Mapping[str, np.ndarray], context: RobotContext, started: float
    ) -> tuple[list[np.ndarray], str]:
        """Upload, then run on the serving tier, stepping down on trouble (see serve);
        returns the outputs and the tier that produced them."""
        ladder, path = self._ladder, self._path
        try:
            path.stage(images, context)
        except ValueError:
            raise
        except Exception as exc:
            raise PolicyError(f"uploading the observation failed: {first_line(exc)}") from exc
        while True:
            name = ladder.tiers[ladder.current or 0]
            try:
                outputs = path.run(self._tiers[name])
                if not all_finite(outputs):
                    raise NonFiniteOutput("the chunk has NaN or Inf values")
                return outputs, name
            except Exception as exc:
                if isinstance(exc, NonFiniteOutput) and self._reference_fails_too():
                    # The input is at fault, not the tier: refuse it, demote nothing.
                    self._counts.input_faults += 1
                    raise InputFault(
                        "the policy's FP32 reference also returns NaN or Inf for this "
                        "observation, so the observation was refused (no tier was demoted)"
                    ) from None
                self._counts.failed_steps += 1
                self._counts.last_error = f"{name}: {first_line(exc)}"
                cause = "non_finite" if isinstance(exc, NonFiniteOutput) else "exception"
                to = ladder.demote(cause, first_line(exc))
                if to is None:
                    raise PolicyError(
                        f"tier {name} failed ({first_line(exc)}) and no lower tier is left; "
                        "this step has no chunk"
                    ) from exc
                budget = ladder.budget_s
                spent = self._clock() - started
                expected = self._reports[to].step_s or 0.0
                if budget is not None and spent + expected > budget:
                    raise PolicyError(
                        f"tier {name} failed ({first_line(exc)}); demoted to {to}, but this "
                        f"step was not re-run: {spent * 1e3:.1f} ms spent + "
                        f"{expected * 1e3:.1f} ms expected exceeds the {budget * 1e3:.1f} ms "
                        "budget"
                    ) from exc
                self._counts.reruns += 1

    def _reference_fails_too(self) -> bool:
        """Run eager FP32 (the reference) on the observation still in the static inputs: does
        it fail as well? Then the observation, not the tier, is at fault."""
        try:
            return not all_finite(self._path.execute(self._reference))
        except Exception as exc:  # the reference cannot say: blame the tier, as before
            log.warning("fault attribution: the reference failed (%s)", first_line(exc))
            return False
