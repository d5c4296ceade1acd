"""Reading a live status socket in tests: the page's messages, without the agents' `seen`
beats (one per agent frame, for the stale mark) that interleave with them."""

from __future__ import annotations


async def next_message(page, timeout: float = 5) -> dict:  # noqa: ASYNC109 (the communicator's)
    """The next message of a status-page WebsocketCommunicator that is not a `seen` beat."""
    while True:
        message = await page.receive_json_from(timeout=timeout)
        if message.get("type") != "seen":
            return message
