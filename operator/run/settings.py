"""The operator's own settings, and where they come from: file < environment < command line.

Pulsar's load-balancer keys (``loadBalancer…``, ``maxUnloadPercentage``, …) may sit in the same file;
they go to the strategies' LoadBalancerConfig. Everything is validated at start, and an error names
the key. The admin token is read from a file or an environment variable and is never logged.

Why not pydantic-settings: the same typed conversion (``strategies.config.convert_value``) must also read
Pulsar's keys into the strategies' LoadBalancerConfig, and the strategies layer stays free of it; the
environment names are Pulsar-style camelCase keys in upper snake case (``maxUnloadsPerCycle`` →
``PULSAR_LB_MAX_UNLOADS_PER_CYCLE``), which would need an alias per field; and every message is already one
line naming the key and the rule (with a "did you mean" for a typo), where pydantic's are several lines
to be reformatted. What would go (the type conversion, ~40 lines) would come back as sources and aliases.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pulsar_lb_operator import hints
from pulsar_lb_operator.act.guard import BuiltinGuard
from pulsar_lb_operator.act.safety import KILL_SWITCH_ENV, Safety
from pulsar_lb_operator.adminapi import AdminClient, auth, origins
from pulsar_lb_operator.adminapi.auth import AuthSettings
from pulsar_lb_operator.adminapi.client import TEMPLATE_FIELDS, render_template, service_url_of, template_fields
from pulsar_lb_operator.collect.elm import ElmSettings
from pulsar_lb_operator.record.audit.publisher import AuditSettings
from pulsar_lb_operator.run.leadership import LeaseSettings
from pulsar_lb_operator.strategies import (
    DEFAULT_RAILS,
    YEAR_MINUTES,
    ConfigError,
    LoadBalancerConfig,
    config_keys,
    convert_value,
    did_you_mean,
)

ENV_PREFIX = "PULSAR_LB_"
MAY_BE_EMPTY = ("historyUri", "profileUri")  # "" turns the history or the profile off
CONTROL_TOKEN_MIN_CHARS = 16  # a guessable credential for approve / drain / pause is no credential

# Every PULSAR_LB_* name that is not a setting, in one place: any other PULSAR_LB_* variable is an error (exit 2,
# "did you mean …"), as an unknown key in the settings file is, so a typo of the kill switch never passes unseen.
# (Also accepted: the variable tokenEnv names, and the link variables Kubernetes sets for a Service whose name
# starts with pulsar-lb-, which the chart turns off with enableServiceLinks: false.)
OTHER_ENVIRONMENT = {
    KILL_SWITCH_ENV: "the emergency stop: on for any value but 0, false, no, off or empty",
    "PULSAR_LB_TOKEN": "the admin token (tokenEnv's default)",
    "PULSAR_LB_CONFIG": "the settings file a command reads when it is given no --config",
    "PULSAR_LB_TRACEBACK": "an internal error shows its traceback",
}
_SERVICE_LINK = re.compile(r"SERVICE_HOST|SERVICE_PORT(_\w+)?|PORT(_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)?")
HTTP_URL = r"^https?://[^/\s]+(/\S*)?$"
PULSAR_URL = r"^pulsar(\+ssl)?://[^/\s]+/?$"


YEAR_S = YEAR_MINUTES * 60
INTERVAL_ZERO = {"cycleIntervalSeconds": "loadBalancerSheddingIntervalMinutes", "aggregateEveryMinutes": "no Spark job"}


@dataclass(frozen=True)
class OperatorSettings:
    adminUrl: str | None = None  # any broker's or the proxy's web URL (env PULSAR_ADMIN_URL)
    cluster: str | None = None  # default: the only cluster the admin API lists
    tokenFile: str | None = None
    tokenEnv: str = "PULSAR_LB_TOKEN"  # name of the environment variable holding the token
    caBundle: str | None = None  # PEM file to verify the brokers' TLS certificates
    tlsVerify: bool = True
    authPlugin: str | None = None  # token | tls | oauth2 | none (or Pulsar's class names); unset: token if one is set
    tlsCertFile: str | None = None  # client certificate (PEM): authPlugin tls, or mutual TLS beside a token/OAuth2
    tlsKeyFile: str | None = None  # its private key (PEM)
    oauth2IssuerUrl: str | None = None  # authPlugin oauth2: the issuer; its /.well-known/openid-configuration
    oauth2Audience: str | None = None
    oauth2CredentialsFile: str | None = None  # Pulsar's key file: {"client_id": …, "client_secret": …}
    oauth2Scope: str | None = None
    brokerWebServiceUrlTemplate: str | None = None  # e.g. https://{host}:8443 ({id}, {host}, {port}): proxy, NAT
    brokerWebServiceUrls: tuple[str, ...] = ()  # brokerId=URL pairs (a mapping in a settings file), over the template
    dryRun: bool = True  # log what would be done; call no mutating endpoint
    maxUnloadsPerCycle: int = DEFAULT_RAILS.max_unloads_per_cycle
    maxUnloadsPerBroker: int = DEFAULT_RAILS.max_unloads_per_broker
    excludedNamespaces: tuple[str, ...] = ()  # regular expressions over tenant/namespace
    excludedBrokers: tuple[str, ...] = ()
    killSwitchFile: str | None = None  # while it exists nothing is sent (operator pause); default <stateFile>.pause
    controlTokenFile: str | None = None  # the status page's approve/drain/pause need this token; unset: read-only
    pauseSeconds: float = 5.0  # between two actions of a cycle
    brokerTimeoutSeconds: float = 20.0  # a broker whose load report takes longer is left out of the cycle
    verifyAfterSeconds: float = 120.0
    shutdownTimeoutSeconds: float = 50.0  # SIGTERM → exit within this (the pod's terminationGracePeriodSeconds − 10)
    maxResponseMegabytes: float = 64.0  # a larger admin API answer is cut off with an error, never read whole
    stateFile: str = "state/operator-state.json"
    historyUri: str = "history"  # where every cycle's samples go (Parquet); a directory or s3a://, hdfs://…; "" off
    historyRetentionDays: float = 14.0
    historyMaxMegabytes: float = 0.0  # the history's byte bound: past it the oldest hours go first; 0: age only
    historyMinuteHours: float = 26.0  # bundle minute samples kept this long (≥ the 24 h profile window + 1 h)
    profileUri: str = "profile"  # the load profile the Spark job writes and every cycle reads; "" off
    aggregateEveryMinutes: float = 15.0  # run the Spark job in-process this often; 0: an external job writes it
    sparkMaster: str = "local[2]"
    metricsPort: int = 8090  # /healthz, /readyz, /metrics; 0 disables
    metricsHost: str = "127.0.0.1"  # local runs stay on loopback; the chart (and the image) set 0.0.0.0
    # host names the status page and /api/status answer to besides localhost, IP addresses and the host's own
    # names (an Ingress's, a Service's; "*": any): asked for under another (a DNS-rebinding page), they refuse
    statusPageHosts: tuple[str, ...] = ()
    cycleIntervalSeconds: float = 0.0  # 0: loadBalancerSheddingIntervalMinutes
    approval: str = "auto"  # "manual": each cycle's plan waits as a proposal for `operator approve`
    disableBuiltinShedding: bool = False  # turn Pulsar's own shedder (and splitter) off before the first action
    coexistWithBuiltinShedding: bool = False  # act while Pulsar's own balancer is on (a person chose both)
    auditEnabled: bool = False  # publish every plan and action outcome to auditTopic
    auditServiceUrl: str | None = None  # pulsar:// or pulsar+ssl:// URL; default: adminUrl's host on 6650/6651
    auditTopic: str = "persistent://public/default/pulsar-lb-operator-audit"
    auditSpoolDir: str | None = None  # events wait here until the broker has them; default: beside stateFile
    auditSpoolMaxMegabytes: float = 64.0  # past this, new events are dropped and counted, never blocking a cycle
    # the extensible load manager's system topics (operator/collect/elm.py): any broker's or the proxy's pulsar:// or
    # pulsar+ssl:// URL (default: the cluster's brokerServiceUrl / brokerServiceUrlTls, from its metadata)
    elmServiceUrl: str | None = None
    # how long the first cycle waits for every broker's data on the extensible load manager's topics (0: one report
    # interval, the brokers' loadBalancerReportUpdateMaxIntervalMinutes)
    elmReadTimeoutSeconds: float = 0.0
    leaderElection: bool = False  # act only while holding the Kubernetes Lease leaseName (see leadership.py)
    leaseName: str = "pulsar-lb-operator"
    leaseNamespace: str | None = None  # default: the pod's namespace (its service account's namespace file)
    leaseDurationSeconds: float = 15.0  # a standby takes over an unrenewed lease after this
    renewDeadlineSeconds: float = 10.0  # the leader stops acting when it could not renew for this long
    retryPeriodSeconds: float = 2.0  # between two tries to acquire or renew
    logLevel: str = "info"
    logJson: bool = False
    seed: int = 0

    def __repr__(self) -> str:  # a basic-auth login in a URL is a credential (the token is only a file's path)
        fields = ", ".join(
            f"{f.name}={origins.without_userinfo(v)!r}"
            if isinstance(v := getattr(self, f.name), str)
            else f"{f.name}={v!r}"
            for f in dataclasses.fields(self)
        )
        return f"OperatorSettings({fields})"

    def __post_init__(self) -> None:
        for key in ("maxUnloadsPerCycle", "maxUnloadsPerBroker"):
            if getattr(self, key) < 1:
                raise ConfigError(f"{key}: must be >= 1")
        for key in ("pauseSeconds", "verifyAfterSeconds"):
            if getattr(self, key) < 0:
                raise ConfigError(f"{key}: must be >= 0")
        for key, most in (("cycleIntervalSeconds", YEAR_S), ("aggregateEveryMinutes", YEAR_S / 60)):
            if not 0 <= getattr(self, key) <= most:
                raise ConfigError(f"{key}: must be from 0 (0: {INTERVAL_ZERO[key]}) to {most:,.0f}, a year")
        for key in ("shutdownTimeoutSeconds", "maxResponseMegabytes", "brokerTimeoutSeconds"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"{key}: must be > 0")
        if not 0 <= self.metricsPort <= 65535:
            raise ConfigError("metricsPort: must be a port number (0 disables)")
        if self.disableBuiltinShedding and self.coexistWithBuiltinShedding:
            raise ConfigError("coexistWithBuiltinShedding: contradicts disableBuiltinShedding: true; choose one")
        if self.approval not in ("auto", "manual"):
            raise ConfigError(f"approval: {self.approval!r} is not auto or manual")
        if self.logLevel.lower() not in ("debug", "info", "warning", "error"):
            raise ConfigError(f"logLevel: {self.logLevel!r} is not debug, info, warning or error")
        if self.adminUrl is not None:
            _check_url("adminUrl", self.adminUrl, r"^https?://[^/\s]+/?$", "an http(s)://host:port URL")
        self._check_auth()
        self._check_broker_urls()
        if self.auditServiceUrl is not None:
            _check_url("auditServiceUrl", self.auditServiceUrl, PULSAR_URL, "a pulsar:// or pulsar+ssl:// URL")
        if not re.match(r"^(persistent|non-persistent)://[^/\s]+/[^/\s]+/[^/\s]+$", self.auditTopic):
            raise ConfigError(
                f"auditTopic: {self.auditTopic!r} is not a full topic name (persistent://tenant/ns/topic)"
            )
        if self.elmServiceUrl is not None:
            _check_url("elmServiceUrl", self.elmServiceUrl, PULSAR_URL, "a pulsar:// or pulsar+ssl:// URL")
        if self.elmReadTimeoutSeconds < 0:
            raise ConfigError("elmReadTimeoutSeconds: must be >= 0 (0: one report interval)")
        if self.historyMaxMegabytes < 0:
            raise ConfigError("historyMaxMegabytes: must be >= 0 (0: bounded by age only)")
        if not self.historyRetentionDays > 0:
            raise ConfigError("historyRetentionDays: must be > 0")
        if self.historyMinuteHours < 25:
            raise ConfigError("historyMinuteHours: must be >= 25 (the profile's 24 h window and what leaves it)")
        if self.auditSpoolMaxMegabytes <= 0:
            raise ConfigError("auditSpoolMaxMegabytes: must be > 0")
        if self.auditEnabled and not (self.auditServiceUrl or self.adminUrl):
            raise ConfigError("auditEnabled: needs auditServiceUrl (or an adminUrl to derive it from)")
        for key in ("leaseDurationSeconds", "renewDeadlineSeconds", "retryPeriodSeconds"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"{key}: must be > 0")
        if not self.renewDeadlineSeconds < self.leaseDurationSeconds:
            raise ConfigError("renewDeadlineSeconds: must be less than leaseDurationSeconds (no two leaders at once)")
        if not self.retryPeriodSeconds < self.renewDeadlineSeconds:
            raise ConfigError("retryPeriodSeconds: must be less than renewDeadlineSeconds")
        for pattern in self.excludedNamespaces:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError(f"excludedNamespaces: {pattern!r} is not a regular expression ({exc})") from None

    def _check_auth(self) -> None:
        plugin = auth.plugin_name(self.authPlugin)  # ConfigError naming authPlugin
        if bool(self.tlsCertFile) != bool(self.tlsKeyFile):
            missing = "tlsKeyFile" if self.tlsCertFile else "tlsCertFile"
            raise ConfigError(f"{missing}: a client certificate needs both tlsCertFile and tlsKeyFile")
        if plugin == "tls":
            if not self.tlsCertFile:
                raise ConfigError("tlsCertFile: authPlugin tls needs tlsCertFile and tlsKeyFile")
            if self.adminUrl is not None and not self.adminUrl.startswith("https://"):
                raise ConfigError("adminUrl: authPlugin tls presents a client certificate, which needs https://")
        if plugin == "oauth2":
            if not self.oauth2IssuerUrl:
                raise ConfigError("oauth2IssuerUrl: authPlugin oauth2 needs the issuer's URL")
            if not self.oauth2CredentialsFile:
                raise ConfigError("oauth2CredentialsFile: authPlugin oauth2 needs the client credentials file")
        if self.oauth2IssuerUrl is not None:
            _check_url("oauth2IssuerUrl", self.oauth2IssuerUrl, HTTP_URL, "an http(s):// URL")

    def _check_broker_urls(self) -> None:
        template = self.brokerWebServiceUrlTemplate
        if template is not None:
            try:
                unknown = template_fields(template) - TEMPLATE_FIELDS
                rendered = "" if unknown else render_template(template, "broker-0.example:8080")
            except (ValueError, IndexError, KeyError):
                raise ConfigError(f"brokerWebServiceUrlTemplate: {template!r} is not a URL template") from None
            if unknown:
                raise ConfigError(
                    f"brokerWebServiceUrlTemplate: unknown placeholder {{{sorted(unknown)[0]}}} (use {{id}}, {{host}}, "
                    "{port})"
                )
            if not re.match(HTTP_URL, rendered) or _bad_port(rendered) is not None:
                raise ConfigError(f"brokerWebServiceUrlTemplate: {template!r} does not make an http(s):// URL")
        self.broker_web_service_urls()

    def broker_web_service_urls(self) -> dict[str, str]:
        """brokerWebServiceUrls as broker id → URL; ConfigError naming the key for a malformed pair."""
        urls: dict[str, str] = {}
        for pair in self.brokerWebServiceUrls:
            broker_id, _, url = pair.partition("=")
            broker_id, url = broker_id.strip(), url.strip()
            if not re.match(r"^[^\s/:]+:\d+$", broker_id) or not re.match(HTTP_URL, url) or _bad_port(url) is not None:
                raise ConfigError(f"brokerWebServiceUrls: {pair!r} is not brokerId=URL (host:port=http(s)://host:port)")
            urls[broker_id] = url
        return urls

    # ---- what each stage reads: built from these settings, the stage never sees the rest

    def auth(self) -> AuthSettings:
        return AuthSettings(
            plugin=self.authPlugin,
            token_file=self.tokenFile,
            token_env=self.tokenEnv,
            tls_cert_file=self.tlsCertFile,
            tls_key_file=self.tlsKeyFile,
            oauth2_issuer_url=self.oauth2IssuerUrl,
            oauth2_audience=self.oauth2Audience,
            oauth2_credentials_file=self.oauth2CredentialsFile,
            oauth2_scope=self.oauth2Scope,
        )

    def audit(self) -> AuditSettings:
        service_url = self.auditServiceUrl or (service_url_of(self.adminUrl) if self.adminUrl else None)
        return AuditSettings(
            enabled=self.auditEnabled,
            service_url=service_url,
            topic=self.auditTopic,
            spool_dir=self.auditSpoolDir or str(Path(self.stateFile).parent / "audit-spool"),
            spool_max_bytes=int(self.auditSpoolMaxMegabytes * 2**20),
            auth=self.auth(),
            ca_file=self.caBundle,
            tls_verify=self.tlsVerify,
        )

    def lease(self) -> LeaseSettings:
        return LeaseSettings(
            enabled=self.leaderElection,
            name=self.leaseName,
            namespace=self.leaseNamespace,
            duration_s=self.leaseDurationSeconds,
            renew_deadline_s=self.renewDeadlineSeconds,
            retry_period_s=self.retryPeriodSeconds,
        )

    def elm(self) -> ElmSettings:
        return ElmSettings(self.elmServiceUrl or None, self.elmReadTimeoutSeconds)

    def builtin_guard(self, client: AdminClient, config: LoadBalancerConfig) -> BuiltinGuard:
        """The conflict guard as these settings ask (``rebalance``, the daemon's cycles and approved proposals)."""
        return BuiltinGuard(
            client,
            disable=self.disableBuiltinShedding,
            coexist=self.coexistWithBuiltinShedding,
            splits=config.loadBalancerAutoBundleSplitEnabled,
        )

    def safety(self, config: LoadBalancerConfig, dry_run: bool | None = None) -> Safety:
        """The executor's rails; the one place they are made from the settings."""
        return Safety(
            dry_run=self.dryRun if dry_run is None else dry_run,
            max_unloads_per_cycle=self.maxUnloadsPerCycle,
            max_unloads_per_broker=self.maxUnloadsPerBroker,
            cooldown_minutes=config.loadBalancerSheddingGracePeriodMinutes,
            excluded_namespaces=self.excludedNamespaces,
            excluded_brokers=self.excludedBrokers,
            kill_switch_file=self.kill_switch_file(),
            pause_seconds=self.pauseSeconds,
            verify_after_seconds=self.verifyAfterSeconds,
        )

    def kill_switch_file(self) -> str:
        """The pause file the executor checks before every call and ``operator pause`` writes: killSwitchFile,
        else ``<stateFile>.pause`` — beside the state, so a pause reaches the daemon that owns that state."""
        return self.killSwitchFile or f"{self.stateFile}.pause"

    def control_token(self) -> str | None:
        """The credential of the status page's mutating requests, read again at every call (a rotated Secret
        takes effect at once); None: no controlTokenFile, the page is read-only."""
        if not self.controlTokenFile:
            return None
        try:
            with open(self.controlTokenFile, encoding="utf-8") as handle:
                token = handle.read(4096).strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not a UTF-8 text file"
            fix = hints.file_fix(exc, self.controlTokenFile) if isinstance(exc, OSError) else ""
            message = f"controlTokenFile: cannot read {self.controlTokenFile!r}: {reason}"
            raise ConfigError(hints.with_fix(message, fix)) from None
        if len(token) < CONTROL_TOKEN_MIN_CHARS:
            raise ConfigError(
                f"controlTokenFile: the token in {self.controlTokenFile!r} has {len(token)} characters; use at least "
                f"{CONTROL_TOKEN_MIN_CHARS} (e.g. openssl rand -hex 32 > {self.controlTokenFile})"
            )
        return token


def _env_name(key: str) -> str:
    return ENV_PREFIX + re.sub(r"(?<!^)(?=[A-Z])", "_", key).upper()


# where a daemon reads its pause: its state (the pause file beside it), its pause file, and its Lease
PAUSE_KEYS = frozenset(
    {
        "stateFile",
        "killSwitchFile",
        "leaderElection",
        "leaseName",
        "leaseNamespace",
        "leaseDurationSeconds",
        "renewDeadlineSeconds",
        "retryPeriodSeconds",
    }
)


def pause_settings(file_settings: Mapping[str, Any], environ: Mapping[str, str]) -> OperatorSettings:
    """The settings of ``PAUSE_KEYS`` alone, every other key and variable left out: where the rest has an error (a
    ConfigMap edited badly while the daemon runs on the one it read), the emergency stop must still find the daemon's
    pause. ConfigError where these keys themselves are wrong."""
    names = {_env_name(key) for key in PAUSE_KEYS}
    kept = {key: value for key, value in file_settings.items() if key in PAUSE_KEYS}
    settings, _, _ = resolve(kept, {k: v for k, v in environ.items() if k in names}, {})
    return settings


def check_environment(environ: Mapping[str, str], token_env: str) -> None:
    """ConfigError naming the first PULSAR_LB_* variable that is neither a setting nor one of OTHER_ENVIRONMENT."""
    known = {_env_name(f.name) for f in dataclasses.fields(OperatorSettings) if f.name != "tokenEnv"}
    known |= {*OTHER_ENVIRONMENT, token_env}
    for name in sorted(environ):
        if name.startswith(ENV_PREFIX) and name not in known and not _service_link(name, environ):
            raise ConfigError(
                f"unknown environment variable {name}{did_you_mean(name, known)}: unset it (a setting's variable is "
                "PULSAR_LB_<SETTING>, e.g. PULSAR_LB_DRY_RUN)"
            )


def _service_link(name: str, environ: Mapping[str, str]) -> bool:
    """A variable Kubernetes sets for a Service named pulsar-lb-…: its <SERVICE>_SERVICE_HOST is set beside it."""
    parts = name.split("_")
    return any(
        "_".join(parts[:i]) + "_SERVICE_HOST" in environ and _SERVICE_LINK.fullmatch("_".join(parts[i:]))
        for i in range(3, len(parts))
    )


def resolve(
    file_settings: Mapping[str, Any], environ: Mapping[str, str], flags: Mapping[str, Any]
) -> tuple[OperatorSettings, LoadBalancerConfig, set[str]]:
    """Merge file < environment < flags. Returns the settings, Pulsar's config and the Pulsar keys set."""
    fields = {f.name: f for f in dataclasses.fields(OperatorSettings)}
    ours: dict[str, Any] = {}
    pulsar: dict[str, Any] = {}
    for key, value in file_settings.items():
        if key == "brokerWebServiceUrls" and isinstance(value, Mapping):  # a mapping in a settings file
            value = tuple(f"{k}={v}" for k, v in value.items())
        if key in fields:
            ours[key] = value
        elif key in config_keys() or key.startswith("loadBalancerBandwith"):
            pulsar[key] = value
        else:
            raise ConfigError(f"unknown configuration key {key!r}{did_you_mean(key, [*fields, *config_keys()])}")
    check_environment(environ, str(ours.get("tokenEnv") or OperatorSettings.tokenEnv))
    if environ.get("PULSAR_ADMIN_URL"):
        ours["adminUrl"] = environ["PULSAR_ADMIN_URL"]
    for key in fields:
        if _env_name(key) in environ and key != "tokenEnv":
            ours[key] = environ[_env_name(key)]
    ours.update({k: v for k, v in flags.items() if v is not None})
    # An optional setting given as "" or null (a chart's empty value) is unset.
    ours = {k: v for k, v in ours.items() if not (v in ("", None) and "| None" in str(fields[k].type))}
    converted: dict[str, Any] = {
        k: "" if k in MAY_BE_EMPTY and v == "" else convert_value(k, fields[k].type.replace(" | None", ""), v)
        for k, v in ours.items()
    }
    return OperatorSettings(**converted), LoadBalancerConfig().replace(pulsar), set(pulsar)


def _check_url(key: str, url: str, pattern: str, shape: str) -> None:
    """ConfigError naming ``key`` unless ``url`` has the shape ``pattern`` and, if it has one, a port number."""
    if not re.match(pattern, url):
        raise ConfigError(f"{key}: {url!r} is not {shape}")
    port = _bad_port(url)
    if port is not None:
        raise ConfigError(f"{key}: {url!r}: the port {port!r} is not a number from 1 to 65535")


def _bad_port(url: str) -> str | None:
    """The text after the host's colon when it is no port (``http://h:1808O``), else None.

    Python's URL parsing reads the port only when a request is made: checked here, a typo is an error at
    start instead of a failed call in the first cycle."""
    address = urlsplit(url).netloc.rpartition("@")[2].rpartition("]")[2]  # past the login and an IPv6 host
    if ":" not in address:
        return None
    port = address.rpartition(":")[2]
    return None if port.isascii() and port.isdigit() and 1 <= int(port) <= 65535 else port
