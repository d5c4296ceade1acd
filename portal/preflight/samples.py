"""Sample images the pre-flight page offers (PREFLIGHT_SAMPLE_IMAGES; `make run` serves three on
its loopback registry, deploy/ociregistry/samples.py), each with a manifest to paste.

The manifest claims a slice of the product on the oldest GPU of the catalogue (a V100 in the
demo): that is where an image's GPU code decides whether it runs at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from portal.catalog.models import Product


@dataclass(frozen=True)
class SampleImage:
    image: str
    product: str  # the product's name, as the page says it
    manifest: str


def sample_manifest(image: str, device_class: str) -> str:
    """A one-replica Deployment running `image` on a slice of `device_class` (valid YAML).

    It meets Pod Security "restricted", which tenant namespaces warn on: a sample that draws a
    warning would make every image's overall verdict "warning", never "ok"."""
    return (
        "apiVersion: apps/v1\n"
        "kind: Deployment\n"
        "metadata: {name: gpu-sample}\n"
        "spec:\n"
        "  replicas: 1\n"
        "  selector: {matchLabels: {app: gpu-sample}}\n"
        "  template:\n"
        "    metadata: {labels: {app: gpu-sample}}\n"
        "    spec:\n"
        "      securityContext:\n"
        "        runAsNonRoot: true\n"
        "        runAsUser: 1000\n"
        "        seccompProfile: {type: RuntimeDefault}\n"
        f"      resourceClaims: [{{name: gpu, resourceClaimTemplateName: {device_class}}}]\n"
        "      containers:\n"
        "      - name: app\n"
        f"        image: {image}\n"
        "        securityContext:\n"
        "          allowPrivilegeEscalation: false\n"
        "          capabilities: {drop: [ALL]}\n"
        "        resources: {limits: {memory: 1Gi}, claims: [{name: gpu}]}\n"
    )


def _oldest_gpu_product() -> Product | None:
    products = Product.objects.select_related("gpu_model").order_by("pk")
    return min(products, key=lambda p: float(p.gpu_model.compute_capability), default=None)


def sample_images() -> list[SampleImage]:
    """What the page lists: each configured sample with its manifest; [] when none is set."""
    images = settings.PREFLIGHT_SAMPLE_IMAGES
    product = _oldest_gpu_product() if images else None
    if product is None:
        return []
    return [SampleImage(i, product.name, sample_manifest(i, product.device_class)) for i in images]
