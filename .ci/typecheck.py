"""Type-checks the package with mypy, as installed: ``pulsar_lb_operator`` and its sub-packages.

The repository keeps its folders under the names the design card gives them and setup.py maps them onto one
package (``operator/`` is ``pulsar_lb_operator``, ``strategies/`` is ``pulsar_lb_operator.strategies``, ...).
mypy resolves modules from the file system and cannot see through that mapping, so this builds the package's
layout as a tree of symbolic links in a temporary directory (from setup.py's own ``package_dir``, so a new
sub-package needs no entry here), runs ``mypy -p pulsar_lb_operator`` over it with the settings in
pyproject.toml, and prints the findings under the repository's own paths.

Usage: ``python .ci/typecheck.py [extra mypy arguments]``; the exit status is mypy's.
"""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "pulsar_lb_operator"


def package_dirs() -> dict[str, str]:
    """setup.py's mapping of package names onto folders, read by running it with ``setup()`` captured."""
    captured: dict[str, dict[str, str]] = {}
    with mock.patch("setuptools.setup", lambda **kwargs: captured.update(kwargs)):
        runpy.run_path(str(ROOT / "setup.py"), run_name="__main__")
    return captured["package_dir"]


def link_tree(target: Path) -> None:
    """Every module file of every package, linked at the path its dotted name gives it."""
    for package, folder in package_dirs().items():
        destination = target.joinpath(*package.split("."))
        destination.mkdir(parents=True, exist_ok=True)
        for source in sorted((ROOT / folder).glob("*.py*")):
            if source.suffix in {".py", ".pyi"} or source.name == "py.typed":
                (destination / source.name).symlink_to(source)


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="typecheck-") as temporary:
        tree = Path(temporary)
        link_tree(tree)
        result = subprocess.run(
            [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "-p", PACKAGE, *argv],
            cwd=tree,
            env={**os.environ, "MYPYPATH": str(tree)},
            capture_output=True,
            text=True,
            check=False,
        )
        # Findings name the linked path; print the repository's own file instead.
        links = {str(link.relative_to(tree)): str(link.resolve().relative_to(ROOT)) for link in tree.rglob("*.py")}
        for line in result.stdout.splitlines():
            path, separator, rest = line.partition(":")
            print(f"{links.get(path, path)}{separator}{rest}")
        sys.stderr.write(result.stderr)
        return result.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
