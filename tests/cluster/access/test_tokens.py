"""The API server, not the portal, judges tokens: tampered, foreign and expired ones are refused.

The portal's token lasts CLUSTER_ACCESS_TTL_SECONDS (here the 10-minute floor of the TokenRequest
API). An expired token cannot be waited for inside a test, so the test makes one: the portal's
token with `exp` moved into the past, signed again with the dev cluster's own service-account key
(only this test reads it). The same claims with a future `exp` are accepted, so the refusal is
the expiry's doing. A token with one claim changed but the old signature, and one signed by a
key of our own, are refused. Unauthenticated requests get 401, whatever they ask.
"""

from __future__ import annotations

import base64
import json
import time

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from kubernetes import client, config

from controller.reconcile import reconcile_project
from deploy.devcluster.config import load_settings


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(header: dict, claims: dict, key: ec.EllipticCurvePrivateKey) -> str:
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    r, s = decode_dss_signature(key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
    return f"{signing_input}.{_b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


def _status(kubeconfig: str, context: str, token: str, namespace: str) -> int:
    api = config.new_client_from_config(kubeconfig, context=context)
    # this token and nothing else: the loader's hook would put the kubeconfig's back
    api.configuration.refresh_api_key_hook = None
    api.configuration.api_key = {"BearerToken": f"Bearer {token}"}
    try:
        client.CoreV1Api(api).list_namespaced_pod(namespace, limit=1)
    except client.ApiException as exc:
        return exc.status
    return 200


def test_tampered_foreign_and_expired_tokens_are_refused_by_the_api_server(
    tenant, person, download, settings
) -> None:
    settings.CLUSTER_ACCESS_TTL_SECONDS = 600
    member = person(tenant, "member")
    reconcile_project(tenant.project.pk)
    kubectl = download(member)
    (ctx,) = kubectl.contexts
    ns = kubectl.contexts[ctx]
    token = kubectl.doc["users"][0]["user"]["token"]
    head, body, _sig = token.split(".")
    header, claims = json.loads(_unb64(head)), json.loads(_unb64(body))
    assert claims["exp"] - claims["iat"] == 600, "the token lasts the configured TTL"
    assert _status(str(kubectl.kubeconfig), ctx, token, ns) == 200

    tampered_claims = {**claims, "exp": claims["exp"] + 86400}
    tampered = f"{head}.{_b64(json.dumps(tampered_claims).encode())}.{_sig}"
    assert _status(str(kubectl.kubeconfig), ctx, tampered, ns) == 401

    stranger = ec.generate_private_key(ec.SECP256R1())
    assert _status(str(kubectl.kubeconfig), ctx, _sign(header, claims, stranger), ns) == 401

    sa_key_path = load_settings().pki_dir / "sa.key"
    if not sa_key_path.exists():
        pytest.skip("the cluster's signing key is not readable here (external KUBECONFIG)")
    cluster_key = serialization.load_pem_private_key(sa_key_path.read_bytes(), password=None)
    now = int(time.time())
    expired = {**claims, "iat": now - 1200, "nbf": now - 1200, "exp": now - 600}
    assert _status(str(kubectl.kubeconfig), ctx, _sign(header, expired, cluster_key), ns) == 401
    valid = {**claims, "iat": now, "nbf": now, "exp": now + 600}
    assert _status(str(kubectl.kubeconfig), ctx, _sign(header, valid, cluster_key), ns) == 200

    assert _status(str(kubectl.kubeconfig), ctx, "not-a-token", ns) == 401
