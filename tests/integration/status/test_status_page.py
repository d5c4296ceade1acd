"""The live status page: every role of the project's organization and Support staff see the
server-rendered rows; an outsider, Billing staff and a groupless staff user get 404; anonymous
is sent to log in."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.urls import reverse

from portal.agents.models import NodeToken, PodSliceStatus
from tests.helpers.factories import make_staff

MIB = 1024 * 1024


@pytest.fixture
def pod(world) -> PodSliceStatus:
    return PodSliceStatus.objects.create(
        project=world.project_a,
        node_name="kwok-gpu-0",
        namespace=world.project_a.namespace,
        pod_name="train-0",
        pod_uid="u-1",
        gpu_uuid="GPU-1",
        memory_limit_bytes=8192 * MIB,
        memory_used_bytes=6144 * MIB,
        rejected_allocations=3,
        compute_target_percent=25,
        compute_used_percent=24.5,
        throttled_seconds=1.5,
        processes=2,
        reported_at=datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC),
    )


@pytest.mark.parametrize("role", ["owner", "member", "viewer"])
def test_every_role_of_the_organization_sees_the_pods(world, pod, client_of, role):
    # the node's agent listed its GPUs: the page names the pod's GPU model, slice and share
    NodeToken.objects.create(
        node_name="kwok-gpu-0",
        token_hash="0" * 64,
        gpus=[
            {"uuid": "GPU-0", "name": "Other model", "memory_total_bytes": 1,
             "memory_used_bytes": 0},
            {"uuid": "GPU-1", "name": "Tesla V100-PCIE-32GB", "memory_total_bytes": 32 << 30,
             "memory_used_bytes": 0},
        ],
    )  # fmt: skip
    response = client_of(getattr(world, role)).get(
        reverse("project_status", args=[world.project_a.pk])
    )
    assert response.status_code == 200
    html = response.content.decode()
    for text in (
        "train-0",
        "kwok-gpu-0",
        "GPU-1",
        "6144 / 8192 MiB (75%)",
        "24.5% / 25%",
        "1.50 s",
        "2 Jan 2025, 03:04 UTC",
        "Tesla V100-PCIE-32GB · 8 GiB slice · 25 %",
        '<meter min="0" max="8192.0" high="7373" value="6144.0"',
        '<meter min="0" max="25" high="22" value="24.5"',
    ):
        assert text in html
    assert "Other model" not in html
    assert f"/ws/projects/{world.project_a.pk}/status/" in html
    assert reverse("project_status", args=[world.project_a.pk]) in html  # nav link


def test_outsider_gets_404_not_403(world, pod, client_of):
    response = client_of(world.outsider).get(reverse("project_status", args=[world.project_a.pk]))
    assert response.status_code == 404
    assert "train-0" not in response.content.decode()


def test_support_staff_see_every_project(world, pod, client_of):
    response = client_of(make_staff("sam", "Support")).get(
        reverse("project_status", args=[world.project_a.pk])
    )
    assert response.status_code == 200
    assert "train-0" in response.content.decode()


def test_billing_staff_see_no_live_page(world, pod, client_of):
    """Issue #28: Billing staff get billing pages, not every tenant's live pods."""
    response = client_of(make_staff("bill", "Billing")).get(
        reverse("project_status", args=[world.project_a.pk])
    )
    assert response.status_code == 404


def test_staff_without_a_support_group_gets_404(world, pod, client_of):
    response = client_of(make_staff("stan", None)).get(
        reverse("project_status", args=[world.project_a.pk])
    )
    assert response.status_code == 404


def test_missing_project_is_404(world, client_of):
    assert client_of(world.owner).get("/projects/999999999999999999/status/").status_code == 404


def test_anonymous_is_sent_to_log_in(world, client):
    url = reverse("project_status", args=[world.project_a.pk])
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))
