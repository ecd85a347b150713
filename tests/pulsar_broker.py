"""A real binary-protocol Pulsar broker on loopback for tests: pulsar-lite's, started on a free port.

It can be stopped and started again on the same port and storage, as a broker outage looks to a client.
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import time
from pathlib import Path

import pulsar
from pulsar_lite.binary_finder import find_pulsar_lite_binary

from tests.builders import free_port

_quiet = logging.getLogger("tests.pulsar_client")
_quiet.setLevel("CRITICAL")


class LiteBroker:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.url = f"pulsar://127.0.0.1:{self.port}"
        self._process: subprocess.Popen | None = None

    def start(self) -> LiteBroker:
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / "broker.log", "ab") as log:  # the child keeps its own copy
            self._process = subprocess.Popen(
                [
                    find_pulsar_lite_binary(),
                    "--addr",
                    f"127.0.0.1:{self.port}",
                    "--db-path",
                    str(self.directory / "db"),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"pulsar-lite did not listen on {self.port}")

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(10)
            self._process = None

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
