"""The settings reference (docs/reference/settings.md), written from the settings' own definitions.

Every key a user can set is a field of ``OperatorSettings`` (the operator's own settings) or of
``LoadBalancerConfig`` (Pulsar's load-balancer keys, under Pulsar's names); the page lists each with its
type, its default and the comment its definition carries, so the reference cannot drift from the code:

    python docs/hooks/settings_reference.py            # rewrite the page
    python docs/hooks/settings_reference.py --check    # exit 1 when the page is out of date

As an mkdocs hook (``hooks:`` in mkdocs.yml) it fails the build when the committed page is out of date;
``tests/test_docs.py`` fails then too. The page is committed rather than made at build time so that it
reads the same on the repository's web view as on the site.
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import re
import sys
import tokenize
from pathlib import Path
from typing import Any

PAGE = Path(__file__).resolve().parents[1] / "reference" / "settings.md"
TOKEN_ENV = "PULSAR_LB_TOKEN"

HEADER = """# Settings reference

<!-- Written by `python docs/hooks/settings_reference.py` from the settings' definitions: do not edit by hand. -->

Every key the operator reads, with its type and default. Keys come from one YAML, TOML or JSON file
(`--config FILE`, default `$PULSAR_LB_CONFIG`), then the environment, then flags (`--set key=value`);
see [Configuration](../configuration.md) for how they combine and how they are checked. An unknown key is
exit 2 with "did you mean …".
"""


def comments(cls: Any) -> dict[str, str]:
    """Each field's comment: its own trailing one, else the block of comment lines above the run of
    uncommented fields it heads (how the definitions group fields: "# AvgShedder", "# resource weights")."""
    source = inspect.getsource(cls)
    names = {field.name for field in dataclasses.fields(cls)}
    trailing: dict[int, str] = {}
    whole_line: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            text = token.string.lstrip("#").strip()
            (whole_line if token.line.strip().startswith("#") else trailing)[token.start[0]] = text
    found: dict[str, str] = {}
    block: list[str] = []
    heading = ""
    for number, line in enumerate(source.splitlines(), start=1):
        if number in whole_line:
            if heading:
                block, heading = [], ""
            block.append(whole_line[number])
            continue
        field = re.match(r"^\s+(\w+)\s*:", line)
        if field is None or field[1] not in names:
            block, heading = [], ""
            continue
        if number in trailing:
            found[field[1]] = trailing[number]
            block, heading = [], ""
            continue
        if block:
            heading, block = " ".join(block), []
        if heading:
            found[field[1]] = heading
    return found


def type_name(annotation: Any) -> str:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    optional = text.endswith(" | None")
    text = text.removesuffix(" | None")
    name = {"str": "string", "float": "number", "int": "integer", "bool": "boolean"}.get(text)
    if name is None:
        name = "list of strings" if text.startswith("tuple[str") else text
    return f"{name}, optional" if optional else name


def default_text(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "required"
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, tuple):
        return "`[" + ", ".join(value) + "]`" if value else "`[]`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    return '`""`' if value == "" else f"`{value}`"


def cell(text: str) -> str:
    """A comment as a table cell: no column breaks, and <stateFile> shown, not taken for an HTML tag."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")


def environment_name(key: str) -> str | None:
    """The variable that sets ``key``, if the operator accepts one (asked of the operator's own check)."""
    from pulsar_lb_operator.run.settings import check_environment
    from pulsar_lb_operator.strategies.errors import UserError

    name = "PULSAR_LB_" + re.sub(r"(?<!^)(?=[A-Z])", "_", key).upper()
    try:
        check_environment({name: "x"}, TOKEN_ENV)
    except UserError:
        return None
    return name


def table(definition: Any, last_column: str, environment: bool) -> list[str]:
    """One row per field of the dataclass ``definition``."""
    notes = comments(definition)
    head = ["key", "type", "default", *(["environment"] if environment else []), last_column]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for field in dataclasses.fields(definition):
        cells = [f"`{field.name}`", type_name(field.type), default_text(field)]
        if environment:
            env = environment_name(field.name)
            cells.append(f"`{env}`" if env else "—")
        cells.append(cell(notes.get(field.name, "")))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render() -> str:
    from pulsar_lb_operator.run.settings import OTHER_ENVIRONMENT, OperatorSettings
    from pulsar_lb_operator.strategies.config import LoadBalancerConfig

    lines = [HEADER, "## The operator's settings", ""]
    lines += [
        "Defined in `operator/run/settings.py` (`OperatorSettings`). `PULSAR_ADMIN_URL` sets `adminUrl` too.",
        "",
        *table(OperatorSettings, "meaning", environment=True),
    ]
    lines += ["", "## Pulsar's load-balancer keys", ""]
    lines += [
        "Pulsar's own keys, with Pulsar's names and defaults (`strategies/config.py`, `LoadBalancerConfig`); they",
        "go in the same settings file or `--set`, and choose and tune the strategies ([Strategies](../strategies.md)).",
        "",
        *table(LoadBalancerConfig, "used by", environment=False),
    ]
    lines += ["", "## Other environment variables", "", "| variable | meaning |", "|---|---|"]
    lines += [f"| `{name}` | {cell(meaning)} |" for name, meaning in sorted(OTHER_ENVIRONMENT.items())]
    return "\n".join(lines) + "\n"


def stale() -> str | None:
    """Why the committed page differs from what the definitions give, or None."""
    if not PAGE.exists():
        return f"{PAGE.name} is missing"
    if PAGE.read_text() != render():
        return f"{PAGE.name} is out of date: run python docs/hooks/settings_reference.py"
    return None


def on_pre_build(config: Any) -> None:
    """mkdocs hook: a stale reference fails the build."""
    from mkdocs.exceptions import PluginError

    problem = stale()
    if problem:
        raise PluginError(problem)


def main(argv: list[str]) -> int:
    if argv[1:] == ["--check"]:
        problem = stale()
        if problem:
            print(problem, file=sys.stderr)
            return 1
        return 0
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
