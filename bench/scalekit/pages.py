"""Portal pages and live fan-out measured against a portal that is already running.

Called by bench/scale.py (the fleet) and bench/load.py (its own portal); nothing here starts or
seeds anything, and only the standard library and `websockets` are used, so a run against any
portal URL needs no Django (except `bound_pod`, which reads the running portal's database).

Client model of the pages (`measure_pages`): **open loop**. Each of `clients` browsers loads
one page every `period_s` (default 1 s), alternating the quota page and the live page, on its own
keep-alive connection; the send times are fixed in advance (client i starts at i/clients of a
period), and a request's latency is counted from its *scheduled* send time, so when the portal
falls behind, the queueing shows in the figures instead of slowing the clients down (coordinated
omission). 50 browsers = 50 requests/s offered. The same clients are then run as a **closed
loop** (each sends its next request as soon as the previous answer arrives, no think time) for
`closed_seconds`: that figure is the portal's saturation throughput, and its latency is what 50
clients see when they together ask for more than the portal serves.

Fan-out (`measure_fanout`): `viewers` logged-in websockets on the project's live page and one
node agent socket sending one status frame of one pod every 1/rate_hz s; each frame is one
delivery per viewer. Lag is send -> receive on this process's clock.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlencode, urlsplit

MIB = 1024 * 1024
# A frame of this bench carries its sequence number in `rejected_allocations` above this mark, so
# a delivery is told apart from a real agent's report of the same pod (which counts from 0).
FANOUT_MARK = 10**12
MODEL = (
    "open loop: {clients} browsers, each loading one page every {period:g} s (quota and live "
    "alternating), send times fixed in advance, latency counted from the scheduled send time "
    "(queueing included); keep-alive connection per browser; {sessions} logged-in sessions"
)


def percentile(values: list[float], pct: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def _connection(base_url: str, timeout: float = 60) -> http.client.HTTPConnection:
    parts = urlsplit(base_url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return kind(parts.hostname, parts.port, timeout=timeout)


def _cookies(response: http.client.HTTPResponse) -> dict[str, str]:
    found = {}
    for header, value in response.getheaders():
        if header.lower() == "set-cookie":
            name, _, rest = value.partition("=")
            found[name.strip()] = rest.split(";", 1)[0]
    return found


def login(base_url: str, username: str, password: str) -> str:
    """A logged-in session through /login/ as a browser does it; returns the Cookie header."""
    conn = _connection(base_url)
    conn.request("GET", "/login/")
    page = conn.getresponse()
    body = page.read().decode()
    jar = _cookies(page)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', body)
    if page.status != 200 or token is None:
        raise RuntimeError(f"GET /login/ answered {page.status} without a CSRF form")
    form = urlencode({"username": username, "password": password, "csrfmiddlewaretoken": token[1]})
    cookie = "; ".join(f"{k}={v}" for k, v in jar.items())
    origin = base_url.rstrip("/")
    headers = {"Content-Type": "application/x-www-form-urlencoded", "Cookie": cookie,
               "Origin": origin, "Referer": origin + "/login/"}  # fmt: skip
    conn.request("POST", "/login/", form, headers)
    answer = conn.getresponse()
    answer.read()
    jar.update(_cookies(answer))
    conn.close()
    if answer.status != 302 or "sessionid" not in jar:
        raise RuntimeError(f"login of {username!r} failed: POST /login/ answered {answer.status}")
    return "; ".join(f"{k}={v}" for k, v in jar.items())


def _summary(latencies: list[float], errors: int) -> dict:
    return {
        "p50_ms": round(1000 * percentile(latencies, 50), 1),
        "p95_ms": round(1000 * percentile(latencies, 95), 1),
        "p99_ms": round(1000 * percentile(latencies, 99), 1),
        "requests": len(latencies),
        "errors": errors,
    }


class _Recorder:
    """Latencies and errors per page, shared by the client threads."""

    def __init__(self, base_url: str, pages: dict[str, str]) -> None:
        self.base_url = base_url
        self.latencies: dict[str, list[float]] = {name: [] for name in pages}
        self.errors: dict[str, int] = dict.fromkeys(pages, 0)
        self.lock = threading.Lock()

    def fetch(self, conn, page: tuple[str, str], cookie: str, began: float):
        """One GET of page (name, path); returns the connection to use next (a new one after a
        failure). Latency runs from `began` (the scheduled or the actual send time)."""
        name, path = page
        try:
            conn.request("GET", path, headers={"Cookie": cookie})
            resp = conn.getresponse()
            resp.read()
            ok = resp.status == 200
        except (OSError, http.client.HTTPException):
            conn.close()
            conn, ok = _connection(self.base_url), False
        took = time.monotonic() - began
        with self.lock:
            if ok:
                self.latencies[name].append(took)
            else:
                self.errors[name] += 1
        return conn

    def summary(self) -> dict:
        return {name: _summary(self.latencies[name], self.errors[name]) for name in self.latencies}


def _pages(project_id: int) -> dict[str, str]:
    return {"quota": f"/projects/{project_id}/", "live": f"/projects/{project_id}/status/"}


def open_loop(  # noqa: PLR0917
    base_url: str, cookies: list[str], project_id: int, clients: int, seconds: float,
    period_s: float = 1.0,
) -> dict:  # fmt: skip
    """Each client loads one page every `period_s` on a schedule fixed in advance; latency from
    the scheduled send time (a late client sends at once, and its lateness counts)."""
    pages = list(_pages(project_id).items())
    rec = _Recorder(base_url, dict(pages))
    start = time.monotonic() + 0.5
    ticks = max(1, int(seconds / period_s))

    def client(i: int) -> None:
        conn = _connection(base_url)
        for k in range(ticks):
            scheduled = start + (i / clients + k) * period_s
            wait = scheduled - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            conn = rec.fetch(
                conn, pages[(i + k) % len(pages)], cookies[i % len(cookies)], scheduled
            )
        conn.close()

    _run_threads(client, clients, seconds + 120)
    return rec.summary()


def closed_loop(base_url: str, cookies: list[str], project_id: int, clients: int,
                seconds: float) -> dict:  # fmt: skip
    """Each client sends its next request when the previous answer arrived (no think time)."""
    pages = list(_pages(project_id).items())
    rec = _Recorder(base_url, dict(pages))
    stop_at = time.monotonic() + seconds

    def client(i: int) -> None:
        conn = _connection(base_url)
        k = i
        while time.monotonic() < stop_at:
            page = pages[k % len(pages)]
            k += 1
            conn = rec.fetch(conn, page, cookies[i % len(cookies)], time.monotonic())
        conn.close()

    _run_threads(client, clients, seconds + 120)
    out = rec.summary()
    out["per_s"] = round(sum(v["requests"] for v in out.values()) / seconds, 1)
    return out


def _run_threads(target, count: int, join_s: float) -> None:
    threads = [threading.Thread(target=target, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(join_s)


def measure_pages(  # noqa: PLR0917
    base_url: str, username: str, password: str, project_id: int, clients: int = 50,
    seconds: float = 20, *, period_s: float = 1.0, closed_seconds: float = 5, sessions: int = 5,
) -> dict:  # fmt: skip
    """Quota and live page of `project_id` as `username` sees them, at `clients` browsers.

    Returns {"quota": {p50_ms, p95_ms, p99_ms, requests, errors}, "live": {...}, "model": str,
    "offered_per_s", "closed_loop": {"quota", "live", "per_s"}} (closed loop: saturation).
    `sessions` logins are shared round-robin by the clients (each login costs the portal a
    password hash, which is not the subject)."""
    cookies = [login(base_url, username, password) for _ in range(max(1, min(sessions, clients)))]
    closed_loop(base_url, cookies, project_id, min(clients, 4), 1.0)  # warm the portal up
    result = open_loop(base_url, cookies, project_id, clients, seconds, period_s)
    result["model"] = MODEL.format(clients=clients, period=period_s, sessions=len(cookies))
    result["offered_per_s"] = round(clients / period_s, 1)
    if closed_seconds > 0:
        result["closed_loop"] = closed_loop(base_url, cookies, project_id, clients, closed_seconds)
    return result


def bound_pod(project_id: int, node: str) -> tuple[str, str, str]:
    """(namespace, pod, uid) of a pod of the project that the cluster bound to `node`, as the
    watcher published it (Redis `tranche:pods:<project_id>`); needs Django set up."""
    from portal.cluster.bindings import POD_KEY, _redis
    from portal.tenants.models import Project

    namespace = Project.objects.values_list("namespace", flat=True).get(pk=project_id)
    for name, raw in _redis().hgetall(POD_KEY.format(project_id=project_id)).items():
        state = json.loads(raw)
        if state.get("node") == node:
            return namespace, name.decode(), state.get("uid", "")
    raise LookupError(f"no pod of project {project_id} is bound to node {node} (watcher's view)")


def status_frame(node: str, seq: int, pod: tuple[str, str, str]) -> str:
    namespace, name, uid = pod
    item = {"namespace": namespace, "pod": name, "uid": uid, "gpu_uuid": "GPU-bench",
            "memory_limit_bytes": 8192 * MIB, "memory_used_bytes": (seq % 8192) * MIB,
            "rejected_allocations": FANOUT_MARK + seq, "compute_target_percent": 50,
            "compute_used_percent": 10.0, "throttled_seconds": 0.0, "processes": 1}  # fmt: skip
    return json.dumps(
        {"type": "status", "node": node, "seq": seq, "ts": time.time(), "full": False,
         "dropped": 0, "gpus": [], "pods": [item], "removed": []}
    )  # fmt: skip


@dataclass
class _FanOut:
    """One fan-out run: where, who, which pod, how much; the figures gathered on the way."""

    ws_url: str
    origin: str
    cookies: list[str]
    project_id: int
    node: str
    token: str
    pod: tuple[str, str, str]
    sent_at: dict[int, float] = field(default_factory=dict)
    lags: list[float] = field(default_factory=list)
    last: float = 0.0  # when the latest delivery arrived
    acks: int = 0
    refusals: list[str] = field(default_factory=list)

    async def viewer(self, i: int, ready: asyncio.Event, done: asyncio.Event) -> None:
        import websockets

        key = f"{self.pod[0]}/{self.pod[1]}"
        async with websockets.connect(
            f"{self.ws_url}/ws/projects/{self.project_id}/status/",
            additional_headers={"Cookie": self.cookies[i % len(self.cookies)],
                                "Origin": self.origin},
            open_timeout=60, max_size=2**22,
        ) as ws:  # fmt: skip
            json.loads(await ws.recv())  # the snapshot
            ready.set()
            while not done.is_set():
                try:
                    msg = json.loads(await asyncio.wait_for(ws.recv(), 1))
                except TimeoutError:
                    continue
                if msg.get("type") == "row" and msg.get("key") == key:
                    seq = int(msg["cells"]["rejected"]) - FANOUT_MARK
                    if seq in self.sent_at:
                        self.last = time.monotonic()
                        self.lags.append(self.last - self.sent_at[seq])

    async def read_answers(self, agent) -> None:
        async for raw in agent:
            answer = json.loads(raw)
            if "ack" in answer:
                self.acks += 1
            elif len(self.refusals) < 3:
                self.refusals.append(answer.get("error"))

    async def agent(self, rate: float, seconds: float) -> tuple[int, float]:
        """Sends frames at `rate` for `seconds`; (frames sent, seconds until the last delivery)."""
        import websockets

        headers = {"Authorization": f"Bearer {self.token}", "X-Tranche-Node": self.node,
                   "Origin": self.origin}  # fmt: skip
        async with websockets.connect(f"{self.ws_url}/ws/agent/", additional_headers=headers) as ws:
            reader = asyncio.create_task(self.read_answers(ws))
            began = time.monotonic()
            seq = 0
            while time.monotonic() - began < seconds:
                seq += 1
                self.sent_at[seq] = time.monotonic()
                await ws.send(status_frame(self.node, seq, self.pod))
                await asyncio.sleep(max(0.0, began + seq / rate - time.monotonic()))
            await asyncio.sleep(3)  # deliveries in flight arrive; the rate counts to the last one
            reader.cancel()
        return seq, max(self.last, began + 1e-3) - began

    async def run(self, viewers: int, rate: float, seconds: float) -> dict:
        done = asyncio.Event()
        readies = [asyncio.Event() for _ in range(viewers)]
        tasks = []
        for i in range(viewers):  # connect in small waves: a handshake burst is not the subject
            tasks.append(asyncio.create_task(self.viewer(i, readies[i], done)))
            if i % 20 == 19:
                await asyncio.sleep(0.2)
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 120)
        sent, elapsed = await self.agent(rate, seconds)
        done.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        return {
            "viewers": viewers,
            "offered_per_s": round(rate * viewers, 1),
            "delivered_per_s": round(len(self.lags) / elapsed, 1),
            "lag_p50_s": round(percentile(self.lags, 50), 3),
            "lag_p99_s": round(percentile(self.lags, 99), 3),
            "frames_sent": sent,
            "frames_acked": self.acks,
            "deliveries": len(self.lags),
            "expected_deliveries": sent * viewers,
            "refusals": self.refusals,
        }


def measure_fanout(  # noqa: PLR0917
    base_url: str, username: str, password: str, project_id: int, node: str, node_token: str,
    viewers: int = 200, rate_hz: float = 10, seconds: float = 10, *,
    pod: tuple[str, str, str] | None = None, sessions: int = 5,
) -> dict:  # fmt: skip
    """`viewers` live pages of `project_id` (as `username`) and one agent of `node` sending
    `rate_hz` frames/s of one pod: {"viewers", "offered_per_s", "delivered_per_s", "lag_p50_s",
    "lag_p99_s", "frames_sent", "frames_acked", "deliveries", "expected_deliveries", "refusals"}.

    `node_token` is the plaintext token the portal holds for `node`
    (`portal.agents.services.issue_node_token(node)` returns it once; `manage.py
    create_node_token NODE` calls it): reuse the token the node's agent already has, since
    issuing again refuses and rotating cuts that agent off. The portal stores a pod's report only
    from the node the cluster bound the pod to: `pod` = (namespace, pod name, pod uid) of a pod of
    this project that the watcher saw scheduled to `node`; None finds one (`bound_pod`)."""
    pod = pod or bound_pod(project_id, node)
    cookies = [login(base_url, username, password) for _ in range(max(1, min(sessions, viewers)))]
    parts = urlsplit(base_url)
    ws_url = f"{'wss' if parts.scheme == 'https' else 'ws'}://{parts.netloc}"
    origin = f"{parts.scheme}://{parts.netloc}"
    run = _FanOut(ws_url, origin, cookies, project_id, node, node_token, pod)
    return asyncio.run(run.run(viewers, rate_hz, seconds))
