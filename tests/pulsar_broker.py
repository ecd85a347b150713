"""A real binary-protocol Pulsar broker on loopback for tests: pulsar-lite's, started on a free port.

It can be stopped and started again on the same port and storage, as a broker outage looks to a client.
The launcher is the simulator's (simulator/elm.py), which starts the same broker for the extensible
load manager's topics.
"""

from __future__ import annotations

import json
import logging

import pulsar

from pulsar_lb_operator.simulator.elm import LiteBroker as _LiteBroker

_quiet = logging.getLogger("tests.pulsar_client")
_quiet.setLevel("CRITICAL")


class LiteBroker(_LiteBroker):
    """The simulator's pulsar-lite launcher, plus a reader of everything a topic holds."""

    def read_all(self, topic: str, subscription: str = "test", idle_ms: int = 1500) -> list[dict]:
        """Every message on the topic from the earliest, as JSON, until none comes for ``idle_ms``."""
        client = pulsar.Client(self.url, logger=_quiet)
        try:
            consumer = client.subscribe(topic, subscription, initial_position=pulsar.InitialPosition.Earliest)
            events = []
            while True:
                try:
                    message = consumer.receive(timeout_millis=idle_ms)
                except pulsar.Timeout:
                    return events
                events.append(json.loads(message.data()))
                consumer.acknowledge(message)
        finally:
            client.close()
