"""Reading and writing the operator's files: snapshots, strategy state, configuration."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import tomllib
import yaml

from strategies.snapshots import ClusterSnapshot, parse_snapshot
from strategies.state import StrategyState


class FileError(ValueError):
    """A file that cannot be read or parsed; the message names the file."""


def read_json(path: str | Path, what: str) -> Any:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise FileError(f"cannot read {what} {str(path)!r}: {exc.strerror or exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FileError(f"{what} {str(path)!r} is not valid JSON: {exc.msg} at line {exc.lineno}") from None


def read_snapshot(path: str | Path) -> ClusterSnapshot:
    return parse_snapshot(read_json(path, "snapshot"))


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
    """The strategy state file, or a fresh state when it does not exist yet."""
    if not Path(path).exists():
        return StrategyState()
    return StrategyState.from_json(read_json(path, "state file"))


def write_state(path: str | Path, state: StrategyState) -> None:
    write_json_atomically(path, state.to_json())


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A YAML, TOML or JSON mapping of settings (Pulsar key names)."""
    target = Path(path)
    try:
        text = target.read_text(encoding="utf-8")
    except OSError as exc:
        raise FileError(f"cannot read config file {str(path)!r}: {exc.strerror or exc}") from None
    try:
        if target.suffix == ".toml":
            data = tomllib.loads(text)
        elif target.suffix == ".json":
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, yaml.YAMLError) as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise FileError(f"config file {str(path)!r} cannot be parsed: {first_line}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise FileError(f"config file {str(path)!r} must hold a mapping of settings")
    return data
