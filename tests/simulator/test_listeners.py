"""The simulator as deployed clusters are: https listeners with a CA made at start, mutual TLS, advertised
ids that do not resolve, and the window in which a bundle being unloaded refuses another unload."""

import pytest
import requests

from pulsar_lb_operator.simulator.cluster import UNLOAD_WINDOW_S, SimulatedCluster
from pulsar_lb_operator.simulator.http import serve
from pulsar_lb_operator.simulator.scenario import EventSpec, parse_scenario
from tests.builders import SMALL_SCENARIO as SMALL

T = 10


def served(**kwargs):
    return serve(lambda allocate: SimulatedCluster(parse_scenario(SMALL), allocate), **kwargs)


def path_of(bundle):
    namespace, bundle_range = bundle.rsplit("/", 1)
    return f"/admin/v2/namespaces/{namespace}/{bundle_range}"


def test_each_broker_serves_https_beside_http_and_publishes_its_tls_url():
    with served(tls=True) as sim:
        ca = sim.tls.ca_file
        broker = sim.cluster.by_name("broker-1")
        report = requests.get(f"{sim.url_of('broker-1')}/admin/v2/broker-stats/load-report", verify=ca, timeout=T)
        assert report.json()["webServiceUrlTls"] == broker.web_url_tls == sim.url_of("broker-1")
        assert report.json()["webServiceUrl"] == broker.web_url == f"http://{broker.id}"
        plain = requests.get(f"{broker.web_url}/admin/v2/clusters", timeout=T)  # the plain listener still answers
        assert plain.json() == ["sim"]
        # an https request is redirected to the https URL of the broker it names (maybeRedirectToBroker)
        url = f"{sim.admin_url}/admin/v2/brokers/sim/{broker.id}/ownedNamespaces"
        hop = requests.get(url, verify=ca, allow_redirects=False, timeout=T)
        assert hop.status_code == 307 and hop.headers["Location"].startswith(broker.web_url_tls + "/")
        hop = requests.get(url.replace(sim.admin_url, sim.cluster.by_name("broker-0").web_url), allow_redirects=False)
        assert hop.headers["Location"].startswith(broker.web_url + "/")  # over http: the http URL
        bundle = sim.cluster.owned_by(broker.id)[0]
        topic = next(t.name for t in sim.cluster.topics_in(bundle)).split("://")[1]
        lookup = requests.get(f"{sim.admin_url}/lookup/v2/topic/persistent/{topic}", verify=ca, timeout=T).json()
        assert lookup["httpUrlTls"] == broker.web_url_tls and lookup["httpUrl"] == broker.web_url


def test_a_restarted_broker_listens_on_the_same_https_port():
    with served(tls=True) as sim:
        before = sim.url_of("broker-2")
        restart = EventSpec(at_s=sim.cluster.now_s + 1, type="restart_broker", broker="broker-2", interval_s=10)
        sim.cluster.events.append(restart)
        sim.cluster.advance(2)  # stopped, under the cluster's lock
        with pytest.raises(requests.ConnectionError):
            requests.get(f"{before}/admin/v2/clusters", verify=sim.tls.ca_file, timeout=T)
        sim.cluster.advance(10)  # started again, under the cluster's lock: its listeners come back
        assert sim.url_of("broker-2") == before
        assert requests.get(f"{before}/admin/v2/clusters", verify=sim.tls.ca_file, timeout=T).json() == ["sim"]


def test_mutual_tls_requires_a_client_certificate_from_the_ca_and_takes_the_role_from_it():
    with served(client_auth=True) as sim:
        ca, url = sim.tls.ca_file, f"{sim.admin_url}/admin/v2/clusters"
        with pytest.raises(requests.exceptions.RequestException):
            requests.get(url, verify=ca, timeout=T)  # no certificate: the handshake is refused
        assert requests.get(url, verify=ca, cert=sim.tls.client_cert("superuser"), timeout=T).json() == ["sim"]
        user = requests.get(url, verify=ca, cert=sim.tls.client_cert("app-1"), timeout=T)
        assert user.status_code == 401 and user.json() == {"reason": "This operation requires super-user access"}
        assert (
            requests.get(f"{sim.cluster.by_name('broker-0').web_url}/admin/v2/clusters", timeout=T).status_code == 401
        )


def test_advertised_ids_do_not_resolve_and_each_broker_has_a_loopback_port_of_its_own():
    with served(advertised_domain="pulsar.svc") as sim:
        assert sorted(sim.cluster.brokers) == [f"broker-{i}.pulsar.svc:8080" for i in range(3)]
        listed = requests.get(f"{sim.url_of('broker-1')}/admin/v2/brokers/sim", timeout=T).json()
        assert listed == sorted(sim.cluster.brokers)
        report = requests.get(f"{sim.url_of('broker-1')}/admin/v2/broker-stats/load-report", timeout=T).json()
        assert report["webServiceUrl"] == "http://broker-1.pulsar.svc:8080"  # what it publishes
        assert "pulsar/broker-1.pulsar.svc:8080/0x00000000_0xffffffff" in report["bundles"]
        before = sim.url_of("broker-1")
        sim.cluster.crash("broker-1")
        sim.cluster._start(sim.cluster.by_name("broker-1"))
        assert sim.url_of("broker-1") == before


def test_a_bundle_being_unloaded_refuses_another_unload_for_a_short_window(sim):
    owner = sim.cluster.by_name("broker-0")
    bundle = sim.cluster.owned_by(owner.id)[0]
    assert requests.put(f"{owner.web_url}{path_of(bundle)}/unload", timeout=T).status_code == 204
    dest = sim.cluster.by_name("broker-2").id
    again = requests.put(f"{sim.admin_url}{path_of(bundle)}/unload?destinationBroker={dest}", timeout=T)
    assert again.status_code == 500 and again.headers["Content-Type"] == "text/plain"
    assert again.text.startswith("\n --- An unexpected error occurred in the server ---\n\nMessage: ")
    assert f"Namespace bundle {bundle} is being unloaded" in again.text
    assert sim.cluster.affinity == {
        sim.cluster.affinity_key(bundle): dest
    }  # the leader recorded the destination before it failed
    sim.cluster.advance(UNLOAD_WINDOW_S)
    assert requests.put(f"{sim.admin_url}{path_of(bundle)}/unload", timeout=T).status_code == 204
    sim.cluster.advance(5)
    assert sim.cluster.owner_of(bundle) == dest
