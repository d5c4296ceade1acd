"""The project's Namespace: tenant label (selects the admission policies) and Pod Security."""

from __future__ import annotations

from typing import Any

from controller.render.spec import ProjectSpec
from tranche.claims import project_labels
from tranche.names import LABEL_TENANT


def render_namespace(spec: ProjectSpec) -> dict[str, Any]:
    """Namespace labelled for tenant policies; Pod Security enforces `baseline`, warns `restricted`.

    `baseline` already refuses hostPath, privileged and added capabilities; our own policy repeats
    those checks so the tenant reads one Tranche message whichever admission runs first.
    """
    labels = {
        **project_labels(spec),
        LABEL_TENANT: "true",
        "pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/enforce-version": "latest",
        "pod-security.kubernetes.io/warn": "restricted",
        "pod-security.kubernetes.io/warn-version": "latest",
    }
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": spec.namespace, "labels": labels},
    }
