"""Every file reader fails with one FileError line naming the file and the problem, never a traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pulsar_lb_operator import cli
from pulsar_lb_operator.store import files
from pulsar_lb_operator.strategies import StateError, StrategyState
from tests.builders import broker_report, snapshot_doc

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "unbalanced-after-restart.json"
NOT_UTF8 = b'{"format": "pulsar-lb-snapshot/1", "cluster": "caf\xe9"}'


def _read_snapshot(path: Path) -> object:
    return files.read_snapshot(path)


def _read_state(path: Path) -> object:
    return files.read_state(path)


def _read_json(path: Path) -> object:
    return files.read_json(path, "snapshot")


def _read_config(path: Path) -> object:
    return files.read_config_file(path)


READERS = [_read_snapshot, _read_state, _read_json, _read_config]


def _fails(read, path: Path, *problems: str) -> str:
    with pytest.raises(files.FileError) as raised:
        read(path)
    message = str(raised.value)
    assert "\n" not in message and str(path) in message, message
    for problem in problems:
        assert problem in message, message
    return message


@pytest.mark.parametrize("read", READERS)
def test_missing_file(tmp_path, read):
    if read is _read_state:
        assert files.read_state(tmp_path / "missing.json") == StrategyState()  # no file yet: a first run
    else:
        _fails(read, tmp_path / "missing.json", "cannot read", "No such file")


@pytest.mark.parametrize("read", READERS)
def test_a_directory(tmp_path, read):
    folder = tmp_path / "state.json"
    folder.mkdir()
    _fails(read, folder, "cannot read", "Is a directory")


@pytest.mark.parametrize("read", READERS)
def test_unreadable(tmp_path, read, monkeypatch):
    target = tmp_path / "locked.json"
    target.write_text("{}")
    real_read_bytes = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        if self == target:
            raise PermissionError(13, "Permission denied", str(self))
        return real_read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    _fails(read, target, "cannot read", "Permission denied")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_for_real(tmp_path):
    target = tmp_path / "locked.json"
    target.write_text("{}")
    target.chmod(0)
    for read in READERS:
        _fails(read, target, "Permission denied")


def test_a_state_file_behind_a_dangling_link_is_an_error_not_a_fresh_state(tmp_path):
    link = tmp_path / "state.json"
    link.symlink_to(tmp_path / "gone.json")
    _fails(_read_state, link, "cannot read", "No such file")


@pytest.mark.parametrize("read", READERS)
def test_not_utf8(tmp_path, read):
    path = tmp_path / "latin1.json"
    path.write_bytes(NOT_UTF8)
    _fails(read, path, "is not UTF-8 text (byte 0xe9 at offset 50)")


@pytest.mark.parametrize("read", [_read_snapshot, _read_state, _read_json])
@pytest.mark.parametrize(
    "text, problem",
    [
        ("{not json", "is not valid JSON: Expecting property name enclosed in double quotes at line 1"),
        ("", "is not valid JSON: Expecting value at line 1"),
        ("[" * 100_000, "is not valid JSON: nested too deep"),
        ('{"a": ' * 100_000, "is not valid JSON: nested too deep"),
        ("9" * 5000, "is not valid JSON: Exceeds the limit (4300 digits)"),
    ],
)
def test_not_json(tmp_path, read, text, problem):
    path = tmp_path / "bad.json"
    path.write_text(text)
    _fails(read, path, problem)


@pytest.mark.parametrize("read", [_read_snapshot, _read_state, _read_json, _read_config])
@pytest.mark.parametrize(
    "text, where, number",
    [
        ('{"a": NaN}', "a", "NaN"),
        ('{"a": {"b-c": [1, Infinity]}}', "a['b-c'][1]", "Infinity"),
        ('{"x": -Infinity}', "x", "-Infinity"),
        ('{"x": [1e400]}', "x[0]", "1e400"),
    ],
)
def test_json_has_no_nan_or_infinity(tmp_path, read, text, where, number):
    path = tmp_path / "bad.json"
    path.write_text(text)
    _fails(read, path, f": {where}: expected a finite number, got {number} (JSON has no NaN or Infinity")


@pytest.mark.parametrize("read", [_read_snapshot, _read_state])
@pytest.mark.parametrize("text, kind", [("[]", "list"), ("null", "null"), ("3", "number"), ('"x"', "string")])
def test_snapshot_and_state_must_be_json_objects(tmp_path, read, text, kind):
    path = tmp_path / "top.json"
    path.write_text(text)
    _fails(read, path, f"must hold a JSON object, got {kind}")


def test_read_json_itself_takes_any_top_level_value(tmp_path):
    path = tmp_path / "list.json"
    path.write_text("[1, 2.5, null]")
    assert files.read_json(path, "cursor") == [1, 2.5, None]


@pytest.mark.parametrize(
    "name, text, problem",
    [
        ("lb.yaml", "a: [1, 2\n", "cannot be parsed: expected ',' or ']', but got '<stream end>' at line 2"),
        ("lb.yaml", "a: 2024-13-45\n", "cannot be parsed: month must be in 1..12"),
        ("lb.yaml", "[" * 100_000, "cannot be parsed: nested too deep"),
        ("lb.yaml", "- a\n- b\n", "must hold a mapping of settings, got list"),
        ("lb.yaml", "1: x\n", "setting names must be strings, got 1"),
        ("lb.toml", "a = \n", "cannot be parsed: Invalid value (at line 1, column 5)"),
        ("lb.toml", "a = " + "[" * 100_000, "cannot be parsed: nested too deep"),
        ("lb.json", "[1]", "must hold a mapping of settings, got list"),
        ("lb.json", '{"a": 1,}', "is not valid JSON: Expecting property name enclosed in double quotes at line 1"),
    ],
)
def test_bad_config_files(tmp_path, name, text, problem):
    path = tmp_path / name
    path.write_text(text)
    _fails(_read_config, path, problem)


def test_good_files_still_read(tmp_path):
    snap = files.read_snapshot(EXAMPLE)
    assert len(snap.brokers) > 1
    state = tmp_path / "state.json"
    files.write_state(state, StrategyState(threshold_ema={"a:1": 0.5}))
    assert files.read_state(state).threshold_ema == {"a:1": 0.5}
    empty = tmp_path / "lb.yaml"
    empty.write_text("")
    assert files.read_config_file(empty) == {}


def test_bad_state_content_is_a_state_error_never_a_fresh_state(tmp_path):
    path = tmp_path / "state.json"
    for document, problem in [
        ({}, "not a pulsar-lb-state/1 document"),
        ({"format": "pulsar-lb-state/1", "avgHitsHigh": []}, "state.avgHitsHigh: expected an object, got list"),
        (
            {"format": "pulsar-lb-state/1", "bundleData": {"b": {"short": [1], "long": [0, 1, 1, 1, 1]}}},
            "state.bundleData['b'].short: expected a list of 5 items, got 1",
        ),
    ]:
        path.write_text(json.dumps(document))
        with pytest.raises(StateError, match=problem.replace("[", r"\[")):
            files.read_state(path)


# ------------------------------------------------------------------------------------ through the CLI


def _rebalance(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(["rebalance", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_error_line(code: int, out: str, err: str, *problems: str) -> None:
    assert code == 2 and out == ""
    assert err.startswith("operator: error:") and err.count("\n") == 1 and "Traceback" not in err, err
    for problem in problems:
        assert problem in err, err


def test_cli_non_utf8_snapshot_is_one_line_and_exit_2(tmp_path, capsys):
    path = tmp_path / "snapshot.json"
    path.write_bytes(NOT_UTF8)
    code, out, err = _rebalance(capsys, "--snapshot", str(path))
    _one_error_line(code, out, err, str(path), "not UTF-8 text")


@pytest.mark.parametrize("option", ["--config", "--state"])
@pytest.mark.parametrize(
    "content, problem",
    [(NOT_UTF8, "not UTF-8 text"), (b"[]", "must hold"), (b'{"a": NaN}', "expected a finite number, got NaN")],
)
def test_cli_bad_config_and_state_files_are_one_line_and_exit_2(tmp_path, capsys, option, content, problem):
    path = tmp_path / "file.json"
    path.write_bytes(content)
    code, out, err = _rebalance(capsys, "--snapshot", str(EXAMPLE), option, str(path))
    _one_error_line(code, out, err, str(path), problem)


@pytest.mark.parametrize(
    "text, problem",
    [
        ("[]", "must hold a JSON object, got list"),
        ("[" * 100_000, "nested too deep"),
        (
            json.dumps(snapshot_doc({"a:1": broker_report(cpu=(1e16, 100))})),
            "cpu.usage: 1e+16 is above the bound 1e+15",
        ),
        (json.dumps(snapshot_doc({"a:1": broker_report(cpu=(1.0, 100))})).replace("1.0", "1e999"), "got 1e999"),
    ],
)
def test_cli_bad_snapshots_are_one_line_and_exit_2(tmp_path, capsys, text, problem):
    path = tmp_path / "snapshot.json"
    path.write_text(text)
    code, out, err = _rebalance(capsys, "--snapshot", str(path))
    _one_error_line(code, out, err, problem)
