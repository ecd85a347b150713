"""A cluster that cannot be reached, as a person meets it: each way a connection fails is one line naming the URL,
what failed and the likely fix (not ``cannot reach: ConnectionError``); a malformed admin URL is refused before
anything is sent (exit 2); ``snapshot --out`` into a directory that does not exist is exit 2, with nothing
asked of the cluster and no directory made. Real sockets on loopback, the simulator for the TLS cases."""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
import threading
import time

import pytest
import requests

from pulsar_lb_operator import cli
from pulsar_lb_operator.adminapi import AdminClient, Timeouts
from pulsar_lb_operator.adminapi.errors import TransportError, transport_error
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.http import serve
from pulsar_lb_operator.simulator.scenario import load_scenario
from tests.builders import free_port, operator_script


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the state file and its lock
    for name in ("PULSAR_ADMIN_URL", "PULSAR_LB_TOKEN"):
        monkeypatch.delenv(name, raising=False)


@contextlib.contextmanager
def served(**kwargs):
    scenario = load_scenario("demo")
    with serve(lambda allocate: SimulatedCluster(scenario, allocate, int(time.time() * 1000)), **kwargs) as sim:
        yield sim


def error_line(capsys, *argv: str) -> tuple[int, str]:
    """The exit code and the one ``operator: error:`` line of a command (its only line of that kind)."""
    code = cli.main(list(argv))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("operator: ")]
    assert len(lines) == 1, err
    return code, lines[0]


def rebalance_line(capsys, admin_url: str, *extra: str) -> tuple[int, str]:
    return error_line(capsys, "rebalance", "--admin-url", admin_url, "--cluster", "sim", *extra)


def test_a_refused_port_says_nothing_listens_there(capsys):
    port = free_port()
    code, line = rebalance_line(capsys, f"http://127.0.0.1:{port}")
    assert code == 1
    assert f"cannot reach 127.0.0.1:{port}: connection refused — nothing listens on that port" in line
    assert "--admin-url" in line and "8080" in line and f"(http://127.0.0.1:{port}/admin/v2/" in line


def test_a_host_name_that_does_not_resolve_says_so(capsys):
    code, line = rebalance_line(capsys, "http://no-such-broker.invalid:8080")
    assert code == 1
    assert "cannot reach no-such-broker.invalid:8080: unknown host 'no-such-broker.invalid'" in line
    assert "check the host name in --admin-url" in line and "(http://no-such-broker.invalid:8080/admin/v2/" in line


def test_https_on_a_plain_http_port_says_to_use_http(capsys):
    with served() as sim:
        https = sim.admin_url.replace("http://", "https://")
        code, line = rebalance_line(capsys, https)
    netloc = https.removeprefix("https://")
    assert code == 1
    assert f"cannot reach {netloc}: TLS handshake failed: that port speaks plain HTTP — use http://{netloc}" in line
    assert f"({https}/admin/v2/" in line


def test_http_on_a_tls_port_says_to_use_https(capsys):
    with served(tls=True) as sim:
        plain = sim.admin_url.replace("https://", "http://")
        code, line = rebalance_line(capsys, plain)
    netloc = plain.removeprefix("http://")
    assert code == 1
    assert f"cannot reach {netloc}: the connection was closed without an HTTP answer" in line
    assert f"if that port serves TLS (webServicePortTls, 8443 by default), use https://{netloc}" in line


def test_a_certificate_nobody_trusts_asks_for_its_ca(capsys):
    with served(tls=True) as sim:
        code, line = rebalance_line(capsys, sim.admin_url)
        assert code == 1 and "certificate is not trusted" in line and "caBundle" in line
        fixed = ["--admin-url", sim.admin_url, "--cluster", "sim", "--set", f"caBundle={sim.tls.ca_file}"]
        assert cli.main(["rebalance", *fixed]) == 0  # the fix it names works


def test_a_broker_that_wants_a_client_certificate_says_which_settings_give_one(capsys):
    with served(client_auth=True) as sim:
        code, line = rebalance_line(capsys, sim.admin_url, "--set", f"caBundle={sim.tls.ca_file}")
    assert code == 1 and "cannot reach" in line and "client certificate, set tlsCertFile and tlsKeyFile" in line


def test_a_port_that_never_completes_the_connection_is_a_connect_timeout():
    """A listener whose backlog is full: the kernel drops new connections' SYNs, as a firewall would."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        with contextlib.ExitStack() as held:
            for _ in range(8):  # fill the accept queue (its size is the kernel's, from the backlog of 0)
                sock = held.enter_context(socket.socket())
                sock.settimeout(0.3)
                try:
                    sock.connect(("127.0.0.1", port))
                except OSError:
                    break
            client = AdminClient(f"http://127.0.0.1:{port}", timeouts=Timeouts(0.5, 2.0, 2.0), retries=1)
            with pytest.raises(TransportError) as caught:
                client.clusters()
    message = str(caught.value)
    assert f"cannot reach 127.0.0.1:{port}: timed out: no connection within 0.5 s" in message
    assert "firewall" in message and f"(http://127.0.0.1:{port}/admin/v2/clusters)" in message


def test_a_port_that_accepts_and_never_answers_is_a_read_timeout():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        accepted = []
        threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True).start()
        client = AdminClient(f"http://127.0.0.1:{port}", timeouts=Timeouts(1.0, 0.5, 2.0), retries=1)
        with pytest.raises(TransportError) as caught:
            client.clusters()
        for connection, _ in accepted:
            connection.close()
    message = str(caught.value)
    assert f"timed out: 127.0.0.1:{port} accepted the connection but sent no answer within 0.5 s" in message
    assert "not Pulsar's web service" in message


def test_an_address_a_broker_publishes_points_at_the_url_override_not_at_the_admin_url(capsys):
    """The admin URL resolves; the brokers' advertised ids do not (NAT, another network's DNS)."""
    with served(advertised_domain="pulsar.svc") as sim:
        code = cli.main(["rebalance", "--admin-url", sim.admin_url, "--output", "json"])
    out = capsys.readouterr().out
    assert code == 0
    assert "unknown host 'broker-0.pulsar.svc'" in out and "brokerWebServiceUrlTemplate" in out
    assert "check the host name in --admin-url" not in out


def test_a_certificate_for_another_name_and_a_missing_client_certificate_say_so():
    """OpenSSL's verdicts as Python raises them (a real broker's TLS 1.3 alert for a missing client certificate;
    the simulator's listener closes instead), wrapped as requests wraps them."""
    url = "https://broker-0:8443/admin/v2/clusters"
    mismatch = ssl.SSLCertVerificationError(1, "certificate verify failed")
    mismatch.verify_message = "Hostname mismatch, certificate is not valid for 'broker-0'."
    error = transport_error(url, requests.exceptions.SSLError(mismatch), 5, 30)
    assert "the broker's TLS certificate does not name 'broker-0'" in str(error) and str(error).endswith(f"({url})")
    alert = ssl.SSLError(1, "[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert certificate required")
    error = transport_error(url, requests.exceptions.SSLError(alert), 5, 30)
    assert "wants a client certificate it trusts: set tlsCertFile and tlsKeyFile" in str(error)


@pytest.mark.parametrize("url", ["http://h:1808O", "http://h:99999", "http://h:0", "https://h:"])
@pytest.mark.parametrize("command", ["rebalance", "snapshot"])
def test_a_malformed_admin_url_is_exit_2_before_anything_is_sent(capsys, url, command):
    argv = [command, "--admin-url", url, "--cluster", "c"]
    if command == "snapshot":
        argv += ["--out", "s.json"]
    started = time.monotonic()
    code, line = error_line(capsys, *argv)
    assert code == 2 and line.startswith(f"operator: error: adminUrl: {url!r}: the port ")
    assert "is not a number from 1 to 65535" in line
    assert time.monotonic() - started < 5  # refused at validation, not after a connection attempt


def test_the_daemon_with_a_malformed_admin_url_does_not_start(tmp_path):
    """A process of its own: a daemon that did start would run until stopped."""
    result = subprocess.run(
        [operator_script(), "run", "--admin-url", "http://h:1808O", "--cluster", "c", "--set", "metricsPort=0"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        "operator: error: adminUrl: 'http://h:1808O': the port '1808O' is not a number from 1 to 65535\n"
    )
    assert not (tmp_path / "state").exists()


def test_the_same_port_check_holds_for_every_url_setting(capsys):
    for key, value in (
        ("auditServiceUrl", "pulsar://b:665O"),
        ("elmServiceUrl", "pulsar+ssl://b:70000"),
        ("oauth2IssuerUrl", "https://issuer:44e/realms/pulsar"),
    ):
        code, line = error_line(capsys, "rebalance", "--admin-url", "http://b:8080", "--set", f"{key}={value}")
        assert code == 2 and line.startswith(f"operator: error: {key}: {value!r}: the port "), line


def test_snapshot_into_a_missing_directory_is_exit_2_and_creates_nothing(capsys, tmp_path):
    with served() as sim:
        code, line = error_line(capsys, "snapshot", "--admin-url", sim.admin_url, "--out", "no/such/dir/s.json")
        assert code == 2
        assert line == (
            "operator: error: --out 'no/such/dir/s.json': the directory 'no/such/dir' does not exist: create it first"
        )
        assert not (tmp_path / "no").exists() and sim.requests == []  # nothing asked of the cluster
        code, line = error_line(capsys, "snapshot", "--admin-url", sim.admin_url, "--out", str(tmp_path))
        assert code == 2 and "is a directory: give a file name" in line
        (tmp_path / "out").mkdir()
        assert cli.main(["snapshot", "--admin-url", sim.admin_url, "--out", "out/s.json"]) == 0
        assert (tmp_path / "out" / "s.json").exists()
