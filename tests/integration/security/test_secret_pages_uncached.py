"""Issue #45: every page that shows a secret says `Cache-Control: no-store`, so no browser or
proxy keeps a copy: the invitation link (the organization page that just made it, and the
invitation page it opens), the cluster access page and its kubeconfig, the API tokens page,
and the admin page showing a new node token."""

from __future__ import annotations

from django.urls import reverse

from tests.helpers.factories import make_staff


def _no_store(response) -> bool:
    return "no-store" in response.get("Cache-Control", "")


def test_every_page_showing_a_secret_is_never_stored(world, client_of, client) -> None:
    owner = client_of(world.owner)
    made = owner.post(
        reverse("organization", args=[world.org_a.pk]),
        {"form": "invite", "email": "new@example.test", "role": "member"},
    )
    assert "#" in made.context["invite_link"]  # the page shows the link with its token
    pages = {
        "organization (invitation link)": made,
        "organization": owner.get(reverse("organization", args=[world.org_a.pk])),
        "cluster access": owner.get(reverse("cluster_access")),
        "api tokens": owner.get(reverse("api_tokens")),
    }
    client.logout()
    pages["invitation"] = client.get(reverse("accept_invitation"))
    root = make_staff("root")
    root.is_superuser = True
    root.save()
    admin = client_of(root)
    admin.post(reverse("admin:agents_nodetoken_add"), {"node_name": "gpu-node-9"})
    pages["node token (admin)"] = admin.get(reverse("admin:agents_nodetoken_changelist"))
    assert "Token for node gpu-node-9" in pages["node token (admin)"].content.decode()
    assert [name for name, page in pages.items() if not _no_store(page)] == []
