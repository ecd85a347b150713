"""The package's metadata against its code: ``requires-python`` names the oldest Python the code runs on.

vermin reads every module of the installed package (the folders setup.py maps) and finds the newest
standard-library module, member or syntax it uses (``tomllib``: 3.11). pip installs the project only on a
Python ``requires-python`` allows, so a floor below that lets a user install what then fails at its first
import; mypy and ruff check the code as that same oldest Python would run it.
"""

from __future__ import annotations

import runpy
import tomllib
from pathlib import Path
from unittest import mock

import vermin

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def package_folders() -> list[Path]:
    """The folders setup.py installs as ``pulsar_lb_operator`` and its sub-packages."""
    with mock.patch("setuptools.setup"):
        folders = runpy.run_path(str(ROOT / "setup.py"))["FOLDERS"]
    return [ROOT / folder for folder in folders.values()]


def oldest_python() -> tuple[tuple[int, int], list[str]]:
    """The oldest Python 3 every module runs on, and the modules that need exactly that one."""
    config = vermin.Config()
    config.set_eval_annotations(True)  # annotations are evaluated (typing.get_type_hints, dataclasses)
    needs: dict[str, tuple[int, int]] = {}
    for folder in package_folders():
        for path in sorted(folder.rglob("*.py")):
            _python2, python3 = vermin.detect(path.read_text(encoding="utf-8"), config, str(path))
            assert python3 is not None, f"{path}: vermin finds it runs on no Python 3"
            needs[str(path.relative_to(ROOT))] = tuple(python3)
    oldest = max(needs.values())
    return oldest, sorted(module for module, version in needs.items() if version == oldest)


def test_requires_python_is_the_oldest_python_the_code_runs_on():
    (major, minor), modules = oldest_python()
    assert (major, minor) >= (3, 11), modules  # tomllib, read by store/files.py, is 3.11's
    assert PYPROJECT["project"]["requires-python"] == f">={major}.{minor}", f"{modules} need {major}.{minor}"
    assert PYPROJECT["tool"]["mypy"]["python_version"] == f"{major}.{minor}"
    assert PYPROJECT["tool"]["ruff"]["target-version"] == f"py{major}{minor}"
