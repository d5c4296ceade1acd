"""The pure pre-flight checks, as a table: facts in, the verdict and its figures out."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from portal.catalog.manifests import (
    ProjectRef,
    WorkloadSpec,
    render_models_volume,
    render_sample_deployment,
)
from portal.preflight.checks import check_gpu_code, requested, run_checks, translate_admission
from portal.preflight.facts import (
    AdmissionResult,
    CapacityFacts,
    Facts,
    ImageFacts,
    ProductFacts,
    QuotaFacts,
)
from portal.preflight.manifest import MAX_MANIFEST_BYTES, ManifestError, parse_manifest
from portal.preflight.verdicts import Level, overall

V100_8G = ProductFacts(
    "tranche-v100-8g", "V100 8 GiB slice", "Tesla V100-PCIE-32GB", "7.0", 8192, 25
)
A100_10G = ProductFacts("tranche-a100-10g", "A100 10 GiB slice", "NVIDIA A100", "8.0", 10240, 25)
PRODUCTS = {p.device_class: p for p in (V100_8G, A100_10G)}
REF = ProjectRef("t-ns", "org", "ml")
KEY = "tranche-v100-8g.deviceclass.resource.k8s.io/devices"


def sample(**workload) -> list[dict]:
    spec = WorkloadSpec(**workload)
    product = V100_8G
    from portal.catalog.manifests import ProductSpec

    ps = ProductSpec(product.device_class, product.memory_mib, product.compute_percent)
    return [render_models_volume(REF, spec), render_sample_deployment(REF, ps, spec)]


def facts(objects, **kw) -> Facts:
    return Facts(objects=objects, namespace="t-ns", products=PRODUCTS, **kw)


def by_check(verdicts, check):
    return [v for v in verdicts if v.check == check]


QUOTA = QuotaFacts(
    "tranche-quota",
    {KEY: "2", "requests.cpu": "8", "requests.memory": "16Gi"},
    {KEY: "1", "requests.cpu": "7500m", "requests.memory": "2Gi"},
)


@pytest.mark.parametrize(
    ("quota", "capacity", "check", "level", "words"),
    [
        (QUOTA, None, "gpu_quota", Level.OK, "1 held + 1 wanted of 2"),
        (QuotaFacts("q", {KEY: "1"}, {KEY: "1"}), None, "gpu_quota", Level.WILL_FAIL,
         "over your quota"),
        (None, CapacityFacts({"tranche-v100-8g": 2}, {"tranche-v100-8g": 0}), "capacity",
         Level.WARNING, "Will wait: capacity busy (all 2 GPU(s) are full"),
        (None, CapacityFacts({}, {}), "capacity", Level.WARNING, "no GPU of this model is online"),
        (None, CapacityFacts({"tranche-v100-8g": 1}, {"tranche-v100-8g": 3}), "capacity",
         Level.OK, "Starts now: 3 slice(s) free"),
        (QUOTA, None, "cpu_quota", Level.WILL_FAIL,
         "requests.cpu quota (tranche-quota) has 0.5 CPU"),
        (QUOTA, None, "memory_quota", Level.OK, "2048 MiB of 14336 MiB left"),
    ],
)  # fmt: skip
def test_start_checks(quota, capacity, check, level, words) -> None:
    found = by_check(run_checks(facts(sample(), quota=quota, capacity=capacity)), check)
    assert [v.level for v in found] == [level], found
    assert words in found[0].reason


def test_requested_counts_replicas_and_claims() -> None:
    objects = sample()
    objects[1]["spec"]["replicas"] = 3
    want = requested(facts(objects))
    assert want.devices == {"tranche-v100-8g": 3}
    assert str(want.cpu) == "3"
    assert want.memory == 3 * 2 * 2**30


@pytest.mark.parametrize(
    ("sass", "ptx", "product", "level"),
    [
        ((50, 60, 70, 75, 80, 90), (121,), V100_8G, Level.OK),  # CUDA 12 libcurand
        ((75, 80, 86, 90, 100, 120), (121,), V100_8G, Level.WILL_FAIL),  # CUDA 13: Volta dropped
        ((75, 80, 86, 90, 100, 120), (121,), A100_10G, Level.OK),
        ((86,), (), A100_10G, Level.WILL_FAIL),  # same major, newer minor: no binary compat
        ((), (60,), V100_8G, Level.OK),  # old PTX JITs forward
    ],
)
def test_gpu_code_against_compute_capability(sass, ptx, product, level) -> None:
    image = ImageFacts("img:1", digest="sha256:x", gpu_files=("lib.so",), sass=sass, ptx=ptx)
    verdict = check_gpu_code(facts([]), product, image)
    assert verdict.level is level, verdict
    if level is Level.WILL_FAIL and product is V100_8G:
        assert "need sm_75 or newer; on a Tesla V100-PCIE-32GB" in verdict.reason


def test_registry_errors_and_bounds_are_verdicts_not_passes() -> None:
    failed = check_gpu_code(facts([]), V100_8G, ImageFacts("x:1", error="it timed out"))
    assert failed.level is Level.WARNING
    assert "Not checked: it timed out" in failed.reason
    bounded = check_gpu_code(facts([]), V100_8G, ImageFacts("x:1", bound_reached=True))
    assert bounded.level is Level.WARNING
    assert "bound was reached" in bounded.reason


def test_a_cpu_only_image_is_told_it_has_no_gpu_code() -> None:
    """#45: an image without CUDA code (an ordinary CPU image) was a TypeError, so HTTP 500."""
    cpu = ImageFacts("python:3.12", digest="sha256:x", bytes_read=50_000_000)
    verdict = check_gpu_code(facts([]), V100_8G, cpu)
    assert verdict.level is Level.WARNING
    assert verdict.reason.startswith("No GPU code in this image: none of its files carries CUDA")
    assert "runtime" in verdict.fix
    assert verdict.figures["gpu_files"] == 0


def test_ram_lint_512mi_container_with_4gib_model() -> None:
    objects = sample(ram_limit="512Mi", ram_request="512Mi")
    objects[1]["spec"]["template"]["metadata"]["annotations"] = {"tranche.dev/model-size": "4Gi"}
    [ram] = by_check(run_checks(facts(objects)), "ram_limit")
    assert ram.level is Level.WARNING
    assert ram.figures == {"ram_limit_mib": 512, "model_mib": 4096}
    assert "OOMKilled, exit code 137" in ram.reason


def test_ram_lint_warns_a_model_server_below_the_floor_without_a_model_named() -> None:
    objects = sample(image="ollama/ollama:0.24.0", ram_limit="512Mi", ram_request="512Mi")
    [ram] = by_check(run_checks(facts(objects)), "ram_limit")
    assert ram.level is Level.WARNING
    assert ram.figures == {"ram_limit_mib": 512, "floor_mib": 2048}
    assert "too little for a model server to load a model" in ram.reason
    roomy = sample(image="ollama/ollama:0.24.0", ram_limit="4Gi", ram_request="4Gi")
    assert by_check(run_checks(facts(roomy)), "ram_limit") == []
    other = sample(image="busybox:1.37", ram_limit="512Mi", ram_request="512Mi")
    assert by_check(run_checks(facts(other)), "ram_limit") == []


def test_context_lint_shows_the_formula_and_the_tokens_that_fit() -> None:
    objects = sample(context_length=131072)
    objects[1]["spec"]["template"]["metadata"]["annotations"] = {"tranche.dev/model": "llama3.2:3b"}
    [ctx] = by_check(run_checks(facts(objects)), "context_length")
    assert ctx.level is Level.WARNING
    # 2 x 28 layers x 8 KV heads x 128 x 2 bytes = 112 KiB/token; 131072 tokens = 14336 MiB
    assert ctx.figures["kv_cache_mib"] == 14336
    assert ctx.figures["needed_mib"] == 2048 + 14336 + 512
    assert ctx.figures["fits_tokens"] == (8192 - 2048 - 512) * 2**20 // (112 * 1024)
    assert "KV cache = 2 x 28 layers x 8 KV heads x 128 head dim" in ctx.reason


def test_the_sample_manifest_passes_every_lint() -> None:
    verdicts = run_checks(facts(sample(), volume_claims={"llm-models": "Bound"}))
    assert overall(verdicts) is Level.OK, [v for v in verdicts if v.level is not Level.OK]


@pytest.mark.parametrize(
    ("image", "level"),
    [("ollama/ollama", Level.WARNING), ("ollama/ollama:latest", Level.WARNING),
     ("localhost:5000/ollama", Level.WARNING), ("ollama/ollama:0.24.0", Level.OK),
     ("r.example/x@sha256:" + "a" * 64, Level.OK)],
)  # fmt: skip
def test_image_tag_lint(image, level) -> None:
    [tag] = by_check(run_checks(facts(sample(image=image))), "image_tag")
    assert tag.level is level


def test_model_directory_without_a_volume_is_a_warning() -> None:
    objects = sample()
    pod = objects[1]["spec"]["template"]["spec"]
    pod["volumes"] = []
    pod["containers"][0]["volumeMounts"] = []
    [vol] = by_check(run_checks(facts(objects)), "model_volume")
    assert vol.level is Level.WARNING
    assert "downloads the model again" in vol.reason


def test_admission_refusals_are_translated() -> None:
    message = (
        'resourceclaims.resource.k8s.io "mine" is forbidden: ValidatingAdmissionPolicy '
        "'tranche-claims' with binding 'tranche-claims' denied request: ResourceClaim mine "
        'asks for DeviceClass "gpu.nvidia.com", which is not a Tranche product'
    )
    reason, _fix = translate_admission(message, 422)
    assert reason.startswith("Tranche policy tranche-claims: ResourceClaim mine asks for")
    verdicts = run_checks(
        facts(
            [], admission=(AdmissionResult("ResourceClaim/mine", False, 422, "Invalid", message),)
        )
    )
    assert verdicts[0].level is Level.WILL_FAIL
    assert "Refused: Tranche policy" in verdicts[0].reason


@pytest.mark.parametrize(
    ("text", "words"),
    [("a: [1, 2", "not valid YAML at the end of line 1"),
     ("a: b\n  c: d\n: x", "not valid YAML at line 2, column 4"), ("", "empty"),
     ("- 1\n", "not a Kubernetes object"),
     ("apiVersion: v1\nkind: Pod\n", "no metadata.name"), (b"\xff\xfe", "not UTF-8"),
     ("x: " + "y" * (MAX_MANIFEST_BYTES + 1), "pre-flight reads at most 1 MiB"),
     ("!!python/object/apply:os.system ['true']", "not valid YAML")],
)  # fmt: skip
def test_bad_manifests_are_clear_errors(text, words) -> None:
    with pytest.raises(ManifestError, match=None) as err:
        parse_manifest(text)
    assert words in str(err.value)


def test_multi_document_yaml_is_read_in_order() -> None:
    objects = parse_manifest(yaml.safe_dump_all(sample()))
    assert [o["kind"] for o in objects] == ["PersistentVolumeClaim", "Deployment"]


def ollama_pod(env: dict[str, str], mount: str, uid: int | None) -> list[dict]:
    """The sample Deployment changed to `env`, the models volume at `mount`, running as `uid`."""
    objects = sample()
    pod = objects[1]["spec"]["template"]["spec"]
    if uid is None:
        pod.pop("securityContext")
    else:
        pod["securityContext"]["runAsUser"] = uid
    c = pod["containers"][0]
    c["env"] = [{"name": k, "value": v} for k, v in env.items()]
    c["volumeMounts"] = [{"name": "models", "mountPath": mount}]
    return objects


@pytest.mark.parametrize(
    ("env", "mount", "uid", "level", "words"),
    [
        # uid 1000 with HOME on the volume: Ollama keeps models in $HOME/.ollama/models (it
        # was a false "not on a volume" warning, the lint looked for /root/.ollama only)
        ({"HOME": "/models"}, "/models", 1000, Level.OK,
         "Models in /models/.ollama/models (OLLAMA_MODELS is not set; HOME=/models)"),
        # a volume at /root/.ollama for uid 1000: not where Ollama looks (it was a false OK)
        ({}, "/root/.ollama", 1000, Level.WARNING,
         "runs as uid 1000: the server keeps models in $HOME/.ollama/models"),
        ({"HOME": "/home/app"}, "/root/.ollama", 1000, Level.WARNING,
         "The model directory /home/app/.ollama/models (OLLAMA_MODELS is not set; "
         "HOME=/home/app) is not on a persistent volume"),
        # OLLAMA_MODELS decides, whatever HOME and the uid say
        ({"OLLAMA_MODELS": "/data/m", "HOME": "/models"}, "/data", 1000, Level.OK,
         "Models in /data/m (OLLAMA_MODELS names it)"),
        ({"OLLAMA_MODELS": "/data/m"}, "/models", None, Level.WARNING,
         "The model directory /data/m (OLLAMA_MODELS names it) is not on"),
        # root (no runAsUser: the image's root user) keeps them under /root
        ({}, "/root/.ollama", None, Level.OK, "Models in /root/.ollama/models"),
        ({}, "/root/.ollama", 0, Level.OK, "Models in /root/.ollama/models"),
        # a mount whose path only starts with the same letters is another directory
        ({"OLLAMA_MODELS": "/models2/x"}, "/models", 1000, Level.WARNING, "is not on"),
    ],
)  # fmt: skip
def test_the_model_directory_is_resolved_as_ollama_does(env, mount, uid, level, words) -> None:
    objects = ollama_pod(env, mount, uid)
    [vol] = by_check(
        run_checks(facts(objects, volume_claims={"llm-models": "Bound"})), "model_volume"
    )
    assert vol.level is level, vol
    assert words in vol.reason, vol.reason


def test_a_container_uid_overrides_the_pods() -> None:
    objects = ollama_pod({}, "/root/.ollama", 0)
    container = objects[1]["spec"]["template"]["spec"]["containers"][0]
    container["securityContext"]["runAsUser"] = 1000
    [vol] = by_check(
        run_checks(facts(objects, volume_claims={"llm-models": "Bound"})), "model_volume"
    )
    assert vol.level is Level.WARNING
    assert "uid 1000" in vol.reason


def test_the_context_charge_is_the_agents_measured_figure() -> None:
    """The lint charged a constant 512 MiB per CUDA context where the agent measured 300 MiB
    on a V100: with the agent's figure, 300 MiB is charged and more tokens fit."""
    objects = sample(context_length=131072)
    objects[1]["spec"]["template"]["metadata"]["annotations"] = {"tranche.dev/model": "llama3.2:3b"}
    measured = {**PRODUCTS, "tranche-v100-8g": replace(V100_8G, context_mib=300)}
    [ctx] = by_check(
        run_checks(Facts(objects=objects, namespace="t-ns", products=measured)), "context_length"
    )
    assert ctx.figures["context_mib"] == 300
    assert ctx.figures["needed_mib"] == 2048 + 14336 + 300
    assert ctx.figures["fits_tokens"] == (8192 - 2048 - 300) * 2**20 // (112 * 1024)
    assert "300 MiB CUDA context (as node agents measured on a Tesla V100-PCIE-32GB)" in ctx.reason
    # Not yet measured: the core's charge for an unmeasured GPU, and the page says so.
    [unmeasured] = by_check(run_checks(facts(objects)), "context_length")
    assert unmeasured.figures["context_mib"] == 512
    assert "not yet measured on this GPU model" in unmeasured.reason


def test_the_manifest_pages_ram_advice_passes_the_ram_lint() -> None:
    """The page recommended 4 GiB, which pre-flight flags for llama3.1:8b: the page's figures
    now come from the lint's own source, and each passes (1 MiB less does not)."""
    import re

    from portal.catalog.llm_models import KNOWN_MODELS, ram_limits_line

    advice = dict(re.findall(r"(\S+) (\d+) MiB", ram_limits_line()))
    assert set(advice) == set(KNOWN_MODELS)
    assert advice["llama3.1:8b"] == "5944"
    for model, limit in advice.items():
        for mib, level in ((int(limit), Level.OK), (int(limit) - 1, Level.WARNING)):
            objects = sample(ram_limit=f"{mib}Mi", ram_request="2Gi")
            objects[1]["spec"]["template"]["metadata"]["annotations"] = {"tranche.dev/model": model}
            [ram] = by_check(run_checks(facts(objects)), "ram_limit")
            assert ram.level is level, (model, mib, ram)
