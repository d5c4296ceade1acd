"""The pre-flight worker's one task: scan a call's images, hand each result back as it finishes.

Thin (STYLE.md): the work is `scanning.scan_image`. Results go to the Redis list the web
process named and waits on (`service.scan_in_worker`), one JSON `ImageFacts` per image, so a
call gets every image finished by its deadline even when another is still being read. The
call's slot (`limits.Slot`) is released when the last image is done, success or not. Not
retried: a scan that failed said why in its result, and the tenant can check again.
"""

from __future__ import annotations

import dataclasses
import json

from celery import shared_task

from portal.preflight import limits, scanning

RESULT_TTL_S = 600


@shared_task(name="preflight.scan_images", acks_late=False, ignore_result=True)
def scan_images(key: str, images: list[str], slot: list[str]) -> None:
    """Scan each image, RPUSH its facts to `key`; `slot` is released at the end."""
    try:
        for image in images:
            found = scanning.scan_image(image)
            redis = limits.client()
            redis.rpush(key, json.dumps(dataclasses.asdict(found)))
            redis.expire(key, RESULT_TTL_S)
    finally:
        limits.release(slot)
