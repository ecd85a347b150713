"""Reading and writing the operator's files: snapshots, strategy state, configuration.

Every reader fails with FileError and one line naming the file and the problem: missing, unreadable,
a directory, not UTF-8 text, not JSON / YAML / TOML, nested too deep, a JSON number that is not
finite (``NaN``, ``Infinity``, or too large for a double: JSON has no such numbers), or a top-level
value of the wrong type. What a snapshot or a state holds is checked by their own parsers
(SnapshotError, StateError), which name the field.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import msgspec
import yaml

from pulsar_lb_operator import hints
from pulsar_lb_operator.strategies import (
    ClusterSnapshot,
    SnapshotError,
    StrategyState,
    UserError,
    describe,
    parse_snapshot,
    type_name,
)


class FileError(UserError, ValueError):
    """A file that cannot be read or parsed; the message names the file."""


def _name(path: str | Path) -> str:
    return repr(str(path))


def _read_bytes(path: str | Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        message = f"cannot read {what} {_name(path)}: {exc.strerror or exc}"
        raise FileError(hints.with_fix(message, hints.file_fix(exc, path))) from None


def _read_text(path: str | Path, what: str, data: bytes | None = None) -> str:
    if data is None:
        data = _read_bytes(path, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileError(
            f"{what} {_name(path)} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None


class _NotFinite:
    """A JSON number the decoder would turn into NaN or ±infinity, kept as written to be reported."""

    def __init__(self, text: str) -> None:
        self.text = text


def _float(text: str) -> float | _NotFinite:
    value = float(text)
    return value if math.isfinite(value) else _NotFinite(text)


def _key_path(path: str, key: str) -> str:
    if not key.isidentifier():
        return f"{path}[{describe(key, limit=200)}]"
    return f"{path}.{key}" if path else key


def _first_not_finite(document: Any) -> tuple[str, str] | None:
    """(path, text) of the first NaN / Infinity / overflowing number, walking without recursion."""
    stack: list[tuple[Any, str]] = [(document, "")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, _NotFinite):
            return path or "(top level)", value.text
        if isinstance(value, dict):
            stack.extend(reversed([(v, _key_path(path, k)) for k, v in value.items()]))
        elif isinstance(value, list):
            stack.extend(reversed([(v, f"{path}[{i}]") for i, v in enumerate(value)]))
    return None


def _parse_json(text: str, path: str | Path, what: str) -> Any:
    try:
        document = json.loads(text, parse_constant=_NotFinite, parse_float=_float)
    except RecursionError:
        raise FileError(f"{what} {_name(path)} is not valid JSON: nested too deep") from None
    except json.JSONDecodeError as exc:
        raise FileError(f"{what} {_name(path)} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise FileError(f"{what} {_name(path)} is not valid JSON: {str(exc).splitlines()[0]}") from None
    found = _first_not_finite(document)
    if found is not None:
        where, number = found
        raise FileError(
            f"{what} {_name(path)}: {where}: expected a finite number, got {number} "
            "(JSON has no NaN or Infinity, and a double stops at 1.8e308)"
        )
    return document


def read_json(path: str | Path, what: str) -> Any:
    """Any JSON document, strictly: valid UTF-8, finite numbers only."""
    return _parse_json(_read_text(path, what), path, what)


def read_json_object(path: str | Path, what: str) -> dict[str, Any]:
    """A JSON document whose top level must be an object."""
    document = read_json(path, what)
    if not isinstance(document, dict):
        raise FileError(f"{what} {_name(path)} must hold a JSON object, got {type_name(document)}")
    return document


_JSON = msgspec.json.Decoder()


def _quick_json(data: bytes) -> Any:
    """The document as ``json.loads`` reads it, by msgspec (about twice as fast), or None when msgspec
    refuses it: NaN, Infinity, a number beyond a double, text that is not UTF-8, a lone surrogate, a
    byte-order mark — then ``_parse_json`` reads the text strictly and names the problem."""
    try:
        return _JSON.decode(data)
    except (msgspec.DecodeError, ValueError, RecursionError):  # ValidationError is a DecodeError; bad UTF-8
        return None


def read_snapshot(path: str | Path) -> ClusterSnapshot:
    return snapshot_from_bytes(_read_bytes(path, "snapshot"), path)


def snapshot_from_bytes(data: bytes, path: str | Path) -> ClusterSnapshot:
    """A snapshot file's bytes, read as strictly as any document here (``path`` names it in a message)."""
    document = _quick_json(data)
    if isinstance(document, dict):
        try:
            return parse_snapshot(document)
        except SnapshotError:
            pass  # the strict reading below finds the same problem and names it as it always has
    document = _parse_json(_read_text(path, "snapshot", data), path, "snapshot")
    if not isinstance(document, dict):
        raise FileError(f"snapshot {_name(path)} must hold a JSON object, got {type_name(document)}")
    return parse_snapshot(document)


def check_output_file(path: str | Path, option: str) -> None:
    """FileError, before any work is done, unless ``path`` can be written: its directory must exist (a typo in
    a path must not create directories) and let this user write, and ``path`` must not be a directory."""
    target = Path(path)
    directory = target.parent
    if target.is_dir():
        raise FileError(f"{option} {_name(path)} is a directory: give a file name, e.g. {target / 'snapshot.json'}")
    if not directory.is_dir():
        raise FileError(f"{option} {_name(path)}: the directory {_name(directory)} does not exist: create it first")
    if not os.access(directory, os.W_OK):
        raise FileError(
            f"{option} {_name(path)}: this user (uid {os.getuid()}) may not write in {_name(directory)}: "
            "choose another path"
        )


def write_json_atomically(path: str | Path, document: Any) -> None:
    """Write to a temporary file in the same folder and rename, so a crash never leaves half a file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=1, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_state(path: str | Path) -> StrategyState:
    """The strategy state file, or a fresh state when there is no file at all.

    Anything else that is not a readable state (a dangling link, no permission, bad content) is an
    error, never a fresh start: that would silently forget hit counters and grace periods.
    """
    try:
        os.lstat(path)
    except FileNotFoundError:
        return StrategyState()
    except OSError:
        pass  # reading it says what is wrong
    return StrategyState.from_json(read_json_object(path, "state file"))


def write_state(path: str | Path, state: StrategyState) -> None:
    write_json_atomically(path, state.to_json())


def _config_problem(exc: Exception) -> str:
    problem, mark = getattr(exc, "problem", None), getattr(exc, "problem_mark", None)
    if problem and mark is not None:  # YAML: say where, not the multi-line excerpt
        return f"{problem} at line {mark.line + 1}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A YAML, TOML or JSON mapping of settings (Pulsar key names)."""
    text = _read_text(path, "config file")
    suffix = Path(path).suffix
    if suffix == ".json":
        data = _parse_json(text, path, "config file")
    else:
        try:
            data = tomllib.loads(text) if suffix == ".toml" else yaml.safe_load(text)
        except RecursionError:
            raise FileError(f"config file {_name(path)} cannot be parsed: nested too deep") from None
        except (yaml.YAMLError, ValueError) as exc:  # TOMLDecodeError is a ValueError, as is a bad YAML date
            raise FileError(f"config file {_name(path)} cannot be parsed: {_config_problem(exc)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise FileError(f"config file {_name(path)} must hold a mapping of settings, got {type_name(data)}")
    for key in data:
        if not isinstance(key, str):
            raise FileError(f"config file {_name(path)}: setting names must be strings, got {describe(key)}")
    return data
