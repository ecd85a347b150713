"""One exception tree: every error class of the project sits under ``PulsarLbError``, in one of its branches,
and the command line's exit code is the class's — a new error needs no change to the CLI to get the right one."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import pulsar_lb_operator
from pulsar_lb_operator import cli
from pulsar_lb_operator.adminapi.errors import AdminError, TransportError
from pulsar_lb_operator.store.statefile import AnotherInstanceError
from pulsar_lb_operator.strategies import ClusterError, InternalError, PulsarLbError, UserError
from pulsar_lb_operator.strategies.errors import __doc__ as TREE


def our_modules() -> list[str]:
    """Every module of the package; the folders mapped under it (setup.py) are walked each on its own."""
    names = []
    for package in ("", ".strategies", ".simulator", ".spark_jobs", ".benchmarks"):
        module = importlib.import_module(pulsar_lb_operator.__name__ + package)
        names.append(module.__name__)
        names += [m.name for m in pkgutil.walk_packages(module.__path__, f"{module.__name__}.")]
    return sorted(set(names))


def our_exception_classes() -> list[type[BaseException]]:
    found = {}
    for name in our_modules():
        module = importlib.import_module(name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__.startswith(pulsar_lb_operator.__name__):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return list(found.values())


def test_every_exception_class_of_the_project_is_in_the_tree():
    classes = our_exception_classes()
    assert len(classes) >= 40  # the whole package was walked (41 classes when the tree was made)
    # a signal is no error: lifecycle.Interrupted stays a KeyboardInterrupt, so no `except Exception` swallows it
    outside = [
        f"{c.__module__}.{c.__qualname__}"
        for c in classes
        if not issubclass(c, PulsarLbError) and not issubclass(c, KeyboardInterrupt)
    ]
    assert outside == []
    branches = (UserError, ClusterError, InternalError, AnotherInstanceError)
    assert [
        c.__qualname__
        for c in classes
        if issubclass(c, PulsarLbError) and c is not PulsarLbError and not issubclass(c, branches)
    ] == []


def test_the_branches_keep_the_builtin_bases_callers_catch():
    from pulsar_lb_operator.collect.elm import ElmDataUnreadable
    from pulsar_lb_operator.store.files import FileError
    from pulsar_lb_operator.strategies import ConfigError, SnapshotError

    assert issubclass(ConfigError, ValueError) and issubclass(SnapshotError, ValueError)
    assert issubclass(FileError, ValueError) and issubclass(ElmDataUnreadable, ConnectionError)
    assert issubclass(AdminError, ClusterError) and issubclass(ConfigError, UserError)
    error = ElmDataUnreadable("cannot read topic at pulsar://b:6650: refused")
    assert str(error) == "cannot read topic at pulsar://b:6650: refused" and error.exit_code == 1
    assert "AnotherInstanceError" in TREE


class _NewUserError(UserError, ValueError):
    """Made after the CLI was written: its exit code comes from the tree alone."""


class _NewClusterError(ClusterError):
    pass


@pytest.mark.parametrize(
    ("error", "code", "line"),
    [
        (_NewUserError("widgetCount: must be >= 1"), 2, "operator: error: widgetCount: must be >= 1"),
        (_NewClusterError("the brokers said no"), 1, "operator: error: the brokers said no"),
        (AnotherInstanceError("state lock held by pid 7"), 3, "operator: error: state lock held by pid 7"),
        (
            TransportError("http://b:8080/admin/v2/clusters", "cannot reach b:8080: connection refused"),
            1,
            "operator: error: the cluster's admin API: cannot reach b:8080: connection refused "
            "(http://b:8080/admin/v2/clusters)",
        ),
        (InternalError("the plan lost an action"), 1, "operator: internal error: InternalError: the plan lost"),
    ],
)
def test_the_exit_code_is_the_error_class_s(monkeypatch, capsys, error, code, line):
    def failing(args):
        raise error

    monkeypatch.setattr(cli, "cmd_rehearse", failing)
    assert cli.main(["rehearse", "--quick"]) == code
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(line) and err.count("\n") == 1 and "Traceback" not in err


def test_a_usage_error_still_points_at_help(capsys):
    assert cli.main(["rehearse", "--jobs", "0"]) == 2
    assert capsys.readouterr().err == "operator: error: --jobs must be at least 1 (see 'operator --help')\n"


def test_a_rehearsal_filter_that_matches_nothing_is_a_user_error(capsys):
    assert cli.main(["rehearse", "--quick", "--only", "no-such-case-anywhere"]) == 2
    assert capsys.readouterr().err == "operator: error: no rehearsal case matches 'no-such-case-anywhere'\n"
