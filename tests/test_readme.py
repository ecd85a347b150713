"""What the README and the docs claim holds: the settings example loads, the commands parse, the links resolve."""

import dataclasses
import re
import shlex
from pathlib import Path

import pytest
import yaml

from pulsar_lb_operator.cli import build_parser
from pulsar_lb_operator.run.settings import OperatorSettings, resolve
from pulsar_lb_operator.strategies.config import LoadBalancerConfig
from pulsar_lb_operator.strategies.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
CHART_README = ROOT / "helm" / "pulsar-lb-operator" / "README.md"
DOCS = sorted((ROOT / "docs").rglob("*.md"))
EVERY_DOC = [ROOT / "README.md", CHART_README, ROOT / "helm" / "README.md", *DOCS]


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", [ROOT / "README.md", ROOT / "docs" / "configuration.md"], ids=_name)
def test_the_settings_example_loads(path):
    block = re.search(r"```yaml\n(adminUrl:.*?)```", path.read_text(), re.S).group(1)
    settings, config, explicit = resolve(yaml.safe_load(block), {}, {})
    assert settings.dryRun is True and settings.excludedNamespaces == ("pulsar/.*", "acme/critical")
    assert (
        config.loadBalancerLoadSheddingStrategy == "AvgShedder" and "loadBalancerSheddingGracePeriodMinutes" in explicit
    )


def test_the_settings_example_also_drives_offline_planning(tmp_path, capsys):
    from pulsar_lb_operator import cli

    block = re.search(r"```yaml\n(adminUrl:.*?)```", README, re.S).group(1)
    config = tmp_path / "operator.yaml"
    config.write_text(block)
    example = ROOT / "examples" / "unbalanced-after-restart.json"
    assert cli.main(["rebalance", "--snapshot", str(example), "--config", str(config)]) == 0
    assert "shedding AvgShedder" in capsys.readouterr().out


def test_the_helm_values_example_renders_as_the_readme_says():
    """The values snippet passes the chart's schema, and the release it renders carries what the comments say."""
    import helm_python as helm

    values = yaml.safe_load(re.search(r"```yaml\n# my-values.yaml\n(.*?)```", README, re.S).group(1))
    with helm.Chart.load(CHART_README.parent) as chart:
        chart.validate_schema(values)
        rendered = chart.render(values=values, name="lb", namespace="pulsar")
    texts = [text for name, text in rendered.items() if not name.endswith("NOTES.txt")]
    manifests = {d["kind"]: d for text in texts for d in yaml.safe_load_all(text) if d}
    settings = yaml.safe_load(manifests["ConfigMap"]["data"]["settings.yaml"])
    assert settings["maxUnloadsPerCycle"] == 10 and settings["dryRun"] is True and settings["tokenFile"]
    assert settings["loadBalancerLoadSheddingStrategy"] == "AvgShedder" and "PrometheusRule" in manifests
    volumes = manifests["Deployment"]["spec"]["template"]["spec"]["volumes"]
    assert any(v.get("secret", {}).get("secretName") == "pulsar-token-admin" for v in volumes)


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _prose(text: str) -> str:
    """The text outside fenced code blocks (where a `#` is a comment and `[x](y)` is code)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _anchors(path: Path) -> set[str]:
    return {_anchor(h) for h in re.findall(r"^#+ (.+)$", _prose(path.read_text()), re.M)}


def _section(heading: str) -> str:
    return README.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize(
    ("heading", "must"),
    [
        (
            "Emergency stop",
            ("operator pause", "operator resume", "PULSAR_LB_KILL_SWITCH", "killSwitch=true", "/api/status"),
        ),
        (
            "Going live",
            ("dryRun: false", "disableBuiltinShedding", "loadBalancerSheddingEnabled", "--set dryRun=false"),
        ),
    ],
)
def test_the_emergency_stop_and_going_live_are_one_click_from_the_top(heading, must):
    """A person in an incident, or about to go live, finds it on the first screen: a link there to the section."""
    first_screen = "\n".join(README.splitlines()[:25])
    links = re.findall(r"\]\(#([^)]+)\)", first_screen)
    assert _anchor(heading) in links and _anchor(heading) in _anchors(ROOT / "README.md")
    section = _section(heading)
    for text in must:
        assert text in section


def test_the_readme_is_a_front_door():
    """Short enough to read in one sitting; the rest is in docs/, linked from it."""
    assert len(README.splitlines()) <= 250
    linked = set(re.findall(r"\]\(docs/([\w/-]+\.md)", README))
    assert {_name(page).removeprefix("docs/") for page in DOCS} - linked == set(), "a docs page the README omits"


def test_the_quick_start_is_the_two_commands_ci_runs():
    block = re.search(r"```bash\n(.*?)```", _section("Quick start"), re.S).group(1)
    assert block.splitlines() == ["pip install -e '.[test]' && operator demo", "python -m pytest"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install --quiet --disable-pip-version-check -e '.[test]'" in ci and "python3 -m pytest" in ci


def _commands(path: Path) -> list[tuple[str, list[str]]]:
    """Every `operator …` command in the file's shell blocks, as its words (comments and pipes dropped)."""
    found = []
    for block in re.findall(r"^```bash\n(.*?)^```", path.read_text(), re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            for start, word in enumerate(words):
                if word == "operator" and (start == 0 or words[start - 1] in ("&&", ";", "--", "|", "do", "then")):
                    rest = words[start + 1 :]
                    end = next((i for i, w in enumerate(rest) if w in ("&&", ";", "|", "&", "||")), len(rest))
                    found.append((line.strip(), rest[:end]))
    return found


def test_every_operator_command_in_the_docs_is_one_the_cli_accepts():
    """Each subcommand and flag a page shows exists, with a value of the right kind."""
    commands = [(path, line, words) for path in EVERY_DOC for line, words in _commands(path)]
    assert len(commands) > 40  # the README's and the docs' blocks were found
    parser = build_parser()
    keys = {f.name for definition in (OperatorSettings, LoadBalancerConfig) for f in dataclasses.fields(definition)}
    wrong = []
    for path, line, words in commands:
        try:
            args = parser.parse_args(words)
        except (UserError, SystemExit) as exc:
            wrong.append(f"{_name(path)}: {line}: {exc}")
            continue
        wrong += [
            f"{_name(path)}: {line}: no setting {key}"
            for key, _ in getattr(args, "overrides", None) or []
            if key not in keys
        ]
    assert wrong == []


@pytest.mark.parametrize("path", EVERY_DOC, ids=_name)
def test_every_link_resolves(path):
    """Relative links point at files in the repository, and anchors at headings there (GitHub's anchors)."""
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"`[^`\n]*`", "", _prose(path.read_text()))):
        if re.match(r"^[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.is_relative_to(ROOT) or not linked.exists():
            broken.append(f"{target}: no such file in the repository")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(f"{target}: no heading makes #{anchor}")
    assert broken == []


@pytest.mark.parametrize("path", EVERY_DOC, ids=_name)
def test_no_doc_speaks_of_where_it_was_developed(path):
    """Figures name the hardware ("2 cores, 24 GiB"), and nothing points outside the repository."""
    text = path.read_text().lower()
    for phrase in ("our machines", "this machine", "../shared", "shared/reference", "/work/"):
        assert phrase not in text, f"{_name(path)} says {phrase!r}"
