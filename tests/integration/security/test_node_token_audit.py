"""Issue #28, finding 9: node-token issue, rotate and revoke each leave an AuditLog row (by
prefix: the token and its hash never reach the log), from the command line and the admin."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from portal.agents import services
from portal.audit.models import AuditLog

pytestmark = pytest.mark.django_db


def _rows(node: str) -> list[AuditLog]:
    return [r for r in AuditLog.objects.order_by("pk") if r.object_repr.startswith(node)
            or r.after.get("node") == node]  # fmt: skip


def test_issue_rotate_and_revoke_are_audited_without_the_secret(tmp_path, billing):
    out = tmp_path / "t"
    call_command("create_node_token", "gpu-node-7", "--output", str(out))
    first = out.read_text().strip()
    second = services.issue_node_token("gpu-node-7", created_by=billing, rotate=True)
    assert services.revoke_node_token("gpu-node-7", actor=billing) is True
    assert services.revoke_node_token("gpu-node-7", actor=billing) is False  # nothing changed
    rows = _rows("gpu-node-7")
    actions = [r.action for r in rows]
    assert actions == ["node_token.issue", "node_token.rotate", "node_token.revoke"]
    issue, rotate, revoke = rows
    assert issue.actor is None
    assert issue.actor_label.startswith("system:")
    assert rotate.actor == billing
    assert revoke.actor == billing
    assert rotate.before["token_prefix"] == first[:8]
    assert rotate.after["token_prefix"] == second[:8]
    assert revoke.before["revoked"] is False
    assert revoke.after["revoked"] is True
    text = " ".join(str(r.before) + str(r.after) for r in rows)
    assert first not in text
    assert second not in text
    assert services.hash_token(second) not in text
