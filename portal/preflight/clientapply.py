"""The dry run of an object first applied with client-side `kubectl apply`: as kubectl computes it.

kubectl's client-side apply keeps the file it last applied in the annotation
`kubectl.kubernetes.io/last-applied-configuration` and sends a three-way strategic merge patch:
the new file, `null` for what the last file had and this one drops, `$patch: delete` for list
items gone (by the list's merge key), and `$retainKeys` on the maps whose strategy is retainKeys
(a Deployment's `strategy`: switching to Recreate clears `rollingUpdate`). A server-side apply
of the same file keeps kubectl's field ownership instead, and the API server refuses it; so for
such an object pre-flight sends kubectl's patch (`dryRun=All`), and answers as
`kubectl apply --dry-run=server` would.

The patch strategies and merge keys come from the API server's own OpenAPI v3 document for the
group/version (`x-kubernetes-patch-strategy`, `x-kubernetes-patch-merge-key`), cached like
discovery. A kind without a schema there (a custom resource) gets a JSON merge patch, as kubectl
sends for those.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from portal.preflight.kube import Identity, Response, request

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
KUBECTL_MANAGER = "kubectl-client-side-apply"
SCHEMA_TTL_S = 300.0
MAX_DEPTH = 64  # manifests are refused deeper than this before parsing (manifest.py)


class _Schemas:
    """Per group/version: the API server's OpenAPI v3 components, kept SCHEMA_TTL_S."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_gv: dict[str, tuple[float, dict[str, Any]]] = {}
        self._index: tuple[float, dict[str, str]] | None = None

    def _urls(self, api: Any) -> dict[str, str]:
        now = time.monotonic()
        if self._index and now - self._index[0] < SCHEMA_TTL_S:
            return self._index[1]
        resp = request(api, "GET", "/openapi/v3")
        paths = resp.body.get("paths") if resp.status == 200 else None
        urls = {
            k: str(v.get("serverRelativeURL", ""))
            for k, v in (paths or {}).items()
            if isinstance(v, dict)
        }
        self._index = (now, urls)
        return urls

    def components(self, api: Any, api_version: str) -> dict[str, Any]:
        key = "api/v1" if api_version == "v1" else f"apis/{api_version}"
        with self._lock:
            now = time.monotonic()
            cached = self._by_gv.get(key)
            if cached and now - cached[0] < SCHEMA_TTL_S:
                return cached[1]
            url = self._urls(api).get(key, "")
            schemas: dict[str, Any] = {}
            if url.startswith("/openapi/v3/"):
                path, _, query = url.partition("?")
                params = [tuple(p.split("=", 1)) for p in query.split("&") if "=" in p]
                resp = request(api, "GET", path, query=params)  # type: ignore[arg-type]
                if resp.status == 200:
                    schemas = (resp.body.get("components") or {}).get("schemas") or {}
            self._by_gv[key] = (now, schemas)
            return schemas


SCHEMAS = _Schemas()


def kind_schema(schemas: dict[str, Any], api_version: str, kind: str) -> dict[str, Any] | None:
    group, _, version = api_version.rpartition("/")
    for schema in schemas.values():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            if (gvk.get("group", ""), gvk.get("version"), gvk.get("kind")) == (
                group,
                version,
                kind,
            ):
                return schema
    return None


def _deref(schemas: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    for _ in range(MAX_DEPTH):
        ref = schema.get("$ref")
        if ref is None and len(schema.get("allOf") or []) == 1:
            ref = schema["allOf"][0].get("$ref")
        if not isinstance(ref, str):
            return schema
        schema = schemas.get(ref.rsplit("/", 1)[-1]) or {}
    return schema


def three_way_patch(
    schemas: dict[str, Any], last: Any, new: Any, field: dict[str, Any], depth: int = 0
) -> Any:
    """kubectl's patch from the last applied file to the new one (the live object's other
    fields are left to the server's merge); `field` is the schema of this value's field."""
    if depth > MAX_DEPTH:
        return new
    strategies = set(str(field.get("x-kubernetes-patch-strategy", "")).split(","))
    shape = _deref(schemas, field)
    if isinstance(new, dict):
        last = last if isinstance(last, dict) else {}
        props = shape.get("properties") or {}
        extra = shape.get("additionalProperties")
        out: dict[str, Any] = {}
        for key, value in new.items():
            sub = props.get(key) or (extra if isinstance(extra, dict) else {})
            out[key] = three_way_patch(schemas, last.get(key), value, sub, depth + 1)
        for key in last:
            if key not in new:
                out[key] = None
        if "retainKeys" in strategies:
            out["$retainKeys"] = sorted(new)
        return out
    merge_key = field.get("x-kubernetes-patch-merge-key")
    if isinstance(new, list) and "merge" in strategies and isinstance(merge_key, str):
        items = shape.get("items") or {}
        before = {
            e.get(merge_key): e for e in (last if isinstance(last, list) else [])
            if isinstance(e, dict)
        }  # fmt: skip
        out_list = [
            three_way_patch(schemas, before.get(e.get(merge_key)), e, items, depth + 1)
            if isinstance(e, dict) else e
            for e in new
        ]  # fmt: skip
        kept = {e.get(merge_key) for e in new if isinstance(e, dict)}
        out_list += [{"$patch": "delete", merge_key: k} for k in before if k not in kept]
        return out_list
    return new


def _last_applied(live: dict[str, Any]) -> dict[str, Any] | None:
    text = ((live.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED)
    try:
        last = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return last if isinstance(last, dict) else None


def dry_run_as_kubectl(
    api: Any, path: str, body: dict[str, Any], identity: Identity
) -> Response | None:
    """kubectl's client-side apply of `body` as a dry run, when the live object at `path` was
    last applied that way; None when it was not (or does not exist): server-side apply then."""
    live = request(api, "GET", path, identity=identity)
    if live.status != 200:
        return None
    last = _last_applied(live.body)
    if last is None:
        return None
    api_version, kind = str(body["apiVersion"]), str(body["kind"])
    schemas = SCHEMAS.components(api, api_version)
    root = kind_schema(schemas, api_version, kind)
    config = json.loads(json.dumps(body, default=str))
    config.get("metadata", {}).get("annotations", {}).pop(LAST_APPLIED, None)
    patch = three_way_patch(schemas, last, config, root or {})
    metadata = patch.setdefault("metadata", {})
    annotations = metadata.get("annotations")
    metadata["annotations"] = {**(annotations if isinstance(annotations, dict) else {})}
    metadata["annotations"][LAST_APPLIED] = json.dumps(config, separators=(",", ":")) + "\n"
    if root is None:  # a custom resource: kubectl sends a JSON merge patch, without directives
        patch = three_way_patch({}, last, config, {})
        patch.setdefault("metadata", {}).setdefault("annotations", {})[LAST_APPLIED] = (
            json.dumps(config, separators=(",", ":")) + "\n"
        )
    content_type = (
        "application/strategic-merge-patch+json" if root else "application/merge-patch+json"
    )
    query = [("dryRun", "All"), ("fieldManager", KUBECTL_MANAGER)]
    # A dict: the client encodes JSON bodies itself (a string would be encoded twice).
    return request(
        api, "PATCH", path, query=query, body=patch, identity=identity,
        content_type=content_type,
    )  # fmt: skip
