"""The per-project manifest page (view, copy, download): the documented claim template, the
slice check (a Pod of the sample image) and a sample workload using the template, with how many
slices of the product the project holds."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from portal.catalog import check_manifest, manifests
from portal.catalog.llm_models import ram_limits_line
from portal.catalog.models import Product
from portal.catalog.selectors import find_product
from portal.orders.selectors import current_quantity
from portal.tenants.context import nav_context, request_project
from portal.tenants.models import Project


def _ref(project: Project) -> manifests.ProjectRef:
    return manifests.ProjectRef(
        namespace=project.namespace,
        organization=project.organization.slug,
        project=project.slug,
    )


def _check(project: Project, product: Product) -> str:
    """The slice check Pod as YAML (the page shows and offers exactly this)."""
    return manifests.to_yaml([check_manifest.render_slice_check(_ref(project), product.spec())])


def _bundle(project: Project, product: Product) -> tuple[str, str]:
    ref = _ref(project)
    spec = product.spec()
    template = manifests.to_yaml([manifests.render_claim_template(ref, spec)])
    workload = manifests.WorkloadSpec()
    deployment = manifests.to_yaml(
        [
            manifests.render_models_volume(ref, workload),
            manifests.render_sample_deployment(ref, spec, workload),
        ]
    )
    return template, deployment


def _load(request: HttpRequest, project_id: int, product_id: int) -> tuple[Project, Product]:
    project, _ = request_project(request, project_id)
    product = find_product(product_id)
    if product is None:
        raise Http404("No such product.")
    return project, product


@login_required
def manifest(request: HttpRequest, project_id: int, product_id: int) -> HttpResponse:
    """The documented claim template and a Deployment using it, for this project."""
    project, product = _load(request, project_id, product_id)
    template, deployment = _bundle(project, product)
    context = {
        "project": project,
        "product": product,
        "template_yaml": template,
        "deployment_yaml": deployment,
        "check_yaml": _check(project, product),
        "check_name": check_manifest.CHECK_NAME,
        "check_image": check_manifest.SAMPLE_IMAGE,
        "check_alloc_mib": check_manifest.check_alloc_mib(product.spec()),
        "entitled": current_quantity(project, product),
        "ram_limits": ram_limits_line(),
        **nav_context(request, project),
    }
    return render(request, "catalog/manifest.html", context)


@login_required
def manifest_download(request: HttpRequest, project_id: int, product_id: int) -> HttpResponse:
    """The workload manifest as a YAML file."""
    project, product = _load(request, project_id, product_id)
    _template, deployment = _bundle(project, product)
    response = HttpResponse(deployment, content_type="application/yaml; charset=utf-8")
    filename = f"{project.slug}-{product.device_class}.yaml"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@login_required
def check_download(request: HttpRequest, project_id: int, product_id: int) -> HttpResponse:
    """The slice check Pod as a YAML file."""
    project, product = _load(request, project_id, product_id)
    response = HttpResponse(
        _check(project, product), content_type="application/yaml; charset=utf-8"
    )
    filename = f"{project.slug}-{product.device_class}-{check_manifest.CHECK_NAME}.yaml"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
