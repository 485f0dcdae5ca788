"""The execution settings in effect for a policy once it is loaded: the `execution:` section's
explicit fields, else what the policy's checkpoint records (`PolicySpec.execution`), else the
defaults. The daemon (and the tools that serve as it does) resolve them once the spec is known.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller.config_sections import ExecutionConfig
from controller.errors import ConfigError
from policies.base import Execution, PolicySpec
from policies.flow.settings import RTCConfig

# Where each execution setting in effect came from (resolve_execution).
FROM_CONFIG = "config"
FROM_DEFAULT = "default"
# The execution fields a checkpoint may record (policies.base.Execution).
EXECUTION_FIELDS = ("query_period", "ensemble", "temporal_k")


def resolve_execution(
    execution: ExecutionConfig, spec: PolicySpec, rtc: RTCConfig | None = None
) -> tuple[ExecutionConfig, str]:
    """The execution settings in effect for a policy: each field the config sets explicitly,
    else what the policy's checkpoint records (`spec.execution`), else the field's default.
    Returns them with one line saying what is in effect and where each part came from (and
    that real-time chunking is on, with its settings, when `rtc` turns it on)."""
    hint = spec.execution
    explicit = execution.model_fields_set
    # The fields a checkpoint cannot record (batching, admission) pass through as set.
    values: dict[str, Any] = {
        name: getattr(execution, name) for name in explicit - set(EXECUTION_FIELDS)
    }
    origins: dict[str, str] = {}
    for name in EXECUTION_FIELDS:
        hinted = getattr(hint, name) if hint is not None else None
        if name in explicit:
            values[name], origins[name] = getattr(execution, name), FROM_CONFIG
        elif hinted is not None:
            values[name], origins[name] = hinted, "checkpoint"
        else:
            values[name], origins[name] = getattr(execution, name), FROM_DEFAULT
    resolved = ExecutionConfig.model_validate(values)
    if resolved.query_period > spec.chunk_size:
        raise ConfigError(
            f"execution.query_period {resolved.query_period} ({origins['query_period']}) exceeds "
            f"the policy's chunk_size {spec.chunk_size}: steps between chunks would have no "
            "action; set execution.query_period to at most the chunk size"
        )
    return resolved, describe_execution(resolved, origins, hint, rtc)


def describe_execution(
    execution: ExecutionConfig,
    origins: Mapping[str, str],
    hint: Execution | None,
    rtc: RTCConfig | None = None,
) -> str:
    """One line: 'query every 100 steps, play the newest chunk (query_period from the
    checkpoint (LeRobot config.json: ...), ensemble from the checkpoint)'."""
    if execution.ensemble == "temporal":
        how = f"temporal ensembling k={execution.temporal_k:g}"
    elif rtc is not None and rtc.mode != "off":
        beta = "default" if rtc.beta is None else f"{rtc.beta:g}"  # default: the family's
        how = (
            f"real-time chunking (policy.rtc: mode {rtc.mode}, beta {beta}, schedule "
            f"{rtc.schedule}; the old chunk plays until the new one, guided to agree with it, "
            "lands)"
        )
    else:
        how = "play the newest chunk"
    parts = [f"{name} from {origins[name]}" for name in ("query_period", "ensemble")]
    if execution.ensemble == "temporal":
        parts.append(f"temporal_k from {origins['temporal_k']}")
    where = ", ".join(parts)
    if hint is not None and hint.source and "checkpoint" in origins.values():
        where += f"; checkpoint: {hint.source}"
    return f"query every {execution.query_period} step(s), {how} ({where})"
