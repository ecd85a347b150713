"""The tree's layers, held by every import: collect → store/aggregate → decide → execute → record.

Lowest first; a layer imports only those below it (and itself):

0. ``lifecycle`` (``operator/lifecycle.py``) — that nothing started outlives the process: imports nothing of
   ours, and any layer may import it (the simulator starts a broker, Spark's session a JVM).
1. ``strategies`` — pure decisions over snapshots: nothing of ours.
2. ``simulator`` (a fake Pulsar cluster) and ``spark_jobs`` (the aggregation): ``strategies`` only.
3. ``operator`` — the daemon and the cycle: ``strategies`` and ``spark_jobs``, never the simulator.
4. ``benchmarks`` — measures strategies and the operator's own parts: anything below.
5. ``operator/sandbox`` — the commands that stand up a simulator or a benchmark (``demo``,
   ``simulate``, ``rehearse``, ``benchmark``): the one place the operator reaches into layers 2 and 4.
6. ``operator/cli.py`` — the command line: anything.

Every import counts, at module level or inside a function. No import cycle, between modules or between
folders: a lazy import inside a function only hides one. A wheel built from the project holds one
top-level package of ours, so nothing generic (``strategies``, ``simulator``) lands in site-packages.
"""

from __future__ import annotations

import ast
import graphlib
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "pulsar_lb_operator"
SUBPACKAGES = ("strategies", "simulator", "spark_jobs", "benchmarks")
FOUNDATION = f"{PACKAGE}.lifecycle"  # layer 0: imports nothing of ours, any layer may import it
ALLOWED = {
    "strategies": {"strategies"},
    "simulator": {"strategies", "simulator"},
    "spark_jobs": {"strategies", "spark_jobs"},
    "operator": {"strategies", "spark_jobs", "operator"},
    "benchmarks": {"strategies", "simulator", "spark_jobs", "operator", "benchmarks"},
    "sandbox": {"strategies", "simulator", "spark_jobs", "operator", "benchmarks", "sandbox"},
    "cli": {"strategies", "simulator", "spark_jobs", "operator", "benchmarks", "sandbox", "cli"},
}


def layer_of_file(path: Path) -> str:
    parts = path.relative_to(ROOT).parts
    if parts[0] == "operator":
        if parts[1:2] == ("sandbox",):
            return "sandbox"
        return "cli" if parts[1:] == ("cli.py",) else "operator"
    return parts[0]


def layer_of_module(name: str) -> str | None:
    """The layer a module of ours belongs to; None for anything not ours. Old top-level names are errors."""
    parts = name.split(".")
    if parts[0] in SUBPACKAGES:
        raise AssertionError(f"imports {name!r}: ours are imported as {PACKAGE}.{name}")
    if parts[0] != PACKAGE or name == FOUNDATION:
        return None
    if parts[1:2] and parts[1] in SUBPACKAGES:
        return parts[1]
    if parts[1:2] == ["sandbox"]:
        return "sandbox"
    return "cli" if parts[1:2] == ["cli"] else "operator"


def imported_modules(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: relative import; ours are absolute"
            base = node.module or ""
            # `from pulsar_lb_operator import sandbox` imports a sub-package: name it
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names] or [(node.lineno, base)]
    return found


def source_files() -> list[Path]:
    folders = [ROOT / "operator", *(ROOT / name for name in SUBPACKAGES)]
    return sorted(p for folder in folders for p in folder.rglob("*.py"))


def violations(files: list[Path]) -> list[str]:
    found = []
    for path in files:
        layer = layer_of_file(path)
        for line, module in imported_modules(path):
            try:
                target = layer_of_module(module)
            except AssertionError as exc:
                found.append(f"{path.relative_to(ROOT)}:{line}: {exc}")
                continue
            if target is not None and target not in ALLOWED[layer]:
                found.append(f"{path.relative_to(ROOT)}:{line}: {layer} imports {module} ({target})")
    return found


def test_no_module_imports_against_the_layering() -> None:
    files = source_files()
    assert len(files) > 80  # the whole tree was read, not an empty glob
    assert violations(files) == []


def test_the_foundation_imports_nothing_of_ours() -> None:
    path = ROOT / "operator" / "lifecycle.py"
    assert [m for _, m in imported_modules(path) if m.split(".")[0] in (PACKAGE, *SUBPACKAGES)] == []


# Inside the operator, the stages in the order their imports allow, lowest first: a stage imports only
# stages before it. (The data flows collect → decide → act → store → record; what the executor, the state file and
# the recorders share — outcomes, the executor's record — is in ``records``, below them all.)
OPERATOR_STAGES = (
    ("__init__", "hints", "lifecycle"),  # the version; messages with their fixes; child processes and temp dirs
    ("records",),  # outcomes and the executor's record: typed, shared by act, store and record
    ("adminapi",),  # the admin REST client: the edge both collect and act talk through
    ("collect",),
    ("act",),
    ("store",),
    ("record",),
    ("run",),
    ("arguments",),  # the command line's value types
    ("control_cli", "sandbox"),  # command-line faces
    ("cli",),
)
STAGE_RANK = {name: rank for rank, names in enumerate(OPERATOR_STAGES) for name in names}


def operator_stage_of_file(path: Path) -> str:
    parts = path.relative_to(ROOT / "operator").parts
    return parts[0] if len(parts) > 1 else parts[0].removesuffix(".py")


def operator_stage_of_module(module: str) -> str | None:
    """The stage of ``pulsar_lb_operator.<stage>…``; None for the other layers and for what is not ours."""
    parts = module.split(".")
    if parts[0] != PACKAGE or len(parts) < 2 or parts[1] in SUBPACKAGES:
        return None
    return parts[1] if parts[1] in STAGE_RANK else "__init__"  # `from pulsar_lb_operator import __version__`


def stage_violations(files: list[Path]) -> list[str]:
    found = []
    for path in files:
        stage = operator_stage_of_file(path)
        assert stage in STAGE_RANK, f"{path}: a module outside the stages {sorted(STAGE_RANK)}"
        for line, module in imported_modules(path):
            target = operator_stage_of_module(module)
            if target is None or target == stage:
                continue
            if STAGE_RANK[target] >= STAGE_RANK[stage]:
                found.append(f"{path.relative_to(ROOT)}:{line}: {stage} imports {module} ({target})")
    return found


def test_the_operators_stages_import_only_the_stages_before_them() -> None:
    files = sorted((ROOT / "operator").rglob("*.py"))
    assert {operator_stage_of_file(p) for p in files} == set(STAGE_RANK)  # every stage has code, none is missed
    assert stage_violations(files) == []


def test_the_stage_check_catches_a_backward_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, text in {
        "collect/bad.py": "from pulsar_lb_operator.act.executor import Executor\n",
        "act/bad.py": "def f():\n    from pulsar_lb_operator.run import settings\n",
        "store/ok.py": "from pulsar_lb_operator.records import ExecutorState\n",
    }.items():
        path = tmp_path / "operator" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    found = stage_violations(sorted((tmp_path / "operator").rglob("*.py")))
    assert len(found) == 2 and not any("store/ok.py" in f for f in found), found


def test_the_tests_import_ours_under_the_package_too() -> None:
    """From the repository root `strategies` would still import (the folder is on sys.path), hiding a stale
    name until the code runs installed: the tests use the package's names like everything else."""
    stale = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for line, module in imported_modules(path):
            if module.split(".")[0] in SUBPACKAGES:
                stale.append(f"{path.relative_to(ROOT)}:{line}: {module}")
    assert stale == []


def test_the_check_catches_an_upward_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check itself fails on each kind of wrong import (else the test above could pass vacuously)."""
    fake_root = tmp_path
    for folder, text in {
        "strategies/bad.py": "from pulsar_lb_operator.act.executor import Executor\n",
        "simulator/bad.py": "def f():\n    from pulsar_lb_operator import collector\n",
        "operator/bad.py": "from pulsar_lb_operator.simulator.cluster import SimulatedCluster\n",
        "operator/old.py": "import strategies.bundles\n",
        "benchmarks/bad.py": "from pulsar_lb_operator.sandbox import demo\n",
        "operator/sandbox/ok.py": "from pulsar_lb_operator.simulator import http\n",
    }.items():
        path = fake_root / folder
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", fake_root)
    found = violations(sorted(fake_root.rglob("*.py")))
    assert len(found) == 5 and not any("sandbox/ok.py" in f for f in found), found


def test_the_wheel_holds_one_top_level_package_of_ours(tmp_path: Path) -> None:
    source = tmp_path / "source"  # a copy: building in place would leave build/ in the checkout
    for name in ("pyproject.toml", "setup.py", "README.md"):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, source / name)
    for folder in ("operator", *SUBPACKAGES):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), "."],
        cwd=source,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == {PACKAGE}
    for module in ("strategies/planner.py", "simulator/scenarios/demo.yaml", "spark_jobs/load_profile.py"):
        assert f"{PACKAGE}/{module}" in names
    assert f"{PACKAGE}/benchmarks/suite.py" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "operator = pulsar_lb_operator.cli:run" in zipfile.ZipFile(wheel).read(entry_points).decode()


# ---------------------------------------------------------------------------------------------- import cycles

FOLDER_PACKAGES = {"operator": PACKAGE, **{name: f"{PACKAGE}.{name}" for name in SUBPACKAGES}}  # as setup.py maps them


def module_name(path: Path) -> str:
    """The installed name of one of our files: ``simulator/faults.py`` → ``pulsar_lb_operator.simulator.faults``."""
    folder, *rest = path.relative_to(ROOT).with_suffix("").parts
    if rest[-1] == "__init__":
        rest = rest[:-1]
    return ".".join([FOLDER_PACKAGES[folder], *rest])


def runtime_imports(path: Path) -> list[str]:
    """What a file imports when it runs: module level and inside functions alike, each ``from a import b`` as
    ``a.b``. Only an ``if TYPE_CHECKING:`` block is left out: it never runs, so it cannot catch a module half
    initialised; it is how an annotation names a type from the module that uses this one."""
    found: list[str] = []

    class Imports(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            test = node.test
            guarded = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
            )
            for child in node.orelse if guarded else [node.test, *node.body, *node.orelse]:
                self.visit(child)

        def visit_Import(self, node: ast.Import) -> None:
            found.extend(alias.name for alias in node.names)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            found.extend(f"{node.module}.{alias.name}" for alias in node.names)

    Imports().visit(ast.parse(path.read_text(), str(path)))
    return found


def import_graph(files: list[Path]) -> dict[str, set[str]]:
    """Module → the modules of ours it imports. ``from pkg import name`` counts as an import of ``pkg.name``
    when that is a module, else of ``pkg`` itself (its ``__init__``); a package's ``__init__`` that Python
    runs on the way to a submodule is not an edge (it runs first and cannot close a cycle through it)."""
    names = {module_name(p): p for p in files}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        edges = set()
        for imported in runtime_imports(path):
            while imported and imported not in names:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                edges.add(imported)
        graph[name] = edges
    return graph


def folder_graph(graph: dict[str, set[str]], files: list[Path]) -> dict[str, set[str]]:
    """The same imports between folders (packages), leaving out a folder and its own sub-folders: a package's
    ``__init__`` gathering its sub-packages' names is a facade, not a cycle."""
    package_of = {module_name(p): module_name(p.parent / "__init__.py") for p in files}

    def nested(a: str, b: str) -> bool:
        return a == b or a.startswith(b + ".") or b.startswith(a + ".")

    folders: dict[str, set[str]] = {}
    for module, imported in graph.items():
        source = package_of[module]
        targets = {package_of[m] for m in imported}
        folders.setdefault(source, set()).update(t for t in targets if not nested(source, t))
    return folders


def cycle_in(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its first name again at the end), or None when the graph has none."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        return list(reversed(exc.args[1]))
    return None


def test_no_import_cycle_between_modules_or_folders() -> None:
    files = source_files()
    graph = import_graph(files)
    assert sum(len(edges) for edges in graph.values()) > 300  # imports were found, not an empty graph
    assert cycle_in(graph) is None, " → ".join(cycle_in(graph) or [])
    folders = folder_graph(graph, files)
    assert cycle_in(folders) is None, " → ".join(cycle_in(folders) or [])


def test_the_cycle_check_sees_lazy_imports_and_folder_cycles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check itself fails on a cycle closed by a function-level import and on one between folders, and
    leaves a type-only import alone (else the test above could pass vacuously)."""
    layout = {
        "simulator/__init__.py": "",
        "simulator/a.py": "from pulsar_lb_operator.simulator.b import B\n",
        "simulator/b.py": "def f():\n    from pulsar_lb_operator.simulator import a\n",
        "simulator/c.py": "from pulsar_lb_operator.simulator import d\n",
        "simulator/d.py": "import typing\nif typing.TYPE_CHECKING:\n    from pulsar_lb_operator.simulator.c import C\n",
        "strategies/__init__.py": "from pulsar_lb_operator.strategies.x.one import f\n",
        "strategies/x/__init__.py": "",
        "strategies/x/one.py": "from pulsar_lb_operator.strategies import config\n",
        "strategies/config.py": "",
        "strategies/y/__init__.py": "",
        "strategies/y/two.py": "from pulsar_lb_operator.strategies.x.one import f\n",
        "strategies/x/three.py": "import pulsar_lb_operator.strategies.y.two\n",
    }
    for name, text in layout.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    files = sorted(tmp_path.rglob("*.py"))
    graph = import_graph(files)
    assert graph["pulsar_lb_operator.simulator.d"] == set()  # the type-only import is not an edge
    assert graph["pulsar_lb_operator.strategies.x.one"] == {"pulsar_lb_operator.strategies.config"}
    assert set(cycle_in(graph) or []) == {"pulsar_lb_operator.simulator.a", "pulsar_lb_operator.simulator.b"}
    del graph["pulsar_lb_operator.simulator.b"]  # the modules' cycle gone: the folders' one remains
    assert cycle_in(graph) is None
    folders = folder_graph(graph, files)
    assert set(cycle_in(folders) or []) == {"pulsar_lb_operator.strategies.x", "pulsar_lb_operator.strategies.y"}
