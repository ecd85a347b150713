"""The Kubernetes API as leader election needs it: GET, POST and PUT of a Lease, and what a pod knows of itself.

``LeaseClient`` makes the three REST calls on one ``coordination.k8s.io/v1`` Lease (run/leadership.py's
elector decides when); ``in_cluster`` finds the pod's API server and service account, ``pod_namespace`` and
``default_identity`` the pod's namespace and name. The service-account token is read from its file at every
request (the kubelet rotates it) and is never logged; a failed request raises ``LeaseApiError`` with a one-line
message that holds no secret.

**Why plain ``requests`` and not the official ``kubernetes`` client.** The client installs and works
(checked: kubernetes 37.0.2 against ``tests/kube_api.py``), but leader election needs three REST calls
on one object, and the client brings about a dozen more packages (aiohttp, pydantic, websocket-client,
oauthlib, …) with floors that clash with what is installed beside it (``python-dateutil>=3``,
``pydantic>=2.14.2``, ``urllib3>=2.8``). The image installs exactly ``requirements.lock`` and then the
project with ``--no-deps`` and ``pip check``, so a new dependency also means a regenerated lock.
``requests`` is already a dependency; in-cluster configuration is four files and two environment
variables (``KUBERNETES_SERVICE_HOST``/``_PORT``, the service account's token, CA and namespace).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import requests

from pulsar_lb_operator.strategies import ClusterError, ConfigError

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
LEASES_PATH = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


class LeaseApiError(ClusterError):
    """A request to the API server failed: no answer, or an error status. The message holds no secret."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class LeaseConflict(LeaseApiError):
    """409: someone else wrote the Lease first (a stale resourceVersion, or it already exists)."""


class LeaseClient:
    """GET, POST and PUT of Leases, with a bearer token, against ``host`` (``https://host:port``)."""

    def __init__(
        self,
        host: str,
        *,
        token: str | None = None,
        token_file: str | os.PathLike[str] | None = None,
        ca_file: str | os.PathLike[str] | None = None,
        verify: bool = True,
        timeout: float = 5.0,
    ) -> None:
        self.host = host.rstrip("/")
        self._token = token
        self._token_file = Path(token_file) if token_file else None
        self._verify: bool | str = str(ca_file) if ca_file else verify
        self.timeout = timeout
        self._session = requests.Session()
        self._session.trust_env = False  # no proxy from the environment between a pod and its API server

    def __repr__(self) -> str:  # never the token
        return f"LeaseClient({self.host!r})"

    @classmethod
    def in_cluster(
        cls,
        *,
        environ: Mapping[str, str] | None = None,
        service_account_dir: str | os.PathLike[str] | None = None,
        timeout: float = 5.0,
    ) -> LeaseClient:
        """The pod's API server and service account, as ``kubernetes.config.load_incluster_config()`` finds them."""
        environ = os.environ if environ is None else environ
        host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
        if not host or not port:
            raise ConfigError("leaderElection: not running in a Kubernetes pod (KUBERNETES_SERVICE_HOST/PORT unset)")
        account = Path(service_account_dir or SERVICE_ACCOUNT_DIR)
        if not (account / "token").is_file():
            raise ConfigError(
                f"leaderElection: no service-account token at {account / 'token'} "
                "(the pod needs automountServiceAccountToken: true)"
            )
        ca = account / "ca.crt"
        netloc = f"[{host}]" if ":" in host else host
        return cls(
            f"https://{netloc}:{port}",
            token_file=account / "token",
            ca_file=ca if ca.is_file() else None,
            timeout=timeout,
        )

    def twin(self) -> LeaseClient:
        """The same server and credentials on a session of its own (a session is not shared between threads)."""
        return LeaseClient(
            self.host,
            token=self._token,
            token_file=self._token_file,
            verify=self._verify if isinstance(self._verify, bool) else True,
            ca_file=self._verify if isinstance(self._verify, str) else None,
            timeout=self.timeout,
        )

    def close(self) -> None:
        self._session.close()

    def get(self, namespace: str, name: str, timeout: float | None = None) -> dict[str, Any] | None:
        """The Lease, or None when it does not exist."""
        try:
            return self._request("GET", f"{LEASES_PATH.format(namespace=namespace)}/{name}", None, timeout)
        except LeaseApiError as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, namespace: str, lease: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        return self._request("POST", LEASES_PATH.format(namespace=namespace), lease, timeout)

    def replace(self, namespace: str, name: str, lease: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        return self._request("PUT", f"{LEASES_PATH.format(namespace=namespace)}/{name}", lease, timeout)

    def _bearer(self) -> str | None:
        if self._token_file is not None:
            try:
                return self._token_file.read_text(encoding="utf-8").strip() or None
            except OSError as exc:
                raise LeaseApiError(f"service-account token unreadable: {exc.strerror or exc}") from None
        return self._token

    def _request(self, method: str, path: str, body: dict[str, Any] | None, timeout: float | None) -> dict[str, Any]:
        headers = {"Accept": "application/json"}
        token = self._bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            response = self._session.request(
                method,
                self.host + path,
                json=body,
                headers=headers,
                timeout=self.timeout if timeout is None else timeout,
                verify=self._verify,
                allow_redirects=False,
            )
        except requests.RequestException as exc:
            raise LeaseApiError(f"{method} {path}: {type(exc).__name__}: {_first_line(exc)}") from None
        if response.status_code >= 300:
            try:
                status = response.json()
                detail = f"{status.get('reason') or response.reason}: {status.get('message') or ''}".rstrip(": ")
            except ValueError:
                detail = response.reason or ""
            kind = LeaseConflict if response.status_code == 409 else LeaseApiError
            raise kind(f"{method} {path}: HTTP {response.status_code} {detail}", response.status_code)
        try:
            answer = response.json()
        except ValueError:
            raise LeaseApiError(f"{method} {path}: the answer is not JSON", response.status_code) from None
        if not isinstance(answer, dict):
            raise LeaseApiError(f"{method} {path}: the answer is not a JSON object", response.status_code)
        return answer


def default_identity(environ: Mapping[str, str] | None = None) -> str:
    """The pod's name (env POD_NAME, from the downward API), else ``hostname_pid``."""
    environ = os.environ if environ is None else environ
    return environ.get("POD_NAME") or f"{socket.gethostname()}_{os.getpid()}"


def pod_namespace(service_account_dir: str | os.PathLike[str] | None = None) -> str | None:
    """The namespace of the pod we run in, from its service account's files; None outside a pod."""
    try:
        return (Path(service_account_dir or SERVICE_ACCOUNT_DIR) / "namespace").read_text(
            encoding="utf-8"
        ).strip() or None
    except OSError:
        return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return text[:300]
