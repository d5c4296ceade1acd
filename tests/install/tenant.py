"""A tenant using the installed portal over plain HTTP, as a browser would submit its forms.

Cookies (session, CSRF) are kept per tenant; each form is read from the page that shows it
(hidden fields: CSRF token, the confirmation key and the quote the tenant saw), so what is posted
is what the portal rendered, not field values copied from its source.
"""

from __future__ import annotations

import html
import http.cookiejar
import re
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

import yaml

from deploy.devcluster.config import load_settings
from deploy.images.sample import IMAGE
from tests.install.installation import NAMESPACE, RELEASE

PRODUCT = "tranche-v100-8g"
PASSWORD = "a-long-pass-42-install"
SEED = (
    "from portal.catalog.seed import ensure_catalogue; from portal.catalog.models import Product;"
    f"ensure_catalogue(); print(Product.objects.get(device_class='{PRODUCT}').pk)"
)


def tenant_manifest(text: str) -> str:
    """The manifest page's workload with the tenant's changes (tests/install/test_tenant.py)."""
    docs = [d for d in yaml.safe_load_all(text) if d and d["kind"] != "PersistentVolumeClaim"]
    (deployment,) = docs
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    container["image"] = IMAGE
    container["env"] = [{"name": "SAMPLE_ALLOC_MIB", "value": "2048"}]
    container.pop("ports", None)
    container["resources"]["requests"] = {"cpu": "50m", "memory": "256Mi"}
    container["resources"]["limits"]["memory"] = "512Mi"
    pod["volumes"] = [{"name": "models", "emptyDir": {}}]
    return yaml.safe_dump(deployment)


def as_tenant(kubeconfig, *args: str, stdin: str | None = None) -> str:
    # the kubectl built with the cluster (docs/devcluster.md), not whatever is on PATH
    kubectl = str(load_settings().kubectl)
    done = subprocess.run([kubectl, f"--kubeconfig={kubeconfig}", *args], input=stdin,
                          capture_output=True, text=True, check=False, timeout=60)  # fmt: skip
    assert done.returncode == 0, f"kubectl {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def seed_catalogue(installation) -> int:
    """docs/install.md, "First product": the staff's catalogue (the seed's V100 line); the id of
    the 8 GiB product."""
    argv = ["-n", NAMESPACE, "exec", f"deploy/{RELEASE}-portal", "--", "python3", "manage.py"]
    return int(installation.kubectl(*argv, "shell", "-c", SEED).split()[-1])  # the last line


_FORM = re.compile(r"<form\b(?P<attrs>[^>]*)>(?P<body>.*?)</form>", re.S | re.I)
_INPUT = re.compile(r"<input\b[^>]*>", re.S | re.I)
_ATTR = re.compile(r'([a-zA-Z_:-]+)\s*=\s*"([^"]*)"')


@dataclass
class Response:
    status: int
    url: str
    body: str
    headers: dict[str, str]


@dataclass
class RawResponse:
    status: int
    body: bytes
    headers: dict[str, str]  # names lower-cased: HTTP header names are case-insensitive


def _headers(message) -> dict[str, str]:
    return {name.lower(): value for name, value in message.items()}


def _attrs(tag: str) -> dict[str, str]:
    return {k.lower(): html.unescape(v) for k, v in _ATTR.findall(tag)}


def form_fields(page: str, containing: str) -> tuple[str, dict[str, str]]:
    """(action, name -> value) of the first form whose HTML contains `containing`."""
    for match in _FORM.finditer(page):
        if containing in match.group("body"):
            action = _attrs(f"<form {match.group('attrs')}>").get("action", "")
            fields = {}
            for tag in _INPUT.findall(match.group("body")):
                a = _attrs(tag)
                if a.get("name") and a.get("type", "text") not in ("submit", "checkbox"):
                    fields[a["name"]] = a.get("value", "")
            return action, fields
    raise AssertionError(f"no form containing {containing!r} on the page:\n{page[:2000]}")


@dataclass
class Tenant:
    base: str
    jar: http.cookiejar.CookieJar = field(default_factory=http.cookiejar.CookieJar)
    # X-Forwarded-For as the one trusted proxy would pass it on (tests/install/test_proxy.py)
    forwarded_for: str = ""

    def __post_init__(self) -> None:
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def request(self, path: str, data: dict[str, str] | None = None) -> Response:
        url = path if path.startswith("http") else self.base + path
        body = urllib.parse.urlencode(data).encode() if data is not None else None
        req = urllib.request.Request(url, data=body)  # noqa: S310 - http to the node only
        if data is not None:
            req.add_header("Referer", url)  # Django's CSRF check wants a same-origin referer
        if self.forwarded_for:
            req.add_header("X-Forwarded-For", self.forwarded_for)
        try:
            with self.opener.open(req, timeout=30) as resp:
                text = resp.read().decode(errors="replace")
                return Response(resp.status, resp.url, text, dict(resp.headers))
        except urllib.error.HTTPError as err:
            return Response(err.code, url, err.read().decode(errors="replace"), dict(err.headers))

    def request_bytes(self, path: str) -> RawResponse:
        req = urllib.request.Request(self.base + path)  # noqa: S310 - http to the node only
        try:
            with self.opener.open(req, timeout=60) as resp:
                return RawResponse(resp.status, resp.read(), _headers(resp.headers))
        except urllib.error.HTTPError as err:
            return RawResponse(err.code, err.read(), _headers(err.headers))

    def submit(self, path: str, containing: str, **values: str) -> Response:
        """GET `path`, fill the form that contains `containing` with `values`, POST it."""
        page = self.request(path)
        assert page.status == 200, (path, page.status, page.body[:1500])
        action, fields = form_fields(page.body, containing)
        fields.update(values)
        target = urllib.parse.urljoin(page.url, action) if action else page.url
        return self.request(target, fields)

    def sign_up(self, username: str, organization: str, project: str) -> int:
        """Sign up; returns the new project's id (the portal lands on its quota page)."""
        done = self.submit("/signup/", 'name="username"', username=username,
                           email=f"{username}@example.test", password=PASSWORD,
                           organization_name=organization, project_name=project)  # fmt: skip
        match = re.search(r"/projects/(\d+)/", done.url)
        assert done.status == 200, (done.status, done.url, done.body[:2000])
        assert match, (done.url, done.body[:2000])
        return int(match.group(1))

    def log_in(self, username: str, password: str) -> Response:
        """The log-in form; a 200 away from /login/ is a session, 429 the lock-out page."""
        return self.submit("/login/", 'name="username"', username=username, password=password)

    def order(self, project: int, product_id: int, quantity: int) -> str:
        """Review the price, confirm; returns the order page's URL."""
        query = urllib.parse.urlencode({"product": product_id, "quantity": quantity})
        done = self.submit(f"/projects/{project}/order/confirm/?{query}", "idempotency_key")
        assert done.status == 200, (done.status, done.body[:2000])
        assert "/orders/" in done.url, (done.url, done.body[:2000])
        return done.url

    def order_state(self, order_url: str) -> str:
        page = self.request(order_url).body
        match = re.search(r'id="order-state">([^<]+)<', page)
        return match.group(1).strip() if match else ""

    def kubeconfig(self) -> str:
        page = self.request("/access/")
        action, fields = form_fields(page.body, 'id="download-kubeconfig"')
        done = self.request(urllib.parse.urljoin(page.url, action), fields)
        assert done.status == 200, (done.status, done.body[:500])
        assert "apiVersion: v1" in done.body, done.body[:500]
        return done.body


def tenant_namespace(kubeconfig) -> str:
    return as_tenant(kubeconfig, "config", "view", "--minify", "-o", "jsonpath={..namespace}")
