"""A page through the portal's real ASGI application (portal/asgi.py) crosses from the event
loop to a thread once for its middleware and view (`portal.core.sync_stack`), not around every
sync-only middleware and per MiddlewareMixin hook as Django's async-mode chain does."""

from __future__ import annotations

import pytest
from asgiref.sync import SyncToAsync, async_to_sync
from channels.testing import HttpCommunicator

pytestmark = pytest.mark.django_db


def _hops_of(path: str, monkeypatch, cookie: bytes = b"") -> tuple[int, list[str]]:
    from portal.asgi import application

    hops: list[str] = []
    original = SyncToAsync.__call__

    async def counted(self, *args, **kwargs):
        hops.append(getattr(self.func, "__qualname__", type(self.func).__name__))
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(SyncToAsync, "__call__", counted)
    headers = [(b"host", b"testserver")] + ([(b"cookie", cookie)] if cookie else [])
    response = async_to_sync(
        HttpCommunicator(application, "GET", path, headers=headers).get_response
    )()
    return response["status"], hops


def test_a_page_runs_its_middleware_and_view_in_one_hop(monkeypatch):
    status, hops = _hops_of("/login/", monkeypatch)
    assert status == 200
    started, *chain, closed = hops  # Django's own: request_started, the response's close
    assert started.startswith("Signal.asend"), hops
    assert closed.endswith(".close"), hops
    assert len(chain) == 1, f"the middleware and view crossed {len(chain)} times: {chain}"
