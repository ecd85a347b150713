"""The README's settings example is valid: the file a user copies must load."""

import re
from pathlib import Path

import yaml

from pulsar_lb_operator.run.settings import resolve

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_the_settings_example_loads():
    block = re.search(r"```yaml\n(adminUrl:.*?)```", README, re.S).group(1)
    settings, config, explicit = resolve(yaml.safe_load(block), {}, {})
    assert settings.dryRun is False and settings.excludedNamespaces == ("pulsar/.*", "acme/critical")
    assert (
        config.loadBalancerLoadSheddingStrategy == "AvgShedder" and "loadBalancerSheddingGracePeriodMinutes" in explicit
    )


def test_the_settings_example_also_drives_offline_planning(tmp_path, capsys):
    from pulsar_lb_operator import cli

    block = re.search(r"```yaml\n(adminUrl:.*?)```", README, re.S).group(1)
    config = tmp_path / "operator.yaml"
    config.write_text(block)
    example = Path(__file__).resolve().parent.parent / "examples" / "unbalanced-after-restart.json"
    assert cli.main(["rebalance", "--snapshot", str(example), "--config", str(config)]) == 0
    assert "shedding AvgShedder" in capsys.readouterr().out


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_emergency_stop_is_one_click_from_the_top():
    """A person in an incident finds it on the first screen: a link there to the section that explains it."""
    first_screen = "\n".join(README.splitlines()[:25])
    anchors = {_anchor(h) for h in re.findall(r"^#+ (.+)$", README, re.M)}
    links = [a for a in re.findall(r"\]\(#([^)]+)\)", first_screen) if "emergency-stop" in a]
    assert links and links[0] in anchors
    section = README.split("## Emergency stop", 1)[1].split("\n## ", 1)[0]
    for must in ("operator pause", "operator resume", "PULSAR_LB_KILL_SWITCH", "killSwitch=true", "/api/status"):
        assert must in section
