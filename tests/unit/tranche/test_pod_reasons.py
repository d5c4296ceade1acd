"""The pod classifier as a table: facts the cluster reports → reason class, words, next step."""

from __future__ import annotations

import pytest

from tranche import pod_reasons as r
from tranche.pod_reasons import ContainerFacts, PodFacts, ProjectFacts

CLS = "tranche-v100-8g"
PROJECT = ProjectFacts(
    products={CLS: "V100 8 GiB slice"},
    gpu_quota={CLS: 2},
    gpu_holders={CLS: ("train-a", "train-b")},
    cpu_quota_millicores=8000,
    cpu_used_millicores=7500,
)
CPU_REFUSAL = (
    'Error creating: pods "web-7d9-x" is forbidden: exceeded quota: tranche-quota, '
    "requested: requests.cpu=1, used: requests.cpu=7500m, limited: requests.cpu=8"
)
MEM_REFUSAL = (
    'pods "p" is forbidden: exceeded quota: tranche-quota, requested: requests.memory=2Gi, '
    "used: requests.memory=31Gi, limited: requests.memory=32Gi"
)
GPU_REFUSAL = (
    "PodResourceClaim gpu: resource claim creation failed: resourceclaims.resource.k8s.io "
    '"third-gpu-x" is forbidden: exceeded quota: tranche-quota, requested: '
    f"{CLS}.deviceclass.resource.k8s.io/devices=1, used: "
    f"{CLS}.deviceclass.resource.k8s.io/devices=2, limited: "
    f"{CLS}.deviceclass.resource.k8s.io/devices=2"
)
ADMISSION_REFUSAL = (
    'Error creating: pods "gpu-5f-x" is forbidden: ValidatingAdmissionPolicy '
    "'tranche-no-extended-gpu' with binding 'tranche-no-extended-gpu' denied request: "
    "GPUs come only from this project's slice claim templates"
)
FULL = "0/2 nodes are available: 2 cannot allocate all claims. preemption: 0/2 nodes are available"


def pod(**kw) -> PodFacts:
    return PodFacts(name="p", **kw)


CASES = [
    (
        "cpu quota (FailedCreate of a Deployment)",
        None,
        CPU_REFUSAL,
        PROJECT,
        r.CPU_QUOTA,
        ["1000 m", "7500 m of 8000 m", "headroom 500 m"],
    ),
    (
        "memory quota",
        None,
        MEM_REFUSAL,
        PROJECT,
        r.MEMORY_QUOTA,
        ["2048 MiB", "31744 MiB of 32768 MiB", "headroom 1024 MiB"],
    ),
    (
        "admission refusal (nvidia.com/gpu)",
        None,
        ADMISSION_REFUSAL,
        PROJECT,
        r.ADMISSION,
        ["admission", "claim templates"],
    ),
    (
        "third claim over a quota of 2",
        pod(
            gpu_classes=(CLS,),
            unclaimed_classes=(CLS,),
            events=(("FailedResourceClaimCreation", GPU_REFUSAL),),
        ),
        None,
        PROJECT,
        r.GPU_QUOTA,
        ["allows 2 x V100 8 GiB slice", "held by train-a, train-b", "resize"],
    ),
    (
        # A lost node's replacement pod: its claim waited for the old pod's claim to go (a quota
        # refusal, still among its events), was made since, and every GPU is full.
        "quota refusal in the past, claim made since, every GPU full",
        pod(
            gpu_classes=(CLS,),
            unschedulable_message=FULL,
            events=(("FailedResourceClaimCreation", GPU_REFUSAL),),
        ),
        None,
        PROJECT,
        r.CAPACITY_BUSY,
        ["Capacity busy", "starts by itself"],
    ),
    (
        "every GPU full",
        pod(gpu_classes=(CLS,), unschedulable_message=FULL),
        None,
        PROJECT,
        r.CAPACITY_BUSY,
        ["every compatible GPU", "entitlement, not a reservation", "frees up"],
    ),
    (
        "OOMKilled after a restart",
        pod(
            phase="Running",
            containers=(
                ContainerFacts(
                    "main",
                    last_terminated_reason="OOMKilled",
                    last_exit_code=137,
                    memory_limit="512Mi",
                ),
            ),
        ),
        None,
        PROJECT,
        r.OOM_KILLED,
        ["RAM limit of 512Mi", "exit code 137", "separate from the GPU slice"],
    ),
    (
        "OOMKilled, never restarted",
        pod(
            phase="Failed",
            containers=(
                ContainerFacts("main", terminated_reason="OOMKilled", terminated_exit_code=137),
            ),
        ),
        None,
        PROJECT,
        r.OOM_KILLED,
        ["OOMKilled"],
    ),
    (
        "bad image",
        pod(
            containers=(
                ContainerFacts(
                    "main", waiting_reason="ImagePullBackOff", waiting_message="no such tag"
                ),
            )
        ),
        None,
        PROJECT,
        r.IMAGE_PULL,
        ["cannot be pulled", "no such tag", "image name"],
    ),
    (
        "crash loop",
        pod(
            phase="Running",
            containers=(
                ContainerFacts(
                    "main", waiting_reason="CrashLoopBackOff", restart_count=4, last_exit_code=1
                ),
            ),
        ),
        None,
        PROJECT,
        r.CRASH_LOOP,
        ["restarted 4 times", "exit code 1", "--previous"],
    ),
    (
        "suspended organization",
        pod(gpu_classes=(CLS,), unschedulable_message=FULL),
        None,
        ProjectFacts(suspended=True, suspension_reason="unpaid invoice"),
        r.SUSPENDED,
        ["suspended (unpaid invoice)", "billing"],
    ),
    (
        "suspended: workload refusal too",
        None,
        GPU_REFUSAL,
        ProjectFacts(suspended=True),
        r.SUSPENDED,
        ["suspended"],
    ),
    ("running", pod(phase="Running"), None, PROJECT, r.RUNNING, ["Running"]),
    (
        "failed with a code",
        pod(
            phase="Failed",
            containers=(ContainerFacts("m", terminated_reason="Error", terminated_exit_code=3),),
        ),
        None,
        PROJECT,
        r.FAILED,
        ["exit code 3"],
    ),
    (
        "unschedulable for another reason",
        pod(unschedulable_message="0/2 nodes are available: 2 node(s) had untolerated taint"),
        None,
        PROJECT,
        r.UNSCHEDULABLE,
        ["untolerated taint"],
    ),
    ("scheduled, starting", pod(), None, PROJECT, r.STARTING, ["Starting"]),
]


@pytest.mark.parametrize(
    ("facts", "refusal", "project", "reason", "words"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_classification(facts, refusal, project, reason, words):
    verdict = r.classify(facts, project) if facts else r.classify_refusal(refusal, project)
    assert verdict.reason == reason
    text = verdict.words + " " + verdict.next_step
    for expected in words:
        assert expected in text, (expected, text)
    if reason not in (r.RUNNING, r.SUCCEEDED, r.STARTING):
        assert verdict.next_step, "every problem says what to do next"


def test_over_quota_and_capacity_busy_never_read_the_same():
    over = r.classify(pod(gpu_classes=(CLS,), events=(("x", GPU_REFUSAL),)), PROJECT)
    busy = r.classify(pod(gpu_classes=(CLS,), unschedulable_message=FULL), PROJECT)
    assert over.reason != busy.reason
    assert over.words != busy.words


@pytest.mark.parametrize(
    ("text", "value"),
    [("7500m", 7.5), ("8", 8), ("512Mi", 512 * 2**20), ("1G", 1e9), ("2Gi", 2**31)],
)
def test_quantities(text, value):
    assert r.parse_quantity(text) == value


def test_message_without_quota_is_not_a_quota_verdict():
    assert r.quota_verdict("pods is forbidden: something else", PROJECT) is None
    assert r.parse_exceeded_quota("garbage") == []


# containerd's answer for an image it cannot resolve on a node without DNS (the demo's walk)
PULL_ERROR = (
    'failed to pull and unpack image "docker.io/ollama/ollama:0.24.0": failed to resolve '
    'reference "docker.io/ollama/ollama:0.24.0": failed to do request: Head '
    '"https://registry-1.docker.io/v2/ollama/ollama/manifests/0.24.0": dial tcp: lookup '
    "registry-1.docker.io on 10.96.0.10:53: read udp 10.244.0.7:40182->10.96.0.10:53: i/o "
    "timeout"
)


def _pulling(message: str) -> r.Verdict:
    waiting = ContainerFacts("llm", waiting_reason="ErrImagePull", waiting_message=message)
    return r.classify(pod(phase="Pending", containers=(waiting,)), ProjectFacts())


def test_a_pull_error_is_quoted_whole_never_cut_mid_word():
    """Issue #49: the live page showed the pull error cut at 200 characters, mid-word."""
    verdict = _pulling(PULL_ERROR)
    assert verdict.reason == r.IMAGE_PULL
    assert f"(ErrImagePull: {PULL_ERROR})." in verdict.words
    assert len(verdict.words) <= r.WORDS_CHARS


@pytest.mark.parametrize(
    "build",
    [
        lambda m: _pulling(m).words,
        lambda m: r.classify_refusal(m, ProjectFacts()).words,
        lambda m: r.classify(pod(phase="Pending", unschedulable_message=m), ProjectFacts()).words,
    ],
    ids=["pull", "refusal", "unschedulable"],
)
def test_a_message_longer_than_the_page_keeps_is_shortened_at_a_word(build):
    long = " ".join(f"word{i:03d}" for i in range(150))  # 1,199 characters
    words = build(long)
    assert len(words) <= r.WORDS_CHARS
    assert "…" in words
    last = words.split("…")[0].split()[-1]
    assert last in long.split(), last  # a whole word before the mark, never half of one
