"""Lints from what cost tenants time before (RAM, context, volume, tag), each citing its figure.

1. Container RAM limit vs the model it loads: Ollama and vLLM read the weights through host
   memory, so a 512 MiB limit with a 4 GiB model is OOMKilled (exit 137) while loading.
2. Context length vs the slice: the KV cache for the context must fit next to the weights.
   KV bytes = 2 (K and V) x layers x KV heads x head dim x 2 bytes (fp16) x tokens.
3. The model directory on a bound PersistentVolumeClaim, or every restart downloads it again.
4. The image tag pinned (not `latest`): Ollama 0.24 is the last release that runs on CC 7.0.
Pure: facts in, verdicts out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from portal.catalog.llm_models import KNOWN_MODELS, recommended_ram_limit_mib
from portal.preflight.facts import Facts, ProductFacts
from portal.preflight.manifest import (
    ManifestError,
    PodTemplate,
    containers,
    mib,
    parse_quantity,
    pod_templates,
)
from portal.preflight.verdicts import Verdict, ok, warning
from tranche.agent_protocol import UNMEASURED_CONTEXT_FLOOR_BYTES
from tranche.names import ANNOTATION_MODEL, ANNOTATION_MODEL_SIZE

OLLAMA_DEFAULT_CONTEXT = 4096


def _env(container: dict[str, Any], name: str) -> str | None:
    for item in container.get("env") or []:
        if isinstance(item, dict) and item.get("name") == name and "value" in item:
            return str(item["value"])
    return None


def _arg(container: dict[str, Any], flag: str) -> str | None:
    words = [str(w) for w in (container.get("command") or []) + (container.get("args") or [])]
    for i, word in enumerate(words):
        if word == flag and i + 1 < len(words):
            return words[i + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return None


def _model(pod: PodTemplate, container: dict[str, Any]) -> str:
    return pod.annotations.get(ANNOTATION_MODEL) or _arg(container, "--model") or ""


def _model_mib(pod: PodTemplate, container: dict[str, Any]) -> int | None:
    size = pod.annotations.get(ANNOTATION_MODEL_SIZE)
    if size:
        try:
            return mib(parse_quantity(size))
        except ManifestError:
            return None
    known = KNOWN_MODELS.get(_model(pod, container))
    return known.weights_mib if known else None


# Below this a model server cannot load even a small model (its runtime and the first weights
# pass through the container's memory); used when the model is not known.
INFERENCE_RAM_FLOOR_MIB = 2048
INFERENCE_SERVERS = ("ollama", "vllm", "text-generation-inference", "llama.cpp", "llama-cpp")


def _ram_floor(subject: str, limit_mib: int) -> Verdict | None:
    if limit_mib >= INFERENCE_RAM_FLOOR_MIB:
        return None
    return warning(
        "ram_limit", subject,
        f"The container's RAM limit ({limit_mib} MiB) is below {INFERENCE_RAM_FLOOR_MIB} MiB, "
        "too little for a model server to load a model: it is killed for memory (OOMKilled, "
        "exit code 137) while loading. The GPU slice is not the container's RAM.",
        "Set resources.limits.memory to the model's size plus 1 GiB, or annotate the pod with "
        f"{ANNOTATION_MODEL_SIZE} so pre-flight can check it.",
        ram_limit_mib=limit_mib, floor_mib=INFERENCE_RAM_FLOOR_MIB,
    )  # fmt: skip


def lint_ram(pod: PodTemplate, c: dict[str, Any]) -> Verdict | None:  # noqa: PLR0911 (one per verdict)
    limit = ((c.get("resources") or {}).get("limits") or {}).get("memory")
    model_mib = _model_mib(pod, c)
    if limit is None:
        return None
    try:
        limit_mib = mib(parse_quantity(limit))
    except ManifestError:
        return None
    if model_mib is None:
        image = str(c.get("image", "")).lower()
        if any(server in image for server in INFERENCE_SERVERS):
            return _ram_floor(f"{pod.owner} container {c.get('name')}", limit_mib)
        return None
    subject = f"{pod.owner} container {c.get('name')}"
    figures = {"ram_limit_mib": limit_mib, "model_mib": model_mib}
    if limit_mib < model_mib:
        return warning(
            "ram_limit", subject,
            f"The container's RAM limit ({limit_mib} MiB) is below the model it loads "
            f"({model_mib} MiB): the model is read through the container's memory on its way to "
            "the GPU, so the server is killed for memory (OOMKilled, exit code 137) while "
            "loading. The GPU slice is not the container's RAM.",
            f"Set resources.limits.memory to at least {recommended_ram_limit_mib(model_mib)} MiB "
            "(the model plus 1 GiB for the server).", **figures,
        )  # fmt: skip
    need = recommended_ram_limit_mib(model_mib)
    if limit_mib < need:
        return warning(
            "ram_limit", subject,
            f"The container's RAM limit ({limit_mib} MiB) holds the {model_mib} MiB model but "
            f"leaves less than {need - model_mib} MiB for the server itself: it is likely killed "
            "for memory (OOMKilled, exit code 137) while loading.",
            f"Set resources.limits.memory to at least {need} MiB "
            "(the model plus 1 GiB for the server).", **figures,
        )  # fmt: skip
    return ok(
        "ram_limit",
        subject,
        f"RAM limit {limit_mib} MiB holds the {model_mib} MiB model and the server.",
        **figures,
    )


def _context(c: dict[str, Any]) -> tuple[str, int | None]:
    for source, value in (
        ("OLLAMA_CONTEXT_LENGTH", _env(c, "OLLAMA_CONTEXT_LENGTH")),
        ("--max-model-len", _arg(c, "--max-model-len")),
    ):
        if value is not None:
            return source, int(value) if value.isdigit() else None
    return "", None


def context_charge(product: ProductFacts) -> tuple[int, str]:
    """MiB one CUDA context takes on the product's GPU, and where the figure comes from: the
    node agents' measurement of that model, else what the core charges an unmeasured GPU."""
    if product.context_mib:
        return product.context_mib, f"as node agents measured on a {product.gpu_name}"
    unmeasured = UNMEASURED_CONTEXT_FLOOR_BYTES // 2**20
    return unmeasured, "not yet measured on this GPU model: what the core charges then"


def lint_context(
    pod: PodTemplate, c: dict[str, Any], product: ProductFacts | None
) -> Verdict | None:
    source, tokens = _context(c)
    subject = f"{pod.owner} container {c.get('name')}"
    image = str(c.get("image", ""))
    if not source and "ollama" in image:
        return warning(
            "context_length", subject,
            f"OLLAMA_CONTEXT_LENGTH is not set: Ollama keeps {OLLAMA_DEFAULT_CONTEXT} tokens and "
            "silently cuts longer prompts (an agent's prompt with its tool descriptions is often "
            "14,000 or more).",
            "Set OLLAMA_CONTEXT_LENGTH to what your prompts need, e.g. 16384.",
            context_tokens=OLLAMA_DEFAULT_CONTEXT,
        )  # fmt: skip
    known = KNOWN_MODELS.get(_model(pod, c))
    if tokens is None or known is None or product is None:
        return None
    slice_mib = product.memory_mib
    context_mib, context_from = context_charge(product)
    weights = _model_mib(pod, c) or known.weights_mib
    kv_mib = known.kv_bytes_per_token * tokens / 2**20
    need = weights + kv_mib + context_mib
    fit_tokens = int(max(0, slice_mib - weights - context_mib) * 2**20 // known.kv_bytes_per_token)
    formula = (
        f"KV cache = 2 x {known.layers} layers x {known.kv_heads} KV heads x {known.head_dim} "
        f"head dim x 2 bytes x {tokens} tokens = {kv_mib:.0f} MiB; {weights} MiB weights + "
        f"{kv_mib:.0f} MiB KV + {context_mib} MiB CUDA context ({context_from}) = "
        f"{need:.0f} MiB of a {slice_mib} MiB slice"
    )
    figures = {
        "context_tokens": tokens, "kv_cache_mib": round(kv_mib), "weights_mib": weights,
        "context_mib": context_mib, "needed_mib": round(need), "slice_mib": slice_mib,
        "fits_tokens": fit_tokens, "formula": formula,
    }  # fmt: skip
    if need > slice_mib:
        return warning(
            "context_length", subject,
            f"The context of {tokens} tokens ({source}) does not fit the slice next to the "
            f"weights: {formula}. The server will spill to CPU or refuse to load.",
            f"Lower {source} to at most {fit_tokens}, or choose a larger slice.", **figures,
        )  # fmt: skip
    return ok("context_length", subject, f"Fits: {formula}.", **figures)


def _product(facts: Facts, pod: PodTemplate) -> ProductFacts | None:
    for ref in pod.spec.get("resourceClaims") or []:
        product = facts.products.get(str(ref.get("resourceClaimTemplateName") or ""))
        if product:
            return product
    return None


def _run_as_user(pod: PodTemplate, c: dict[str, Any]) -> int | None:
    """The uid the container runs as: its own securityContext, else the pod's (None: the
    image's USER, root for the servers' images)."""
    for context in (c.get("securityContext"), pod.spec.get("securityContext")):
        uid = (context or {}).get("runAsUser") if isinstance(context, dict) else None
        if isinstance(uid, int) and not isinstance(uid, bool):
            return uid
    return None


# Where each server keeps its models: the variable that names the directory, else this path
# under $HOME (Ollama: envconfig.Models(); Hugging Face: HF_HOME, else ~/.cache/huggingface).
MODEL_DIRS = {
    "ollama": ("OLLAMA_MODELS", ".ollama/models"),
    "vllm": ("HF_HOME", ".cache/huggingface"),
}


@dataclass(frozen=True)
class ModelDir:
    path: str | None  # None: it depends on the image's /etc/passwd, which pre-flight cannot know
    how: str  # how it was resolved, in the tenant's words


def model_directory(pod: PodTemplate, c: dict[str, Any]) -> ModelDir | None:
    """The model directory as the server resolves it: OLLAMA_MODELS (HF_HOME), else $HOME's
    default path, HOME being the container's variable, else the home of the uid it runs as:
    /root for root; for another uid the image's /etc/passwd entry, or / when there is none
    (runc's fallback), so never /root. None when the image is not a known model server."""
    image = str(c.get("image", ""))
    server = next((name for name in MODEL_DIRS if name in image), None)
    variables = [name for name, _ in MODEL_DIRS.values()]
    if (named := next((v for v in variables if _env(c, v)), None)) is not None:
        return ModelDir(_env(c, named), f"{named} names it")
    if server is None:
        return None
    variable, under_home = MODEL_DIRS[server]
    home = _env(c, "HOME")
    if home:
        return ModelDir(f"{home.rstrip('/')}/{under_home}", f"{variable} is not set; HOME={home}")
    uid = _run_as_user(pod, c)
    if uid in (None, 0):
        return ModelDir(f"/root/{under_home}", f"{variable} and HOME are not set; root's home")
    return ModelDir(
        None,
        f"{variable} and HOME are not set and it runs as uid {uid}: the server keeps models in "
        f"$HOME/{under_home}, HOME being uid {uid}'s home in the image's /etc/passwd, or / when "
        "it has none (never /root)",
    )


def _mounted(path: str, mount: str) -> bool:
    mount = mount.rstrip("/") or "/"
    return path == mount or path.startswith(mount if mount == "/" else mount + "/")


def lint_volume(facts: Facts, pod: PodTemplate) -> list[Verdict]:
    out = []
    claims = {
        v.get("name"): (v.get("persistentVolumeClaim") or {}).get("claimName")
        for v in pod.spec.get("volumes") or []
        if isinstance(v, dict)
    }
    in_manifest = {
        o["metadata"]["name"] for o in facts.objects if o["kind"] == "PersistentVolumeClaim"
    }
    for c in containers(pod):
        found = model_directory(pod, c)
        if found is None:
            continue
        subject = f"{pod.owner} container {c.get('name')}"
        if found.path is None:
            out.append(warning(
                "model_volume", subject,
                f"Pre-flight cannot tell where the models go: {found.how}. If that is not on a "
                "persistent volume, every restart downloads the model again.",
                "Set OLLAMA_MODELS (or HF_HOME) to a path on a mounted PersistentVolumeClaim, "
                "or HOME to the volume's mount path.",
            ))  # fmt: skip
            continue
        path = found.path
        mounts = [m for m in c.get("volumeMounts") or [] if isinstance(m, dict)]
        mount = max(
            (m for m in mounts if _mounted(path, str(m.get("mountPath", "\0")))),
            key=lambda m: len(str(m.get("mountPath", ""))), default=None,
        )  # fmt: skip
        claim = claims.get(mount.get("name")) if mount else None
        if not claim:
            out.append(warning(
                "model_volume", subject,
                f"The model directory {path} ({found.how}) is not on a persistent volume: every "
                "restart, even for an environment change, downloads the model again.",
                f"Mount a PersistentVolumeClaim at {path} (the sample manifest does).",
            ))  # fmt: skip
            continue
        phase = facts.volume_claims.get(claim, "")
        if phase == "Bound" or (not phase and claim in in_manifest):
            out.append(ok(
                "model_volume", subject, f"Models in {path} ({found.how}) live on claim {claim}."
            ))  # fmt: skip
        else:
            out.append(warning(
                "model_volume", subject,
                f"The claim {claim} holding {path} is {phase or 'missing'}: the pod waits for it.",
                f"Create the PersistentVolumeClaim {claim} in the manifest or the project.",
            ))  # fmt: skip
    return out


def lint_tag(pod: PodTemplate, c: dict[str, Any]) -> Verdict | None:
    image = str(c.get("image", ""))
    if not image:
        return None
    subject = f"{pod.owner} container {c.get('name')}"
    last = image.rsplit("/", 1)[-1]
    if "@sha256:" in image or (":" in last and not last.endswith(":latest")):
        return ok("image_tag", subject, f"{image} is pinned.")
    return warning(
        "image_tag", subject,
        f"{image} is not pinned: `latest` moves, and a newer release may drop your GPU "
        "(Ollama after 0.24 dropped compute capability 7.0, so a V100 fell back to CPU).",
        "Pin a version that this pre-flight found compatible, e.g. ollama/ollama:0.24.0.",
    )  # fmt: skip


def run_lints(facts: Facts) -> list[Verdict]:
    out: list[Verdict] = []
    for pod in pod_templates(facts.objects):
        product = _product(facts, pod)
        for c in containers(pod):
            for found in (lint_tag(pod, c), lint_ram(pod, c), lint_context(pod, c, product)):
                if found is not None:
                    out.append(found)
        out += lint_volume(facts, pod)
    return out
