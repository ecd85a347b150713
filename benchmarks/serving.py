"""Benchmark: how fast the simulator's HTTP server answers, with 1,000 brokers each on its own address.

    python benchmarks/serving.py                          # 1,000 brokers, 10,000 bundles
    python benchmarks/serving.py --baseline-python /other/venv/bin/python   # against another installation

The cluster (the shipped ``large-1000`` scenario at the size asked, each broker loaded alike, as
``benchmarks/scale.py`` builds it) is served by ``simulator.http.serve`` in a process of its own; with
``--baseline-python`` a second process serves the same cluster from another installation of the project
(an older checkout, say) and the runs alternate between the two, so both are measured under the same
load. A client in a third process — one asyncio loop writing requests and reading answers by their
Content-Length, far cheaper per request than the server — sends ``--concurrency`` (64: the collector's)
requests at once, ``--rounds`` over every broker per run:

* **health**: ``GET /admin/v2/brokers/health`` on a kept-alive connection to each broker — the transport
  alone: read a request, route it, answer;
* **load report**: ``GET /admin/v2/broker-stats/load-report``, kept alive — what the collector reads;
* **new connection**: health on a connection of its own, closed after the answer — accept and tear down.

For each: requests per second, and the server's CPU time per request (its process clock around the run,
so what the client costs does not count). Each figure is the best of ``--repeat`` runs (the fastest rate,
and apart the least CPU); the ratios compare the two servers' figures of the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from pulsar_lb_operator.benchmarks.scale import scenario_data

# The server's process: only what both an old and a new installation have (serve, the cluster, a scenario).
SERVER = """
import json, sys, time
import pulsar_lb_operator
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.http import serve
from pulsar_lb_operator.simulator.scenario import parse_scenario
data = json.loads(sys.stdin.readline())
sim = serve(lambda allocate: SimulatedCluster(parse_scenario(data), allocate))
try:
    print(json.dumps({"brokers": sim.cluster.active_ids(), "source": pulsar_lb_operator.__file__}), flush=True)
    for line in sys.stdin:
        if line.strip() != "cpu":
            break
        print(time.process_time(), flush=True)
finally:
    sim.stop()
"""
WORKLOADS = ("health", "load report", "new connection")
PATHS = {"health": "/admin/v2/brokers/health", "load report": "/admin/v2/broker-stats/load-report"}


class Server:
    """The simulator serving ``data`` in a process of ``python``'s own; stopped (and waited for) by ``stop``."""

    def __init__(self, python: str, data: dict[str, Any]) -> None:
        self._process = subprocess.Popen(
            [python, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            assert self._process.stdin is not None and self._process.stdout is not None
            with contextlib.suppress(BrokenPipeError):  # it has ended already: said below
                self._process.stdin.write(json.dumps(data) + "\n")
                self._process.stdin.flush()
            line = self._process.stdout.readline()
            if not line:
                raise RuntimeError(f"{python}: the simulator did not start (exit code {self._process.wait()})")
            info = json.loads(line)
        except BaseException:
            self.stop()
            raise
        self.brokers: list[str] = info["brokers"]
        self.source: str = info["source"]

    def cpu_s(self) -> float:
        """The server process's CPU time so far."""
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write("cpu\n")
        self._process.stdin.flush()
        return float(self._process.stdout.readline())

    def stop(self) -> None:
        """End of input tells it to stop serving and exit; killed if it has not within 30 s."""
        for stream in (self._process.stdin, self._process.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()
        try:
            self._process.wait(30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


@dataclass
class Run:
    requests: int
    seconds: float
    server_cpu_s: float

    @property
    def per_second(self) -> float:
        return self.requests / self.seconds

    @property
    def cpu_us(self) -> float:
        return self.server_cpu_s / self.requests * 1e6


def _request(path: str, host: str, close: bool) -> bytes:
    connection = "close" if close else "keep-alive"
    return f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: {connection}\r\n\r\n".encode()


async def _answer(reader: asyncio.StreamReader) -> int:
    """Read one answer; its status."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return int(head.split(b" ", 2)[1])


class Client:
    """Kept-alive connections to every broker (opened on first use) and the requests of one workload."""

    def __init__(self, brokers: list[str], concurrency: int) -> None:
        self.brokers = brokers
        self.concurrency = concurrency
        self.connections: dict[str, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}

    async def _kept_alive(self, broker: str, path: str) -> int:
        if broker not in self.connections:
            host, port = broker.rsplit(":", 1)
            self.connections[broker] = await asyncio.open_connection(host, int(port))
        reader, writer = self.connections[broker]
        writer.write(_request(path, broker, close=False))
        return await _answer(reader)

    @staticmethod
    async def _fresh(broker: str, path: str) -> int:
        host, port = broker.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(_request(path, broker, close=True))
            return await _answer(reader)
        finally:
            writer.close()
            await writer.wait_closed()

    async def run(self, workload: str, rounds: int) -> int:
        """Every broker asked ``rounds`` times, ``concurrency`` requests at once; the number of requests."""
        path = PATHS.get(workload, PATHS["health"])
        ask = self._fresh if workload == "new connection" else self._kept_alive
        queue = [broker for _ in range(rounds) for broker in self.brokers]
        position = 0

        async def worker() -> None:
            nonlocal position
            while position < len(queue):
                broker = queue[position]
                position += 1
                status = await ask(broker, path)
                if status != 200:
                    raise RuntimeError(f"{broker}{path}: HTTP {status}")

        await asyncio.gather(*(worker() for _ in range(self.concurrency)))
        return len(queue)

    async def close(self) -> None:
        for _, writer in self.connections.values():
            writer.close()
        self.connections.clear()


def _raise_open_files(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def measure(servers: dict[str, Server], rounds: int, repeat: int, concurrency: int) -> dict[str, dict[str, list[Run]]]:
    """Every run of each workload on each server, the servers alternating within every repeat."""
    runs: dict[str, dict[str, list[Run]]] = {name: {w: [] for w in WORKLOADS} for name in servers}

    async def main() -> None:
        clients = {name: Client(server.brokers, concurrency) for name, server in servers.items()}
        try:
            for client in clients.values():  # warm up: every connection open, every report serialized
                for workload in WORKLOADS:
                    await client.run(workload, 1)
            for attempt in range(repeat):
                order = list(servers) if attempt % 2 == 0 else list(reversed(servers))
                for workload in WORKLOADS:
                    for name in order:
                        cpu = servers[name].cpu_s()
                        started = time.perf_counter()
                        count = await clients[name].run(workload, rounds)
                        runs[name][workload].append(
                            Run(count, time.perf_counter() - started, servers[name].cpu_s() - cpu)
                        )
        finally:
            for client in clients.values():
                await client.close()

    asyncio.run(main())
    return runs


def table(runs: dict[str, dict[str, list[Run]]]) -> str:
    """Per workload and server the best rate and, apart, the least server CPU per request (each of its own
    run: what other processes took varies from run to run), and their ratios between the two servers."""
    names = list(runs)
    header = ["workload"]
    for name in names:
        header += [f"{name} req/s", f"{name} server µs/req"]
    if len(names) == 2:
        header += [f"req/s {names[1]} / {names[0]}", f"server µs/req {names[1]} / {names[0]}"]
    rows = [header, ["---"] + ["---:"] * (len(header) - 1)]
    for workload in WORKLOADS:
        rate = {name: max(run.per_second for run in runs[name][workload]) for name in names}
        cpu = {name: min(run.cpu_us for run in runs[name][workload]) for name in names}
        row = [workload]
        for name in names:
            row += [f"{rate[name]:,.0f}", f"{cpu[name]:.0f}"]
        if len(names) == 2:
            before, after = names
            row += [f"{rate[after] / rate[before]:.2f}×", f"{cpu[after] / cpu[before]:.2f}×"]
        rows.append(row)
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=1000)
    parser.add_argument("--bundles", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5, help="requests to every broker per run (default 5)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per workload and server; the best counts")
    parser.add_argument("--concurrency", type=int, default=64, help="requests in flight at once (default 64)")
    parser.add_argument(
        "--baseline-python", metavar="PYTHON", help="also serve from this interpreter's installation, as baseline"
    )
    args = parser.parse_args(argv)
    for name in ("brokers", "bundles", "rounds", "repeat", "concurrency"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    data = scenario_data(args.brokers, args.bundles)
    _raise_open_files(2 * args.brokers + 256)  # a kept-alive connection to every broker of both servers
    pythons = {"this": sys.executable}
    if args.baseline_python:
        pythons = {"baseline": args.baseline_python, **pythons}
    servers: dict[str, Server] = {}
    try:
        for name, python in pythons.items():
            started = time.perf_counter()
            servers[name] = Server(python, data)
            print(
                f"{name}: {servers[name].source}, {len(servers[name].brokers)} brokers served in "
                f"{time.perf_counter() - started:.1f} s",
                file=sys.stderr,
                flush=True,
            )
        runs = measure(servers, args.rounds, args.repeat, args.concurrency)
    finally:
        for server in servers.values():
            server.stop()
    print(f"{args.brokers:,} brokers, {args.bundles:,} bundles; best of {args.repeat} runs of {args.rounds} rounds")
    print(table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
