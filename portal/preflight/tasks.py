"""The pre-flight worker's one task: scan a call's images, hand each result back as it finishes.

Thin (STYLE.md): the work is `scanning.scan_image`. Results go to the Redis list the web
process named and waits on (`service.scan_in_worker`), one JSON `ImageFacts` per image, so a
call gets every image finished by its deadline even when another is still being read. The
call's slot (`limits.Slot`) is released when the last image is done, success or not. Not
retried: a scan that failed said why in its result, and the tenant can check again.

A hard time limit (`task_time_limit`: the call's deadline plus one image's) ends the task
whatever the registries do: each image's reads end by the sooner of the image's deadline and
the task's (the outbound watchdog shuts the socket, in every response mode), and no image starts
after it. Celery's own `time_limit` is declared too, but its thread pool (the pre-flight
worker's) does not enforce it: the task's clock does.

`answer_by` is the call's deadline (wall clock, `service.CallDeadline`): no image is started
after it, because the web process has answered by then and nobody reads the result. Under load
that keeps the worker's threads for calls still waiting (50 calls at a silent registry
queued 150 image reads behind each other). An image started before it runs to its own deadline
and is cached, so checking again answers at once.
"""

from __future__ import annotations

import dataclasses
import json
import time

from celery import shared_task
from django.conf import settings

from portal.preflight import limits, scanning
from tranche import tasknames

RESULT_TTL_S = 600


def task_time_limit() -> float:
    """Seconds one scan task may run: the call's deadline, then one image's."""
    return settings.PREFLIGHT_CALL_DEADLINE_SECONDS + settings.PREFLIGHT_IMAGE_DEADLINE_SECONDS


@shared_task(
    name=tasknames.SCAN_IMAGES, acks_late=False, ignore_result=True,
    time_limit=task_time_limit() + 30, soft_time_limit=task_time_limit(),
)  # fmt: skip
def scan_images(
    key: str, images: list[str], slot: list[str], answer_by: float | None = None
) -> None:
    """Scan each image, RPUSH its facts to `key`; `slot` is released at the end. No image is
    started at or after `answer_by` (time.time()); none runs past `task_time_limit()`."""
    ends_at = time.monotonic() + task_time_limit()
    try:
        for image in images:
            left = ends_at - time.monotonic()
            if left <= 0 or (answer_by is not None and time.time() >= answer_by):
                break
            found = scanning.scan_image(image, within_s=left)
            redis = limits.client()
            redis.rpush(key, json.dumps(dataclasses.asdict(found)))
            redis.expire(key, RESULT_TTL_S)
    finally:
        limits.release(slot)
