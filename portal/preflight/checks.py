"""Pure pre-flight checks over gathered facts: will it be admitted, start, and run its GPU code?

Each check takes `Facts` and returns verdicts; none reads the cluster, the registry or the
database, so the whole table is unit-tested (tests/unit/portal/test_preflight_checks.py).
The lints (RAM, context, volume, tag) live in `lints.py`; `run_checks` runs both.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from portal.preflight import lints
from portal.preflight.facts import Facts, ImageFacts, ProductFacts
from portal.preflight.manifest import (
    ManifestError,
    containers,
    describe,
    parse_quantity,
    pod_templates,
)
from portal.preflight.verdicts import Verdict, ok, warning, will_fail

QUOTA_EXPLAINED = "quota is an entitlement, not a reservation"


def device_quota_key(device_class: str) -> str:
    return f"{device_class}.deviceclass.resource.k8s.io/devices"


@dataclass(frozen=True)
class Requested:
    """What applying the manifest asks for: slices per DeviceClass, CPU cores, memory bytes."""

    devices: Counter[str]
    cpu: Decimal
    memory: Decimal


def _template_classes(objects: list[dict[str, Any]]) -> dict[str, list[str]]:
    """ResourceClaimTemplates (and claims) in the manifest -> the DeviceClasses they request."""
    out: dict[str, list[str]] = {}
    for obj in objects:
        if obj.get("kind") not in ("ResourceClaimTemplate", "ResourceClaim"):
            continue
        spec = obj.get("spec") or {}
        if obj["kind"] == "ResourceClaimTemplate":
            spec = spec.get("spec") or {}
        requests = ((spec.get("devices") or {}).get("requests")) or []
        classes = [
            str((r.get("exactly") or r).get("deviceClassName", ""))
            for r in requests
            if isinstance(r, dict)
        ]
        out[f"{obj['kind']}/{obj['metadata']['name']}"] = [c for c in classes if c]
    return out


def requested(facts: Facts) -> Requested:
    """Sum of requests over every pod the manifest creates (replicas counted)."""
    by_name = _template_classes(facts.objects)
    devices: Counter[str] = Counter()
    cpu = Decimal(0)
    memory = Decimal(0)
    for pod in pod_templates(facts.objects):
        for ref in pod.spec.get("resourceClaims") or []:
            template = str(ref.get("resourceClaimTemplateName") or "")
            claim = str(ref.get("resourceClaimName") or "")
            if template:
                # The project's own templates are named like their DeviceClass.
                classes = by_name.get(f"ResourceClaimTemplate/{template}", [template])
                for device_class in classes:
                    devices[device_class] += pod.replicas
            elif claim and f"ResourceClaim/{claim}" not in by_name:
                continue  # an existing claim: already counted as held
        for c in containers(pod):
            reqs = ((c.get("resources") or {}).get("requests")) or {}
            try:
                cpu += parse_quantity(reqs.get("cpu", 0)) * pod.replicas
                memory += parse_quantity(reqs.get("memory", 0)) * pod.replicas
            except ManifestError:
                continue  # admission reports the malformed quantity in its own words
    for name, classes in by_name.items():
        if name.startswith("ResourceClaim/"):
            for device_class in classes:
                devices[device_class] += 1
    return Requested(devices, cpu, memory)


def check_gpu_quota(facts: Facts, want: Requested) -> list[Verdict]:
    if facts.quota is None or not want.devices:
        return []
    out = []
    for device_class, count in sorted(want.devices.items()):
        key = device_quota_key(device_class)
        product = facts.products.get(device_class)
        label = product.name if product else device_class
        entitled = int(parse_quantity(facts.quota.hard.get(key, "0")))
        held = int(parse_quantity(facts.quota.used.get(key, "0")))
        figures = {"entitled": entitled, "held": held, "wanted": count}
        if held + count > entitled:
            out.append(
                will_fail(
                    "gpu_quota",
                    label,
                    f"Will never start: over your quota. The manifest asks for {count} slice(s) of "
                    f"{label}; the project is entitled to {entitled} and holds {held} already.",
                    "Order more slices of this product, lower the replicas, or delete a "
                    "workload that holds one.",
                    **figures,
                )
            )
        else:
            out.append(
                ok(
                    "gpu_quota",
                    label,
                    f"Within your quota: {held} held + {count} wanted of {entitled} entitled.",
                    **figures,
                )
            )
    return out


def check_capacity(facts: Facts, want: Requested) -> list[Verdict]:
    if facts.capacity is None:
        return []
    out = []
    for device_class, count in sorted(want.devices.items()):
        product = facts.products.get(device_class)
        label = product.name if product else device_class
        gpus = facts.capacity.compatible_gpus.get(device_class, 0)
        free = facts.capacity.free_slices.get(device_class, 0)
        figures = {"compatible_gpus": gpus, "free_slices": free, "wanted": count}
        if free >= count:
            out.append(ok("capacity", label, f"Starts now: {free} slice(s) free.", **figures))
            continue
        busy = "no GPU of this model is online" if gpus == 0 else f"all {gpus} GPU(s) are full"
        out.append(
            warning(
                "capacity",
                label,
                f"Will wait: capacity busy ({busy}; {free} free, {count} wanted). Your pods stay "
                f"Pending until a slice frees up: {QUOTA_EXPLAINED}.",
                "Apply anyway to queue, or ask your platform team when capacity is added.",
                **figures,
            )
        )
    return out


def check_cpu_memory_quota(facts: Facts, want: Requested) -> list[Verdict]:
    if facts.quota is None:
        return []
    out = []
    for key, asked, unit in (
        ("requests.cpu", want.cpu, "cores"),
        ("requests.memory", want.memory, "bytes"),
    ):
        if key not in facts.quota.hard or asked <= 0:
            continue
        hard = parse_quantity(facts.quota.hard[key])
        used = parse_quantity(facts.quota.used.get(key, "0"))
        room = hard - used
        what = "CPU" if key == "requests.cpu" else "memory"
        shown = _show(asked, unit), _show(room, unit), _show(hard, unit)
        figures = {"requested": shown[0], "headroom": shown[1], "quota": shown[2]}
        if asked > room:
            out.append(
                will_fail(
                    f"{what.lower()}_quota",
                    f"{key} of ResourceQuota {facts.quota.name}",
                    f"Will never start: the manifest requests {shown[0]} of {what}, the "
                    f"{key} quota ({facts.quota.name}) has {shown[1]} left of {shown[2]}.",
                    f"Lower the {what} requests, scale down other workloads, or ask for a "
                    "larger plan.",
                    **figures,
                )
            )
        else:
            out.append(
                ok(f"{what.lower()}_quota", key, f"{shown[0]} of {shown[1]} left.", **figures)
            )
    return out


def _show(value: Decimal, unit: str) -> str:
    if unit == "cores":
        return f"{value.normalize():f} CPU"
    return f"{int(value / 2**20)} MiB"


_POLICY = re.compile(r"ValidatingAdmissionPolicy '([^']+)'.*?denied request: (.*)", re.S)
_QUOTA = re.compile(r"exceeded quota: ([^,]+), requested: ([^,]+), used: ([^,]+), limited: (.*)")


def translate_admission(message: str, status: int) -> tuple[str, str]:
    """The API server's refusal in the product's words, and the fix."""
    if match := _POLICY.search(message):
        return f"Tranche policy {match.group(1)}: {match.group(2)}", (
            "Use the claim template shown on the project's manifest page "
            "(resourceClaimTemplateName: the product's DeviceClass)."
        )
    if match := _QUOTA.search(message):
        return (
            f"Over your quota {match.group(1)}: requested {match.group(2)}, already used "
            f"{match.group(3)}, limit {match.group(4)}.",
            "Order more, or lower the requests.",
        )
    if "violates PodSecurity" in message:
        return f"Pod Security (restricted) refuses it: {message.split(':', 1)[-1].strip()}", (
            "Run as non-root, drop all capabilities, disallow privilege escalation and set "
            "seccompProfile RuntimeDefault, as the sample manifest does."
        )
    if status == 403:
        return f"Your role may not do this in the project: {message}", (
            "Tenants manage workloads, claims, volumes and services; quotas, roles and policies "
            "stay with the platform."
        )
    return message, "Correct the object as the message says and check again."


def check_admission(facts: Facts) -> list[Verdict]:
    out = []
    for result in facts.admission:
        if result.allowed:
            text = "Admitted (server-side dry run)."
            if result.warnings:
                out.append(
                    warning(
                        "admission",
                        result.subject,
                        f"{text} The API server warns: {'; '.join(result.warnings)}",
                        "Address the warnings; later Kubernetes versions may refuse the object.",
                    )
                )
            else:
                out.append(ok("admission", result.subject, text))
            continue
        reason, fix = translate_admission(result.message, result.status)
        out.append(will_fail("admission", result.subject, f"Refused: {reason}", fix))
    return out


def _cc(text: str) -> int:
    major, _, minor = text.partition(".")
    return int(major) * 10 + int(minor or 0)


def gpu_code_runs(image: ImageFacts, cc: int) -> bool:
    """SASS for the same major at or below the GPU's minor, or PTX at or below it to JIT."""
    sass_fits = any(a // 10 == cc // 10 and a <= cc for a in image.sass)
    return sass_fits or any(p <= cc for p in image.ptx)


def _jit(image: ImageFacts, cc: int) -> str:
    """What a start costs when only PTX fits: the driver compiles it before the first kernel."""
    if any(a // 10 == cc // 10 and a <= cc for a in image.sass):
        return ""
    ptx = max(p for p in image.ptx if p <= cc)
    return (
        f" No SASS for sm_{cc}: the driver compiles the PTX (compute_{ptx}) at the first launch "
        "of each container, which delays its first kernel by seconds to minutes; its cache "
        "(~/.nv/ComputeCache, or CUDA_CACHE_PATH) kept on a volume spares later starts that "
        f"wait; an image built with SASS for sm_{cc} never has it."
    )


def _archs(values: tuple[int, ...], prefix: str) -> str:
    return ", ".join(f"{prefix}_{v}" for v in values) or "none"


def check_gpu_code(facts: Facts, product: ProductFacts, image: ImageFacts) -> Verdict:
    cc = _cc(product.compute_capability)
    gpu = f"{product.gpu_name} (compute capability {product.compute_capability})"
    figures = {
        "sass": list(image.sass),
        "ptx": list(image.ptx),
        "gpu_files": len(image.gpu_files),
        "bytes_read": image.bytes_read,
        "compute_capability": product.compute_capability,
    }
    if image.missing:
        return will_fail(
            "image", image.image,
            f"Will fail to pull: {image.error} The node's pull gets the same answer, so the pod "
            "stays in ErrImagePull / ImagePullBackOff.", _MISSING_FIX, **figures,
        )  # fmt: skip
    if image.error:
        return warning(
            "gpu_code", image.image, f"Not checked: {image.error}", _IMAGE_FIX, **figures
        )
    bound = " (the read bound was reached: files past it were not checked)" * image.bound_reached
    if not image.gpu_files:
        # A CPU-only image on a GPU slice: it runs, but on the CPU, while the slice is billed.
        return warning(
            "gpu_code", image.image,
            f"No GPU code in this image: none of its files carries CUDA kernels (SASS or PTX)"
            f"{bound}, so on a {gpu} it would run on the CPU only while the slice is billed.",
            "Nothing to do if the image downloads its GPU code at runtime; otherwise use an "
            "image built with CUDA (e.g. a framework's CUDA build).", **figures,
        )  # fmt: skip
    if gpu_code_runs(image, cc):
        return ok(
            "gpu_code", image.image,
            f"GPU code runs on {gpu}: SASS {_archs(image.sass, 'sm')}; PTX "
            f"{_archs(image.ptx, 'compute')}{bound}.{_jit(image, cc)}", **figures,
        )  # fmt: skip
    oldest = min([a for a in image.sass if a >= cc] + list(image.ptx) or [0])
    return will_fail(
        "gpu_code",
        image.image,
        f"This image's GPU kernels need sm_{oldest} or newer; on a {gpu} it will run on CPU or "
        f"fail. It carries SASS {_archs(image.sass, 'sm')} and PTX {_archs(image.ptx, 'compute')}"
        f"{bound}.",
        f"Pin an image version built for sm_{cc} (CUDA 12 or older for Volta), or choose a "
        "product on a newer GPU.",
        **figures,
    )


_IMAGE_FIX = "Check the image name and that the platform's pull secret can read it."
_MISSING_FIX = (
    "Check the image's name and tag against its registry (a typo, or a tag not pushed yet: "
    "the registry's page or `docker manifest inspect IMAGE` lists what exists), or push the "
    "image under this exact name and tag, then check again."
)


def image_product_pairs(facts: Facts) -> list[tuple[str, ProductFacts]]:
    """(image, product) for every container whose pod claims a slice of a known product."""
    want_by_template = _template_classes(facts.objects)
    pairs = []
    for pod in pod_templates(facts.objects):
        classes = set()
        for ref in pod.spec.get("resourceClaims") or []:
            template = str(ref.get("resourceClaimTemplateName") or "")
            classes.update(want_by_template.get(f"ResourceClaimTemplate/{template}", [template]))
        for device_class in sorted(classes):
            product = facts.products.get(device_class)
            for c in containers(pod):
                if product and isinstance(c.get("image"), str):
                    pairs.append((c["image"], product))
    return list(dict.fromkeys(pairs))


def run_checks(facts: Facts) -> list[Verdict]:
    """Every verdict for the manifest, in the order the page shows them."""
    want = requested(facts)
    verdicts = check_admission(facts)
    verdicts += check_gpu_quota(facts, want)
    verdicts += check_cpu_memory_quota(facts, want)
    verdicts += check_capacity(facts, want)
    for image, product in image_product_pairs(facts):
        if image in facts.images:
            verdicts.append(check_gpu_code(facts, product, facts.images[image]))
    verdicts += lints.run_lints(facts)
    return verdicts


__all__ = ["describe", "requested", "run_checks"]
