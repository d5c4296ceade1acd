"""The portal's one conversation with Kubernetes: mint a token for a tenant's ServiceAccount.

The identity comes from CLUSTER_ACCESS_KUBECONFIG, else CONTROLLER_KUBECONFIG, KUBECONFIG, the
in-cluster ServiceAccount (`tranche-portal` in deploy/install), else the dev cluster. In
production that identity holds only `serviceaccounts/token` create, bound in project
namespaces (docs/cluster-access.md). Tokens pass through memory only: never logged, never stored.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import urllib3
from django.conf import settings
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from portal.core.cluster import kubeconfig_path

TIMEOUT = (3, 10)  # connect, read seconds: a tenant waits on this in a request


class AccountNotReadyError(Exception):
    """The user's ServiceAccount is not in the namespace yet (the reconcile is on its way)."""


class ClusterUnavailableError(Exception):
    """The API server could not be reached or refused the portal; the message says which."""


@dataclass(frozen=True)
class Endpoint:
    """Where tenants' kubectl connects: the API server URL and its CA (PEM, base64)."""

    server: str
    ca_data: str


def api_client() -> client.ApiClient:
    """A client with the portal's identity (see the module docstring for which one)."""
    path = kubeconfig_path()
    if not path:
        config.load_incluster_config()
        return client.ApiClient()
    try:
        return config.new_client_from_config(config_file=path)
    except (OSError, config.ConfigException) as exc:
        raise ClusterUnavailableError(f"the portal's cluster configuration: {exc}") from exc


@contextmanager
def session() -> Iterator[client.ApiClient]:
    """`api_client()` for the length of one download, closed afterwards (no pool left behind)."""
    api = api_client()
    try:
        yield api
    finally:
        api.close()


def endpoint(api: client.ApiClient) -> Endpoint:
    """CLUSTER_API_SERVER / CLUSTER_CA_FILE if set, else those the portal itself connects with."""
    server = settings.CLUSTER_API_SERVER or api.configuration.host
    ca_file = settings.CLUSTER_CA_FILE or api.configuration.ssl_ca_cert or ""
    ca = Path(ca_file).read_bytes() if ca_file else b""
    return Endpoint(server=server, ca_data=base64.b64encode(ca).decode())


def request_token(
    api: client.ApiClient, namespace: str, account: str, seconds: int
) -> tuple[str, datetime]:
    """A token for `account` in `namespace`, valid `seconds`; returns (token, expiry).

    Raises AccountNotReadyError (404) or ClusterUnavailableError (anything else)."""
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds}}  # fmt: skip
    try:
        result = client.CoreV1Api(api).create_namespaced_service_account_token(
            account, namespace, body, _request_timeout=TIMEOUT
        )
    except ApiException as exc:
        if exc.status == 404:
            raise AccountNotReadyError(f"{namespace}/{account}") from None
        answer = f"{exc.status} {exc.reason}"
        raise ClusterUnavailableError(f"the API server answered {answer}") from None
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        what = type(exc).__name__
        raise ClusterUnavailableError(f"the API server cannot be reached ({what})") from None
    return result.status.token, result.status.expiration_timestamp
