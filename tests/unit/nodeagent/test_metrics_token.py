"""#45: the agent's /metrics names every tenant's namespace and pod on the node; the chart served
it on all interfaces to anyone. With a token it answers only `Authorization: Bearer <token>`
(the chart binds it to the node's loopback unless a token is configured: tests/cluster/deploy/
test_chart.py)."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from nodeagent import metrics
from nodeagent.__main__ import parse


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(port: int, token: str | None) -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310 (http://127.0.0.1)
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


def test_metrics_with_a_token_answer_only_its_bearer() -> None:
    port = _free_port()
    served = metrics.serve("gpu-node-7", port, "127.0.0.1", token="s3cret-token")
    served.tick.observe(0.01)
    assert _get(port, None)[0] == 401
    assert _get(port, "wrong")[0] == 401
    status, text = _get(port, "s3cret-token")
    assert status == 200
    assert 'tranche_agent_tick_seconds_count{node="gpu-node-7"} 1.0' in text


def test_without_a_token_metrics_stay_open_for_the_loopback_default() -> None:
    port = _free_port()
    metrics.serve("gpu-node-8", port)
    assert _get(port, None)[0] == 200


def test_the_agent_takes_a_token_file(tmp_path: Path) -> None:
    token = tmp_path / "metrics-token"
    token.write_text("abc\n")
    opts = parse(["run", "--node=n1", "--portal=ws://x/ws/agent/", "--token-file=/t",
                  f"--metrics-token-file={token}"])  # fmt: skip
    assert opts.metrics_token_file == token
    assert opts.metrics_addr == "127.0.0.1"


@pytest.mark.parametrize("content", ["", "  \n"])
def test_an_empty_token_file_keeps_metrics_closed(tmp_path: Path, content: str) -> None:
    from nodeagent import agent

    token = tmp_path / "metrics-token"
    token.write_text(content)
    opts = parse(["run", "--node=n1", "--portal=ws://x/ws/agent/", "--token-file=/t",
                  f"--metrics-token-file={token}", f"--metrics-port={_free_port()}"])  # fmt: skip
    assert agent._serve_metrics(opts, health=None) is None
