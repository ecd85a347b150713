"""The README's settings example is valid: the file a user copies must load."""

import re
from pathlib import Path

import yaml

from pulsar_lb_operator.settings import resolve

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_the_settings_example_loads():
    block = re.search(r"```yaml\n(adminUrl:.*?)```", README, re.S).group(1)
    settings, config, explicit = resolve(yaml.safe_load(block), {}, {})
    assert settings.dryRun is False and settings.excludedNamespaces == ("pulsar/.*", "acme/critical")
    assert (
        config.loadBalancerLoadSheddingStrategy == "AvgShedder" and "loadBalancerSheddingGracePeriodMinutes" in explicit
    )
