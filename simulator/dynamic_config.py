"""What a broker makes of a stored dynamic-config value (BrokerService's configuration watch).

``POST /admin/v2/brokers/configuration/{name}/{value}`` stores any value of a dynamic key (only
loadManagerClassName has a validator); every broker then sets the field from the string with
``FieldParser.value``: ``Boolean.valueOf`` for a boolean (true only for "true", any case; anything else is
false), ``Integer.valueOf``/``Double.valueOf`` for numbers — a value that does not parse throws, is logged,
and the setting keeps its value. The simulator applies the value at once on every broker.
"""

from __future__ import annotations

import dataclasses

from pulsar_lb_operator.strategies import CONFIG_ALIASES, ConfigError, LoadBalancerConfig


def effective_config(config: LoadBalancerConfig, name: str, value: str) -> LoadBalancerConfig:
    """``config`` with the stored ``value`` of ``name`` applied as a broker applies it (unchanged when it
    does not parse or is out of the setting's range)."""
    key = CONFIG_ALIASES.get(name, name)
    fields = {f.name: f for f in dataclasses.fields(LoadBalancerConfig)}
    if key in fields and str(fields[key].type) == "bool":
        value = "true" if value.lower() == "true" else "false"  # Boolean.valueOf: no trim, any case
    try:
        return config.replace({name: value})
    except ConfigError:
        return config
