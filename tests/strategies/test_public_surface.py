"""The public surface of ``strategies`` is its ``__init__``: the layers above import what ``__all__`` names, from
the package itself, or a name of one of the submodules that are public whole (``bundles``, ``policies``,
``registry``), and nothing else, so the inside can be split or renamed without touching them."""

from __future__ import annotations

import ast
import types
from pathlib import Path

import pulsar_lb_operator.strategies as strategies

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "pulsar_lb_operator.strategies"
PUBLIC_MODULES = {"bundles", "policies", "registry"}
OUTSIDE = ("operator", "simulator", "spark_jobs", "benchmarks")


def strategy_imports(path: Path) -> list[tuple[int, str, str]]:
    """(line, module, name) of every import from ``strategies`` in a file, at module level or in a function."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, "") for a in node.names if a.name.startswith(PACKAGE)]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE):
            found += [(node.lineno, node.module or "", a.name) for a in node.names]
    return found


def leaks(files: list[Path], root: Path = ROOT) -> list[str]:
    """Each import of ``files`` that goes past the public surface, as ``file:line: what`` (relative to ``root``)."""
    public = set(strategies.__all__)
    found = []
    for path in files:
        for line, module, name in strategy_imports(path):
            where = f"{path.relative_to(root)}:{line}"
            if module == PACKAGE and name in public:
                continue
            if module.removeprefix(PACKAGE + ".") in PUBLIC_MODULES and name:
                continue
            found.append(f"{where}: {module}{'.' + name if name else ''}")
    return sorted(found)


def outside_files() -> list[Path]:
    return sorted(p for folder in OUTSIDE for p in (ROOT / folder).rglob("*.py"))


def test_every_public_name_is_there_once():
    assert len(strategies.__all__) == len(set(strategies.__all__))
    missing = [name for name in strategies.__all__ if not hasattr(strategies, name)]
    assert missing == []
    modules = {name for name in strategies.__all__ if isinstance(getattr(strategies, name), types.ModuleType)}
    assert modules == PUBLIC_MODULES  # no submodule is public by accident


def test_a_strategy_author_finds_what_the_protocol_needs_on_the_surface():
    namespace: dict[str, object] = {}
    exec(f"from {PACKAGE} import *", namespace)  # what ``import *`` gives is exactly __all__
    assert set(namespace) - {"__builtins__"} == set(strategies.__all__)
    for name in ("Shedder", "SheddingResult", "LoadData", "Unload", "register_shedding", "Placer", "PlacementContext"):
        assert name in namespace


def test_the_layers_above_import_strategies_only_through_the_public_surface():
    files = outside_files()
    assert sum(len(strategy_imports(p)) for p in files) > 100  # the imports were found, not an empty scan
    assert leaks(files) == []


def test_the_check_catches_a_submodule_import_and_a_private_name(tmp_path):
    """The check itself fails on what it must catch (else the test above could pass vacuously)."""
    sample = tmp_path / "operator" / "sample.py"
    sample.parent.mkdir()
    sample.write_text(
        "from pulsar_lb_operator.strategies import Plan, bundles\n"
        "from pulsar_lb_operator.strategies.bundles import namespace_of\n"
        "from pulsar_lb_operator.strategies.planner import plan_cycle\n"
        "def f():\n"
        "    from pulsar_lb_operator.strategies import _plan_cycle\n"
        "    import pulsar_lb_operator.strategies.shedding.avg\n"
    )
    assert leaks([sample], tmp_path) == [
        "operator/sample.py:3: pulsar_lb_operator.strategies.planner.plan_cycle",
        "operator/sample.py:5: pulsar_lb_operator.strategies._plan_cycle",
        "operator/sample.py:6: pulsar_lb_operator.strategies.shedding.avg",
    ]
