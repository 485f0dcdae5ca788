"""How a checkpoint's chunks are meant to be executed, in Tempo's terms.

LeRobot's ACT records two execution settings in its config.json:

    n_action_steps            actions executed from each chunk before the next inference
                              (LeRobot's action queue: infer, play n actions, infer again)
    temporal_ensemble_coeff   when set, infer every step and average every chunk's prediction
                              for the step with weights exp(-coeff * i), i = 0 the oldest
                              (LeRobot then requires n_action_steps == 1)

In Tempo's terms the first is `query_period = n_action_steps` playing the newest chunk, the
second `query_period = 1`, temporal ensembling with `temporal_k = coeff`. Tempo's own format
records the result in its spec (`spec.execution`); a Tempo checkpoint written before that field
existed carries the LeRobot values in its model config, and gets the same translation.
"""

from __future__ import annotations

from policies.base import Execution


def lerobot_execution(
    n_action_steps: int | None, temporal_ensemble_coeff: float | None, source: str
) -> Execution | None:
    """LeRobot's execution settings as Tempo's; None when neither is known."""
    settings = f"n_action_steps={n_action_steps}, temporal_ensemble_coeff={temporal_ensemble_coeff}"
    if temporal_ensemble_coeff is not None:
        return Execution(
            query_period=1,
            ensemble="temporal",
            temporal_k=float(temporal_ensemble_coeff),
            source=f"{source}: {settings}",
        )
    if n_action_steps is None:
        return None
    return Execution(query_period=n_action_steps, ensemble="newest", source=f"{source}: {settings}")


def describe(execution: Execution | None) -> str:
    """One line for `tempo checkpoint inspect`."""
    if execution is None:
        return "execution: not recorded; the daemon's inference config (or its defaults) decides"
    if execution.ensemble == "temporal":
        how = f"temporal ensembling k={execution.temporal_k:g}"
    else:
        how = "play the newest chunk"
    where = f" (from {execution.source})" if execution.source else ""
    return (
        f"execution: query every {execution.query_period} step(s), {how}{where}; "
        "inference.* set in the config overrides it"
    )
