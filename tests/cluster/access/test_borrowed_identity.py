"""A member cannot borrow a colleague's cluster identity (issue #28, finding 3).

The attack run at 7382faa: with their own downloaded kubeconfig, a member (1) ran a Pod (or a
Deployment) as the owner's account `u-<owner>-<id>-1`, with its automounted or a projected
token, and it kept running as the owner after the member was removed; (2) pre-created the
owner's *next* account name, so when the owner revoked, the controller adopted that
ServiceAccount (same uid) and bound it `edit`. Both are refused at the first step now, by the
real API server's admission; and should such an object exist anyway (made by someone the
policies do not judge), the controller replaces it instead of adopting it.
"""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from controller.reconcile import reconcile_project
from tests.helpers.wait import wait_for

PERSON_ACCOUNT = "a person's cluster account"
RESERVED = "are reserved for the cluster accounts"


def _pod(name: str, account: str, projected: bool = False) -> dict:
    spec: dict = {
        "serviceAccountName": account,
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
    }
    if projected:  # a 10-year token of that account, as in the attack
        spec["automountServiceAccountToken"] = False
        spec["volumes"] = [
            {
                "name": "t",
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"path": "t", "expirationSeconds": 315360000}}
                    ]
                },
            }
        ]
        spec["containers"][0]["volumeMounts"] = [{"name": "t", "mountPath": "/var/t"}]
    return {"metadata": {"name": name}, "spec": spec}


def _deployment(account: str) -> dict:
    pod = _pod("x", account)
    return {
        "metadata": {"name": "borrowed"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "b"}},
            "template": {"metadata": {"labels": {"app": "b"}}, "spec": pod["spec"]},
        },
    }


def test_the_chained_identity_attack_is_refused_at_the_first_step(
    tenant, person, download, kube_cluster
) -> None:
    from portal.access.services import generation_of
    from tranche.naming import account_name

    owner = tenant.membership.user
    member = person(tenant, "member")
    reconcile_project(tenant.project.pk)
    ns = tenant.namespace
    owner_account = account_name(owner.get_username(), owner.pk, generation_of(owner))
    next_account = account_name(owner.get_username(), owner.pk, generation_of(owner) + 1)
    kubectl = download(member)
    api = kubectl.api(kubectl.doc["current-context"])
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    admin = client.CoreV1Api(kube_cluster.api_client)
    try:
        # step 1: run as the owner's account, automounted or projected; or through a workload
        body = _refusal_once_loaded(
            lambda **kw: core.create_namespaced_pod(ns, _pod("as-owner", owner_account), **kw)
        )
        assert PERSON_ACCOUNT in body
        assert owner_account in body
        assert "Remove serviceAccountName" in body
        for attempt, what in (
            (lambda: core.create_namespaced_pod(ns, _pod("p", owner_account, True)), "projected"),
            (lambda: apps.create_namespaced_deployment(ns, _deployment(owner_account)), "deploy"),
            # the member's own account is a person's identity too: for kubectl only
            (lambda: core.create_namespaced_pod(ns, _pod("own", _own(member))), "own account"),
        ):
            with pytest.raises(ApiException) as refusal:
                attempt()
            assert PERSON_ACCOUNT in refusal.value.body, what
        # step 2: pre-create the owner's next account (the one a revocation makes)
        with pytest.raises(ApiException) as refusal:
            core.create_namespaced_service_account(ns, {"metadata": {"name": next_account}})
        assert refusal.value.status == 403
        assert RESERVED in refusal.value.body
        with pytest.raises(ApiException) as refusal:
            core.create_namespaced_service_account(ns, {"metadata": {"generateName": "u-"}})
        assert RESERVED in refusal.value.body
        names = [p.metadata.name for p in admin.list_namespaced_pod(ns).items]
        assert names == [], f"nothing may run as a person: {names}"
        # ordinary pods still run as the namespace's default account
        core.create_namespaced_pod(ns, _pod("mine", "default"))
    finally:
        api.close()


def _refusal_once_loaded(create) -> str:
    """The API server's refusal of `create()`. Policies load asynchronously after the reconcile
    applied them, so dry runs (admitted or not, nothing is stored) are tried until one is
    refused; then the real request must be refused too."""

    def dry_refused() -> str | None:
        try:
            create(dry_run="All")
        except ApiException as exc:
            return exc.body
        return None

    wait_for(dry_refused, 20, "the admission policies to be loaded")
    with pytest.raises(ApiException) as refusal:
        create()
    return refusal.value.body


def _own(user) -> str:
    from portal.access.services import generation_of
    from tranche.naming import account_name

    return account_name(user.get_username(), user.pk, generation_of(user))


def test_the_controller_replaces_an_account_it_did_not_make(tenant, kube_cluster) -> None:
    """Made by someone admission does not judge (an admin, a stale install): on the owner's
    revocation the controller deletes it and makes the account afresh, so whatever held the
    pre-created object's tokens holds nothing."""
    from portal.access.services import generation_of, revoke_credentials
    from tranche.naming import account_name

    owner = tenant.membership.user
    reconcile_project(tenant.project.pk)
    ns = tenant.namespace
    admin = client.CoreV1Api(kube_cluster.api_client)
    following = account_name(owner.get_username(), owner.pk, generation_of(owner) + 1)
    planted = admin.create_namespaced_service_account(ns, {"metadata": {"name": following}})
    revoke_credentials(owner)
    result = reconcile_project(tenant.project.pk)
    assert f"replaced foreign ServiceAccount/{following}" in result.changes, result.changes
    made = admin.read_namespaced_service_account(following, ns)
    assert made.metadata.uid != planted.metadata.uid
    assert made.metadata.labels["app.kubernetes.io/managed-by"] == "tranche"
    again = reconcile_project(tenant.project.pk)
    assert again.writes == 0, again.changes
