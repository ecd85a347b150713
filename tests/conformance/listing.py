"""The docs' list of the Java tests mirrored here, one line each, made from the tests' docstrings.

A conformance test whose docstring starts with ``SomeJavaTest.testMethod`` mirrors that Java test;
``test_listing.py`` fails when the list in docs/strategies.md and the tests disagree. To rewrite the list:

    python -m tests.conformance.listing
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PAGE = HERE.parent.parent / "docs" / "strategies.md"
START, END = "<!-- conformance-list:start -->", "<!-- conformance-list:end -->"
JAVA_TEST = re.compile(r"(\w+Test)\.(\w+)")


def mirrored() -> list[tuple[str, str, str]]:
    """(Java class, Java method, pytest id) for every conformance test that names its Java test."""
    found = []
    for path in sorted(HERE.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                match = JAVA_TEST.match(ast.get_docstring(node) or "")
                if match:
                    found.append((match[1], match[2], f"{path.name}::{node.name}"))
    return sorted(found)


def block() -> str:
    rows = mirrored()
    lines = [START, f'<details markdown="1"><summary>The {len(rows)} Java tests mirrored, one line each</summary>', ""]
    lines += [f"- `{cls}.{method}` — `tests/conformance/{test}`" for cls, method, test in rows]
    lines += ["", "</details>", END]
    return "\n".join(lines)


def listed_block(text: str) -> str | None:
    if START not in text or END not in text:
        return None
    return text[text.index(START) : text.index(END) + len(END)]


def main() -> int:
    text = PAGE.read_text()
    current = listed_block(text)
    if current is None:
        print(f"{PAGE.name} has no {START} … {END} block", file=sys.stderr)
        return 1
    PAGE.write_text(text.replace(current, block()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
