"""Credentials for the admin API and for pulsar-client, built from one set of settings.

Pulsar's three client authentication plugins, as production clusters configure them:

- ``token`` (AuthenticationToken): ``Authorization: Bearer <JWT>``, from ``tokenFile`` or the environment
  variable named by ``tokenEnv``. The file is read again whenever it changes (Kubernetes updates a mounted
  Secret in place by swapping a symlink), so a rotated token is used from the next call on, without a
  restart; while a new version cannot be read, the last one read is kept.
- ``tls`` (AuthenticationTls): a client certificate and its key (``tlsCertFile``, ``tlsKeyFile``), presented in
  the TLS handshake; the broker takes the role from the certificate. A certificate may also be given with
  ``token`` or ``oauth2``, for clusters that require mutual TLS on the transport.
- ``oauth2`` (AuthenticationOAuth2, client credentials): the token endpoint is found in the issuer's
  ``<oauth2IssuerUrl>/.well-known/openid-configuration`` (``token_endpoint``, RFC 8414 — Pulsar's
  DefaultMetadataResolver); the client id and secret come from ``oauth2CredentialsFile``, Pulsar's key file
  (``{"type": "client_credentials", "client_id": …, "client_secret": …}``), read at every fetch; the form
  post is ``grant_type=client_credentials``, ``client_id``, ``client_secret`` and, when set, ``audience`` and
  ``scope`` (Pulsar's TokenClient). The access token is cached and fetched again once 90 % of its
  ``expires_in`` has passed (Pulsar's default early refresh), or after a 401. The issuer is verified with the
  system's CAs (``REQUESTS_CA_BUNDLE`` for a private one), not ``caBundle``, which is the brokers' CA. The
  client secret goes only to the ``token_endpoint`` the issuer names: never over plain http when the issuer
  is https, never to an endpoint with a user name or password in it, and never along a redirect (Pulsar's
  TokenClient follows one, re-posting the secret to wherever it points; here a redirect is an error).

The admin client sends these credentials only to origins it knows (adminapi/origins.py).

The same object gives pulsar-client its ``Authentication`` (audit events), so both clients authenticate
alike. Secrets never appear in a repr, a log line or an error message.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests
import structlog

from pulsar_lb_operator import hints
from pulsar_lb_operator.adminapi import origins
from pulsar_lb_operator.adminapi.errors import AuthenticationError, root_cause
from pulsar_lb_operator.strategies import ConfigError

log = structlog.get_logger(__name__)

# authPlugin values: our short names and Pulsar's client plugin class names
PLUGINS = {
    "none": "none",
    "token": "token",
    "tls": "tls",
    "oauth2": "oauth2",
    "org.apache.pulsar.client.impl.auth.AuthenticationToken": "token",
    "org.apache.pulsar.client.impl.auth.AuthenticationTls": "tls",
    "org.apache.pulsar.client.impl.auth.oauth2.AuthenticationOAuth2": "oauth2",
}
EARLY_REFRESH = 0.9  # fetch a new OAuth2 token once this share of its lifetime has passed (Pulsar's expiryAdjustment)


def plugin_name(value: str | None) -> str | None:
    """``token``, ``tls``, ``oauth2``, ``none`` or None (not set); ConfigError naming authPlugin otherwise."""
    if value is None or not str(value).strip():
        return None
    name = PLUGINS.get(str(value).strip()) or PLUGINS.get(str(value).strip().lower())
    if name is None:
        raise ConfigError(
            f"authPlugin: {value!r} is not token, tls, oauth2 or none "
            "(Pulsar's AuthenticationToken, AuthenticationTls, AuthenticationOAuth2 class names work too)"
        )
    return name


def _readable(key: str, path: str) -> None:
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path!r}: {exc.strerror or exc}") from None


class Credentials:
    """No authentication (but maybe a client certificate); the base of the others."""

    plugin = "none"

    def __init__(self, cert: tuple[str, str] | None = None) -> None:
        self.cert = cert  # (certificate file, key file) for the TLS handshake, or None

    def authorization(self) -> str | None:
        """The Authorization header to send now, or None. Raises AuthenticationError when none can be had."""
        return None

    def bearer(self) -> str | None:
        return None

    def renew(self) -> bool:
        """After a 401: True when other credentials may now be sent (the call is then tried once more)."""
        return False

    def check(self) -> None:
        """At start: ConfigError naming the setting whose file cannot be used."""
        if self.cert:
            _readable("tlsCertFile", self.cert[0])
            _readable("tlsKeyFile", self.cert[1])

    def pulsar_authentication(self) -> Any:
        """A ``pulsar.Authentication`` for pulsar-client, or None."""
        return None

    def pulsar_client_options(self) -> dict[str, Any]:
        """Keyword arguments for ``pulsar.Client``: the authentication and, for mutual TLS, the certificate."""
        options: dict[str, Any] = {"authentication": self.pulsar_authentication()}
        if self.cert and self.plugin != "tls":
            options["tls_certificate_file_path"], options["tls_private_key_file_path"] = self.cert
        return options

    def __repr__(self) -> str:  # never a secret
        return f"{type(self).__name__}(plugin={self.plugin!r}, cert={'yes' if self.cert else 'no'})"


class TokenCredentials(Credentials):
    """A bearer token: given, from a file read again when it changes, or from an environment variable."""

    plugin = "token"

    def __init__(
        self,
        token: str | None = None,
        file: str | None = None,
        env: str | None = None,
        cert: tuple[str, str] | None = None,
    ) -> None:
        super().__init__(cert)
        self._static = token
        self.file = file
        self.env = env
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int, int] | None = None
        self._cached: str | None = None

    def bearer(self) -> str | None:
        if self._static is not None:
            return self._static
        if self.file:
            return self._from_file()
        return os.environ.get(self.env or "") or None

    def _from_file(self) -> str | None:
        path = self.file or ""
        with self._lock:
            try:
                st = os.stat(path)  # follows the ..data symlink Kubernetes swaps on an update
                stamp = (st.st_ino, st.st_dev, st.st_mtime_ns, st.st_size)
                if stamp != self._stamp:
                    token = Path(path).read_text(encoding="utf-8").strip() or None
                    if token is None:  # nothing to send: not a 401 that blames the token the file "holds"
                        raise OSError(0, "the file is empty")
                    if self._stamp is not None and token != self._cached:
                        log.info("admin token file changed: using the new token", file=path)
                    self._stamp, self._cached = stamp, token
            except (OSError, UnicodeDecodeError) as exc:
                if self._stamp is None:
                    raise AuthenticationError(path, f"tokenFile: cannot read {path!r}: {_why(exc)}") from None
                log.warning("admin token file unreadable: keeping the last token read", file=path, reason=_why(exc))
            return self._cached

    def authorization(self) -> str | None:
        token = self.bearer()
        return f"Bearer {token}" if token else None

    def renew(self) -> bool:
        if not self.file:
            return False
        with self._lock:
            before, self._stamp = self._cached, None
        try:
            return self._from_file() != before
        except AuthenticationError:
            return False

    def check(self) -> None:
        super().check()
        if self.file:
            try:
                self._from_file()
            except AuthenticationError as exc:
                raise ConfigError(exc.reason) from None

    def pulsar_authentication(self) -> Any:
        import pulsar  # only the audit publisher needs the native client

        # a callable: pulsar-client asks it again on every (re)connection, so a rotated file is picked up
        return pulsar.AuthenticationToken(lambda: self.bearer() or "")


class TlsCredentials(Credentials):
    """Pulsar's AuthenticationTls: the client certificate is the credential."""

    plugin = "tls"

    def __init__(self, cert_file: str, key_file: str) -> None:
        super().__init__((cert_file, key_file))

    def pulsar_authentication(self) -> Any:
        import pulsar

        assert self.cert is not None
        return pulsar.AuthenticationTLS(self.cert[0], self.cert[1])


class OAuth2Credentials(Credentials):
    """Pulsar's AuthenticationOAuth2 with the client-credentials flow; tokens cached and refreshed early."""

    plugin = "oauth2"

    def __init__(
        self,
        issuer_url: str,
        credentials_file: str,
        audience: str | None = None,
        scope: str | None = None,
        cert: tuple[str, str] | None = None,
        *,
        clock: Callable[[], float] = time.time,
        timeout_s: float = 10.0,
        session: requests.Session | None = None,
    ) -> None:
        super().__init__(cert)
        self.issuer_url = issuer_url.rstrip("/")
        self.credentials_file = credentials_file
        self.audience = audience
        self.scope = scope
        self.clock = clock
        self.timeout_s = timeout_s
        self.session = session or requests.Session()
        self._lock = threading.Lock()
        self._token_endpoint: str | None = None
        self._token: str | None = None
        self._refresh_at = 0.0
        self._expires_at = 0.0
        self.fetches = 0  # tokens obtained so far

    def bearer(self) -> str | None:
        with self._lock:
            now = self.clock()
            if self._token is not None and now < self._refresh_at:
                return self._token
            try:
                self._fetch(now)
            except AuthenticationError as exc:
                if self._token is not None and now < self._expires_at:  # the current one is still good
                    log.warning("OAuth2 token refresh failed: the current token is still valid", reason=exc.reason)
                    self._refresh_at = now + min(30.0, (self._expires_at - now) / 2)
                    return self._token
                raise
            return self._token

    def authorization(self) -> str | None:
        return f"Bearer {self.bearer()}"

    def renew(self) -> bool:
        with self._lock:
            self._refresh_at = 0.0
            self._expires_at = 0.0
        return True

    def _fetch(self, now: float) -> None:
        client_id, client_secret = self._client_credentials()
        endpoint = self._token_endpoint or self._discover()
        form = {"grant_type": "client_credentials", "client_id": client_id, "client_secret": client_secret}
        if self.audience:
            form["audience"] = self.audience
        if self.scope:
            form["scope"] = self.scope
        try:
            response = self.session.post(
                endpoint,
                data=form,
                headers={"Accept": "application/json"},
                timeout=self.timeout_s,
                allow_redirects=False,  # a redirect would take the secret along
            )
        except requests.RequestException as exc:
            raise AuthenticationError(endpoint, f"OAuth2 token endpoint unreachable: {type(exc).__name__}") from None
        if response.is_redirect:
            where = origins.describe(requests.compat.urljoin(endpoint, response.headers.get("Location", "")))
            raise AuthenticationError(
                endpoint,
                f"OAuth2 token endpoint redirected to {where}: not followed (the client secret goes only to the "
                "token_endpoint the issuer's metadata names)",
            )
        if response.status_code != 200:
            raise AuthenticationError(endpoint, f"OAuth2 token endpoint refused: {_token_error(response)}")
        try:
            doc = response.json()
            token = doc["access_token"]
            expires_in = float(doc.get("expires_in", 3600))
            if not isinstance(token, str) or not token or not expires_in > 0:
                raise ValueError
        except (ValueError, KeyError, TypeError):
            raise AuthenticationError(endpoint, "OAuth2 token endpoint: no usable access_token") from None
        self._token = token
        self._expires_at = now + expires_in
        self._refresh_at = now + EARLY_REFRESH * expires_in
        self.fetches += 1
        log.info("OAuth2 token obtained", issuer=self.issuer_url, expires_in_s=round(expires_in))

    def _discover(self) -> str:
        """The issuer's token_endpoint, from its metadata as the issuer itself serves it: a redirect is not followed
        (the metadata names where the client secret goes), and metadata that names another issuer is refused
        (RFC 8414 §3.3: ``issuer`` must be the issuer the metadata was asked of)."""
        url = self.issuer_url + "/.well-known/openid-configuration"
        metadata = None
        try:
            response = self.session.get(
                url, headers={"Accept": "application/json"}, timeout=self.timeout_s, allow_redirects=False
            )
            if response.is_redirect:
                where = origins.describe(requests.compat.urljoin(url, response.headers.get("Location", "")))
                raise AuthenticationError(
                    url, f"oauth2IssuerUrl: the issuer's metadata redirected to {where}: not followed"
                )
            metadata = response.json() if response.status_code == 200 else None
        except requests.RequestException as exc:
            raise AuthenticationError(
                url, f"oauth2IssuerUrl: the issuer cannot be reached ({root_cause(exc)}): check oauth2IssuerUrl"
            ) from None
        except ValueError:
            pass
        endpoint = metadata.get("token_endpoint") if isinstance(metadata, dict) else None
        if not isinstance(endpoint, str) or urlsplit(endpoint).scheme not in ("http", "https"):
            raise AuthenticationError(url, "oauth2IssuerUrl: no token_endpoint in the issuer's metadata")
        named = metadata.get("issuer") if isinstance(metadata, dict) else None
        if not isinstance(named, str) or named.rstrip("/") != self.issuer_url.rstrip("/"):
            raise AuthenticationError(
                url,
                f"oauth2IssuerUrl: the issuer's metadata names the issuer {str(named)[:200]!r}, "
                f"not {self.issuer_url!r} (set oauth2IssuerUrl to the issuer it names, if that is yours)",
            )
        try:
            parsed = origins.parse(endpoint)
        except origins.UnusableUrl as exc:
            raise AuthenticationError(url, f"oauth2IssuerUrl: the issuer's token_endpoint is unusable: {exc}") from None
        if parsed.userinfo is not None:
            raise AuthenticationError(
                url, "oauth2IssuerUrl: the issuer's token_endpoint carries a user name or password"
            )
        if parsed.origin.scheme == "http" and self.issuer_url.lower().startswith("https:"):
            raise AuthenticationError(
                url, f"oauth2IssuerUrl: the issuer's token_endpoint {parsed.origin} is plain http, the issuer https"
            )
        self._token_endpoint = endpoint
        return endpoint

    def _client_credentials(self) -> tuple[str, str]:
        path = self.credentials_file.removeprefix("file://")
        try:
            doc = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise AuthenticationError(path, f"oauth2CredentialsFile: cannot read {path!r}: {_why(exc)}") from None
        if not isinstance(doc, dict):
            raise AuthenticationError(path, "oauth2CredentialsFile: expected a JSON object")
        if doc.get("type", "client_credentials") != "client_credentials":
            kind = doc.get("type")
            raise AuthenticationError(path, f"oauth2CredentialsFile: type {kind!r} is not client_credentials")
        client_id, client_secret = doc.get("client_id"), doc.get("client_secret")
        if not isinstance(client_id, str) or not client_id or not isinstance(client_secret, str) or not client_secret:
            raise AuthenticationError(path, "oauth2CredentialsFile: needs client_id and client_secret")
        return client_id, client_secret

    def check(self) -> None:
        super().check()
        try:
            self._client_credentials()
        except AuthenticationError as exc:
            raise ConfigError(exc.reason) from None

    def pulsar_authentication(self) -> Any:
        import pulsar

        params = {"issuer_url": self.issuer_url, "private_key": self.credentials_file}
        if self.audience:
            params["audience"] = self.audience
        if self.scope:
            params["scope"] = self.scope
        return pulsar.AuthenticationOauth2(json.dumps(params))


@dataclass(frozen=True)
class AuthSettings:
    """What the credentials are built from: the settings' authPlugin, token, client certificate and OAuth2 keys.

    Built once from the operator's settings (run/settings.py), whose keys the errors name."""

    plugin: str | None = None  # authPlugin
    token_file: str | None = None  # tokenFile
    token_env: str = "PULSAR_LB_TOKEN"  # tokenEnv
    tls_cert_file: str | None = None  # tlsCertFile
    tls_key_file: str | None = None  # tlsKeyFile
    oauth2_issuer_url: str | None = None  # oauth2IssuerUrl
    oauth2_audience: str | None = None  # oauth2Audience
    oauth2_credentials_file: str | None = None  # oauth2CredentialsFile
    oauth2_scope: str | None = None  # oauth2Scope

    def token(self) -> str | None:
        """The admin token now (tokenFile, else the environment variable tokenEnv names); ConfigError naming
        tokenFile, with its fix, when the file cannot be read."""
        if self.token_file:
            try:
                return Path(self.token_file).read_text(encoding="utf-8").strip() or None
            except OSError as exc:
                message = f"tokenFile: cannot read {self.token_file!r}: {exc.strerror or exc}"
                raise ConfigError(hints.with_fix(message, hints.file_fix(exc, self.token_file))) from None
        return os.environ.get(self.token_env) or None

    def token_source(self) -> str:
        """Where the admin token was read from — never the token."""
        if self.token_file:
            return f"the token was read from tokenFile {self.token_file!r}"
        if os.environ.get(self.token_env):
            return f"the token was read from the environment variable {self.token_env}"
        env = self.token_env
        return f"no token was sent: neither tokenFile (--token-file) nor the environment variable {env} is set"


def from_settings(settings: AuthSettings) -> Credentials:
    """The credentials the settings ask for, their files checked (ConfigError naming the setting)."""
    plugin = plugin_name(settings.plugin)
    cert = (settings.tls_cert_file, settings.tls_key_file) if settings.tls_cert_file and settings.tls_key_file else None
    has_token = bool(settings.token_file or os.environ.get(settings.token_env))
    credentials: Credentials
    if plugin == "tls":
        if cert is None:
            raise ConfigError("tlsCertFile: authPlugin tls needs tlsCertFile and tlsKeyFile")
        credentials = TlsCredentials(*cert)
    elif plugin == "oauth2":
        if not settings.oauth2_issuer_url or not settings.oauth2_credentials_file:
            raise ConfigError("oauth2IssuerUrl: authPlugin oauth2 needs oauth2IssuerUrl and oauth2CredentialsFile")
        credentials = OAuth2Credentials(
            settings.oauth2_issuer_url,
            settings.oauth2_credentials_file,
            settings.oauth2_audience,
            settings.oauth2_scope,
            cert,
        )
    elif plugin == "token" or (plugin is None and has_token):
        if not has_token:
            raise ConfigError(f"authPlugin: token needs tokenFile or the environment variable {settings.token_env}")
        settings.token()  # an unreadable tokenFile: its own error, with its fix
        credentials = TokenCredentials(file=settings.token_file, env=settings.token_env, cert=cert)
    else:
        credentials = Credentials(cert)
    credentials.check()
    return credentials


def _why(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or type(exc).__name__


def _token_error(response: requests.Response) -> str:
    """RFC 6749 ``error`` / ``error_description`` (never the request, which holds the secret)."""
    try:
        doc = response.json()
        if isinstance(doc, dict) and isinstance(doc.get("error"), str):
            described = doc.get("error_description")
            return f"HTTP {response.status_code} {doc['error']}" + (
                f": {described[:200]}" if isinstance(described, str) else ""
            )
    except ValueError:
        pass
    return f"HTTP {response.status_code}"
