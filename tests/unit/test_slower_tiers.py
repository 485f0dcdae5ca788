"""A tier that measured clearly slower at start-up than a tier below it is not served: on a CPU,
inductor's code for a large model can take 827 ms a step where eager FP32 takes 304 ms."""

from __future__ import annotations

from controller.inference.tier_checks import SLOWER_FACTOR, without_slower_tiers
from controller.inference.tier_report import TierReport


def _reports(**step_ms: float | None) -> dict[str, TierReport]:
    return {
        name: TierReport(name, "fp32", "ready", step_s=None if ms is None else ms / 1e3)
        for name, ms in step_ms.items()
    }


def test_a_compiled_tier_slower_than_eager_is_skipped_with_both_times() -> None:
    reports = _reports(compiled=827.0, eager_fp32=304.0)
    said: list[str] = []
    assert without_slower_tiers(["compiled", "eager_fp32"], reports, said.append) == ["eager_fp32"]
    assert reports["compiled"].state == "skipped"
    assert (
        "827.0 ms" in reports["compiled"].reason
        and "eager_fp32's 304.0 ms" in reports["compiled"].reason
    )
    assert said == [f"compiled: not served: {reports['compiled'].reason}"]


def test_a_tier_is_compared_with_the_fastest_below_it_not_only_the_next() -> None:
    reports = _reports(graph=5.0, compiled=9.0, eager_half=30.0, eager_fp32=4.0)
    kept = without_slower_tiers(list(reports), reports, lambda _: None)
    assert kept == ["graph", "eager_fp32"]  # 9 and 30 ms lose to eager's 4 ms; graph's 5 does not
    assert reports["graph"].state == "ready"


def test_noise_within_the_factor_keeps_the_higher_tier() -> None:
    reports = _reports(compiled=10.0 * SLOWER_FACTOR * 0.99, eager_fp32=10.0)
    assert without_slower_tiers(["compiled", "eager_fp32"], reports, lambda _: None) == [
        "compiled",
        "eager_fp32",
    ]


def test_a_loss_a_control_period_would_not_notice_keeps_the_higher_tier() -> None:
    reports = _reports(compiled=0.2, eager_fp32=0.1)  # 2x, but 0.1 ms: start-up noise
    assert without_slower_tiers(["compiled", "eager_fp32"], reports, lambda _: None) == [
        "compiled",
        "eager_fp32",
    ]


def test_a_tier_without_a_step_time_is_kept() -> None:
    reports = _reports(compiled=None, eager_fp32=1.0)
    assert without_slower_tiers(["compiled", "eager_fp32"], reports, lambda _: None) == [
        "compiled",
        "eager_fp32",
    ]
