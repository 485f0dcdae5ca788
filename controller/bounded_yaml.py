"""YAML read from people (a config, a `--set` value, TD-MPC2's official config), in bounded
time and memory: the one YAML loader of controller/ and policies/.

    value = load_yaml(text, "tempo.yaml", ConfigError)

Anchors and aliases (`&name`, `*name`, `<<: *name`) are refused with one sentence: an alias is
a reference, so 300 bytes of aliases to aliases stand for billions of values, which every walk
of the loaded tree (the depth check, pydantic's validation) would visit. Nesting deeper than
bounded_file.MAX_DEPTH and more than MAX_VALUES values are refused too (building and validating
200,000 values took 4 s; refused, 0.16 s: a config answers within a second whatever it holds).
All three are checked on the parser's event stream, which libyaml produces without recursion
and without building anything, before a value is built; libyaml's own builder then recurses
at most MAX_DEPTH deep (unchecked, it overflows the C stack on 200,000 `- `).
"""

from __future__ import annotations

from typing import Any

import yaml

from controller.bounded_file import MAX_DEPTH
from controller.errors import TempoError

# libyaml (C) where PyYAML has it: several times faster than the Python parser on a large file.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# Values (scalars, lists, mappings) in one document; Tempo's configs hold a few hundred.
MAX_VALUES = 20_000
_VALUES = (yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent)
_OPENS = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_CLOSES = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


def load_yaml(text: str, source: str, error: type[TempoError]) -> Any:
    """The value of the YAML document `text` (from `source`, named in messages), else `error`
    with one sentence: not valid YAML, anchors or aliases, or nested too deep."""
    try:
        _check_events(text, source, error)
        return yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader (SafeLoader's)
    except yaml.YAMLError as exc:
        said = " ".join(str(exc).split())
        raise error(f"{source}: not valid YAML ({said})") from None


def _check_events(text: str, source: str, error: type[TempoError]) -> None:
    depth = values = 0
    for event in yaml.parse(text, Loader=_LOADER):
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            kind = "alias *" if isinstance(event, yaml.AliasEvent) else "anchor &"
            line = event.start_mark.line + 1 if event.start_mark is not None else "?"
            raise error(
                f"{source}: line {line} has the YAML {kind}{anchor}, and Tempo reads no anchors "
                "or aliases (a few bytes of them stand for billions of values); write the "
                "value out in full"
            )
        if isinstance(event, _VALUES):
            values += 1
            if values > MAX_VALUES:
                raise error(
                    f"{source} holds more than {MAX_VALUES:,} values; no Tempo file needs so many"
                )
        if isinstance(event, _OPENS):
            depth += 1
            if depth > MAX_DEPTH:
                raise error(f"{source} nests more than {MAX_DEPTH} levels deep; no Tempo file does")
        elif isinstance(event, _CLOSES):
            depth -= 1
