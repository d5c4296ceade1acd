"""#45: uvicorn's line per refused websocket handshake is rate-limited in the portal's servers
(`portal/serve.py` installs `RefusedHandshakes` on uvicorn's log handler)."""

from __future__ import annotations

import argparse
import logging

from portal import serve
from portal.core.ratelimit import RefusedHandshakes


def _record(msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord("uvicorn.error", logging.INFO, __file__, 1, msg, args, None)


def test_refused_handshakes_pass_a_burst_a_minute_then_say_how_many_were_dropped() -> None:
    now = [0.0]
    flt = RefusedHandshakes(burst=10, period=60.0, clock=lambda: now[0])
    refused = [
        line
        for _ in range(500)
        for line in (_record('%s - "WebSocket %s" 403', "10.0.0.9:4242", "/ws/agent/"),
                     _record("connection rejected (%d %s)", 403, "Forbidden"))
    ]  # fmt: skip
    assert sum(flt.filter(r) for r in refused) == 10
    assert flt.filter(_record('%s - "WebSocket %s" [accepted]', "10.0.0.1:1", "/ws/agent/"))
    assert flt.filter(_record("Started server process [%d]", 42))
    now[0] = 61.0
    first = _record('%s - "WebSocket %s" 403', "10.0.0.9:4243", "/ws/agent/")
    assert flt.filter(first)
    assert first.getMessage() == (
        '990 refused websocket handshakes not logged in 61 s; 10.0.0.9:4243 - "WebSocket '
        '/ws/agent/" 403'
    )


def test_the_servers_log_config_filters_uvicorns_handler() -> None:
    args = argparse.Namespace(host="127.0.0.1", port=8000, processes=1)
    config = serve.uvicorn_options(args)["log_config"]
    assert config["handlers"]["default"]["filters"] == ["handshakes"]
    assert config["filters"]["handshakes"]["()"] == "portal.core.ratelimit.RefusedHandshakes"
    assert config["loggers"]["uvicorn"]["handlers"] == ["default"]  # uvicorn.error's path
