"""Fixtures for controller tests on the real control plane, PostgreSQL and Redis.

`tenant` makes an organization, project and the V100 catalogue in the database (committed, so
worker processes see it) and deletes the project's namespace afterwards. Orders are sent to a
per-test Celery queue, deleted at teardown, so no stray message reaches anyone's worker.
`private_cluster` is a control plane of the test's own, for fault tests that stop or freeze
its kube-apiserver without disturbing other sessions sharing the dev cluster.
"""

from __future__ import annotations

import secrets
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from controller.apply import Applier
from deploy.devcluster import build, launcher
from deploy.devcluster.config import Ports, Settings, load_settings
from tests.helpers.wait import wait_for

T = TypeVar("T")


@dataclass
class Tenant:
    """One organization with one project and an owner membership."""

    membership: Any
    project: Any
    products: dict[str, Any]

    @property
    def namespace(self) -> str:
        return self.project.namespace

    def order(self, device_class: str, quantity: int) -> Any:
        from portal.orders.services import place_order

        order, _ = place_order(
            membership=self.membership,
            project=self.project,
            product=self.products[device_class],
            quantity=quantity,
            idempotency_key=secrets.token_hex(8),
        )
        return order


@pytest.fixture
def controller_settings(settings, kube_cluster) -> Iterator[Any]:
    """Point the controller at the test cluster and orders at a private queue."""
    import redis

    settings.CONTROLLER_KUBECONFIG = str(kube_cluster.kubeconfig)
    settings.CELERY_TASK_DEFAULT_QUEUE = f"tranche-test-{secrets.token_hex(4)}"
    yield settings
    redis.Redis.from_url(settings.REDIS_URL).delete(settings.CELERY_TASK_DEFAULT_QUEUE)


def _free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@pytest.fixture
def private_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """A control plane of this test's own (empty etcd), stopped and deleted afterwards."""
    shared = load_settings()
    if not build.is_built(shared):
        pytest.skip(
            "the control-plane binaries are not built on this machine (the cluster tier uses an "
            "external KUBECONFIG cluster); this test must stop a kube-apiserver of its own: "
            "run `make cluster-build` to include it"
        )
    settings = Settings(
        cache_dir=shared.cache_dir,
        state_dir=tmp_path_factory.mktemp("faults-cluster"),
        ports=Ports(*_free_ports(6)),
    )
    try:
        launcher.up(settings, fresh=True)
        yield settings
    finally:
        launcher.down(settings, purge=True, quiet=True)


@pytest.fixture
def applier(kube_cluster) -> Applier:
    return Applier(kube_cluster.api_client)


@pytest.fixture
def make_tenant(
    transactional_db,
    controller_settings,
    kube_cluster,
) -> Iterator[Callable[[], Tenant]]:
    from portal.catalog.seed import ensure_catalogue
    from portal.tenants.models import Membership
    from portal.tenants.services import sign_up

    made: list[Tenant] = []

    def _make() -> Tenant:
        products = {p.device_class: p for p in ensure_catalogue()}
        tag = secrets.token_hex(3)
        user, org, project = sign_up(
            username=f"owner-{tag}",
            email=f"o{tag}@example.test",
            password="x-Pass-1234567",
            organization_name=f"org {tag}",
            project_name="ml",
        )
        membership = Membership.objects.get(user=user, organization=org)
        tenant = Tenant(membership, project, products)
        made.append(tenant)
        return tenant

    yield _make
    core = client.CoreV1Api(kube_cluster.api_client)
    for tenant in made:
        try:
            core.delete_namespace(tenant.namespace, propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                raise


@pytest.fixture
def tenant(make_tenant: Callable[[], Tenant]) -> Tenant:
    return make_tenant()


def impersonating(kube_cluster, user: str, groups: list[str]) -> client.ApiClient:
    """An ApiClient acting as `user` in `groups` (the admin may impersonate)."""
    from kubernetes import config

    api = config.new_client_from_config(str(kube_cluster.kubeconfig))
    api.default_headers["Impersonate-User"] = user
    # the client sends one header value; groups beyond the first are rarely needed in tests
    api.default_headers["Impersonate-Group"] = groups[0]
    return api


def wait_refused(create: Callable[[], object], what: str, expect: str, timeout: float = 20) -> str:
    """Call `create` until the API server refuses it with `expect` in the body (admission
    policies load asynchronously) and return the body; fails the test if it is admitted."""

    def attempt() -> str | None:
        try:
            create()
        except ApiException as exc:
            if expect in (exc.body or ""):
                return exc.body
            if exc.status not in (403, 422):
                raise
            return None
        pytest.fail(f"{what} was admitted; it should be refused with {expect!r}", pytrace=False)
        return None

    return wait_for(attempt, timeout, f"{what} to be refused with {expect!r}")
