"""Conflict guard: two balancers must not fight. Pulsar's own shedder is on by default.

``loadBalancerSheddingEnabled`` (dynamic) stops both load managers' shedders: the modular one's doLoadShedding
and the extensible one's UnloadScheduler (``loadBalancerEnabled && loadBalancerSheddingEnabled``). The cycle
runs this guard (operator/collect/elm.py): on a modular cluster first, on the extensible load manager only once its load
data was read — never when the operator is not going to balance instead.
"""

from __future__ import annotations

import structlog

from pulsar_lb_operator.adminapi import AdminClient, AdminError

log = structlog.get_logger(__name__)


def check_builtin_shedding(client: AdminClient, disable: bool, dry_run: bool) -> str:
    """'off', 'on' (warned), 'would disable' (dry run: nothing sent) or 'disabled' (we turned it off).

    Reads the effective runtime value. A dry run never changes the cluster's configuration.
    """
    try:
        runtime = client.runtime_config()
        enabled = str(runtime.get("loadBalancerSheddingEnabled", "true")).strip().lower() == "true"
    except AdminError as exc:
        reason = getattr(exc, "reason", str(exc))
        if exc.status in (401, 403) and reason.startswith("HTTP "):  # Jetty's HTML page says nothing more
            reason = f"HTTP {exc.status}: the token was not accepted"
        log.warning("cannot read loadBalancerSheddingEnabled; assuming Pulsar's own shedder is on", reason=reason)
        enabled = True
    if not enabled:
        return "off"
    if disable and dry_run:
        log.warning(
            "dry run: would turn Pulsar's own shedder off (loadBalancerSheddingEnabled=false); nothing sent. "
            "Until then it may fight the plans this dry run prints"
        )
        return "would disable"
    if disable:
        client.set_dynamic_config("loadBalancerSheddingEnabled", "false")
        log.warning(
            "turned Pulsar's own shedder off: loadBalancerSheddingEnabled=false (dynamic config); "
            "set it back to true to hand balancing back to the brokers"
        )
        return "disabled"
    log.warning(
        "PULSAR'S OWN SHEDDER IS ON (loadBalancerSheddingEnabled=true): it will fight this operator. "
        "Turn it off, or run with disableBuiltinShedding: true"
    )
    return "on"
