"""Is the Kubernetes API server answering? A bounded, cached probe that readiness, the order
pages and the support console read, so that a stalled cluster is seen (40 orders sat
in `provisioning` for 48 s while every page and probe stayed green).

`kubeconfig_path()` is the portal's one answer to "which cluster": CLUSTER_ACCESS_KUBECONFIG,
else CONTROLLER_KUBECONFIG, KUBECONFIG, the in-cluster ServiceAccount ("" here), else the dev
cluster's. `cluster_answers()` returns the last probe's result at once and, when it is older
than FRESH_SECONDS, starts a new probe in the background (one at a time); only the very first
call of a process waits for one, at most PROBE_TIMEOUT. A page therefore never waits on a
frozen API server, and the state it shows is at most FRESH_SECONDS + PROBE_TIMEOUT old.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

PROBE_TIMEOUT = 0.7  # seconds: connect and read of GET /version
FRESH_SECONDS = 2.0

_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cluster-probe")
_lock = threading.Lock()
_running: Future | None = None


@dataclass(frozen=True)
class ClusterState:
    ok: bool
    message: str
    checked_at: float  # time.monotonic() of the probe's answer
    down_since: float | None = None  # monotonic time of the first failed probe in a row


_last: ClusterState | None = None


def kubeconfig_path() -> str:
    """The portal's kubeconfig; "" for the in-cluster ServiceAccount."""
    path = (
        settings.CLUSTER_ACCESS_KUBECONFIG
        or settings.CONTROLLER_KUBECONFIG
        or os.environ.get("KUBECONFIG", "")
    )
    if not path and os.environ.get("KUBERNETES_SERVICE_HOST"):
        return ""
    if not path:
        path = str(Path(settings.BASE_DIR) / ".state" / "cluster" / "kubeconfig")
    return path.split(os.pathsep)[0]


def _probe() -> ClusterState:
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException

    previous = _last
    try:
        path = kubeconfig_path()
        conf = client.Configuration()
        if path:
            config.load_kube_config(config_file=path, client_configuration=conf)
        else:
            config.load_incluster_config(client_configuration=conf)
        conf.retries = False  # one attempt within PROBE_TIMEOUT (urllib3 would try 4 times)
        api = client.ApiClient(conf)
        try:
            client.VersionApi(api).get_code(_request_timeout=(PROBE_TIMEOUT, PROBE_TIMEOUT))
        finally:
            api.close()
    except ApiException as exc:
        message = f"the API server answered HTTP {exc.status} to /version"
    except Exception as exc:  # any failure to reach it: refused, timed out, no config
        lines = str(exc).strip().splitlines()
        detail = lines[-1][:160] if lines else ""
        message = f"the API server is not answering ({type(exc).__name__}: {detail})"
    else:
        return ClusterState(True, "the API server answers", time.monotonic())
    now = time.monotonic()
    since = previous.down_since if previous and not previous.ok else now
    return ClusterState(False, message, now, since)


def _finish(future: Future) -> None:
    global _last, _running  # noqa: PLW0603  (one probe state per process)
    with _lock:
        if future.exception() is None:
            _last = future.result()
        _running = None


def cluster_answers(wait: float = PROBE_TIMEOUT + 0.2) -> ClusterState:
    """The latest known state; starts a probe when it is stale. `wait`: how long to wait for
    that probe when nothing is known yet."""
    global _running  # noqa: PLW0603
    started = None
    with _lock:
        last, now = _last, time.monotonic()
        if (last is None or now - last.checked_at > FRESH_SECONDS) and _running is None:
            _running = started = _pool.submit(_probe)
        running = _running
    if started is not None:
        # Outside the lock: a probe already done runs _finish in this thread, right here, and
        # _finish takes the lock (inside it, that hung the caller for good; CI caught it).
        started.add_done_callback(_finish)
    if last is None and running is not None:
        try:
            return running.result(timeout=wait)
        except Exception:  # still waiting: say so rather than hold the page
            said = f"the API server did not answer within {wait:.1f}s"
            return ClusterState(False, said, now, now)
    assert last is not None
    return last
