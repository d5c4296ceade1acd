"""HTTP routes of the portal."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path, register_converter

from portal import metrics
from portal.access import views as access_views
from portal.billing import views as billing_views
from portal.catalog import views as catalog_views
from portal.core import views as core_views
from portal.orders import manifest_views
from portal.orders import views as order_views
from portal.preflight import views as preflight_views
from portal.status import quota_views, support_views
from portal.status import views as status_views
from portal.tenants import views as tenant_views


class IdConverter:
    """A database id: 1 to 18 digits, so an oversized number is a 404, never a 500."""

    regex = "[0-9]{1,18}"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return str(value)


register_converter(IdConverter, "id")
handler500 = "portal.core.outage.server_error"
P = "projects/<id:project_id>/"

urlpatterns = [
    # /healthz is answered before Django: portal/core/liveness.py (portal/asgi.py)
    path("readyz", core_views.readyz, name="readyz"),
    path("metrics", metrics.metrics, name="metrics"),
    path("metrics/business", metrics.business_metrics, name="business_metrics"),
    path("admin/", admin.site.urls),
    path("", tenant_views.home, name="home"),
    path("signup/", tenant_views.signup, name="signup"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("orgs/<id:organization_id>/", tenant_views.organization, name="organization"),
    path(
        "orgs/<id:organization_id>/projects/<id:project_id>/delete/",
        tenant_views.delete_project,
        name="delete_project",
    ),
    path("orgs/<id:organization_id>/billing/", billing_views.billing, name="billing"),
    path(
        "orgs/<id:organization_id>/invoices/<id:invoice_id>/",
        billing_views.invoice,
        name="invoice",
    ),
    path(
        "orgs/<id:organization_id>/focus/<int:year>-<int:month>.csv",
        billing_views.focus_export,
        name="focus_export",
    ),
    path(
        "orgs/<id:organization_id>/credit-notes/<id:note_id>/",
        billing_views.credit_note,
        name="credit_note",
    ),
    path("invite/", tenant_views.accept_invitation, name="accept_invitation"),
    path("switch/", tenant_views.switch_project, name="switch_project"),
    path("catalogue/", catalog_views.catalogue, name="catalogue"),
    path("access/", access_views.cluster_access, name="cluster_access"),
    path("access/kubeconfig/", access_views.download_kubeconfig, name="download_kubeconfig"),
    path("access/revoke/", access_views.revoke, name="revoke_credentials"),
    path(P, quota_views.quota, name="quota"),
    path(P + "status/", status_views.project_status, name="project_status"),
    path("support/", support_views.console, name="support_console"),
    path("support/gpus/", support_views.gpu_service_action, name="support_gpu_service"),
    path(P + "order/", order_views.order_form, name="order_form"),
    path(P + "order/confirm/", order_views.order_confirm, name="order_confirm"),
    path(P + "orders/", order_views.order_list, name="order_list"),
    path(P + "orders/<id:order_id>/", order_views.order_detail, name="order_detail"),
    path(P + "manifests/<id:product_id>/", manifest_views.manifest, name="manifest"),
    path(
        P + "manifests/<id:product_id>/download/",
        manifest_views.manifest_download,
        name="manifest_download",
    ),
    path(
        P + "manifests/<id:product_id>/check/",
        manifest_views.check_download,
        name="manifest_check_download",
    ),
    path(P + "preflight/", preflight_views.preflight_page, name="preflight"),
    path("api/v1/" + P + "preflight", preflight_views.preflight_api, name="preflight_api"),
    path("account/tokens/", preflight_views.api_tokens, name="api_tokens"),
    path(
        "account/tokens/<id:token_id>/revoke/",
        preflight_views.revoke_api_token,
        name="revoke_api_token",
    ),
]
