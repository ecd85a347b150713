"""Leader election over a Lease: two electors against one fake API server (tests/kube_api.py).

Durations are short (lease 1 s, renew deadline 0.6 s, retry 0.1 s) so the tests are fast. Timings are
measured and asserted only from below (no takeover before the lease expired) or with generous slack.
The expiry rules themselves are checked round by round on a fake clock.
"""

from __future__ import annotations

import math
import threading
import time

import pytest
from structlog.testing import capture_logs

from pulsar_lb_operator.run import lease_client
from pulsar_lb_operator.run.leadership import AlwaysLeader, LeaseElector, elector_from_settings
from pulsar_lb_operator.run.lease_client import LeaseClient, LeaseConflict
from pulsar_lb_operator.run.settings import OperatorSettings, resolve
from pulsar_lb_operator.strategies.config import ConfigError
from tests.kube_api import FakeKubeApi

NS, NAME = "pulsar", "lb-pulsar-lb-operator"
LEASE, DEADLINE, RETRY = 2.0, 1.2, 0.2  # roomy enough for a loaded 2-core machine
EXPIRY = max(LEASE, math.ceil(LEASE))  # the Lease's field is whole seconds; a standby honours the longer
SLACK = 1.0


@pytest.fixture
def api():
    with FakeKubeApi(tokens=("token-a", "token-b", "token-c")) as server:
        yield server


def elector(api, identity, token=None, **kwargs):
    client = LeaseClient(api.url, token=token or "token-" + identity[-1], timeout=1.0)
    kwargs = {"lease_duration": LEASE, "renew_deadline": DEADLINE, "retry_period": RETRY, **kwargs}
    return LeaseElector(NAME, NS, client=client, identity=identity, **kwargs)


def wait_for(condition, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.005)
    return condition()


class Sampler:
    """Reads both electors' is_leader() every few milliseconds, in a thread, and remembers every pair
    read close together (a pair read more than 20 ms apart, the sampler having been descheduled, says
    nothing about overlap and is dropped)."""

    def __init__(self, *electors):
        self.electors = electors
        self.samples: list[tuple[float, tuple[bool, ...]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            started = time.monotonic()
            values = tuple(e.is_leader() for e in self.electors)
            if time.monotonic() - started < 0.02:
                self.samples.append((started, values))
            time.sleep(0.002)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(2)

    def overlaps(self):
        return [t for t, values in self.samples if sum(values) > 1]

    def first(self, index, value, after=0.0):
        return next((t for t, values in self.samples if t >= after and values[index] is value), None)


def leader_and_standby(a, b):
    assert wait_for(lambda: a.is_leader() or b.is_leader(), 3), "nobody acquired the lease"
    return (a, b) if a.is_leader() else (b, a)


def test_of_two_electors_exactly_one_leads_and_the_lease_names_it(api):
    a, b = elector(api, "pod-a"), elector(api, "pod-b")
    with Sampler(a, b) as sampler, a, b:
        leader, standby = leader_and_standby(a, b)
        time.sleep(3 * LEASE)  # several lease durations: the leader keeps renewing, the standby never takes it
        assert leader.is_leader() and not standby.is_leader()
        seen = standby.holder  # while both run: leaving the block stops them in turn, and a leader stopped first
        # releases the Lease, which the standby may read as free before it stops too
        lease = api.lease(NS, NAME)
        writes = list(api.writes)
        renewals = [m for m, _, status in api.requests if m == "PUT" and status == 200]
    assert sampler.overlaps() == []
    assert len(sampler.samples) > 100
    assert lease["spec"]["holderIdentity"] == leader.identity
    assert lease["spec"]["leaseTransitions"] == 0
    assert lease["spec"]["leaseDurationSeconds"] == 2  # a whole number of seconds, as the API requires
    assert seen == leader.identity
    assert {holder for _, holder in writes} == {leader.identity}
    assert len(renewals) >= 2 * 3  # renewed every retry period: at least twice a lease duration, for 3 of them


def test_stop_releases_the_lease_and_the_standby_takes_over_within_one_lease_duration(api):
    changes = []
    a, b = elector(api, "pod-a"), elector(api, "pod-b", on_change=changes.append)
    with Sampler(a, b) as sampler:
        a.start()
        assert wait_for(a.is_leader, 3)
        b.start()
        time.sleep(2 * RETRY)
        assert not b.is_leader()
        stopped = time.monotonic()
        a.stop()
        assert not a.is_leader()
        assert wait_for(b.is_leader, LEASE + 1.2 * RETRY + SLACK), "the standby did not take over"
        took = time.monotonic() - stopped
        b.stop()
    print(f"takeover after release: {took:.3f} s (lease duration {LEASE} s)")
    assert sampler.overlaps() == []
    holders = [holder for _, holder in api.writes]
    released = holders.index("")
    assert holders[:released] and set(holders[:released]) == {"pod-a"}
    assert holders[released + 1] == "pod-b"
    assert changes[0] is True and changes[-1] is False


def test_a_leader_that_dies_without_releasing_is_replaced_once_its_lease_expired(api):
    a, b = elector(api, "pod-a"), elector(api, "pod-b")
    with Sampler(a, b) as sampler, a, b:
        leader, standby = leader_and_standby(a, b)
        leader.stop(release=False)  # as a killed process: no release
        died = time.monotonic()
        last_renewal = max(t for t, holder in api.writes if holder == leader.identity)
        assert wait_for(standby.is_leader, EXPIRY + 2 * RETRY + SLACK), "the standby did not take over"
        took = time.monotonic() - died
        takeover = next(t for t, holder in api.writes if holder == standby.identity)
        lease = api.lease(NS, NAME)
    print(f"takeover of an expired lease: {took:.3f} s after the leader died")
    assert takeover - last_renewal >= LEASE, "taken before the lease expired"
    assert lease["spec"]["holderIdentity"] == standby.identity and lease["spec"]["leaseTransitions"] == 1
    assert sampler.overlaps() == []


@pytest.mark.parametrize("failure", ["drop", "hang", "error"])
def test_a_leader_cut_off_from_the_api_server_stops_acting_before_the_standby_can_take_over(api, failure):
    a, b = elector(api, "pod-a"), elector(api, "pod-b")
    with Sampler(a, b) as sampler, a, b, capture_logs() as logs:
        leader, standby = leader_and_standby(a, b)
        index = (a, b).index(standby)
        api.cut_off("token-" + leader.identity[-1], failure)
        cut = time.monotonic()
        last_renewal = max(t for t, holder in api.writes if holder == leader.identity)
        assert wait_for(lambda: not leader.is_leader(), DEADLINE + SLACK)
        stopped_acting = time.monotonic()
        assert wait_for(standby.is_leader, EXPIRY + 2 * RETRY + SLACK), "the standby did not take over"
        took_over = sampler.first(index, True, after=cut) or time.monotonic()
        api.heal("token-" + leader.identity[-1])
        time.sleep(3 * RETRY + 0.2)  # the old leader reads the lease again: someone else holds it
        assert standby.is_leader() and not leader.is_leader()
        assert api.holder(NS, NAME) == standby.identity
    stopped_s, took_s = stopped_acting - cut, took_over - cut
    print(f"{failure}: old leader stopped {stopped_s:.3f} s after the cut, the new one led after {took_s:.3f} s")
    assert stopped_acting - last_renewal < DEADLINE + SLACK
    assert stopped_acting < took_over
    assert sampler.overlaps() == []
    errors = [e for e in logs if e["event"] == "lease API request failed"]
    assert errors and all(isinstance(e["reason"], str) and "\n" not in e["reason"] for e in errors)
    assert len(errors) < 10, "the same error is logged once, not at every retry"


def test_an_outage_for_everyone_leaves_nobody_leading_until_it_ends(api):
    a, b = elector(api, "pod-a"), elector(api, "pod-b")
    with Sampler(a, b) as sampler, a, b:
        leader_and_standby(a, b)
        api.outage = "error"
        assert wait_for(lambda: not a.is_leader() and not b.is_leader(), DEADLINE + SLACK)
        time.sleep(LEASE)
        assert not a.is_leader() and not b.is_leader()
        api.outage = None
        assert wait_for(lambda: a.is_leader() or b.is_leader(), EXPIRY + 3 * RETRY + SLACK)
        time.sleep(3 * RETRY)
    assert sampler.overlaps() == []


def test_a_conflict_on_update_means_the_loser_does_not_lead(api):
    api.put_lease(NS, NAME, {"holderIdentity": "", "leaseDurationSeconds": 1, "leaseTransitions": 4})
    a = elector(api, "pod-a")

    class RacingClient(LeaseClient):
        def replace(self, namespace, name, lease, timeout=None):
            assert a.try_acquire_or_renew()  # pod-a writes between pod-b's read and pod-b's write
            return super().replace(namespace, name, lease, timeout)

    b = LeaseElector(
        NAME,
        NS,
        client=RacingClient(api.url, token="token-b"),
        identity="pod-b",
        lease_duration=LEASE,
        renew_deadline=DEADLINE,
        retry_period=RETRY,
    )
    assert b.try_acquire_or_renew() is False
    assert not b.is_leader() and a.is_leader()
    # pod-a's write went through, pod-b's (made from the older read) was refused; what either reads after
    # that is not part of the race
    assert [status for method, _, status in api.requests if method == "PUT"][-2:] == [200, 409]
    lease = api.lease(NS, NAME)["spec"]
    assert lease["holderIdentity"] == "pod-a" and lease["leaseTransitions"] == 5


def test_a_conflict_on_create_means_the_loser_does_not_lead(api):
    a = elector(api, "pod-a")

    class RacingClient(LeaseClient):
        def create(self, namespace, lease, timeout=None):
            assert a.try_acquire_or_renew()
            return super().create(namespace, lease, timeout)

    b = LeaseElector(NAME, NS, client=RacingClient(api.url, token="token-b"), identity="pod-b")
    assert b.try_acquire_or_renew() is False and not b.is_leader()
    assert api.holder(NS, NAME) == "pod-a"  # (not a.is_leader(): on a loaded machine its deadline may pass)
    assert [status for method, _, status in api.requests if method == "POST"][-2:] == [201, 409]


def test_a_leader_whose_renewal_conflicts_stops_leading_at_once(api):
    a = elector(api, "pod-a")
    assert a.try_acquire_or_renew() and a.is_leader()

    class Intruder(LeaseClient):
        def replace(self, namespace, name, lease, timeout=None):
            api.put_lease(NS, NAME, {"holderIdentity": "intruder", "leaseDurationSeconds": 15})
            return super().replace(namespace, name, lease, timeout)

    a.client = Intruder(api.url, token="token-a")
    assert a.try_acquire_or_renew() is False
    assert not a.is_leader(), "a 409 on renewal ends leadership without waiting for the renew deadline"


def test_a_lease_that_someone_else_keeps_renewing_is_never_taken(api):
    stop = threading.Event()

    def other_holder():  # writes the same spec: only the resourceVersion changes
        while not stop.wait(LEASE / 3):
            api.put_lease(NS, NAME, {"holderIdentity": "other", "leaseDurationSeconds": 1, "leaseTransitions": 7})

    renewing = threading.Thread(target=other_holder, daemon=True)
    api.put_lease(NS, NAME, {"holderIdentity": "other", "leaseDurationSeconds": 1, "leaseTransitions": 7})
    renewing.start()
    c = elector(api, "pod-c")
    with Sampler(c) as sampler, c:
        time.sleep(3 * EXPIRY)
        assert not any(values[0] for _, values in sampler.samples), "took a lease that is being renewed"
        assert {holder for _, holder in api.writes} == {"other"}
        assert c.holder == "other"
        stop.set()
        renewing.join(2)
        gone = max(t for t, _ in api.writes)
        assert wait_for(c.is_leader, EXPIRY + 2 * RETRY + SLACK), "did not take the expired lease"
    takeover = next(t for t, holder in api.writes if holder == "pod-c")
    assert takeover - gone >= LEASE
    assert api.lease(NS, NAME)["spec"]["leaseTransitions"] == 8


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_expiry_is_judged_on_our_own_clock_not_on_the_remote_renew_time(api):
    clock = FakeClock()
    c = elector(api, "pod-c", clock=clock, lease_duration=15, renew_deadline=10, retry_period=2)
    # an old renewTime (the holder's clock is behind, or it renewed long ago) does not make it expired
    api.put_lease(
        NS, NAME, {"holderIdentity": "other", "leaseDurationSeconds": 15, "renewTime": "2001-01-01T00:00:00.000000Z"}
    )
    assert c.try_acquire_or_renew() is False
    clock.now += 14.9
    assert c.try_acquire_or_renew() is False
    # a renewTime in the future (the holder's clock is ahead) does not keep it forever
    api.put_lease(
        NS, NAME, {"holderIdentity": "other", "leaseDurationSeconds": 15, "renewTime": "2999-01-01T00:00:00.000000Z"}
    )
    clock.now += 1
    assert c.try_acquire_or_renew() is False  # it changed: 15 s from now
    clock.now += 14.9
    assert c.try_acquire_or_renew() is False
    clock.now += 0.2
    assert c.try_acquire_or_renew() is True and c.is_leader()
    assert api.holder(NS, NAME) == "pod-c"


def test_a_longer_lease_duration_written_by_the_holder_is_honoured(api):
    clock = FakeClock()
    c = elector(api, "pod-c", clock=clock, lease_duration=15, renew_deadline=10, retry_period=2)
    api.put_lease(NS, NAME, {"holderIdentity": "cronjob-x", "leaseDurationSeconds": 60})
    assert c.try_acquire_or_renew() is False
    clock.now += 59
    assert c.try_acquire_or_renew() is False
    clock.now += 1.5
    assert c.try_acquire_or_renew() is True


def test_is_leader_turns_false_after_the_renew_deadline_on_our_clock(api):
    clock = FakeClock()
    c = elector(api, "pod-c", clock=clock, lease_duration=15, renew_deadline=10, retry_period=2)
    assert c.try_acquire_or_renew() and c.is_leader()
    api.cut_off("token-c", "error")
    for _ in range(4):
        clock.now += 2
        assert c.try_acquire_or_renew() is False
        assert c.is_leader(), "still within the renew deadline"
    clock.now += 1.99
    assert c.is_leader()
    clock.now += 0.02
    assert not c.is_leader()
    api.heal("token-c")  # nobody took over: it renews its own lease and leads again
    assert c.try_acquire_or_renew() and c.is_leader()
    assert api.lease(NS, NAME)["spec"]["leaseTransitions"] == 0


def test_a_restarted_pod_with_the_same_name_keeps_its_lease_and_transitions(api):
    first = elector(api, "pod-a")
    assert first.try_acquire_or_renew()
    acquired = api.lease(NS, NAME)["spec"]["acquireTime"]
    again = elector(api, "pod-a")
    assert again.try_acquire_or_renew() and again.is_leader()
    spec = api.lease(NS, NAME)["spec"]
    assert spec["acquireTime"] == acquired and spec["leaseTransitions"] == 0


def test_a_wrong_token_is_an_error_logged_without_the_token_and_never_raised(api):
    c = elector(api, "pod-c", token="s3cr3t-wrong-token")
    with capture_logs() as logs:
        c.start()
        time.sleep(5 * RETRY)
        assert not c.is_leader()
        c.stop()
    assert any("401" in e.get("reason", "") for e in logs)
    assert "s3cr3t" not in repr(logs) and "s3cr3t" not in repr(c.client)
    assert api.lease(NS, NAME) is None


def test_the_token_file_is_read_again_for_every_request(api, tmp_path):
    token = tmp_path / "token"
    token.write_text("token-a\n")
    client = LeaseClient(api.url, token_file=token, timeout=1.0)
    assert client.get(NS, NAME) is None
    token.write_text("token-b\n")  # the kubelet rotated it
    created = client.create(NS, {"metadata": {"name": NAME}, "spec": {"holderIdentity": "x"}})
    assert created["metadata"]["resourceVersion"]
    token.write_text("expired")
    with pytest.raises(lease_client.LeaseApiError, match="401"):
        client.get(NS, NAME)
    with pytest.raises(LeaseConflict, match="409"):
        LeaseClient(api.url, token="token-a").create(NS, {"metadata": {"name": NAME}, "spec": {}})


def test_in_cluster_configuration_comes_from_the_pods_service_account(tmp_path):
    (tmp_path / "token").write_text("t")
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    (tmp_path / "namespace").write_text("pulsar\n")
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    client = LeaseClient.in_cluster(environ=env, service_account_dir=tmp_path)
    assert client.host == "https://10.96.0.1:443" and client._verify == str(tmp_path / "ca.crt")
    v6 = LeaseClient.in_cluster(environ={**env, "KUBERNETES_SERVICE_HOST": "fd00::1"}, service_account_dir=tmp_path)
    assert v6.host == "https://[fd00::1]:443"
    assert lease_client.pod_namespace(tmp_path) == "pulsar"
    with pytest.raises(ConfigError, match=r"^leaderElection: not running in a Kubernetes pod"):
        LeaseClient.in_cluster(environ={}, service_account_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"^leaderElection: no service-account token"):
        LeaseClient.in_cluster(environ=env, service_account_dir=tmp_path / "missing")
    assert lease_client.default_identity({"POD_NAME": "lb-7d9-x2"}) == "lb-7d9-x2"
    assert lease_client.default_identity({}).endswith(f"_{__import__('os').getpid()}")


def test_settings_choose_the_elector_and_validate_the_durations(api, monkeypatch, tmp_path):
    assert isinstance(elector_from_settings(OperatorSettings().lease()), AlwaysLeader)
    settings = OperatorSettings(
        leaderElection=True,
        leaseName="lb-x",
        leaseNamespace="pulsar",
        leaseDurationSeconds=LEASE,
        renewDeadlineSeconds=DEADLINE,
        retryPeriodSeconds=RETRY,
    )
    elected = elector_from_settings(settings.lease(), client=LeaseClient(api.url, token="token-a"), identity="pod-a")
    assert isinstance(elected, LeaseElector)
    assert (elected.name, elected.namespace, elected.identity) == ("lb-x", "pulsar", "pod-a")
    assert (elected.lease_duration, elected.renew_deadline, elected.retry_period) == (LEASE, DEADLINE, RETRY)
    assert elected.try_acquire_or_renew() and api.holder("pulsar", "lb-x") == "pod-a"

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(lease_client, "SERVICE_ACCOUNT_DIR", tmp_path / "no-such-dir")
    with pytest.raises(ConfigError, match=r"^leaderElection: "):
        elector_from_settings(settings.lease())
    with pytest.raises(ConfigError, match=r"^leaseNamespace: "):
        elector_from_settings(OperatorSettings(leaderElection=True).lease())

    for bad, key in [
        ({"renewDeadlineSeconds": 15.0}, "renewDeadlineSeconds"),
        ({"retryPeriodSeconds": 10.0}, "retryPeriodSeconds"),
        ({"leaseDurationSeconds": 0.0}, "leaseDurationSeconds"),
        ({"retryPeriodSeconds": -1.0}, "retryPeriodSeconds"),
    ]:
        with pytest.raises(ConfigError, match=f"^{key}: "):
            OperatorSettings(**bad)
    with pytest.raises(ValueError, match="retry_period < renew_deadline < lease_duration"):
        LeaseElector(NAME, NS, client=LeaseClient(api.url), renew_deadline=20)

    environ = {"PULSAR_LB_LEADER_ELECTION": "true", "PULSAR_LB_LEASE_NAME": "lb-y"}
    ours, _, _ = resolve({"leaseDurationSeconds": 30, "renewDeadlineSeconds": 20}, environ, {})
    assert ours.leaderElection is True and ours.leaseName == "lb-y" and ours.leaseDurationSeconds == 30.0


def test_always_leader_has_the_electors_interface():
    public = {n for n in dir(LeaseElector) if not n.startswith("_")} - {"try_acquire_or_renew"}
    assert public <= set(dir(AlwaysLeader))
    changes = []
    with AlwaysLeader("local", on_change=changes.append) as leader:
        assert leader.is_leader() and leader.wait_until_leader(0) and leader.holder == "local"
    assert not leader.is_leader() and changes == [True, False]


def test_stop_is_safe_before_start_and_twice_and_wait_until_leader_times_out(api):
    api.put_lease(NS, NAME, {"holderIdentity": "other", "leaseDurationSeconds": 30})
    c = elector(api, "pod-c")
    c.stop()
    c = elector(api, "pod-c")
    c.start()
    assert c.wait_until_leader(timeout=3 * RETRY) is False
    c.stop()
    c.stop()
    assert api.holder(NS, NAME) == "other"
    d = elector(api, "pod-d", token="token-a")
    api.put_lease(NS, NAME, {"holderIdentity": "", "leaseDurationSeconds": 1})
    with d:
        assert d.wait_until_leader(timeout=2)
    assert api.holder(NS, NAME) is None  # released on exit
