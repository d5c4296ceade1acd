"""The Celery task wrapper: a hint naming a project deleted since it was sent is done, not an
error (the message would otherwise be retried or logged as a failure forever)."""

from __future__ import annotations

import logging

import pytest

from controller.tasks import reconcile_project


@pytest.mark.django_db
def test_a_project_gone_since_the_message_was_sent_is_nothing_to_do(caplog) -> None:
    from portal.tenants.models import Project

    missing = (Project.objects.order_by("-pk").values_list("pk", flat=True).first() or 0) + 1000
    with caplog.at_level(logging.INFO, logger="controller.tasks"):
        result = reconcile_project.run(missing)
    assert result == {"project": missing, "writes": 0, "orders": 0, "gone": True}
    assert f"project {missing} no longer exists" in caplog.text
