"""`tempo profile compare`'s verdict line: the headline figure and its interval read the same
way (controller.tools.compare.verdict)."""

from __future__ import annotations

import re

import pytest

from controller.tools.compare import verdict


def _figures(text: str) -> tuple[float, float, float]:
    """The headline "by N.Nx" and the interval's two ends, from a verdict line."""
    by = re.search(r"by ([0-9.]+)x", text)
    ci = re.search(r"CI ([0-9.]+)x-([0-9.]+)x", text)
    assert by and ci, text
    return float(by.group(1)), float(ci.group(1)), float(ci.group(2))


@pytest.mark.parametrize(
    ("ratio", "ci", "faster"),
    [
        (0.432, (0.370, 0.496), "A"),  # the case: B slower by 2.3x
        (2.5, (2.2, 2.8), "B"),
    ],
)
def test_the_headline_lies_inside_its_own_interval(
    ratio: float, ci: tuple[float, float], faster: str
) -> None:
    text, who = verdict(ratio, ci, 0.02, 0.95)
    assert who == faster
    headline, low, high = _figures(text)
    assert low <= headline <= high, text
    assert low > 1.0  # both said as "how many times", above 1


def test_slower_names_the_direction_of_its_ratio() -> None:
    text, _ = verdict(0.432, (0.370, 0.496), 0.02, 0.95)
    assert "slower by 2.3x" in text and "2.016x-2.703x" in text and "B/A" in text
