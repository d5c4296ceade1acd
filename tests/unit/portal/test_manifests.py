"""The claim template and sample workload: exact shape the controller and admission demand."""

from __future__ import annotations

import yaml

from portal.catalog.manifests import (
    ProductSpec,
    ProjectRef,
    WorkloadSpec,
    memory_quantity,
    render_claim_template,
    render_models_volume,
    render_sample_deployment,
    to_yaml,
)

REF = ProjectRef(namespace="t-acme-inference-abc123", organization="acme", project="inference")
V100_8G = ProductSpec("tranche-v100-8g", 8192, 25, "Tesla V100-PCIE-32GB", "7.0")


def test_claim_template_exact():
    assert render_claim_template(REF, V100_8G) == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": "tranche-v100-8g",
            "namespace": "t-acme-inference-abc123",
            "labels": {
                "tranche.dev/organization": "acme",
                "tranche.dev/project": "inference",
                "app.kubernetes.io/managed-by": "tranche",
            },
        },
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {
                                "deviceClassName": "tranche-v100-8g",
                                "count": 1,
                                "capacity": {"requests": {"memory": "8Gi", "cores": "25"}},
                            },
                        }
                    ]
                }
            }
        },
    }


def test_deployment_uses_template_ram_and_volume():
    dep = render_sample_deployment(REF, V100_8G)
    pod = dep["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [
        {"name": "gpu", "resourceClaimTemplateName": "tranche-v100-8g"}
    ]
    (container,) = pod["containers"]
    assert container["resources"]["claims"] == [{"name": "gpu"}]
    assert container["resources"]["requests"]["memory"] == "2Gi"
    assert container["resources"]["limits"]["memory"] == "4Gi"
    assert container["image"] == "ollama/ollama:0.24.0"
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "llm-models"
    assert "app.kubernetes.io/managed-by" not in dep["metadata"]["labels"]
    assert render_models_volume(REF, WorkloadSpec())["kind"] == "PersistentVolumeClaim"


def test_yaml_round_trips_and_quotes_cores():
    text = to_yaml([render_claim_template(REF, V100_8G)])
    assert "cores: '25'" in text
    assert yaml.safe_load(text) == render_claim_template(REF, V100_8G)
    assert memory_quantity(1536) == "1536Mi"


def test_no_django_imports():
    from pathlib import Path

    import portal.catalog.manifests as m

    source = Path(m.__file__).read_text()
    assert "django" not in source.lower().replace("no django", "")


def test_sample_deployment_yaml_has_no_anchors_or_aliases():
    """Labels shared by the Deployment and its pod template are written out twice, in full."""
    docs = [render_models_volume(REF, WorkloadSpec()), render_sample_deployment(REF, V100_8G)]
    text = to_yaml(docs)
    assert "&id" not in text
    assert "*id" not in text
    assert list(yaml.safe_load_all(text)) == docs
