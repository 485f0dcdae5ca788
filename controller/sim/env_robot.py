"""`tempo sim-robot --env NAME`: a simulated environment as a robot of the running daemon, for
seeded episodes one after another, each reported as it ends (a line, or JSON with
--json-lines). `tempo eval` runs the same episodes and summarises them (eval_summary).

Needs the `sim` extra (the environment packages), not the serve extra: the driver talks to the
daemon through the public client only.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TextIO

from controller.errors import ConfigError
from controller.sim.env_driver import connect_env_client
from controller.sim.envs.catalog import layout_of, make_env
from controller.sim.episode_loop import EpisodeResult, run_episode
from controller.sim.eval_plot import check_plot_installed, write_eval_plot
from controller.sim.eval_summary import eval_summary, eval_table
from controller.sim.first_answers import FirstAnswers
from controller.sim.rollout_video import RolloutVideo, check_video_installed


def run_env_episodes(
    endpoint: str,
    env_name: str,
    clock: str,
    seeds: Sequence[int],
    max_steps: int | None = None,
    policy: str | None = None,
    on_episode: Callable[[EpisodeResult], None] | None = None,
    video_dir: Path | None = None,
    video_seeds: Collection[int] = (),
    on_start: Callable[[int, int], None] | None = None,
) -> list[EpisodeResult]:
    """One episode per seed of environment `env_name` through the daemon at `endpoint` (its
    policy `policy`, default the daemon's). Raises ConfigError for an unknown environment, a
    missing package or a clock the daemon's rate does not allow, SpecMismatchError when the
    served policy does not fit the environment (each one sentence). The episodes of
    `video_seeds` are written to `video_dir` as ENV-seedN.mp4. `on_start(k, seed)`: episode
    k (from 1) begins; `on_episode(result)`: it ended."""
    layout = layout_of(env_name)  # an unknown name before anything is imported or connected
    if max_steps is not None and max_steps < 1:
        raise ConfigError(f"--max-steps must be at least 1, not {max_steps}")
    if video_seeds:
        check_video_installed()
    env = make_env(layout)
    try:
        answers = FirstAnswers()
        client = connect_env_client(
            endpoint, layout, policy=policy, clock=clock, on_command=answers.on_command
        )
        try:
            results = []
            for number, seed in enumerate(seeds, 1):
                if on_start is not None:
                    on_start(number, seed)
                video = None
                if seed in video_seeds and video_dir is not None:
                    video = RolloutVideo(video_dir / f"{env_name}-seed{seed}.mp4", layout.fps)
                try:
                    result = run_episode(
                        client,
                        env,
                        seed,
                        clock,
                        max_steps=max_steps,
                        on_step=None if video is None else lambda *_, v=video: v.add(env.render()),
                        answers=answers if clock == "lockstep" else None,
                    )
                finally:
                    if video is not None:
                        video.close()
                if on_episode is not None:
                    on_episode(result)
                results.append(result)
            return results
        finally:
            client.close()
    finally:
        env.close()


def episode_line(env_name: str, result: EpisodeResult) -> str:
    """One episode as a line a person reads."""
    outcome = "success" if result.success else "no success"
    return (
        f"{env_name} seed {result.seed} ({result.clock}): {outcome}, return "
        f"{result.episode_return:.2f} over {result.length} steps, {result.holds} held, "
        f"{result.missed_ticks} missed ticks, latency p50 {result.latency_ms_p50:.1f} ms, "
        f"{result.wall_s:.1f} s"
    )


def main_env_robot(
    endpoint: str,
    env_name: str,
    clock: str,
    seeds: Sequence[int],
    max_steps: int | None,
    json_lines: bool,
    policy: str | None = None,
    out: TextIO | None = None,
) -> int:
    stream = out or sys.stdout  # looked up now: sys.stdout may have been replaced since import

    def report(result: EpisodeResult) -> None:
        if json_lines:
            print(json.dumps({"env": env_name, **result.as_dict()}), file=stream, flush=True)
        else:
            print(episode_line(env_name, result), file=stream, flush=True)

    run_env_episodes(endpoint, env_name, clock, seeds, max_steps, policy, report)
    return 0


def main_eval(
    endpoint: str,
    env_name: str,
    clock: str,
    seeds: Sequence[int],
    max_steps: int | None,
    json_out: str | None,
    policy: str | None = None,
    out: TextIO | None = None,
    video_dir: Path | None = None,
    video_seeds: Collection[int] = (),
    plot: Path | None = None,
) -> int:
    """`tempo eval`: the episodes, then the table; the JSON summary to `json_out` ("-": in
    place of the table, on stdout); rollout videos of `video_seeds` into `video_dir`; the
    figure of the episodes to `plot`."""
    if plot is not None:
        check_plot_installed()  # before the episodes, not after them
    stream = out or sys.stdout
    progress = sys.stderr if json_out == "-" else stream
    done = [0]

    def start(number: int, seed: int) -> None:  # an episode can take tens of seconds
        print(f"episode {number} of {len(seeds)} (seed {seed}) running", file=progress, flush=True)

    def report(result: EpisodeResult) -> None:
        done[0] += 1
        line = episode_line(env_name, result)
        print(f"episode {done[0]} of {len(seeds)}: {line}", file=progress, flush=True)

    results = run_env_episodes(
        endpoint, env_name, clock, seeds, max_steps, policy, report, video_dir, video_seeds, start
    )
    summary = eval_summary(env_name, clock, [r.as_dict() for r in results])
    if plot is not None:
        write_eval_plot(summary, plot)
    if json_out == "-":
        print(json.dumps(summary, indent=2), file=stream)
        return 0
    print(eval_table(summary), file=stream)
    if json_out is not None:
        with open(json_out, "w", encoding="utf-8") as file:
            json.dump(summary, file, indent=2)
            file.write("\n")
    return 0
