"""tempo eval's figures: the Wilson score interval against values worked by hand, the summary's
means and counts, and the table's summary line."""

from __future__ import annotations

import pytest

from controller.sim.eval_summary import eval_summary, eval_table, wilson_interval


@pytest.mark.parametrize(
    ("successes", "trials", "low", "high"),
    [
        (0, 10, 0.0, 0.27753),  # not empty at 0 successes, as the normal approximation is
        (5, 10, 0.23659, 0.76341),
        (10, 10, 0.72247, 1.0),
        (48, 50, 0.86539, 0.98896),
    ],
)
def test_wilson_interval_matches_worked_values(successes, trials, low, high):
    got = wilson_interval(successes, trials)
    assert got == pytest.approx((low, high), abs=1e-5)


@pytest.mark.parametrize(("successes", "trials"), [(1, 0), (-1, 5), (6, 5)])
def test_wilson_interval_refuses_what_is_not_a_proportion(successes, trials):
    with pytest.raises(ValueError, match="is not a proportion"):
        wilson_interval(successes, trials)


def _episode(seed, success, ret, length, p50=12.5):
    return {
        "seed": seed,
        "success": success,
        "return": ret,
        "length": length,
        "holds": 1,
        "missed_ticks": 2,
        "latency_ms_p50": p50,
        "latency_ms_p99": None,
    }


def test_summary_and_table():
    episodes = [_episode(0, True, 3.0, 100), _episode(1, False, 1.0, 300, p50=None)]
    summary = eval_summary("pusht", "lockstep", episodes)
    assert summary["successes"] == 1 and summary["success_rate"] == 0.5
    assert summary["return_mean"] == 2.0 and summary["length_mean"] == 200.0
    assert summary["missed_ticks"] == 4 and summary["holds"] == 2
    assert summary["success_interval_95"] == pytest.approx(list(wilson_interval(1, 2)))
    table = eval_table(summary).splitlines()
    assert table[0].split() == [
        "seed",
        "success",
        "return",
        "length",
        "holds",
        "missed",
        "p50",
        "ms",
        "p99",
        "ms",
    ]
    assert table[1].split() == ["0", "yes", "3.00", "100", "1", "2", "12.5", "-"]
    assert table[2].split()[:2] == ["1", "no"] and table[2].split()[-2:] == ["-", "-"]
    assert table[3].startswith("pusht (lockstep): success 1/2 = 50% (95% Wilson interval 9% to")
