"""Progress lines of the long commands: on stderr with the command's name, and paced."""

from __future__ import annotations

from controller.inference.progress import PacedProgress, to_stderr


def test_progress_goes_to_stderr_named_by_its_command(capsys) -> None:
    to_stderr("export-lerobot")("reading a.mcap (1 of 2)")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "tempo export-lerobot: reading a.mcap (1 of 2)\n"


def test_paced_progress_passes_the_first_line_one_an_interval_and_those_said_always() -> None:
    now = [0.0]
    said: list[str] = []
    paced = PacedProgress(said.append, every_s=5.0, clock=lambda: now[0])
    for step in range(1, 13):  # one step a second
        paced(f"step {step}", step == 12)
        now[0] += 1.0
    # 1 at 0 s, 6 at 5 s, 11 at 10 s; 12 at 11 s because it is said always.
    assert said == ["step 1", "step 6", "step 11", "step 12"]
