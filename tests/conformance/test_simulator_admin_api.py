"""The simulator against Pulsar master's admin API, over real loopback HTTP.

Each test names the Java method whose behaviour it checks. The rows of shared/reference/pulsar-admin-api.md §7
are numbered in the test names (row1 … row10). Error bodies: ``RestException(Status, message)`` gives JSON
``{"reason": …}``, ``RestException(Throwable)`` a text/plain 500 with the stack trace; which one each endpoint
the operator calls gives is checked here, and that the operator's client reads both into one line.
"""

import pytest
import requests

from pulsar_lb_operator.adminapi import errors
from pulsar_lb_operator.adminapi.client import AdminClient
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.http import serve
from pulsar_lb_operator.simulator.scenario import parse_scenario
from tests.builders import SMALL_SCENARIO

T = (2, 10)
SCENARIO = SMALL_SCENARIO


@pytest.fixture
def sim():
    with serve(lambda allocate: SimulatedCluster(parse_scenario(SCENARIO), allocate)) as served:
        yield served


def owned(sim, name):
    return sim.cluster.owned_by(sim.cluster.by_name(name).id)


def bundle_path(bundle):
    namespace, _, bundle_range = bundle.rpartition("/")
    return f"/admin/v2/namespaces/{namespace}/{bundle_range}"


def not_owner(sim, bundle):
    owner = sim.cluster.owner_of(bundle)
    return next(b for b in sim.cluster.alive_brokers() if b.id != owner)


def is_rest_exception_text(answer):
    """RestException(Throwable): text/plain, the marker, the message, the stack trace."""
    return (
        answer.status_code == 500
        and answer.headers["Content-Type"].startswith("text/plain")
        and answer.text.startswith("\n --- An unexpected error occurred in the server ---\n\nMessage: ")
        and "\n\nStacktrace:\n\n" in answer.text
    )


# ----------------------------------------------------------------------------- split: validation order


def test_split_refuses_an_unknown_algorithm_before_checking_ownership(sim):
    """NamespacesBase.internalSplitNamespaceBundleAsync: the algorithm check runs in the first stage, before
    validateNamespaceBundleOwnershipAsync — a broker that does not own the bundle answers 412, not 307."""
    bundle = owned(sim, "broker-0")[0]
    elsewhere = not_owner(sim, bundle)
    url = f"{elsewhere.web_url}{bundle_path(bundle)}/split?splitAlgorithmName=no_such_divide"
    answer = requests.put(url, allow_redirects=False, timeout=T)
    supported = ", ".join(sim.cluster.config.supportedNamespaceBundleSplitAlgorithms)
    assert answer.status_code == 412
    assert answer.json() == {
        "reason": f"Unsupported namespace bundle split algorithm, supported algorithms are [{supported}]"
    }
    # the name is compared as List.contains does: case-sensitively
    upper = requests.put(url.replace("no_such_divide", "RANGE_EQUALLY_DIVIDE"), allow_redirects=False, timeout=T)
    assert upper.status_code == 412
    # and before the namespace is looked up
    missing = requests.put(
        f"{elsewhere.web_url}/admin/v2/namespaces/t/nope/0x00000000_0xffffffff/split?splitAlgorithmName=x",
        allow_redirects=False,
        timeout=T,
    )
    assert missing.status_code == 412 and "Unsupported namespace bundle split algorithm" in missing.json()["reason"]


def test_split_with_specified_positions_and_no_body_is_412_before_ownership(sim):
    """internalSplitNamespaceBundleAsync: specified_positions_divide (equalsIgnoreCase) without boundaries."""
    bundle = owned(sim, "broker-0")[0]
    elsewhere = not_owner(sim, bundle)
    url = f"{elsewhere.web_url}{bundle_path(bundle)}/split?splitAlgorithmName=specified_positions_divide"
    answer = requests.put(url, allow_redirects=False, timeout=T)
    assert answer.status_code == 412
    assert answer.json() == {
        "reason": "With specified_positions_divide split algorithm, splitBoundaries must not be empty"
    }
    with_body = requests.put(url, json=[(sim.cluster.namespaces["t/ns"][0] + 5)], allow_redirects=False, timeout=T)
    assert with_body.status_code == 307  # valid: now ownership is checked, and this broker is not the owner


def test_split_then_checks_namespace_range_and_ownership(sim):
    """getNamespacePoliciesAsync (404), validateNamespaceBundleRange (412, its IllegalArgumentException's
    message), validateBundleOwnershipAsync (307 to the owner)."""
    bundle = owned(sim, "broker-0")[0]
    elsewhere = not_owner(sim, bundle)
    base = f"{elsewhere.web_url}/admin/v2/namespaces"
    missing = requests.put(f"{base}/t/nope/0x00000000_0xffffffff/split", allow_redirects=False, timeout=T)
    assert missing.status_code == 404 and missing.json() == {"reason": "Namespace does not exist"}
    no_underscore = requests.put(f"{base}/t/ns/0x00000000/split", allow_redirects=False, timeout=T)
    assert no_underscore.status_code == 412
    assert no_underscore.json() == {"reason": "Invalid bundle range: 0x00000000"}
    not_hex = requests.put(f"{base}/t/ns/0xzz_0x10/split", allow_redirects=False, timeout=T)
    assert not_hex.status_code == 412 and not_hex.json() == {"reason": 'For input string: "zz" under radix 16'}
    lower = requests.put(f"{base}/t/ns/0x00000001_0x10000000/split", allow_redirects=False, timeout=T)
    assert lower.json() == {"reason": "Cannot find bundle in the bundles list"}
    upper = requests.put(f"{base}/t/ns/0x00000000_0x10000000/split", allow_redirects=False, timeout=T)
    assert upper.json() == {"reason": "Invalid upper boundary for bundle"}
    redirect = requests.put(f"{elsewhere.web_url}{bundle_path(bundle)}/split", allow_redirects=False, timeout=T)
    assert redirect.status_code == 307
    assert redirect.headers["Location"].startswith(sim.cluster.brokers[sim.cluster.owner_of(bundle)].web_url)
    bad_name = requests.put(f"{base}/t%20x/ns/0x00000000_0x20000000/split", allow_redirects=False, timeout=T)
    assert bad_name.status_code == 412 and bad_name.json() == {"reason": "Namespace name is not valid"}


# ----------------------------------------------------------------------------- error bodies per endpoint


def test_unload_errors_json_and_text(sim):
    """NamespacesBase.internalUnloadNamespaceBundleAsync: NamespaceBundleFactory.getBundle parses the range in
    the future chain, so a malformed one becomes RestException(Throwable) — text/plain 500 — while a
    well-formed range that is not a bundle reaches validateNamespaceBundleRange — 412 JSON."""
    base = f"{sim.admin_url}/admin/v2/namespaces/t/ns"
    no_underscore = requests.put(f"{base}/0x00000000/unload", timeout=T)
    assert is_rest_exception_text(no_underscore)
    assert "Message: Invalid bundle range\n" in no_underscore.text
    assert "java.lang.IllegalArgumentException: Invalid bundle range" in no_underscore.text
    not_hex = requests.put(f"{base}/0x0000000g_0xffffffff/unload", timeout=T)
    assert is_rest_exception_text(not_hex) and "java.lang.NumberFormatException" in not_hex.text
    unknown = requests.put(f"{base}/0x00000000_0x00000005/unload", timeout=T)
    assert unknown.status_code == 412 and unknown.headers["Content-Type"] == "application/json"
    assert unknown.json() == {"reason": "Invalid upper boundary for bundle"}
    inactive = requests.put(f"{base}/0x00000000_0x20000000/unload?destinationBroker=10.9.9.9:8080", timeout=T)
    assert inactive.status_code == 409
    assert inactive.json() == {"reason": "Not allowed unload namespace bundle to inactive destination broker"}


def test_the_client_reads_both_error_bodies_into_one_line(sim):
    """What the operator logs: the JSON reason, or the marker and the Message line — never the trace."""
    client = AdminClient(sim.admin_url)
    client.active_brokers("sim")
    with pytest.raises(errors.ServerError) as text_error:
        client.unload("t/ns/0x00000000")
    reason = text_error.value.reason
    assert reason == "HTTP 500: --- An unexpected error occurred in the server --- Invalid bundle range"
    assert "\n" not in str(text_error.value) and "Stacktrace" not in str(text_error.value)
    with pytest.raises(errors.PreconditionFailed) as json_error:
        client.unload("t/ns/0x00000000_0x00000005")
    assert json_error.value.reason == "Invalid upper boundary for bundle"
    with pytest.raises(errors.PreconditionFailed) as split_error:
        client.split("t/ns/0x00000000_0x20000000", "no_such_divide", None, unload=False)
    assert split_error.value.reason.startswith("Unsupported namespace bundle split algorithm")


def test_load_report_failure_is_text_500(sim, monkeypatch):
    """BrokerStatsBase.getLoadReport: any exception of generateLoadReport → RestException(e), text/plain."""

    def broken(_broker_id):
        raise RuntimeError("no stats yet")

    monkeypatch.setattr(sim.cluster, "load_report_json", broken)
    answer = requests.get(f"{sim.admin_url}/admin/v2/broker-stats/load-report", timeout=T)
    assert answer.status_code == 500 and answer.headers["Content-Type"].startswith("text/plain")
    assert "--- An unexpected error occurred in the server ---" in answer.text


# ----------------------------------------------------------------------------- dynamic configuration


def test_dynamic_config_post_answers_as_brokers_base(sim):
    """BrokersBase.updateDynamicConfiguration → persistDynamicConfigurationAsync: an empty 200; no validator
    for load-balancer keys (any value is stored, and applied as FieldParser reads it); 412 JSON for a
    non-dynamic or unknown key and for a loadManagerClassName that is not on the class path."""
    base = f"{sim.admin_url}/admin/v2/brokers/configuration"
    ok = requests.post(f"{base}/loadBalancerSheddingEnabled/true", timeout=T)
    assert ok.status_code == 200 and ok.content == b""
    odd = requests.post(f"{base}/loadBalancerAutoBundleSplitEnabled/yes", timeout=T)
    assert odd.status_code == 200  # stored as given; Boolean.valueOf("yes") is false
    assert requests.get(f"{base}/values", timeout=T).json() == {
        "loadBalancerSheddingEnabled": "true",
        "loadBalancerAutoBundleSplitEnabled": "yes",
    }
    runtime = requests.get(f"{sim.url_of('broker-1')}/admin/v2/brokers/configuration/runtime", timeout=T).json()
    assert runtime["loadBalancerSheddingEnabled"] == "true"
    assert runtime["loadBalancerAutoBundleSplitEnabled"] == "false"
    not_a_number = requests.post(f"{base}/loadBalancerBrokerOverloadedThresholdPercentage/lots", timeout=T)
    assert not_a_number.status_code == 200  # stored; the brokers keep 85 (Integer.valueOf throws, logged)
    runtime = requests.get(f"{sim.admin_url}/admin/v2/brokers/configuration/runtime", timeout=T).json()
    assert runtime["loadBalancerBrokerOverloadedThresholdPercentage"] == "85"
    unknown = requests.post(f"{base}/noSuchSetting/1", timeout=T)
    assert unknown.status_code == 412 and unknown.json() == {"reason": "Can't update non-dynamic configuration"}
    bad_class = requests.post(f"{base}/loadManagerClassName/com.example.Nope", timeout=T)
    assert bad_class.status_code == 412 and bad_class.json() == {"reason": " Invalid dynamic-config value"}
    deleted = requests.delete(f"{base}/loadBalancerSheddingEnabled", timeout=T)
    assert deleted.status_code == 200  # deleteDynamicConfiguration: Response.ok()
    not_dynamic = requests.delete(f"{base}/noSuchSetting", timeout=T)
    assert not_dynamic.json() == {"reason": "Can't delete non-dynamic configuration"}


# ----------------------------------------------------------------------------- §7 rows


def test_row1_per_broker_endpoints_answer_for_the_broker_addressed(sim):
    for broker in sim.cluster.alive_brokers():
        report = requests.get(f"{broker.web_url}/admin/v2/broker-stats/load-report", timeout=T).json()
        assert report["webServiceUrl"] == broker.web_url
        runtime = requests.get(f"{broker.web_url}/admin/v2/brokers/configuration/runtime", timeout=T).json()
        assert runtime["webServicePort"] == str(broker.port)


def test_row2_redirect_rewrites_authoritative_and_keeps_path_and_query(sim):
    bundle = owned(sim, "broker-1")[0]
    leader = sim.cluster.leader
    url = f"{sim.cluster.brokers[leader].web_url}{bundle_path(bundle)}/unload?authoritative=false"
    hop = requests.put(url, allow_redirects=False, timeout=T)
    owner = sim.cluster.brokers[sim.cluster.owner_of(bundle)]
    assert hop.status_code == 307
    assert hop.headers["Location"] == f"{owner.web_url}{bundle_path(bundle)}/unload?authoritative=true"


def test_row3_unload_unowned_is_a_no_op_and_owned_becomes_unowned(sim):
    bundle = owned(sim, "broker-1")[0]
    owner = sim.cluster.brokers[sim.cluster.owner_of(bundle)]
    assert requests.put(f"{owner.web_url}{bundle_path(bundle)}/unload", timeout=T).status_code == 204
    assert sim.cluster.owner_of(bundle) is None
    sim.cluster.advance(1.5)  # past the unload window, before the clients look it up again
    again = requests.put(f"{sim.admin_url}{bundle_path(bundle)}/unload", timeout=T)
    assert again.status_code == 204 and sim.cluster.owner_of(bundle) is None


def test_row4_split_keeps_children_on_the_owner_and_no_boundary_is_a_no_op(sim):
    bundle = owned(sim, "broker-1")[0]
    owner = sim.cluster.owner_of(bundle)
    existing = set(sim.cluster.all_bundles())
    before = len(existing)
    answer = requests.put(f"{sim.admin_url}{bundle_path(bundle)}/split", timeout=T)
    assert answer.status_code == 204 and len(sim.cluster.all_bundles()) == before + 1
    children = set(sim.cluster.all_bundles()) - existing
    assert bundle not in sim.cluster.all_bundles() and len(children) == 2
    assert {sim.cluster.owner_of(c) for c in children} == {owner}
    first = sim.cluster.all_bundles()[0]  # its range starts at 0x00000000, far below the position given
    outside = requests.put(
        f"{sim.admin_url}{bundle_path(first)}/split?splitAlgorithmName=specified_positions_divide",
        json=[0xFFFFFFF0],
        timeout=T,
    )
    assert outside.status_code == 204 and len(sim.cluster.all_bundles()) == before + 1


def test_row5_lookup_assigns_an_unowned_bundle_once(sim):
    bundle = owned(sim, "broker-1")[0]
    topic = sim.cluster.topics_in(bundle)[0].name.split("://", 1)[1]
    sim.cluster.unload(bundle)
    sim.cluster.advance(1.5)
    data = requests.get(f"{sim.admin_url}/lookup/v2/topic/persistent/{topic}", timeout=T).json()
    owner = sim.cluster.owner_of(bundle)
    assert owner is not None and data["httpUrl"] == sim.cluster.brokers[owner].web_url


def test_row7_dynamic_config_visible_in_values_and_runtime(sim):
    base = f"{sim.admin_url}/admin/v2/brokers/configuration"
    assert requests.post(f"{base}/loadBalancerSheddingEnabled/true", timeout=T).status_code == 200
    assert requests.get(f"{base}/values", timeout=T).json() == {"loadBalancerSheddingEnabled": "true"}
    for broker in sim.cluster.alive_brokers():
        runtime = requests.get(f"{broker.web_url}/admin/v2/brokers/configuration/runtime", timeout=T).json()
        assert runtime["loadBalancerSheddingEnabled"] == "true"


def test_row8_auth_html_401_and_json_401():
    with serve(
        lambda allocate: SimulatedCluster(parse_scenario(SCENARIO), allocate), token="s3cret", user_token="reader"
    ) as sim:
        anonymous = requests.get(f"{sim.admin_url}/admin/v2/clusters", timeout=T)
        assert anonymous.status_code == 401 and anonymous.headers["Content-Type"] == "text/html"
        reader = requests.get(
            f"{sim.admin_url}/admin/v2/clusters", headers={"Authorization": "Bearer reader"}, timeout=T
        )
        assert reader.status_code == 401 and reader.json() == {"reason": "This operation requires super-user access"}


def test_row9_explicit_errors_are_json_unexpected_ones_text(sim):
    missing = requests.get(f"{sim.admin_url}/admin/v2/namespaces/t/nope/bundles", timeout=T)
    assert missing.status_code == 404 and missing.headers["Content-Type"] == "application/json"
    assert is_rest_exception_text(requests.put(f"{sim.admin_url}/admin/v2/namespaces/t/ns/nope/unload", timeout=T))


def test_row10_reports_refresh_on_the_sample_cadence(sim):
    broker = sim.cluster.by_name("broker-0")
    first = requests.get(f"{broker.web_url}/admin/v2/broker-stats/load-report", timeout=T).json()
    sim.cluster.advance(broker.next_sample_s - sim.cluster.now_s - 0.5)  # just before its next sample
    assert requests.get(f"{broker.web_url}/admin/v2/broker-stats/load-report", timeout=T).json() == first
    sim.cluster.advance(1.0)
    assert requests.get(f"{broker.web_url}/admin/v2/broker-stats/load-report", timeout=T).json() != first
