"""The Helm chart, rendered and linted by Helm's own library (helm-python-sdk, offline), every manifest
validated against the Kubernetes 1.30 schemas, and the rendered settings file read by the operator."""

import base64
import dataclasses
import json
import re
import shlex
from pathlib import Path

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from pulsar_lb_operator.adminapi import AdminClient
from pulsar_lb_operator.cli import main
from pulsar_lb_operator.records import Outcome
from pulsar_lb_operator.run.daemon import Daemon
from pulsar_lb_operator.run.leadership import LeaseElector, elector_from_settings
from pulsar_lb_operator.run.lease_client import LeaseClient
from pulsar_lb_operator.run.settings import OperatorSettings, resolve
from pulsar_lb_operator.strategies import PLACEMENT, SHEDDING
from pulsar_lb_operator.strategies.config import config_keys
from tests.kube_api import FakeKubeApi

CHART = Path(__file__).resolve().parents[2] / "helm" / "pulsar-lb-operator"
KUBE = "1.30.0"
CUSTOM_RESOURCES = {
    ("monitoring.coreos.com/v1", "PodMonitor"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("operator.victoriametrics.com/v1beta1", "VMPodScrape"),
}
PULSAR_NAMING = Path(__file__).resolve().parent / "pulsar-chart-naming"  # apache/pulsar-helm-chart's naming

COMBINATIONS = {
    "default": {},
    "token": {"auth": {"token": {"enabled": True}}},
    "tls": {"tls": {"enabled": True, "ca": {"enabled": True}}},
    "monitoring": {
        "metrics": {
            "podMonitor": {"enabled": True},
            "serviceMonitor": {"enabled": True},
            "vmPodScrape": {"enabled": True},
            "prometheusRule": {"enabled": True},
            "grafanaDashboard": {"enabled": True},
        }
    },
    "pvc": {"persistence": {"enabled": True, "storageClass": "fast", "size": "50Gi"}},
    "external-spark": {
        "spark": {"master": "spark://spark-master:7077", "conf": {"spark.executor.memory": "4g"}},
        "history": {"uri": "s3a://pulsar-lb/history", "profileUri": "s3a://pulsar-lb/profile"},
    },
    "ha": {"replicaCount": 2, "podDisruptionBudget": {"enabled": True}},
    "egress": {
        "networkPolicy": {
            "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}], "ports": [{"port": 8080, "protocol": "TCP"}]}]
        }
    },
    "controls-existing-secret": {"controls": {"existingSecret": "ops-lb-control", "existingSecretKey": "t"}},
    "read-only": {"controls": {"enabled": False}, "killSwitch": True},
    "oauth2": {
        "tls": {"enabled": True},
        "auth": {
            "oauth2": {
                "enabled": True,
                "issuerUrl": "https://auth.example.com/",
                "audience": "urn:sn:pulsar:prod",
                "credentialsSecretName": "lb-oauth2",
            }
        },
    },
    "everything": {
        "dryRun": False,
        "leaderElection": {"enabled": True},
        "podDisruptionBudget": {"enabled": True},
        "terminationGracePeriodSeconds": 90,
        "auth": {"token": {"enabled": True, "role": "lb-operator"}, "tls": {"enabled": True, "secretName": "lb-cert"}},
        "tls": {"enabled": True, "ca": {"enabled": True, "secretName": "my-ca"}},
        "pulsar": {"release": "prod", "cluster": "east"},
        "audit": {"enabled": True},
        "metrics": {"podMonitor": {"enabled": True}},
        "persistence": {"enabled": True, "existingClaim": "lb-data"},
        "loadBalancer": {"loadBalancerLoadSheddingStrategy": "PredictivePairingShedder"},
    },
}


def render(values=None):
    """Manifests by kind, and NOTES.txt."""
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(values=values or {}, name="lb", namespace="pulsar")
    notes = rendered.pop("pulsar-lb-operator/templates/NOTES.txt")
    docs = [d for text in rendered.values() for d in yaml.safe_load_all(text) if d]
    return {d["kind"]: d for d in docs}, docs, notes


def env_of(manifests):
    return {e["name"]: e for e in container(manifests)["env"]}


def settings_file(manifests):
    return yaml.safe_load(manifests["ConfigMap"]["data"]["settings.yaml"])


def container(manifests):
    return manifests["Deployment"]["spec"]["template"]["spec"]["containers"][0]


def volume(manifests, name):
    return next(v for v in manifests["Deployment"]["spec"]["template"]["spec"]["volumes"] if v["name"] == name)


def mount(manifests, name):
    return next(m for m in container(manifests)["volumeMounts"] if m["name"] == name)


@pytest.mark.parametrize("combination", sorted(COMBINATIONS))
def test_every_rendered_manifest_is_valid_kubernetes_1_30_and_lint_is_clean(combination):
    values = COMBINATIONS[combination]
    _, docs, _ = render(values)
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) in CUSTOM_RESOURCES:
            if "selector" in doc["spec"]:
                assert doc["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] == "lb"
            continue
        kubernetes_validate.validate(doc, KUBE, strict=True)
    report = helm.lint(CHART, values, strict=True, kube_version=f"v{KUBE}")
    assert report["errors"] == [] and report["messages"] == []


def test_default_is_one_replica_leader_elected_dry_run_hardened_and_probed():
    manifests, docs, notes = render()
    kinds = {"ConfigMap", "Deployment", "Service", "ServiceAccount", "Role", "RoleBinding", "Secret", "NetworkPolicy"}
    assert {d["kind"] for d in docs} == kinds
    deployment = manifests["Deployment"]["spec"]
    rolling = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    assert deployment["replicas"] == 1 and deployment["strategy"] == rolling
    pod = deployment["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["automountServiceAccountToken"] is True
    security = container(manifests)["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    ports = {p["name"]: p["containerPort"] for p in container(manifests)["ports"]}
    assert container(manifests)["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container(manifests)["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    settings = settings_file(manifests)
    assert ports["http"] == settings["metricsPort"] == manifests["Service"]["spec"]["ports"][0]["port"]
    assert manifests["Service"]["spec"]["selector"] == deployment["template"]["metadata"]["labels"]
    assert settings["dryRun"] is True and settings["adminUrl"] == "http://pulsar-broker:8080"
    assert settings["metricsHost"] == "0.0.0.0", "the probes and Prometheus reach the pod's IP"
    assert settings["auditEnabled"] is False
    assert container(manifests)["args"] == ["--config", mount(manifests, "config")["mountPath"]]
    assert "emptyDir" in volume(manifests, "data") and "emptyDir" in volume(manifests, "tmp")
    assert "DRY RUN" in notes and "--set dryRun=false" in notes
    assert "loadBalancerSheddingEnabled --value false" in notes
    assert "--set dryRun=false --set settings.disableBuiltinShedding=true" in notes  # the go-live path offers it


def test_the_rendered_settings_file_is_read_by_the_operator_with_every_setting_in_it():
    manifests, _, notes = render(COMBINATIONS["everything"])
    settings = settings_file(manifests)
    assert set(settings) >= {f.name for f in dataclasses.fields(OperatorSettings)}, "every operator setting"
    ours, config, explicit = resolve(settings, {}, {})
    assert ours.dryRun is False and ours.auditEnabled is True and ours.cluster == "east"
    assert ours.leaderElection is True and ours.leaseName == manifests["Deployment"]["metadata"]["name"]
    assert ours.shutdownTimeoutSeconds == 80.0
    assert ours.auditServiceUrl == "pulsar+ssl://prod-pulsar-broker:6651"
    assert ours.adminUrl == "https://prod-pulsar-broker:8443"
    assert config.loadBalancerLoadSheddingStrategy == "PredictivePairingShedder" and explicit
    assert volume(manifests, "data")["persistentVolumeClaim"]["claimName"] == "lb-data"
    assert all(ours.stateFile.startswith(p) for p in [mount(manifests, "data")["mountPath"]])
    assert "LIVE" in notes and "-- operator pause --reason" in notes and "--set killSwitch=true" in notes
    assert "any pod: the pause goes on the Lease every replica reads" in notes


def test_the_control_token_is_a_secret_the_chart_makes_mounted_where_the_settings_read_it(tmp_path):
    manifests, _, notes = render()
    secret = manifests["Secret"]
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert len(token) == 40 and token.isalnum() and token not in json.dumps(manifests["ConfigMap"])
    assert token != base64.b64decode(render()[0]["Secret"]["data"]["token"]).decode()  # random, never a default
    control = volume(manifests, "control")["secret"]
    assert control["secretName"] == secret["metadata"]["name"] == "lb-pulsar-lb-operator-control"
    assert control["items"] == [{"key": "token", "path": "token"}] and control["defaultMode"] == 0o440
    settings = settings_file(manifests)
    assert settings["controlTokenFile"] == mount(manifests, "control")["mountPath"] + "/token"
    assert "subPath" not in mount(manifests, "control")  # a rotated Secret reaches the running pod
    # the operator reads what the Secret holds, from the rendered settings
    (tmp_path / "token").write_text(token)
    ours = resolve({**settings, "controlTokenFile": str(tmp_path / "token")}, {}, {})[0]
    assert ours.control_token() == token
    assert "get secret lb-pulsar-lb-operator-control" in notes and "port-forward" in notes
    # every command run in the pod reads the daemon's settings, and no Service's link variable reaches it
    assert env_of(manifests)["PULSAR_LB_CONFIG"]["value"] == container(manifests)["args"][1]
    assert manifests["Deployment"]["spec"]["template"]["spec"]["enableServiceLinks"] is False
    existing = render(COMBINATIONS["controls-existing-secret"])[0]
    assert "Secret" not in existing
    assert volume(existing, "control")["secret"]["items"] == [{"key": "t", "path": "token"}]
    assert volume(existing, "control")["secret"]["secretName"] == "ops-lb-control"
    dotted = render({"controls": {"existingSecret": "ops", "existingSecretKey": "control.token"}})[2]
    assert "jsonpath='{.data.control\\.token}'" in dotted  # kubectl's jsonpath reads an unescaped dot as a level
    read_only, _, notes = render(COMBINATIONS["read-only"])
    assert "Secret" not in read_only and settings_file(read_only)["controlTokenFile"] == ""
    assert resolve(settings_file(read_only), {}, {})[0].control_token() is None and "read-only" in notes
    assert not [v for v in read_only["Deployment"]["spec"]["template"]["spec"]["volumes"] if v["name"] == "control"]


def test_the_token_comes_from_the_pulsar_charts_secret_as_a_file_never_an_environment_variable():
    manifests, _, _ = render(COMBINATIONS["token"])
    token = volume(manifests, "token")["secret"]
    assert token["secretName"] == "pulsar-token-admin"
    assert token["items"] == [{"key": "TOKEN", "path": "token"}]
    settings = settings_file(manifests)
    assert settings["tokenFile"] == mount(manifests, "token")["mountPath"] + "/token"
    assert not any("secretKeyRef" in json.dumps(e) for e in container(manifests)["env"])
    custom = render({"auth": {"token": {"enabled": True, "secretName": "ops-jwt", "secretKey": "jwt"}}})[0]
    assert volume(custom, "token")["secret"]["secretName"] == "ops-jwt"


def test_tls_switches_the_admin_url_and_mounts_the_ca():
    manifests, _, _ = render(COMBINATIONS["tls"])
    settings = settings_file(manifests)
    assert settings["adminUrl"] == "https://pulsar-broker:8443" and settings["tlsVerify"] is True
    assert volume(manifests, "ca")["secret"]["secretName"] == "pulsar-ca-tls"
    assert settings["caBundle"] == mount(manifests, "ca")["mountPath"] + "/ca.crt"


def test_monitors_select_the_operators_pod_and_service_on_the_metrics_port():
    manifests, _, _ = render(COMBINATIONS["monitoring"])
    pod_labels = manifests["Deployment"]["spec"]["template"]["metadata"]["labels"]
    pod_monitor = manifests["PodMonitor"]["spec"]
    assert pod_monitor["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pod_monitor["podMetricsEndpoints"][0]["port"] == "http"
    assert pod_monitor["podMetricsEndpoints"][0]["path"] == "/metrics"
    service_monitor = manifests["ServiceMonitor"]["spec"]
    assert service_monitor["selector"]["matchLabels"].items() <= manifests["Service"]["metadata"]["labels"].items()
    assert service_monitor["endpoints"][0]["port"] == manifests["Service"]["spec"]["ports"][0]["name"]


def test_persistence_claims_a_volume_for_the_history_and_state():
    manifests, _, notes = render(COMBINATIONS["pvc"])
    claim = manifests["PersistentVolumeClaim"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert claim["spec"]["storageClassName"] == "fast"
    assert volume(manifests, "data")["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    settings = settings_file(manifests)
    data = mount(manifests, "data")["mountPath"]
    assert all(settings[k].startswith(data) for k in ("historyUri", "profileUri", "stateFile", "auditSpoolDir"))
    assert "emptyDir" not in notes


def test_the_network_policy_admits_only_the_operators_own_ports_to_its_pods():
    def admitted(manifests):
        policy = manifests["NetworkPolicy"]["spec"]
        labels = manifests["Deployment"]["spec"]["template"]["metadata"]["labels"]
        assert policy["policyTypes"] == ["Ingress"]
        assert policy["podSelector"]["matchLabels"].items() <= labels.items()
        return [({p["port"] for p in rule["ports"]}, rule.get("from")) for rule in policy["ingress"]]

    assert admitted(render()[0]) == [({8090}, None)]  # a local Spark's ports serve the pod itself only
    scrapers = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    external = {**COMBINATIONS["external-spark"], "networkPolicy": {"from": scrapers}}
    assert admitted(render(external)[0]) == [({8090}, scrapers), ({7078, 7079}, None)]
    assert "NetworkPolicy" not in render({"networkPolicy": {"enabled": False}})[0]
    assert "egress" not in render()[0]["NetworkPolicy"]["spec"], "egress open unless rules are given"


def test_egress_rules_narrow_where_the_pods_connect_and_dns_stays_reachable():
    brokers = {"to": [{"podSelector": {"matchLabels": {"component": "broker"}}}], "ports": [{"port": 8080}]}
    api_server = {"to": [{"ipBlock": {"cidr": "10.96.0.1/32"}}], "ports": [{"port": 443}]}
    policy = render({"networkPolicy": {"egress": [brokers, api_server]}})[0]["NetworkPolicy"]["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    dns, *given = policy["egress"]
    assert {(p["port"], p["protocol"]) for p in dns["ports"]} == {(53, "UDP"), (53, "TCP")} and "to" not in dns
    assert given == [brokers, api_server]
    only_dns = render({"networkPolicy": {"egress": []}})[0]["NetworkPolicy"]["spec"]
    assert only_dns["policyTypes"] == ["Ingress", "Egress"] and len(only_dns["egress"]) == 1


def test_an_external_spark_master_gets_the_driver_reachable_from_its_executors():
    manifests, _, _ = render(COMBINATIONS["external-spark"])
    settings = settings_file(manifests)
    assert settings["sparkMaster"] == "spark://spark-master:7077"
    assert settings["historyUri"] == "s3a://pulsar-lb/history"
    env = {e["name"]: e for e in container(manifests)["env"]}
    args = env["PYSPARK_SUBMIT_ARGS"]["value"]
    assert "spark.driver.host=$(POD_IP)" in args and args.endswith("pyspark-shell")
    assert "spark.driver.port=7078" in args and "spark.executor.memory=4g" in args
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    ports = {p["name"]: p["containerPort"] for p in container(manifests)["ports"]}
    assert ports["spark-driver"] == 7078 and ports["spark-blocks"] == 7079
    assert "PYSPARK_SUBMIT_ARGS" not in {e["name"] for e in container(render()[0])["env"]}


def test_spark_conf_values_with_spaces_reach_spark_whole_and_credentials_are_refused():
    conf = {"spark.executorEnv.GREETING": "hello world", "spark.executor.memory": "4g"}
    manifests, _, _ = render({"spark": {"master": "spark://spark-master:7077", "conf": conf}})
    args = shlex.split(env_of(manifests)["PYSPARK_SUBMIT_ARGS"]["value"])  # as pyspark's launch_gateway splits it
    assert "spark.executorEnv.GREETING=hello world" in args and args[-1] == "pyspark-shell"
    for key in ("spark.hadoop.fs.s3a.secret.key", "spark.hadoop.fs.s3a.access.key", "spark.authenticate.secret"):
        with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmRenderError, match=re.escape(f"spark.conf.{key}")):
            chart.render(values={"spark": {"conf": {key: "AKIA-not-here"}}}, name="lb", namespace="pulsar")
    in_the_value = {  # a credential under a key that names none
        "spark.sql.catalog.db.url": "jdbc:postgresql://db:5432/x?user=lb&password=hunter2",
        "spark.eventLog.dir": "s3a://AKIAEXAMPLE:wJalrXUtnFEMI@logs/spark",
    }
    for key, value in in_the_value.items():
        with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmRenderError, match=re.escape(f"spark.conf.{key}")):
            chart.render(values={"spark": {"conf": {key: value}}}, name="lb", namespace="pulsar")
    plain = {"spark.eventLog.dir": "s3a://logs@2026/spark", "spark.master.rest.url": "http://spark:6066/?a=b"}
    assert render({"spark": {"conf": plain}})[0]["Deployment"]  # an @ or a query without a credential: allowed
    provider = "spark.hadoop.fs.s3a.aws.credentials.provider"  # names a class, not a credential: allowed
    assert (
        provider
        in env_of(render({"spark": {"conf": {provider: "x.DefaultCredentialsProvider"}}})[0])["PYSPARK_SUBMIT_ARGS"][
            "value"
        ]
    )


def pulsar_broker_service(release, values):
    """Name and ports of the broker Service the apache/pulsar chart creates for this release."""
    with helm.Chart.load(PULSAR_NAMING) as chart:
        rendered = chart.render(values=values, name=release, namespace="pulsar")
    [service] = [d for text in rendered.values() for d in yaml.safe_load_all(text) if d]
    return service["metadata"]["name"], {p["name"]: p["port"] for p in service["spec"]["ports"]}


@pytest.mark.parametrize(
    ("release", "theirs", "ours", "expected"),
    [
        ("pulsar", {}, {}, "pulsar-broker"),  # the release name contains the chart's name: used as it is
        ("my", {}, {}, "my-pulsar-broker"),
        ("prod-pulsar-east", {}, {}, "prod-pulsar-east-broker"),
        ("my", {"fullnameOverride": "streaming"}, {"fullnameOverride": "streaming"}, "streaming-broker"),
        ("my", {"broker": {"component": "brk"}}, {"brokerComponent": "brk"}, "my-pulsar-brk"),
    ],
)
def test_the_derived_urls_name_the_broker_service_the_pulsar_chart_creates(release, theirs, ours, expected):
    service, ports = pulsar_broker_service(release, theirs)
    assert service == expected
    pulsar = {"release": release, **ours}
    plain = settings_file(render({"pulsar": pulsar, "audit": {"enabled": True}})[0])
    assert plain["adminUrl"] == f"http://{service}:{ports['http']}"
    assert plain["auditServiceUrl"] == f"pulsar://{service}:{ports['pulsar']}"
    tls = settings_file(render({"pulsar": pulsar, "tls": {"enabled": True}})[0])
    assert tls["adminUrl"] == f"https://{service}:{ports['https']}"
    assert tls["auditServiceUrl"] == f"pulsar+ssl://{service}:{ports['pulsarssl']}"
    token = render({"pulsar": pulsar, "auth": {"token": {"enabled": True}}})[0]
    assert volume(token, "token")["secret"]["secretName"] == f"{release}-token-admin", "the Pulsar chart's Release.Name"
    explicit = render({"pulsar": {**pulsar, "adminUrl": "https://proxy.example:443"}})[0]
    assert settings_file(explicit)["adminUrl"] == "https://proxy.example:443"


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"dryRun": "no"}, "/dryRun"),
        ({"settings": {"maxUnloadsPerCycle": 0}}, "/settings/maxUnloadsPerCycle"),
        ({"loadBalancer": {"loadBalancerLoadSheddingStrategy": "FastShedder"}}, "loadBalancerLoadSheddingStrategy"),
        ({"loadBalancer": {"loadBalancerShedingEnabled": False}}, "loadBalancerShedingEnabled"),
        ({"audit": {"topic": "audit"}}, "/audit/topic"),
        ({"spark": {"master": "local[two]"}}, "/spark/master"),
        ({"spark": {"conf": {"spark.executorEnv.NAME": "it's"}}}, "/spark/conf"),  # would end its shell quoting
        ({"metrics": {"port": 70000}}, "/metrics/port"),
        ({"pulsar": {"adminUrl": "pulsar-broker:8080"}}, "/pulsar/adminUrl"),
        ({"replicaCount": 0}, "/replicaCount"),
        ({"replicaCount": 1.5}, "/replicaCount"),
        ({"leaderElection": {"enabled": "yes"}}, "/leaderElection/enabled"),
        ({"leaderElection": {"leaseDurationSeconds": 0}}, "/leaderElection/leaseDurationSeconds"),
        ({"leaderElection": {"retryPeriodSeconds": -1}}, "/leaderElection/retryPeriodSeconds"),
        ({"terminationGracePeriodSeconds": 10}, "/terminationGracePeriodSeconds"),
        ({"updateStrategy": {"type": "OnDelete"}}, "/updateStrategy/type"),
    ],
)
def test_a_bad_value_is_rejected_with_the_key_named(values, where):
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmValuesError, match=re.escape(where)):
        chart.render(values=values, name="lb", namespace="pulsar")


def test_two_replicas_elect_a_leader_over_a_lease_the_pod_may_read_create_and_update():
    manifests, _, notes = render({"replicaCount": 2})
    fullname = manifests["Deployment"]["metadata"]["name"]
    deployment = manifests["Deployment"]["spec"]
    assert deployment["replicas"] == 2
    assert deployment["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    pod = deployment["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True, "leader election calls the API with the account's token"
    assert env_of(manifests)["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}

    role, binding = manifests["Role"], manifests["RoleBinding"]
    assert all(r["apiGroups"] == ["coordination.k8s.io"] and r["resources"] == ["leases"] for r in role["rules"])
    verbs = {verb: rule.get("resourceNames") for rule in role["rules"] for verb in rule["verbs"]}
    assert verbs == {"create": None, "get": [fullname], "update": [fullname]}
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    account = manifests["ServiceAccount"]["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "pulsar"}]
    assert pod["serviceAccountName"] == account

    settings = settings_file(manifests)
    assert settings["leaderElection"] is True and settings["leaseName"] == fullname
    assert settings["leaseNamespace"] == "pulsar" and settings["shutdownTimeoutSeconds"] == 50
    ours, _, _ = resolve(settings, {}, {})
    assert (ours.leaseDurationSeconds, ours.renewDeadlineSeconds, ours.retryPeriodSeconds) == (15.0, 10.0, 2.0)
    assert f"kubectl -n pulsar get lease {fullname} -o jsonpath='{{.spec.holderIdentity}}'" in notes
    assert "each replica keeps its own state" in notes

    budget = render({"replicaCount": 2, "podDisruptionBudget": {"enabled": True}})[0]["PodDisruptionBudget"]["spec"]
    assert budget["maxUnavailable"] == 1
    assert budget["selector"]["matchLabels"].items() <= deployment["template"]["metadata"]["labels"].items()


def test_the_rendered_lease_settings_drive_an_elector_that_takes_the_lease():
    manifests, _, _ = render({"replicaCount": 2})
    ours, _, _ = resolve(settings_file(manifests), {}, {})
    with FakeKubeApi() as api:
        elector = elector_from_settings(ours.lease(), client=LeaseClient(api.url, token=api.token), identity="lb-0")
        assert isinstance(elector, LeaseElector)
        assert elector.try_acquire_or_renew() and elector.is_leader()
        lease = api.lease("pulsar", manifests["Deployment"]["metadata"]["name"])
    assert lease["spec"]["holderIdentity"] == "lb-0" and lease["spec"]["leaseDurationSeconds"] == 15


def test_leader_election_is_on_even_for_one_replica_unless_turned_off():
    one, _, notes = render({"terminationGracePeriodSeconds": 120})
    assert one["Deployment"]["spec"]["replicas"] == 1 and {"Role", "RoleBinding"} <= set(one)
    assert one["Deployment"]["spec"]["template"]["spec"]["automountServiceAccountToken"] is True
    assert one["Deployment"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 120
    assert settings_file(one)["leaderElection"] is True and settings_file(one)["shutdownTimeoutSeconds"] == 110
    assert "POD_NAME" in env_of(one)
    assert "cooldowns, pending verifications and the strategy's counters are kept on the Lease" in notes
    assert settings_file(render({"leaderElection": {"enabled": None}})[0])["leaderElection"] is True, "older values"
    off, _, notes = render({"leaderElection": {"enabled": False}})
    assert "Role" not in off and "RoleBinding" not in off
    assert settings_file(off)["leaderElection"] is False and off["Deployment"]["spec"]["strategy"] == {
        "type": "Recreate"
    }
    assert off["Deployment"]["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    assert "lost on every upgrade" in notes
    own = render({"replicaCount": 2, "serviceAccount": {"create": False, "name": "ops"}})[0]
    assert "ServiceAccount" not in own and own["RoleBinding"]["subjects"][0]["name"] == "ops"
    recreate = render({"replicaCount": 2, "updateStrategy": {"type": "Recreate"}})[0]
    assert recreate["Deployment"]["spec"]["strategy"] == {"type": "Recreate"}
    claim = render(COMBINATIONS["everything"])[0]["Deployment"]["spec"]
    assert claim["strategy"] == {"type": "Recreate"}, "the state file's lock admits one pod: never two on a claim"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"replicaCount": 2, "leaderElection": {"enabled": False}}, "leaderElection.enabled: replicaCount 2 needs"),
        ({"leaderElection": {"renewDeadlineSeconds": 15}}, "leaderElection.renewDeadlineSeconds: must be less"),
        ({"leaderElection": {"retryPeriodSeconds": 10}}, "leaderElection.retryPeriodSeconds: must be less"),
        (
            {"leaderElection": {"enabled": False}, "updateStrategy": {"type": "RollingUpdate"}},
            "updateStrategy.type: RollingUpdate needs leader election",
        ),
        (
            {
                "leaderElection": {"enabled": True},
                "persistence": {"enabled": True},
                "updateStrategy": {"type": "RollingUpdate"},
            },
            "updateStrategy.type: RollingUpdate with persistence.enabled",
        ),
        (
            {"replicaCount": 2, "persistence": {"enabled": True}},
            "persistence.enabled: one claim cannot serve replicaCount 2",
        ),
    ],
)
def test_values_that_would_let_two_operators_act_at_once_are_refused(values, message):
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmRenderError, match=re.escape(message)):
        chart.render(values=values, name="lb", namespace="pulsar")


def test_the_schema_knows_every_pulsar_key_and_strategy_and_the_readme_every_value():
    schema = json.loads((CHART / "values.schema.json").read_text())
    load_balancer = schema["properties"]["loadBalancer"]["properties"]
    assert set(load_balancer) == set(config_keys())
    with helm.Chart.load(CHART) as chart:
        for name in SHEDDING:
            chart.validate_schema({"loadBalancer": {"loadBalancerLoadSheddingStrategy": name}})
        for name in PLACEMENT:
            chart.validate_schema({"loadBalancer": {"loadBalancerLoadPlacementStrategy": f"org.example.{name}"}})
        values = chart.values
    readme = (CHART / "README.md").read_text()

    def leaves(tree, prefix=""):
        for key, value in tree.items():
            if isinstance(value, dict) and value and not readme.count(f"`{prefix}{key}`"):
                yield from leaves(value, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}"

    missing = [key for key in leaves(values) if f"| `{key}` |" not in readme]
    assert missing == []


def test_the_operator_runs_a_cycle_from_the_rendered_settings_file(live_served, tmp_path, capsys):
    manifests, _, _ = render({"settings": {"maxUnloadsPerCycle": 3}})
    config = tmp_path / "settings.yaml"
    config.write_text(manifests["ConfigMap"]["data"]["settings.yaml"])
    argv = ["rebalance", "--config", str(config), "--admin-url", live_served.admin_url, "--dry-run", "--output", "json"]
    assert main(argv) == 0
    plan = json.loads(capsys.readouterr().out.splitlines()[-1])  # the "result" line
    assert plan["shedding"] == "AvgShedder" and len(plan["brokers"]) == 4


def _pod(manifests, sim, api, data_dir, name):
    """The daemon a pod of these manifests runs: its rendered settings, its own (new, empty) data volume."""
    ours, config, _ = resolve(settings_file(manifests), {}, {})
    ours = dataclasses.replace(
        ours, stateFile=str(data_dir / "state.json"), historyUri="", profileUri="", metricsPort=0
    )
    elector = elector_from_settings(ours.lease(), client=LeaseClient(api.url, token=api.token), identity=name)
    client = AdminClient(sim.admin_url, retries=1)
    return Daemon(ours, config, client, "sim", clock_ms=lambda: sim.cluster.now_ms, elector=elector)


@pytest.mark.parametrize("leader_election", [True, False])
def test_an_upgrade_with_the_default_values_keeps_the_cooldowns(served, tmp_path, leader_election):
    """`helm upgrade` with any change restarts the pod (the config checksum) on a new emptyDir. With the default
    values the record of what was sent lives on the Lease, and the new pod inherits it; without leader
    election (the old default) it starts blank and would move the same bundles again."""
    values = {
        "dryRun": False,
        "settings": {"pauseSeconds": 0},
        "loadBalancer": {**served.cluster.scenario.config, "loadBalancerAvgShedderHitCountHighThreshold": 1},
    }
    if not leader_election:
        values["leaderElection"] = {"enabled": False}
    before = render(values)[0]
    after = render({**values, "settings": {"pauseSeconds": 0, "maxUnloadsPerCycle": 8}})[0]

    def checksum(m):
        return m["Deployment"]["spec"]["template"]["metadata"]["annotations"]["checksum/config"]

    assert checksum(before) != checksum(after), "the upgrade restarts the pod"
    assert "emptyDir" in volume(after, "data"), "… on a new, empty volume"
    assert settings_file(before)["leaderElection"] is leader_election
    with FakeKubeApi() as api:
        old = _pod(before, served, api, tmp_path / "old-pod", "lb-old")
        if leader_election:
            assert old.elector.try_acquire_or_renew()
        assert old.leads()
        sent = [r.action.bundle for r in old.run_once().records if r.outcome is Outcome.EXECUTED]
        assert sent
        old.elector.stop()  # SIGTERM: the Lease is released, the record stays on it
        new = _pod(after, served, api, tmp_path / "new-pod", "lb-new")
        if leader_election:
            assert new.elector.try_acquire_or_renew()
        assert new.leads()
    cooldowns, pending = set(new.state.executor.last_moved), new.state.executor.awaiting()
    if leader_election:
        assert set(sent) <= cooldowns and set(sent) <= pending
    else:
        assert not cooldowns and not pending


@pytest.mark.parametrize("leader_election", [True, False])
def test_an_upgrade_with_the_default_values_keeps_the_hit_counters(served, tmp_path, leader_election):
    """AvgShedder acts on a pair's second consecutive hit (Pulsar's default). One cycle before `helm upgrade
    --set dryRun=false` counts the first; with the default values the counters are on the Lease, and the new
    pod's first cycle is the second hit: it acts. Without leader election it starts counting again."""
    values = {"dryRun": False, "settings": {"pauseSeconds": 0}, "loadBalancer": dict(served.cluster.scenario.config)}
    if not leader_election:
        values["leaderElection"] = {"enabled": False}
    before, after = render(values)[0], render({**values, "settings": {"pauseSeconds": 0, "maxUnloadsPerCycle": 8}})[0]
    with FakeKubeApi() as api:
        old = _pod(before, served, api, tmp_path / "old-pod", "lb-old")
        assert old.elector.try_acquire_or_renew() if leader_election else old.leads()
        first = old.run_once()
        assert first.plan is not None and not first.plan.unloads  # one hit counted, nothing sent
        assert old.state.strategy.avg_hits_high
        old.elector.stop()
        new = _pod(after, served, api, tmp_path / "new-pod", "lb-new")
        assert new.elector.try_acquire_or_renew() if leader_election else new.leads()
        assert new.leads()
        sent = [r for r in new.run_once().records if r.outcome is Outcome.EXECUTED]
    if leader_election:
        assert sent, "the second consecutive hit, counted across the upgrade"
    else:
        assert not sent, "a blank pod counts its first hit again"


def test_the_durable_kill_switch_reaches_every_pod_and_stops_every_call(live_served, tmp_path, capsys, monkeypatch):
    """`--set killSwitch=true` survives upgrades: it is in the pod spec, not on the pod's volume."""
    from pulsar_lb_operator import cli

    manifests, _, _ = render({"killSwitch": True})
    env = env_of(manifests)
    assert env["PULSAR_LB_KILL_SWITCH"]["value"] == "1"
    assert "PULSAR_LB_KILL_SWITCH" not in env_of(render()[0])
    monkeypatch.setenv("PULSAR_LB_KILL_SWITCH", env["PULSAR_LB_KILL_SWITCH"]["value"])
    monkeypatch.setenv("PULSAR_ADMIN_URL", live_served.admin_url)
    monkeypatch.chdir(tmp_path)
    args = ["rebalance", "--no-dry-run", "--set", "loadBalancerAvgShedderHitCountHighThreshold=1"]
    assert cli.main([*args, "--set", "pauseSeconds=0"]) == 0
    assert "kill switch: environment variable PULSAR_LB_KILL_SWITCH is set" in capsys.readouterr().out
    assert live_served.mutating_requests() == []


def test_the_status_page_answers_to_its_services_names_and_the_hosts_given():
    settings = settings_file(render({"metrics": {"statusPageHosts": ["lb.example.com"]}})[0])
    service = "lb-pulsar-lb-operator-metrics"
    assert settings["statusPageHosts"] == [
        service,
        f"{service}.pulsar",
        f"{service}.pulsar.svc",
        f"{service}.pulsar.svc.cluster.local",
        "lb.example.com",
    ]
    assert render()[0]["Service"]["metadata"]["name"] == service
