"""Files Tempo reads from people, read with limits: one mechanism for the YAML config, a
checkpoint's JSON files, a safetensors header, a recording, a build manifest.

    text = read_text(path, MAX_CONFIG_BYTES, ConfigError, "config file")
    value = parse_nested(json.loads, text, path, CheckpointError)

A file that is not a regular file (`/dev/zero`, a FIFO, a directory), larger than its limit,
not UTF-8, or nested deeper than MAX_DEPTH is refused with one sentence (the caller's
TempoError class) before anything is parsed or allocated to its size; reading never blocks on
a FIFO and never reads past the limit.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from controller.errors import TempoError

MAX_CONFIG_BYTES = 1024 * 1024  # the YAML config (and the config an inference process reads)
MAX_JSON_BYTES = 4 * 1024 * 1024  # a checkpoint's config.json, processor and dataset JSON files
MAX_DEPTH = 64  # nesting of a config or JSON file; real ones stay under 10
_READ_CHUNK = 1 << 16
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a pipe"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def regular_fd(path: Path, error: type[TempoError], what: str, follow_links: bool = True) -> int:
    """A descriptor of the regular file `path` (non-blocking: a FIFO is refused, not waited
    on), else `error` with one sentence; the check is made on the open descriptor, on which a
    caller may check more (its owner: controller.inference.artefact_files). With
    `follow_links` off, a symbolic link at `path` is refused, not followed."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_links:
            raise error(f"{what} {path} is a symbolic link, which Tempo does not follow") from None
        raise error(f"cannot read {what} {path}: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        raise error(f"cannot read {what} {path}: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise error(f"cannot read {what} {path}: it is {_kind(mode)}, not a regular file")
    return fd


def read_fd(fd: int, limit: int, error: type[TempoError], what: str, path: Path) -> bytes:
    """All of the open regular file `fd` (from its start; `path` names it in messages), else
    `error` with one sentence if it has more than `limit` bytes."""
    try:
        data = _read_at_most(fd, limit + 1, offset=0)
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror}") from None
    if len(data) > limit:
        raise error(f"{what} {path} is larger than {_size(limit)}, the most Tempo reads for it")
    return data


def read_bytes(
    path: Path,
    limit: int,
    error: type[TempoError],
    what: str,
    offset: int = 0,
    whole: bool = True,
) -> bytes:
    """Up to `limit` bytes of the regular file `path` from `offset` (fewer when the file ends
    first); `error` with one sentence if it is not a regular file or, when `whole`, has more
    than `limit` bytes there (else the rest is not read)."""
    fd = regular_fd(path, error, what)
    try:
        os.lseek(fd, offset, os.SEEK_SET)
        data = _read_at_most(fd, limit + 1 if whole else limit)
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise error(f"{what} {path} is larger than {_size(limit)}, the most Tempo reads for it")
    return data


def open_regular(path: Path, error: type[TempoError], what: str) -> BinaryIO:
    """The regular file `path` opened for reading (a stream, for files read in parts: a
    recording), else `error` with one sentence; a FIFO is refused, not waited on."""
    fd = regular_fd(path, error, what)
    try:
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_text(path: Path, limit: int, error: type[TempoError], what: str) -> str:
    """The regular file `path` as UTF-8 text of at most `limit` bytes, else `error`."""
    return decode(read_bytes(path, limit, error, what), path, error, what)


def read_stream_text(stream: BinaryIO, limit: int, error: type[TempoError], what: str) -> str:
    """A stream (an inherited stdin) as UTF-8 text of at most `limit` bytes, else `error`."""
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise error(f"{what} is larger than {_size(limit)}")
    return decode(data, what, error, what)


def decode(data: bytes, path: Path | str, error: type[TempoError], what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(
            f"{path} is not UTF-8 text (byte {exc.start} is {data[exc.start]:#04x}); {what} "
            "must be UTF-8 text"
        ) from None


def parse_nested(
    parse: Callable[[str], Any], text: str, path: Path | str, error: type[TempoError]
) -> Any:
    """`parse(text)` (json.loads, yaml.safe_load), refused with `error` when the document
    nests deeper than MAX_DEPTH (a parser's own recursion limit included)."""
    if _bracket_depth(text) > MAX_DEPTH:
        raise error(f"{path} nests more than {MAX_DEPTH} levels deep; no Tempo file does")
    try:
        value = parse(text)
    except RecursionError:
        raise error(f"{path} nests more than {MAX_DEPTH} levels deep; no Tempo file does") from None
    if _depth(value) > MAX_DEPTH:
        raise error(f"{path} nests more than {MAX_DEPTH} levels deep; no Tempo file does")
    return value


def _bracket_depth(text: str) -> int:
    """The deepest run of opening brackets, a cheap bound taken before parsing: a document of
    200,000 `[` is refused without the parser recursing into it. Brackets inside strings count
    too, so the bound is loose (MAX_DEPTH is far above any real file's depth)."""
    depth = deepest = 0
    for char in _NOT_BRACKETS.sub("", text):
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_DEPTH:
                return deepest
        elif char in "]}":
            depth = max(0, depth - 1)
    return deepest


def _depth(value: Any) -> int:
    """The nesting depth of parsed lists and mappings, without recursion."""
    deepest = 0
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, level = pending.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if deepest > MAX_DEPTH:
            return deepest
        pending.extend((child, level + 1) for child in children)
    return deepest


def _read_at_most(fd: int, count: int, offset: int | None = None) -> bytes:
    """Up to `count` bytes of `fd`, from its position or (pread) from `offset`."""
    parts: list[bytes] = []
    left = count
    while left > 0:
        size = min(left, _READ_CHUNK)
        part = os.read(fd, size) if offset is None else os.pread(fd, size, offset + count - left)
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def _size(limit: int) -> str:
    return f"{limit // (1024 * 1024)} MiB" if limit >= 1024 * 1024 else f"{limit} bytes"
