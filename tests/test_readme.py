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
