"""Cluster access objects: one account per person, bound by rights, pinned by a golden file; the
account name carries the portal user so the API server's audit and `whoami` name the person."""

from __future__ import annotations

import dataclasses

from controller.render.access import VIEW_RULES, render_access
from controller.render.spec import TenantAccount
from tests.unit.controller.test_render_golden import _check, _spec
from tranche.names import ACCOUNT_PREFIX
from tranche.naming import account_name

ACCOUNTS = (
    TenantAccount("u-alice-1-1", "alice", "edit"),
    TenantAccount("u-bob-2-3", "bob", "view"),
    TenantAccount("u-carol-3-1", "carol", "suspended"),
)


def test_access_objects_match_golden() -> None:
    _check("project_access", render_access(dataclasses.replace(_spec(), accounts=ACCOUNTS)))


def test_each_binding_names_only_the_accounts_with_that_access() -> None:
    objs = render_access(dataclasses.replace(_spec(), accounts=ACCOUNTS))
    subjects = {
        o["metadata"]["name"]: sorted(s["name"] for s in o["subjects"])
        for o in objs
        if o["kind"] == "RoleBinding"
    }
    assert subjects["tranche-access-edit"] == ["u-alice-1-1"]
    assert subjects["tranche-access-view"] == ["u-bob-2-3", "u-carol-3-1"]
    assert subjects["tranche-access-suspended"] == ["u-carol-3-1"]
    assert subjects["tranche-portal-tokens"] == ["tranche-portal"]


def test_no_members_no_accounts_and_only_the_portal_binding() -> None:
    objs = render_access(_spec())
    assert [(o["kind"], o["metadata"]["name"]) for o in objs] == [
        ("RoleBinding", "tranche-portal-tokens")
    ]


def test_viewers_read_no_secrets_and_write_nothing() -> None:
    assert all(rule["verbs"] == ["get", "list", "watch"] for rule in VIEW_RULES)
    assert not any("secrets" in rule["resources"] for rule in VIEW_RULES)


def test_account_names_name_the_person_and_change_with_the_generation() -> None:
    # policy 5 lets tokens be minted only for names with this prefix
    assert account_name("alice", 1, 1).startswith(ACCOUNT_PREFIX)
    assert account_name("Alice.Smith@Example", 42, 1) == "u-alice-smith-example-42-1"
    assert account_name("alice", 42, 2) != account_name("alice", 42, 1)
    assert account_name("_", 5, 1) == "u-user-5-1"  # nothing usable left of the username
    long = account_name("x" * 150, 10**12, 10**6)
    assert len(long) <= 253
    assert long.startswith("u-" + "x" * 30 + "-")


def test_the_portal_may_impersonate_exactly_the_projects_member_accounts() -> None:
    """RBAC has no name prefixes, so the Role lists the accounts; none → no Role at all, since a
    rule without resourceNames would let the portal impersonate every account (even `default`)."""
    objs = render_access(dataclasses.replace(_spec(), accounts=ACCOUNTS))
    roles = [o for o in objs if o["kind"] == "Role"]
    assert [r["metadata"]["name"] for r in roles] == ["tranche-portal-impersonate"]
    assert roles[0]["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["serviceaccounts"],
            "resourceNames": ["u-alice-1-1", "u-bob-2-3", "u-carol-3-1"],
            "verbs": ["impersonate"],
        }
    ]
    binding = next(o for o in objs if o["metadata"]["name"] == "tranche-portal-impersonate"
                   and o["kind"] == "RoleBinding")  # fmt: skip
    assert binding["roleRef"]["kind"] == "Role"
    assert [s["name"] for s in binding["subjects"]] == ["tranche-portal"]
    assert not any(o["kind"] == "Role" for o in render_access(_spec()))
