"""What the chart ships for monitoring — the Grafana dashboard, the PrometheusRule alerts, the PodMonitor and its
VictoriaMetrics twin — names only metrics the operator exports, and every PromQL expression parses.

The metric names come from the daemon itself: a Daemon's registry after one (fake) cycle, so a renamed or removed
metric breaks the dashboard's and the alerts' test here rather than in someone's Grafana. The expressions are
parsed by ``promql_parser`` (a Rust port of Prometheus' own parser), the check ``promtool check rules`` does.
"""

from __future__ import annotations

import json
import re

import helm_python as helm
import promql_parser
import pytest
import yaml

from pulsar_lb_operator.adminapi import AdminClient
from pulsar_lb_operator.records import Outcome, Record
from pulsar_lb_operator.run.cycle import CycleResult, OperatorState
from pulsar_lb_operator.run.daemon import Daemon
from pulsar_lb_operator.run.settings import OperatorSettings
from pulsar_lb_operator.strategies import LoadBalancerConfig, Plan, Split, StrategyState, Unload
from pulsar_lb_operator.strategies.plans import BrokerScore
from tests.deploy.test_chart import CHART

MONITORING = {
    "metrics": {
        "podMonitor": {"enabled": True},
        "vmPodScrape": {"enabled": True, "labels": {"vm": "main"}},
        "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "grafanaDashboard": {"enabled": True},
    }
}
DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
# what Grafana substitutes before a query reaches Prometheus
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "30s", "$__range": "6h", "$cluster": "east"}


def rendered(values):
    with helm.Chart.load(CHART) as chart:
        manifests = chart.render(values=values, name="lb", namespace="pulsar")
    manifests.pop("pulsar-lb-operator/templates/NOTES.txt")
    return [d for text in manifests.values() for d in yaml.safe_load_all(text) if d]


def one(docs, kind):
    [doc] = [d for d in docs if d["kind"] == kind]
    return doc


@pytest.fixture(scope="module")
def docs():
    return rendered(MONITORING)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Every series name a daemon's /metrics shows after a cycle, and the samples themselves."""
    state_dir = tmp_path_factory.mktemp("state")
    settings = OperatorSettings(
        stateFile=str(state_dir / "state.json"), historyUri="", profileUri="", metricsPort=0, pauseSeconds=0
    )
    daemon = Daemon(settings, LoadBalancerConfig(), AdminClient("http://127.0.0.1:9"), "east")
    assert daemon.leads()  # no leader election: this instance leads
    unload = Unload("public/default/0x00000000_0x80000000", "b-0:8080", "b-1:8080", "hot")
    split = Split("public/default/0x80000000_0xffffffff", "b-0:8080", "range_equally_divide", (0xC0000000,), "big")
    plan = Plan(
        "AvgShedder",
        "AvgShedder",
        0,
        (unload, split),
        (BrokerScore("b-0:8080", 80, 50, 0, 0, 2, 1), BrokerScore("b-1:8080", 20, 50, 0, 0, 0, 1)),
    )
    records = (*(Record(unload, outcome, "fake", 0) for outcome in Outcome), Record(split, Outcome.EXECUTED, "fake", 0))
    strategy = StrategyState().evolve(prediction_errors={"b-1:8080": 1.5})
    result = CycleResult("c-1", plan, records, (), {"b-2:8080": "timed out"}, OperatorState(strategy))
    daemon.metrics.observe(result, 0.25)
    daemon.metrics.audit_published.inc()
    samples = [s for family in daemon.metrics.registry.collect() for s in family.samples]
    return daemon.metrics.names(), samples


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects; raises ValueError when it does not parse."""
    names: set[str] = set()

    def visit(node):
        if isinstance(node, promql_parser.VectorSelector):
            by_matcher = [m.value for m in node.matchers.matchers if m.name == "__name__"]
            names.update([node.name] if node.name else by_matcher)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


def dashboard_queries(dashboard):
    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            yield panel["title"], target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            yield f"variable {variable['name']}", variable["definition"]


def as_prometheus_sees_it(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    label_values = re.fullmatch(r"label_values\((.+),\s*\w+\)", expr)
    return label_values.group(1) if label_values else expr


def test_the_daemon_exports_only_pulsar_lb_operator_names_each_with_its_cluster(exported):
    names, samples = exported
    assert names and all(n.startswith("pulsar_lb_operator_") for n in names)
    assert all(s.labels.get("cluster") == "east" for s in samples), "every series carries the cluster label"
    assert {
        "pulsar_lb_operator_cycles_total",
        "pulsar_lb_operator_cycle_duration_seconds_bucket",
        "pulsar_lb_operator_actions_total",
        "pulsar_lb_operator_broker_usage_percent",
        "pulsar_lb_operator_kill_switch",
        "pulsar_lb_operator_leader",
        "pulsar_lb_operator_audit_events_dropped_total",
        "pulsar_lb_operator_history_appends_skipped_total",
        "pulsar_lb_operator_history_bytes",
    } <= names
    assert "pulsar_lb_cycles_total" not in names  # the old name collided with Pulsar's own pulsar_lb_* metrics


def test_the_name_check_would_catch_an_unknown_metric(exported):
    names, _ = exported
    assert metric_names('sum(rate(pulsar_lb_cycles_total{result="error"}[5m])) / up') == {
        "pulsar_lb_cycles_total",
        "up",
    }
    assert metric_names('{__name__="pulsar_lb_operator_leader"} == 1') == {"pulsar_lb_operator_leader"}
    assert not metric_names("sum(rate(pulsar_lb_cycles_total[5m]))") <= names
    with pytest.raises(ValueError):
        metric_names("sum(rate(pulsar_lb_operator_cycles_total[5m])")  # unbalanced parenthesis


def test_every_alert_is_a_valid_prometheus_rule_on_exported_metrics(docs, exported):
    names, _ = exported
    rule = one(docs, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["metadata"]["name"]
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    groups = rule["spec"]["groups"]
    assert groups and len({g["name"] for g in groups}) == len(groups)
    alerts = [r for g in groups for r in g["rules"]]
    for alert in alerts:
        assert set(alert) <= {"alert", "expr", "for", "labels", "annotations"}, alert
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", alert["alert"])
        assert "for" not in alert or DURATION.match(alert["for"]), alert["for"]
        assert alert["labels"]["severity"] in ("critical", "warning", "info")
        assert all(isinstance(v, str) for v in (*alert["labels"].values(), *alert["annotations"].values()))
        assert {"summary", "description"} <= set(alert["annotations"])
        for text in alert["annotations"].values():  # Prometheus' alert templates, left for Prometheus
            assert text.count("{{") == text.count("}}")
        used = metric_names(alert["expr"])
        assert used and used <= names, f"{alert['alert']}: {sorted(used - names)} is not exported"
    assert len({a["alert"] for a in alerts}) == len(alerts)
    # what the operator's users asked to be told about
    exprs = {a["alert"]: a["expr"] for a in alerts}
    assert 'result="error"' in exprs["PulsarLbOperatorCyclesFailing"]
    assert "3 * pulsar_lb_operator_cycle_interval_seconds" in exprs["PulsarLbOperatorNoSuccessfulCycle"]
    assert "> 30" in exprs["PulsarLbOperatorSpreadHigh"]
    assert "pulsar_lb_operator_kill_switch" in exprs["PulsarLbOperatorKillSwitchOn"]
    assert "pulsar_lb_operator_held_by_builtin_balancer" in exprs["PulsarLbOperatorHeldByBuiltinBalancer"]
    assert 'outcome=~"failed|unknown"' in exprs["PulsarLbOperatorActionsFailing"]
    assert "pulsar_lb_operator_history_appends_skipped_total" in exprs["PulsarLbOperatorHistoryAppendsSkipped"]


def test_the_alert_thresholds_and_labels_are_values(exported):
    values = {
        "metrics": {
            "prometheusRule": {
                "enabled": True,
                "missedCycles": 5,
                "spreadPoints": 15,
                "spreadFor": "2h",
                "alertLabels": {"team": "streaming"},
            }
        }
    }
    alerts = {r["alert"]: r for g in one(rendered(values), "PrometheusRule")["spec"]["groups"] for r in g["rules"]}
    assert "5 * pulsar_lb_operator_cycle_interval_seconds" in alerts["PulsarLbOperatorNoSuccessfulCycle"]["expr"]
    assert (
        "> 15" in alerts["PulsarLbOperatorSpreadHigh"]["expr"] and alerts["PulsarLbOperatorSpreadHigh"]["for"] == "2h"
    )
    assert all(a["labels"]["team"] == "streaming" for a in alerts.values())
    assert metric_names(alerts["PulsarLbOperatorSpreadHigh"]["expr"]) <= exported[0]


def test_the_dashboard_shows_what_an_operator_watches_from_exported_metrics(docs, exported):
    names, _ = exported
    config_map = next(d for d in docs if d["kind"] == "ConfigMap" and "pulsar-lb-operator.json" in d.get("data", {}))
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1", "the Grafana sidecar's label"
    dashboard = json.loads(config_map["data"]["pulsar-lb-operator.json"])
    assert dashboard["uid"] and dashboard["title"]
    queries = list(dashboard_queries(dashboard))
    assert queries
    for title, expr in queries:
        used = metric_names(as_prometheus_sees_it(expr))
        assert used and used <= names, f"{title}: {sorted(used - names)} is not exported"
    by_title: dict[str, str] = {}
    for title, expr in queries:
        by_title[title] = by_title.get(title, "") + "\n" + expr
    assert "pulsar_lb_operator_broker_usage_percent" in by_title["Broker usage"]
    assert "sum by (outcome)" in by_title["Actions per cycle, by outcome"]
    assert "pulsar_lb_operator_cycle_duration_seconds_bucket" in by_title["Cycle duration"]
    assert "pulsar_lb_operator_brokers_skipped" in by_title["Brokers seen and skipped"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(set(ids)) == len(ids)
    assert all(p["datasource"]["uid"] == "${datasource}" for p in dashboard["panels"])


def test_the_vm_pod_scrape_scrapes_what_the_pod_monitor_scrapes(docs):
    pod_monitor, vm = one(docs, "PodMonitor"), one(docs, "VMPodScrape")
    assert vm["apiVersion"] == "operator.victoriametrics.com/v1beta1" and vm["metadata"]["labels"]["vm"] == "main"
    assert vm["spec"]["selector"] == pod_monitor["spec"]["selector"]
    assert vm["spec"]["namespaceSelector"] == pod_monitor["spec"]["namespaceSelector"] == {"matchNames": ["pulsar"]}
    endpoint, theirs = vm["spec"]["podMetricsEndpoints"][0], pod_monitor["spec"]["podMetricsEndpoints"][0]
    assert (endpoint["port"], endpoint["path"]) == (theirs["port"], theirs["path"]) == ("http", "/metrics")
    assert [r.get("targetLabel") for r in endpoint["relabelConfigs"]] == [
        r.get("targetLabel") for r in theirs["relabelings"]
    ]


def test_everything_for_monitoring_is_off_by_default():
    kinds = {d["kind"] for d in rendered({})}
    assert not kinds & {"PodMonitor", "ServiceMonitor", "VMPodScrape", "PrometheusRule"}
    assert not any("grafana_dashboard" in d["metadata"].get("labels", {}) for d in rendered({}))
