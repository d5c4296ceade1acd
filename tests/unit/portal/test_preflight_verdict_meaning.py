"""Pre-flight's verdicts mean what they say (issue #49): the page's own samples meet Pod Security
"restricted" (so a good image ends "ok", not "warning"), an image the registry says does not
exist will fail with a name-and-tag fix, and a PTX-only image says the driver compiles it at the
first launch."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from portal.preflight.checks import check_gpu_code, run_checks
from portal.preflight.facts import AdmissionResult, Facts, ImageFacts, ProductFacts
from portal.preflight.layers import scan_image
from portal.preflight.outbound import Policy
from portal.preflight.registry import Limits
from portal.preflight.samples import sample_manifest
from portal.preflight.verdicts import Level, overall

V100_8G = ProductFacts(
    "tranche-v100-8g", "V100 8 GiB slice", "Tesla V100-PCIE-32GB", "7.0", 8192, 25
)


def restricted_violations(pod: dict) -> list[str]:
    """What Pod Security "restricted" (v1.37) checks of a pod spec, for the fields a Deployment
    like the samples can set: runAsNonRoot, a non-zero runAsUser, seccomp RuntimeDefault or
    Localhost, no privilege escalation, capabilities dropped to ALL (NET_BIND_SERVICE may be
    added back), no privileged container, no host namespaces, only the allowed volume types."""
    out = []
    pod_sc = pod.get("securityContext") or {}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            out.append(key)
    allowed_volumes = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                       "persistentVolumeClaim", "projected", "secret"}  # fmt: skip
    for volume in pod.get("volumes") or []:
        if not set(volume) - {"name"} <= allowed_volumes:
            out.append(f"volume {volume['name']}")
    if pod_sc.get("runAsUser") == 0:
        out.append("pod runAsUser 0")
    for c in [*(pod.get("initContainers") or []), *pod["containers"]]:
        out += [f"{c['name']}: {what}" for what in _container_violations(c, pod_sc)]
    return out


def _container_violations(c: dict, pod_sc: dict) -> list[str]:
    sc = c.get("securityContext") or {}
    caps = sc.get("capabilities") or {}
    seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
    checks = {
        "runAsNonRoot": not sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")),
        "runAsUser 0": sc.get("runAsUser") == 0,
        "seccompProfile": seccomp not in ("RuntimeDefault", "Localhost"),
        "allowPrivilegeEscalation": sc.get("allowPrivilegeEscalation") is not False,
        "capabilities.drop ALL": "ALL" not in (caps.get("drop") or []),
        "capabilities.add": bool(set(caps.get("add") or []) - {"NET_BIND_SERVICE"}),
        "privileged": bool(sc.get("privileged")),
    }
    return [what for what, failed in checks.items() if failed]


def test_the_restricted_reading_catches_what_the_old_sample_lacked() -> None:
    """The checker itself: a bare pod spec (the samples before #49) fails on every point."""
    bare = {"containers": [{"name": "app", "image": "x:1"}]}
    assert restricted_violations(bare) == [
        "app: runAsNonRoot", "app: seccompProfile", "app: allowPrivilegeEscalation",
        "app: capabilities.drop ALL",
    ]  # fmt: skip


@pytest.mark.parametrize("image", ["127.0.0.1:8005/samples/cuda12-sm70:1", "reg.example/a/b:2"])
def test_the_pages_sample_manifest_meets_pod_security_restricted(image) -> None:
    [deployment] = list(yaml.safe_load_all(sample_manifest(image, "tranche-v100-8g")))
    pod = deployment["spec"]["template"]["spec"]
    assert restricted_violations(pod) == []
    assert pod["securityContext"]["runAsUser"] != 0  # the kubelet's own runAsNonRoot check
    assert pod["containers"][0]["image"] == image


def _clean_sample_facts(image: str, found: ImageFacts) -> Facts:
    objects = list(yaml.safe_load_all(sample_manifest(image, V100_8G.device_class)))
    return Facts(
        objects=objects, namespace="t-ns", products={V100_8G.device_class: V100_8G},
        admission=(AdmissionResult("Deployment/gpu-sample", True),), images={image: found},
    )  # fmt: skip


def test_a_good_image_in_the_sample_manifest_ends_ok() -> None:
    image = "127.0.0.1:8005/samples/cuda12-sm70:1"
    found = ImageFacts(image, digest="sha256:x", gpu_files=("lib.so",), sass=(70, 80), ptx=(80,))
    verdicts = run_checks(_clean_sample_facts(image, found))
    assert overall(verdicts) is Level.OK, [v for v in verdicts if v.level is not Level.OK]


def test_a_missing_image_will_fail_with_a_name_and_tag_fix() -> None:
    image = "127.0.0.1:8005/samples/cuda12-sm70:2"
    found = ImageFacts(image, error=f"The image {image} does not exist in its registry.",
                       missing=True)  # fmt: skip
    verdicts = run_checks(_clean_sample_facts(image, found))
    assert overall(verdicts) is Level.WILL_FAIL
    [verdict] = [v for v in verdicts if v.check == "image"]
    assert verdict.level is Level.WILL_FAIL
    assert verdict.reason.startswith("Will fail to pull: The image")
    assert "ImagePullBackOff" in verdict.reason
    assert "name and tag" in verdict.fix
    assert "pull secret" not in verdict.fix


def test_an_unreadable_image_stays_a_warning_not_checked() -> None:
    found = ImageFacts("x:1", error="The registry x refused to show x:1 (401).")
    verdict = check_gpu_code(_clean_sample_facts("x:1", found), V100_8G, found)
    assert verdict.level is Level.WARNING
    assert verdict.check == "gpu_code"


@pytest.mark.parametrize(
    ("sass", "ptx", "jit"),
    [((), (70,), "compute_70"), ((80,), (60, 70), "compute_70"), ((70,), (70,), None),
     ((60,), (70,), "compute_70")],
)  # fmt: skip
def test_ptx_only_code_says_the_driver_compiles_it_at_first_launch(sass, ptx, jit) -> None:
    found = ImageFacts("img:1", digest="sha256:x", gpu_files=("k.so",), sass=sass, ptx=ptx)
    verdict = check_gpu_code(_clean_sample_facts("img:1", found), V100_8G, found)
    assert verdict.level is Level.OK
    if jit is None:
        assert "compiles" not in verdict.reason
    else:
        assert f"No SASS for sm_70: the driver compiles the PTX ({jit}) at the first launch" in (
            verdict.reason
        )


class _NoSuchManifest(BaseHTTPRequestHandler):
    """A registry that knows no image: what a distribution registry answers for a bad tag."""

    def do_GET(self) -> None:
        body = b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}'
        self.send_response(404 if "/manifests/" in self.path else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        return


@pytest.fixture
def empty_registry() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NoSuchManifest)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_registry_404_for_the_manifest_marks_the_image_missing(empty_registry) -> None:
    policy = Policy(plain_http=frozenset({"127.0.0.1"}), allowed_hosts=frozenset({"127.0.0.1"}))
    found = scan_image(f"{empty_registry}/tenant/app:typo", Limits(deadline_s=10), {}, policy)
    assert found.missing
    assert found.error == (
        f"The image {empty_registry}/tenant/app:typo does not exist in its registry."
    )
