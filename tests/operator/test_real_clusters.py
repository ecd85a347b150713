"""Real clusters as they are deployed: brokers' web URLs from what they publish (TLS, advertised addresses,
overrides), authentication (token file rotation, TLS client certificates, OAuth2 client credentials) for
the admin client and pulsar-client alike, and bundles already in transition — each end to end against
the simulator, plus the admin client's rules on its own."""

import contextlib
import json
import os
import random
import time
from typing import ClassVar

import pytest
import responses
import yaml

from pulsar_lb_operator import cli
from pulsar_lb_operator.act.executor import Executor, Safety
from pulsar_lb_operator.adminapi import AdminClient, BadResponse, Conflict, ServerError, errors
from pulsar_lb_operator.adminapi.auth import OAuth2Credentials, TokenCredentials, from_settings
from pulsar_lb_operator.record.audit import AuditPublisher, Spool
from pulsar_lb_operator.records import Outcome
from pulsar_lb_operator.run import live
from pulsar_lb_operator.run.cycle import CycleContext, OperatorState, run_cycle
from pulsar_lb_operator.run.settings import OperatorSettings, resolve
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.http import serve
from pulsar_lb_operator.simulator.scenario import load_scenario
from pulsar_lb_operator.strategies import Unload
from pulsar_lb_operator.strategies.config import ConfigError
from tests.builders import auth_settings
from tests.oauth2_issuer import Issuer

ACT_NOW = ["--set", "loadBalancerAvgShedderHitCountHighThreshold=1", "--set", "pauseSeconds=0"]
SECRET = "tok-" + "5ecret" * 6


@contextlib.contextmanager
def served(**kwargs):
    """The demo scenario (4 brokers, broker-0 hot) with wall-clock reports, served with ``kwargs``."""
    scenario = load_scenario("demo")
    with serve(lambda allocate: SimulatedCluster(scenario, allocate, int(time.time() * 1000)), **kwargs) as sim:
        yield sim


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # state/operator-state.json and its lock
    for name in ("PULSAR_ADMIN_URL", "PULSAR_LB_TOKEN"):
        monkeypatch.delenv(name, raising=False)


def rebalance(capsys, *args):
    code = cli.main(["rebalance", "--output", "json", *args])
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    return code, (json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}), err  # the "result" line


def executed(doc):
    return [o for o in doc.get("outcomes", []) if o["outcome"] == "executed"]


# ---------------------------------------------------------------------------------- 3. broker web URLs


def test_a_whole_cycle_over_tls_reads_each_broker_at_the_https_url_it_publishes(capsys):
    with served(tls=True) as sim:
        assert sim.admin_url.startswith("https://")
        report = sim.cluster.load_report(sim.cluster.by_name("broker-1").id)
        assert report["webServiceUrlTls"].startswith("https://127.0.0.1:") and report["webServiceUrl"].startswith(
            "http://"
        )
        code, doc, err = rebalance(
            capsys, "--admin-url", sim.admin_url, "--no-dry-run", "--set", f"caBundle={sim.tls.ca_file}", *ACT_NOW
        )
        assert code == 0, err
        assert doc["skippedBrokers"] == {} and len(executed(doc)) == 5  # the per-broker cap of 5
        sim.cluster.advance(5)  # clients reconnect: the leader assigns each bundle to its destination
        assert all(sim.cluster.owner_of(o["bundle"]) == o["destination"] for o in executed(doc))


def test_before_a_report_the_https_url_comes_from_the_admin_apis_redirect_then_from_the_reports():
    with served(tls=True) as sim:
        client = AdminClient(sim.admin_url, ca_bundle=sim.tls.ca_file, retries=1)
        ids = client.active_brokers(sim.cluster.scenario.cluster)
        for broker_id in ids:  # ids carry the plain HTTP port; the URL used is the registered https one
            assert client.broker_url(broker_id) == sim.cluster.brokers[broker_id].web_url_tls
        asked = [r for r in sim.requests if r.path.endswith("/ownedNamespaces")]
        assert len(asked) == len(ids) + 1  # the admin URL's own broker is asked of another one
        for broker_id in ids:
            client.load_report(broker_id)
        client.active_brokers(sim.cluster.scenario.cluster)
        assert [client.broker_url(b) for b in ids] == [sim.cluster.brokers[b].web_url_tls for b in ids]
        assert len([r for r in sim.requests if r.path.endswith("/ownedNamespaces")]) == len(asked)  # no more
        client.close()


def test_advertised_ids_that_do_not_resolve_need_the_override_and_then_the_whole_cycle_runs(capsys, tmp_path):
    with served(advertised_domain="pulsar.svc") as sim:
        ids = sorted(sim.cluster.brokers)
        assert ids[0] == "broker-0.pulsar.svc:8080"
        code, doc, _ = rebalance(capsys, "--admin-url", sim.admin_url, "--dry-run", *ACT_NOW)
        assert set(doc["skippedBrokers"]) == set(ids)  # what they publish cannot be reached from here
        assert all("cannot reach" in why for why in doc["skippedBrokers"].values())

        urls = {b.id: sim.url_of(b.name) for b in sim.cluster.brokers.values()}  # as NAT or port-forwards give
        (tmp_path / "settings.yaml").write_text(yaml.safe_dump({"brokerWebServiceUrls": urls}))
        entry = sim.url_of("broker-2")  # not the leader: each unload is redirected to the leader's advertised URL
        code, doc, err = rebalance(capsys, "--admin-url", entry, "--config", "settings.yaml", "--no-dry-run", *ACT_NOW)
        assert code == 0, err
        assert doc["skippedBrokers"] == {} and len(executed(doc)) == 5
        # each 307 to an advertised address was followed to that broker's override
        statuses = [(r.broker_name, r.status) for r in sim.mutating_requests()]
        assert statuses == [("broker-2", 307), ("broker-0", 204)] * 5
        sim.cluster.advance(5)
        assert all(sim.cluster.owner_of(o["bundle"]) == o["destination"] for o in executed(doc))


@responses.activate
def test_the_published_url_is_used_only_on_a_host_the_cluster_lists():
    admin = AdminClient("https://broker-a:8443", retries=1)
    responses.get("https://broker-a:8443/admin/v2/brokers/c", json=["broker-a:8080", "broker-b:8080"])
    admin.active_brokers("c")
    hb = "pulsar/c/broker-b:8080/0x00000000_0xffffffff"
    responses.get(
        "https://broker-b:8443/admin/v2/broker-stats/load-report",
        json={"webServiceUrl": "http://broker-b:8080", "webServiceUrlTls": "https://broker-b:8443", "bundles": [hb]},
    )
    where = "/admin/v2/brokers/c/broker-b:8080/ownedNamespaces"  # before any report: the registration
    responses.get(f"https://broker-a:8443{where}", status=307, headers={"Location": f"https://broker-b:8443{where}"})
    admin.load_report("broker-b:8080")
    assert admin.broker_url("broker-b:8080") == "https://broker-b:8443"  # TLS, as the admin URL is https
    responses.get(
        "https://broker-b:8443/admin/v2/broker-stats/load-report",
        json={"webServiceUrlTls": "https://attacker.example:8443", "bundles": [hb]},
    )
    admin.load_report("broker-b:8080")
    assert admin.broker_url("broker-b:8080") == "https://broker-b:8443"  # not a host the cluster lists
    assert not admin.is_known("https://attacker.example:8443")


@responses.activate
def test_a_report_that_another_broker_answered_is_refused_not_filed_under_the_wrong_broker():
    admin = AdminClient("http://proxy:8080", retries=1)
    responses.get("http://proxy:8080/admin/v2/brokers/c", json=["b0:8080", "b1:8080"])
    admin.active_brokers("c")
    admin.broker_urls = {"b0:8080": "http://proxy:8080", "b1:8080": "http://proxy:8080"}  # a wrong override
    responses.get(
        "http://proxy:8080/admin/v2/broker-stats/load-report",
        json={"bundles": ["pulsar/b1:8080/0x00000000_0xffffffff"], "webServiceUrl": "http://b1:8080"},
    )
    with pytest.raises(BadResponse, match="is broker b1:8080's, not b0:8080's"):
        admin.load_report("b0:8080")
    assert admin.load_report("b1:8080")["webServiceUrl"] == "http://b1:8080"


@responses.activate
def test_a_report_decoded_once_is_checked_as_a_decoded_document_is():
    """The collector's path (the bytes decoded straight into checked fields): a report another broker
    answered is refused all the same, and the web URL a listed broker publishes is learned all the same."""
    from pulsar_lb_operator.strategies.snapshots import DecodedReport, decode_load_report
    from tests.builders import broker_report

    admin = AdminClient("https://broker-a:8443", retries=1)
    responses.get("https://broker-a:8443/admin/v2/brokers/c", json=["broker-a:8080", "broker-b:8080"])
    admin.active_brokers("c")
    where = "/admin/v2/brokers/c/broker-b:8080/ownedNamespaces"  # before any report: the registration
    responses.get(f"https://broker-a:8443{where}", status=307, headers={"Location": f"https://broker-b:8443{where}"})
    report = broker_report()
    report.update(webServiceUrl="http://broker-b:8080", webServiceUrlTls="https://broker-b:9443")
    report["bundles"] = ["pulsar/c/broker-a:8080/0x00000000_0xffffffff"]
    responses.get("https://broker-b:8443/admin/v2/broker-stats/load-report", json=report)
    with pytest.raises(BadResponse, match="is broker broker-a:8080's, not broker-b:8080's"):
        admin.load_report("broker-b:8080", decode=decode_load_report)
    report["bundles"] = ["pulsar/c/broker-b:8080/0x00000000_0xffffffff"]
    responses.replace(responses.GET, "https://broker-b:8443/admin/v2/broker-stats/load-report", json=report)
    answer = admin.load_report("broker-b:8080", decode=decode_load_report)
    assert type(answer) is DecodedReport and dict(answer) == report
    assert admin.broker_url("broker-b:8080") == "https://broker-b:9443"  # TLS, as the admin URL is https


@responses.activate
def test_behind_a_proxy_discovery_asks_each_broker_once_and_falls_back_to_the_id():
    admin = AdminClient("https://proxy:443", retries=1)
    ids = [f"b{i}:8080" for i in range(6)]
    responses.get("https://proxy:443/admin/v2/brokers/c", json=ids)
    for broker_id in ids:  # the proxy follows redirects itself: every broker seems to answer at the admin URL
        responses.get(f"https://proxy:443/admin/v2/brokers/c/{broker_id}/ownedNamespaces", json={})
    admin.active_brokers("c")
    assert [admin.broker_url(b) for b in ids] == [f"https://{b}" for b in ids]
    assert len(responses.calls) == 1 + len(ids)  # N calls, not N²; none again


@responses.activate
def test_the_template_override_and_redirects_to_published_addresses_rerouted():
    admin = AdminClient("https://gw.example:443", broker_url_template="https://gw.example:443/{host}", retries=1)
    responses.get("https://gw.example:443/admin/v2/brokers/c", json=["b0.svc:8080", "b1.svc:8080"])
    admin.active_brokers("c")
    assert admin.broker_url("b1.svc:8080") == "https://gw.example:443/b1.svc"
    responses.put(
        "https://gw.example:443/admin/v2/namespaces/t/ns/0x0_0x1/unload",
        status=307,
        headers={"Location": "https://b1.svc:8443/admin/v2/namespaces/t/ns/0x0_0x1/unload"},
    )
    responses.put("https://gw.example:443/b1.svc/admin/v2/namespaces/t/ns/0x0_0x1/unload", status=204)
    admin._learn("b1.svc:8080", {"webServiceUrl": "http://b1.svc:8080", "webServiceUrlTls": "https://b1.svc:8443"})
    admin.unload("t/ns/0x0_0x1")
    assert [c.request.url for c in responses.calls][
        -1
    ] == "https://gw.example:443/b1.svc/admin/v2/namespaces/t/ns/0x0_0x1/unload"


# ---------------------------------------------------------------------------------- 5. authentication


def _cycle(client, settings, config, state, cluster):
    executor = Executor(client, cluster, settings.safety(config))
    return run_cycle(CycleContext(client, cluster, config, executor), state, random.Random(1))


def test_a_token_file_rotated_in_place_is_picked_up_between_cycles_without_restart(tmp_path):
    # Kubernetes mounts a Secret as <dir>/token → ..data/token, ..data → ..<timestamp>; an update swaps ..data
    mount = tmp_path / "secret"
    (mount / "..v1").mkdir(parents=True)
    (mount / "..v1" / "token").write_text("first-token\n")
    os.symlink("..v1", mount / "..data")
    os.symlink("..data/token", mount / "token")
    with served(token="first-token") as sim:
        settings, config, _ = resolve(
            {"tokenFile": str(mount / "token"), "pauseSeconds": 0, "dryRun": False},
            {},
            {"adminUrl": sim.admin_url, "cluster": sim.cluster.scenario.cluster},
        )
        config = config.replace({"loadBalancerAvgShedderHitCountHighThreshold": 1})
        client, cluster = live.connect(settings)
        first = _cycle(client, settings, config, OperatorState(), cluster)
        assert first.skipped_brokers == {} and Outcome.EXECUTED in {r.outcome for r in first.records}

        sim.token = "second-token"  # the cluster now wants the new token...
        (mount / "..v2").mkdir()
        (mount / "..v2" / "token").write_text("second-token\n")
        os.symlink("..v2", mount / "..data.tmp")
        os.replace(mount / "..data.tmp", mount / "..data")  # ...and the kubelet swaps it in atomically
        sim.cluster.advance(61)
        second = _cycle(client, settings, config, first.state, cluster)  # the same client: no restart
        assert second.skipped_brokers == {} and second.snapshot is not None and len(second.snapshot.brokers) == 4
        assert 401 not in {r.status for r in sim.requests}
        client.close()


def test_an_empty_token_file_is_named_as_such_and_a_later_empty_one_keeps_the_last_token(tmp_path, capsys):
    """An empty tokenFile sends nothing (before: a call without a token, and a 401 blaming "the token read from
    tokenFile"); one emptied in place after a good read keeps the last token, as an unreadable one does."""
    token = tmp_path / "token"
    token.write_text("\n")
    with served(token="first-token") as sim:
        code, _, err = rebalance(capsys, "--admin-url", sim.admin_url, "--token-file", str(token))
        assert code == 2 and "tokenFile: cannot read" in err and "the file is empty" in err
        assert sim.requests == []
        token.write_text("first-token\n")
        credentials = TokenCredentials(file=str(token))
        assert credentials.authorization() == "Bearer first-token"
        token.write_text("")
        assert credentials.authorization() == "Bearer first-token"


def test_a_whole_cycle_with_a_tls_client_certificate(capsys):
    with served(client_auth=True) as sim:
        cert, key = sim.tls.client_cert("superuser")
        common = ["--admin-url", sim.admin_url, "--set", f"caBundle={sim.tls.ca_file}"]
        code, _, err = rebalance(capsys, *common, "--dry-run")
        assert code == 1 and "cannot reach" in err  # no certificate: the handshake is refused
        auth = ["--set", "authPlugin=tls", "--set", f"tlsCertFile={cert}", "--set", f"tlsKeyFile={key}"]
        code, doc, err = rebalance(capsys, *common, *auth, "--no-dry-run", *ACT_NOW)
        assert code == 0, err
        assert doc["skippedBrokers"] == {} and len(executed(doc)) == 5
        other, other_key = sim.tls.client_cert("someone")  # a valid certificate of a role that is not super-user
        wrong = ["--set", "authPlugin=tls", "--set", f"tlsCertFile={other}", "--set", f"tlsKeyFile={other_key}"]
        code, _, err = rebalance(capsys, *common, *wrong, "--dry-run")
        assert code == 1 and "requires super-user access" in err


def test_a_whole_cycle_with_oauth2_client_credentials(capsys, tmp_path):
    with Issuer(audience="urn:sn:pulsar:sim") as issuer, served(token_check=issuer.valid) as sim:
        credentials = issuer.credentials_file(tmp_path / "credentials.json")
        auth = [
            "--set",
            "authPlugin=oauth2",
            "--set",
            f"oauth2IssuerUrl={issuer.url}",
            "--set",
            "oauth2Audience=urn:sn:pulsar:sim",
            "--set",
            f"oauth2CredentialsFile={credentials}",
        ]
        code, doc, err = rebalance(capsys, "--admin-url", sim.admin_url, *auth, "--no-dry-run", *ACT_NOW)
        assert code == 0, err
        assert doc["skippedBrokers"] == {} and len(executed(doc)) == 5
        assert len(issuer.requests) == 1  # one token for the whole cycle
        assert issuer.requests[0] == {
            "grant_type": "client_credentials",
            "client_id": issuer.client_id,
            "client_secret": issuer.client_secret,
            "audience": "urn:sn:pulsar:sim",
        }
        assert issuer.client_secret not in err and not any(t in err for t in issuer.issued)


def test_an_oauth2_token_is_refreshed_before_it_expires_and_after_a_401(tmp_path):
    now = [1000.0]
    with Issuer(expires_in=100, clock=lambda: now[0]) as issuer:
        creds = OAuth2Credentials(
            issuer.url, issuer.credentials_file(tmp_path / "c.json"), issuer.audience, clock=lambda: now[0]
        )
        first = creds.bearer()
        assert issuer.valid(first) and creds.bearer() == first and creds.fetches == 1  # cached
        now[0] += 89
        assert creds.bearer() == first  # 89 % of its life: still the same
        now[0] += 2
        second = creds.bearer()  # past 90 %: a new one, while the old one is still valid
        assert second != first and issuer.valid(first) and creds.fetches == 2
        assert creds.renew() and creds.bearer() != second and creds.fetches == 3  # a 401 asks for a new one
        issuer.client_secret = "rotated"  # the IdP no longer takes ours: the error says why, not the secret
        now[0] += 200
        with pytest.raises(errors.AuthenticationError, match="invalid_client") as caught:
            creds.bearer()
        assert "client-s3cret-value" not in str(caught.value) and "s3cret" not in repr(creds)


def test_a_401_renews_the_credentials_and_the_call_is_tried_once_more(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("old")
    with served(token="new") as sim:
        client = AdminClient(sim.admin_url, credentials=TokenCredentials(file=str(token_file)), retries=1)
        with pytest.raises(errors.Unauthorized):
            client.clusters()
        token_file.write_text("new")
        os.utime(token_file, ns=(1, 1))  # same size, any mtime: a changed stamp is enough
        assert client.clusters() == [sim.cluster.scenario.cluster]
        client.close()


@pytest.mark.parametrize(
    "values, key",
    [
        ({"authPlugin": "kerberos"}, "authPlugin"),
        ({"authPlugin": "tls", "adminUrl": "https://b:8443"}, "tlsCertFile"),
        ({"tlsCertFile": "c.pem"}, "tlsKeyFile"),
        ({"authPlugin": "tls", "tlsCertFile": "c", "tlsKeyFile": "k", "adminUrl": "http://b:8080"}, "adminUrl"),
        ({"authPlugin": "oauth2", "oauth2CredentialsFile": "c.json"}, "oauth2IssuerUrl"),
        ({"authPlugin": "oauth2", "oauth2IssuerUrl": "https://idp"}, "oauth2CredentialsFile"),
        ({"oauth2IssuerUrl": "idp.example"}, "oauth2IssuerUrl"),
        ({"brokerWebServiceUrlTemplate": "https://{hostname}:8443"}, "brokerWebServiceUrlTemplate"),
        ({"brokerWebServiceUrls": {"b0:8080": "b0:8443"}}, "brokerWebServiceUrls"),
    ],
)
def test_auth_and_url_settings_are_validated_naming_the_key(values, key):
    with pytest.raises(ConfigError) as caught:
        resolve(values, {}, {})
    assert str(caught.value).startswith(f"{key}:")


def test_credential_files_are_checked_at_start_naming_the_key(tmp_path, capsys):
    args = ["--admin-url", "https://127.0.0.1:1", "--set", "authPlugin=tls"]
    missing = ["--set", f"tlsCertFile={tmp_path}/nope.pem", "--set", f"tlsKeyFile={tmp_path}/nope-key.pem"]
    code, _, err = rebalance(capsys, *args, *missing)
    assert code == 2 and err.startswith("operator: error: tlsCertFile: cannot read")
    (tmp_path / "bad.json").write_text("{}")
    oauth = ["--set", "authPlugin=oauth2", "--set", "oauth2IssuerUrl=http://127.0.0.1:1"]
    code, _, err = rebalance(
        capsys, "--admin-url", "http://127.0.0.1:1", *oauth, "--set", "oauth2CredentialsFile=bad.json"
    )
    assert code == 2 and "oauth2CredentialsFile: needs client_id and client_secret" in err


class _Recorder:
    """Stands in for pulsar's Client and Authentication classes: records how they were made."""

    made: ClassVar[list] = []

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs
        _Recorder.made.append(self)

    def create_producer(self, *args, **kwargs):
        return self

    def last_sequence_id(self):
        return -1

    def close(self):
        pass


@pytest.mark.parametrize("plugin", ["token", "tls", "oauth2"])
def test_the_audit_publisher_authenticates_as_the_admin_client_does(plugin, tmp_path, monkeypatch):
    import pulsar

    for name in ("Client", "AuthenticationToken", "AuthenticationTLS", "AuthenticationOauth2"):
        monkeypatch.setattr(pulsar, name, type(name, (_Recorder,), {}))
    _Recorder.made = []
    values = auth_settings(plugin, tmp_path, SECRET)
    settings = OperatorSettings(adminUrl="https://broker:8443", auditEnabled=True, caBundle="ca.pem", **values)
    publisher = AuditPublisher(Spool(tmp_path / "spool"), "pulsar+ssl://broker:6651", "persistent://p/a/t")
    publisher._credentials = from_settings(settings.auth())
    publisher._ensure_producer()
    client = next(m for m in _Recorder.made if type(m).__name__ == "Client")
    authentication = client.kwargs["authentication"]
    assert client.kwargs["tls_trust_certs_file_path"] is None  # (the publisher was made without a CA here)
    if plugin == "token":
        assert type(authentication).__name__ == "AuthenticationToken" and authentication.args[0]() == SECRET
    elif plugin == "tls":
        assert type(authentication).__name__ == "AuthenticationTLS"
        assert authentication.args == (str(tmp_path / "c.pem"), str(tmp_path / "k.pem"))
    else:
        assert type(authentication).__name__ == "AuthenticationOauth2"
        assert json.loads(authentication.args[0]) == {
            "issuer_url": "https://idp.example",
            "private_key": str(tmp_path / "creds.json"),
            "audience": "urn:pulsar",
        }


def test_a_password_in_the_admin_url_is_never_shown(capsys, monkeypatch):
    """A basic-auth login in adminUrl is a credential: no error line, record, log line or repr quotes it."""
    monkeypatch.setenv("PULSAR_LB_LOG_LEVEL", "debug")
    password = "Sup3r" + "SecretPw"
    code, _, err = rebalance(capsys, "--admin-url", f"http://admin:{password}@127.0.0.1:1")
    assert code == 1 and "cannot reach 127.0.0.1:1" in err and password not in err
    with served(faults=["*:PUT:/unload:reset"]) as sim:
        url = sim.admin_url.replace("http://", f"http://admin:{password}@")
        code, doc, err = rebalance(capsys, "--admin-url", url, "--no-dry-run", *ACT_NOW)
        assert doc["outcomes"] and {o["outcome"] for o in doc["outcomes"]} <= {"unknown", "skipped"}
        assert password not in json.dumps(doc) + err
    settings = OperatorSettings(adminUrl=f"https://admin:{password}@pulsar:8443", auditEnabled=True)
    assert password not in repr(settings) + settings.audit().service_url + repr(AdminClient(settings.adminUrl))


def test_secrets_are_never_logged(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PULSAR_LB_LOG_LEVEL", "debug")
    (tmp_path / "token").write_text(SECRET)
    with served(token=SECRET) as sim:
        code, _, err = rebalance(
            capsys, "--admin-url", sim.admin_url, "--token-file", "token", "--no-dry-run", *ACT_NOW
        )
        assert code == 0 and "action" in err and SECRET not in err
    with Issuer(audience="aud") as issuer, served(token_check=issuer.valid) as sim:
        creds = issuer.credentials_file(tmp_path / "creds.json")
        oauth = ["--set", "authPlugin=oauth2", "--set", f"oauth2IssuerUrl={issuer.url}", "--set", "oauth2Audience=aud"]
        code, _, err = rebalance(
            capsys, "--admin-url", sim.admin_url, *oauth, "--set", f"oauth2CredentialsFile={creds}", "--dry-run"
        )
        assert code == 0 and "OAuth2 token obtained" in err
        assert issuer.client_secret not in err and not any(token in err for token in issuer.issued)


# ---------------------------------------------------------------------------------- 6. transitions


def test_an_unload_of_a_bundle_already_being_unloaded_is_unknown_in_transition_then_verified():
    with served() as sim:
        settings, config, _ = resolve(
            {"pauseSeconds": 0, "dryRun": False, "verifyAfterSeconds": 0},
            {},
            {"adminUrl": sim.admin_url, "cluster": sim.cluster.scenario.cluster},
        )
        config = config.replace({"loadBalancerAvgShedderHitCountHighThreshold": 1})
        client, cluster = live.connect(settings)
        hot = sim.cluster.by_name("broker-0").id
        for bundle in sim.cluster.owned_by(hot):  # someone else (Pulsar's own shedder, a person) unloads them all
            sim.cluster.unload(bundle)
        first = _cycle(client, settings, config, OperatorState(), cluster)  # the reports still show them on broker-0
        unloads = [r for r in first.records if r.outcome is not Outcome.SKIPPED]  # (5 per broker at most)
        assert len(unloads) == 5 and {r.outcome for r in unloads} == {Outcome.UNKNOWN}
        assert all(r.detail.startswith("HTTP 500: in transition") and "is being unloaded" in r.detail for r in unloads)
        assert {p.bundle for p in first.state.executor.pending} == {r.action.bundle for r in unloads}
        assert first.failed == len(unloads)  # counted as done, with a person to look: exit 1 for rebalance

        sim.cluster.advance(5)  # the window passed; the clients looked the bundles up again
        second = _cycle(client, settings, config, first.state, cluster)
        verified = {r.action.bundle: r.outcome for r in second.verifications}
        # the leader kept our destination before it answered 500 (setNamespaceBundleAffinityAsync comes first)
        assert verified == {r.action.bundle: Outcome.MOVED_AS_PLANNED for r in unloads}
        assert not any(r.action.bundle in verified for r in second.records)  # in cooldown, not touched again
        client.close()


@responses.activate
@pytest.mark.parametrize(
    "status, body, cls, transition",
    [
        (
            500,
            "\n --- An unexpected error occurred in the server --- \n\nMessage: Namespace bundle t/ns/0x0_0x1 is "
            "being unloaded\n\nStacktrace:\n\njava.lang.IllegalStateException: …",
            ServerError,
            True,
        ),
        (500, {"reason": "Namespace is not active. ns:t/ns/0x0_0x1; state:0"}, ServerError, True),
        (409, {"reason": "Concurrent modification"}, Conflict, True),
        (409, {"reason": "Not allowed unload namespace bundle to inactive destination broker"}, Conflict, False),
        (500, {"reason": "Failed to unload"}, ServerError, False),
    ],
)
def test_answers_about_a_bundle_in_transition_are_recognised(status, body, cls, transition):
    kwargs = {"json": body} if isinstance(body, dict) else {"body": body}
    responses.put("http://b:8080/admin/v2/namespaces/t/ns/0x0_0x1/unload", status=status, **kwargs)
    with pytest.raises(cls) as caught:
        AdminClient("http://b:8080", retries=1).unload("t/ns/0x0_0x1")
    assert caught.value.in_transition is transition


def test_a_call_without_credentials_is_not_sent_and_fails(tmp_path):
    with served() as sim:
        creds = OAuth2Credentials("http://127.0.0.1:1", str(tmp_path / "missing.json"))
        client = AdminClient(sim.admin_url, credentials=creds, retries=1)
        executor = Executor(client, sim.cluster.scenario.cluster, Safety(dry_run=False))
        owner = sim.cluster.by_name("broker-0").id
        bundle = sim.cluster.owned_by(owner)[0]
        record = executor._execute(Unload(bundle, owner, sim.cluster.by_name("broker-1").id, "test"))
        assert record.outcome is Outcome.FAILED and record.detail.startswith("not sent: oauth2CredentialsFile")
        assert sim.mutating_requests() == []
        client.close()
