"""Why a pod is where it is, in the tenant's words, with the next step (pure, dependency-free).

`classify(pod, project)` turns what Kubernetes knows about one pod (phase, scheduling condition,
container states, its recent events) and about its project (GPU quota per product and which pods
hold it, CPU/RAM quota status, whether the organization is suspended) into a `Verdict`: a reason
class, a sentence saying what happened and why, and what to do. `classify_refusal(...)` does the
same for a workload (Deployment, Job) whose pods could not be created at all (`FailedCreate`), so
no pod exists to look at.

The difference the product turns on is said plainly: *over quota* (the plan does not allow one
more slice) versus *capacity busy* (the plan allows it, but every compatible GPU is full: quota is
an entitlement, not a reservation).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# What the live page stores of a verdict (portal.cluster.models.PodState: words, next_step).
# A cluster message is quoted whole when the sentence fits; only a longer one is shortened, at a
# word, marked "…": never cut mid-word, and the page wraps it.
WORDS_CHARS = 600
NEXT_STEP_CHARS = 300


def shorten(text: str, limit: int) -> str:
    """`text` within `limit` characters, cut at a word boundary with "…" (never mid-word unless
    a single word is longer than the limit)."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"


def _quoted(before: str, message: str, after: str) -> str:
    """before + message + after within WORDS_CHARS, the message shortened only if it must."""
    return before + shorten(message, WORDS_CHARS - len(before) - len(after)) + after


# Reason classes (stable identifiers: tests, CSS and support search use them).
RUNNING = "Running"
SUCCEEDED = "Succeeded"
STARTING = "Starting"
GPU_QUOTA = "OverGPUQuota"
CAPACITY_BUSY = "CapacityBusy"
CPU_QUOTA = "CPUQuotaExhausted"
MEMORY_QUOTA = "MemoryQuotaExhausted"
POD_QUOTA = "PodQuotaExhausted"
ADMISSION = "RefusedByAdmission"
OOM_KILLED = "OOMKilled"
CRASH_LOOP = "CrashLoop"
IMAGE_PULL = "ImagePullError"
SUSPENDED = "OrganizationSuspended"
UNSCHEDULABLE = "Unschedulable"
FAILED = "Failed"

DEVICE_QUOTA_SUFFIX = ".deviceclass.resource.k8s.io/devices"
QUOTA_FREE_SLICE = "quota is an entitlement, not a reservation"
_QUOTA_RE = re.compile(
    r"exceeded quota: [^,]+, requested: (?P<req>[^:]+?), used: (?P<used>[^:]+?), "
    r"limited: (?P<lim>[^:]+?)(?:$|[\"'\]}])"
)
_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9}


@dataclass(frozen=True)
class Verdict:
    """A reason class, what happened and why (tenant's words), and the next step."""

    reason: str
    words: str
    next_step: str = ""


@dataclass(frozen=True)
class ContainerFacts:
    """One container's state as the kubelet reports it (`status.containerStatuses[]`)."""

    name: str
    waiting_reason: str = ""
    waiting_message: str = ""
    terminated_reason: str = ""
    terminated_exit_code: int | None = None
    last_terminated_reason: str = ""
    last_exit_code: int | None = None
    restart_count: int = 0
    memory_limit: str = ""  # from the pod spec's resources.limits.memory


@dataclass(frozen=True)
class PodFacts:
    """What the cluster says about one pod."""

    name: str
    phase: str = "Pending"
    unschedulable_message: str = ""  # PodScheduled=False message
    containers: tuple[ContainerFacts, ...] = ()
    gpu_classes: tuple[str, ...] = ()  # DeviceClasses of its claim templates
    unclaimed_classes: tuple[str, ...] = ()  # ... whose claim could not be made yet
    events: tuple[tuple[str, str], ...] = ()  # (reason, message) of its recent Warning events
    # (time as the cluster wrote it, reason, message) of the same events, oldest first: the
    # live page's timeline (the classifier needs no times)
    timeline: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class ProjectFacts:
    """What the portal and the project's ResourceQuota say about the project."""

    suspended: bool = False
    suspension_reason: str = ""
    products: dict[str, str] = field(default_factory=dict)  # DeviceClass -> product name
    gpu_quota: dict[str, int] = field(default_factory=dict)  # DeviceClass -> slices entitled
    gpu_holders: dict[str, tuple[str, ...]] = field(default_factory=dict)  # class -> pod names
    cpu_quota_millicores: int | None = None
    cpu_used_millicores: int | None = None
    memory_quota_mib: int | None = None
    memory_used_mib: int | None = None


def parse_quantity(text: str) -> float:
    """A Kubernetes quantity (`7500m`, `512Mi`, `2`, `1G`) as a number of base units."""
    text = text.strip()
    if text.endswith("m"):
        return float(text[:-1]) / 1000
    for suffix, factor in _UNITS.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


def millicores(text: str) -> int:
    return round(parse_quantity(text) * 1000)


def mebibytes(text: str) -> int:
    return round(parse_quantity(text) / 2**20)


def _pairs(text: str) -> dict[str, str]:
    out = {}
    for part in text.split(","):
        key, _, value = part.strip().partition("=")
        if key and value:
            out[key] = value
    return out


def parse_exceeded_quota(message: str) -> list[tuple[str, str, str, str]]:
    """From the API server's "exceeded quota" message: (resource, requested, used, limited)."""
    found = _QUOTA_RE.search(message)
    if not found:
        return []
    req, used, lim = (_pairs(found.group(g)) for g in ("req", "used", "lim"))
    return [(key, req.get(key, "?"), used.get(key, "?"), lim[key]) for key in lim]


def _product(project: ProjectFacts, device_class: str) -> str:
    return project.products.get(device_class, device_class)


def _gpu_quota_verdict(device_class: str, limited: str, project: ProjectFacts) -> Verdict:
    name = _product(project, device_class)
    holders = project.gpu_holders.get(device_class, ())
    held = f", held by {_names(holders)}" if holders else ""
    return Verdict(
        GPU_QUOTA,
        f"Over GPU quota: your plan allows {limited} x {name}{held}.",
        f"Free one (delete a pod that holds a {name}) or resize the plan on the quota page.",
    )


def _names(pods: tuple[str, ...] | list[str]) -> str:
    pods = sorted(pods)
    shown = ", ".join(pods[:5])
    return shown + (f" and {len(pods) - 5} more" if len(pods) > 5 else "")


def quota_verdict(message: str, project: ProjectFacts) -> Verdict | None:
    """The verdict of an "exceeded quota" refusal, or None when `message` is not one."""
    for key, requested, used, limited in parse_exceeded_quota(message):
        if key.endswith(DEVICE_QUOTA_SUFFIX):
            return _gpu_quota_verdict(key[: -len(DEVICE_QUOTA_SUFFIX)], limited, project)
        if key.endswith("cpu"):
            want, have, cap = millicores(requested), millicores(used), millicores(limited)
            return Verdict(
                CPU_QUOTA,
                f"CPU quota exhausted: the pod asks for {want} m CPU, the project already uses "
                f"{have} m of {cap} m (headroom {max(0, cap - have)} m).",
                "Lower the pod's CPU request, delete pods you no longer need, or ask for a "
                "larger CPU quota.",
            )
        if key.endswith("memory"):
            want, have, cap = mebibytes(requested), mebibytes(used), mebibytes(limited)
            return Verdict(
                MEMORY_QUOTA,
                f"Memory quota exhausted: the pod asks for {want} MiB RAM, the project already "
                f"uses {have} MiB of {cap} MiB (headroom {max(0, cap - have)} MiB).",
                "Lower the pod's memory request, delete pods you no longer need, or ask for a "
                "larger memory quota.",
            )
        if key == "pods":
            return Verdict(
                POD_QUOTA,
                f"Pod quota exhausted: the project already runs {used} of {limited} pods.",
                "Delete pods you no longer need.",
            )
    return None


def _admission_verdict(message: str) -> Verdict | None:
    lowered = message.lower()
    if not ("denied request" in lowered or "admission" in lowered or "forbidden" in lowered):
        return None
    detail = message
    for marker in ("denied request:", "is forbidden:"):
        if marker in message:
            detail = message.split(marker, 1)[1].strip()
            break
    if "gpu" in lowered:
        step = (
            "Change the manifest as the message says: GPUs come only from this project's "
            "slice claim templates (see the Manifest link on the quota page), never from "
            "nvidia.com/gpu or your own claims."
        )
    else:
        step = "Change the manifest as the message says and apply it again."
    return Verdict(
        ADMISSION, _quoted("Refused by the cluster's admission rules: ", detail, ""), step
    )


def classify_refusal(message: str, project: ProjectFacts) -> Verdict:
    """A workload could not create its pod (`FailedCreate` event): quota or admission."""
    if project.suspended:
        return _suspended(project)
    return (
        quota_verdict(message, project)
        or _admission_verdict(message)
        or Verdict(
            ADMISSION, _quoted("The pod could not be created: ", message, ""), "Fix the manifest."
        )
    )


def _suspended(project: ProjectFacts) -> Verdict:
    why = f" ({project.suspension_reason})" if project.suspension_reason else ""
    return Verdict(
        SUSPENDED,
        f"Your organization is suspended{why}: its GPU quota is 0, so no pod can start.",
        "Contact billing to resume the organization; pods start again once it is resumed.",
    )


def _container_verdict(pod: PodFacts) -> Verdict | None:
    for c in pod.containers:
        oom = c.terminated_reason == "OOMKilled" or c.last_terminated_reason == "OOMKilled"
        if oom:
            limit = f" of {c.memory_limit}" if c.memory_limit else ""
            return Verdict(
                OOM_KILLED,
                f"Container {c.name} was killed for using more than its RAM limit{limit} "
                "(OOMKilled, exit code 137). This is the container's host memory, separate "
                "from the GPU slice's memory.",
                "Raise resources.limits.memory of the container (within the project's memory "
                "quota) or make the program use less host RAM.",
            )
    for c in pod.containers:
        if c.waiting_reason in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName"):
            before = f"The image of container {c.name} cannot be pulled ({c.waiting_reason}"
            return Verdict(
                IMAGE_PULL,
                _quoted(f"{before}: ", c.waiting_message, ").")
                if c.waiting_message
                else f"{before}).",
                "Check the image name and tag, and that the registry is reachable "
                "(add an imagePullSecret for a private registry).",
            )
        if c.waiting_reason == "CrashLoopBackOff":
            return Verdict(
                CRASH_LOOP,
                f"Container {c.name} keeps exiting (restarted {c.restart_count} times"
                + (f", last exit code {c.last_exit_code}" if c.last_exit_code is not None else "")
                + "); Kubernetes waits longer before each restart.",
                "Read its output with `kubectl logs --previous` and fix the program or its "
                "arguments.",
            )
    return None


def _pending_verdict(pod: PodFacts, project: ProjectFacts) -> Verdict | None:
    # A pod that exists passed its own quota check; a quota event on it is about a claim it
    # could not get made, so it speaks only while such a claim is still missing. Once every
    # claim exists (a replacement pod whose claim waited for the lost pod's claim to go), the
    # event is history and the scheduler's current condition says why it waits.
    for _reason, message in reversed(pod.events if pod.unclaimed_classes else ()):
        verdict = quota_verdict(message, project)
        if verdict:
            return verdict
    for device_class in pod.gpu_classes:
        entitled = project.gpu_quota.get(device_class)
        if entitled == 0:
            return _gpu_quota_verdict(device_class, "0", project)
    message = pod.unschedulable_message
    if message and ("claim" in message or "device" in message) and pod.gpu_classes:
        names = ", ".join(sorted({_product(project, c) for c in pod.gpu_classes}))
        return Verdict(
            CAPACITY_BUSY,
            f"Capacity busy: every compatible GPU ({names}) is full right now. Your "
            f"{QUOTA_FREE_SLICE}; the pod starts by itself when a slice frees up.",
            "Wait, or free a slice you hold elsewhere. Nothing is wrong with the pod.",
        )
    if message:
        return Verdict(
            UNSCHEDULABLE,
            _quoted("No node can run the pod yet: ", message, ""),
            "Check the pod's requests and node selectors.",
        )
    return None


def classify(pod: PodFacts, project: ProjectFacts) -> Verdict:
    """The reason class, words and next step of one pod."""
    verdict = _container_verdict(pod)
    if verdict:
        return verdict
    if pod.phase == "Pending":
        if project.suspended:
            return _suspended(project)
        return _pending_verdict(pod, project) or Verdict(
            STARTING, "Starting: the pod is scheduled and its containers are being set up."
        )
    if pod.phase == "Running":
        return Verdict(RUNNING, "Running.")
    if pod.phase == "Succeeded":
        return Verdict(SUCCEEDED, "Finished successfully.")
    codes = [c.terminated_exit_code for c in pod.containers if c.terminated_exit_code is not None]
    code = f" (exit code {codes[0]})" if codes else ""
    return Verdict(
        FAILED,
        f"The pod failed{code}.",
        "Read its output with `kubectl logs` and fix the program or its arguments.",
    )
