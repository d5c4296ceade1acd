"""Fixtures for cluster access: people in organizations, their kubeconfigs from the portal's
HTTP interface, and the real `kubectl` run with nothing but such a kubeconfig.

`person(tenant, role)` adds a user to a tenant's organization; `download(user)` logs them into
the portal (Django's test client: the URLs, middleware and views a browser goes through) and
POSTs the Cluster access page's download form; `Kubectl(path)` runs the kubectl built with the
control plane against that file alone (no KUBECONFIG from the environment).
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from deploy.devcluster.config import load_settings
from tests.cluster.controller.conftest import (  # noqa: F401  (fixtures used by these tests)
    Tenant,
    applier,
    controller_settings,
    make_tenant,
    tenant,
)
from tests.cluster.nodeagent.conftest import start_agent  # noqa: F401
from tests.helpers.celery_worker import worker  # noqa: F401 - fixture by name (test_revocation)


@dataclass(frozen=True)
class Kubectl:
    """The real kubectl, bound to one downloaded kubeconfig and nothing else."""

    kubeconfig: Path

    def __call__(self, *args: str, context: str | None = None, stdin: str | None = None):
        argv = [str(load_settings().kubectl), f"--kubeconfig={self.kubeconfig}"]
        argv += [f"--context={context}"] if context else []
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        return subprocess.run(
            [*argv, *args], input=stdin, capture_output=True, text=True, timeout=60, env=env,
            check=False,
        )  # fmt: skip

    @property
    def doc(self) -> dict:
        return yaml.safe_load(self.kubeconfig.read_text())

    @property
    def contexts(self) -> dict[str, str]:
        """context name -> namespace"""
        return {c["name"]: c["context"]["namespace"] for c in self.doc["contexts"]}

    def api(self, context: str) -> client.ApiClient:
        return config.new_client_from_config(str(self.kubeconfig), context=context)


def refused(call: Callable[[], object]) -> int | None:
    """The API's refusal status of `call` (401/403/...), or None if it was allowed."""
    try:
        call()
    except ApiException as exc:
        return exc.status
    return None


def forbidden(result: subprocess.CompletedProcess) -> bool:
    """kubectl failed because the API server said no (403 Forbidden or 401 Unauthorized)."""
    text = result.stderr.lower()
    said_no = ("forbidden", "unauthorized", "must be logged in")
    return result.returncode != 0 and any(word in text for word in said_no)


@pytest.fixture
def person(transactional_db) -> Callable[..., object]:
    """Factory: `person(tenant, role)` -> a new user with that role in the tenant's organization."""
    from django.contrib.auth import get_user_model

    from portal.tenants.models import Membership

    def _make(of: Tenant, role: str, name: str = "") -> object:
        username = name or f"{role}-{secrets.token_hex(3)}"
        user = get_user_model().objects.create_user(username, f"{username}@example.test", "x")
        Membership.objects.create(user=user, organization=of.project.organization, role=role)
        return user

    return _make


@pytest.fixture
def download(tmp_path: Path) -> Callable[..., Kubectl]:
    """Factory: `download(user)` -> Kubectl bound to the kubeconfig the portal handed that user."""
    from django.test import Client

    def _download(user, expect_contexts: bool = True) -> Kubectl:
        browser = Client()
        browser.force_login(user)
        page = browser.get("/access/")
        assert page.status_code == 200
        resp = browser.post("/access/kubeconfig/")
        assert resp.status_code == 200, resp.content.decode()[:500]
        assert resp["Cache-Control"] == "no-store"
        path = tmp_path / f"{user.get_username()}-{secrets.token_hex(2)}.kubeconfig"
        path.write_bytes(resp.content)
        path.chmod(0o600)
        kubectl = Kubectl(path)
        if expect_contexts:
            assert kubectl.contexts, resp.content.decode()
        return kubectl

    return _download
