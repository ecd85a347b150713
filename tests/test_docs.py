"""The docs site builds with every link and anchor checked, and its settings reference lists every setting."""

import dataclasses
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pulsar_lb_operator.run.settings import OTHER_ENVIRONMENT, OperatorSettings, check_environment
from pulsar_lb_operator.strategies.config import LoadBalancerConfig

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "reference" / "settings.md"


def _generator():
    spec = importlib.util.spec_from_file_location(
        "settings_reference", ROOT / "docs" / "hooks" / "settings_reference.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows() -> dict[str, list[str]]:
    """The reference's table rows by key: the cells after the key."""
    rows = {}
    for line in REFERENCE.read_text().splitlines():
        match = re.match(r"^\| `(\w+)` \|(.*)\|$", line)
        if match:
            rows[match[1]] = [cell.strip() for cell in match[2].split(" | ")]
    return rows


@pytest.mark.parametrize("definition", [OperatorSettings, LoadBalancerConfig], ids=lambda cls: cls.__name__)
def test_every_setting_is_in_the_reference_with_its_default(definition):
    rows = _rows()
    missing = [field.name for field in dataclasses.fields(definition) if field.name not in rows]
    assert missing == [], "run python docs/hooks/settings_reference.py"
    assert rows["maxUnloadsPerCycle"][1] == "`10`" and rows["dryRun"][1] == "`true`"
    assert rows["loadBalancerLoadSheddingStrategy"][1] == "`AvgShedder`"


def test_the_reference_is_what_the_definitions_give_today():
    assert _generator().stale() is None


def test_a_field_comment_reaches_the_reference_and_a_group_comment_its_fields():
    rows = _rows()
    assert "call no mutating endpoint" in rows["dryRun"][-1]
    assert rows["loadBalancerAvgShedderLowThreshold"][-1] == "AvgShedder"
    assert rows["loadBalancerCPUResourceWeight"][-1] == rows["loadBalancerBandwidthOutResourceWeight"][-1]


def test_every_environment_variable_the_reference_names_is_one_the_operator_accepts():
    names = re.findall(r"`(PULSAR_LB_\w+)`", REFERENCE.read_text())
    assert set(OTHER_ENVIRONMENT) <= set(names) and "PULSAR_LB_DRY_RUN" in names
    for name in names:
        check_environment({name: "1"}, "PULSAR_LB_TOKEN")  # a ConfigError for a name it does not know


def test_the_site_builds_with_every_link_and_anchor_checked(tmp_path):
    """`mkdocs build --strict`, as CI runs it: a broken link or anchor, or a stale reference, fails it."""
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    chart = (tmp_path / "site" / "chart" / "index.html").read_text()
    assert "High availability" in chart and 'href="../deploy/#going-live"' in chart


def test_folded_blocks_render_their_markdown_on_the_site():
    """A <details> block is raw HTML to mkdocs unless it says markdown="1": its list or table would show as text."""
    for page in (ROOT / "docs").rglob("*.md"):
        for tag in re.findall(r"<details[^>]*>", page.read_text()):
            assert 'markdown="1"' in tag, f"{page.relative_to(ROOT)}: {tag}"
