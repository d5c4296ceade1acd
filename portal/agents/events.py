"""The Channels events the agent ingest publishes to `project.<id>` groups (the status page's
consumer handles them by `type`): typed, built from the agent message schema's own types."""

from __future__ import annotations

from typing import Literal, TypedDict

from tranche.agent_protocol import PodReport, RemovedPod


class PodStatusEvent(PodReport):
    """A pod's latest figures, as its node reported them."""

    type: Literal["pod.status"]
    node: str
    text: str  # the status page's message for this pod, JSON-encoded once by the ingest


class PodRemovedEvent(RemovedPod):
    """A pod its node no longer reports."""

    type: Literal["pod.removed"]
    text: str  # the status page's removal message, JSON-encoded once by the ingest


class NodeSeenEvent(TypedDict):
    """A node's agent reported (every frame, changed pods or not): the page's stale mark."""

    type: Literal["node.seen"]
    node: str
    text: str  # {"type": "seen", "node", "at": epoch seconds}, JSON-encoded once by the ingest


class GpuHealthLiveEvent(TypedDict):
    """The GPU under one of the project's pods failed, or a process of it hit an XID."""

    type: Literal["gpu.health"]
    text: str  # {"type": "gpu-event", "kind", "pod", "at", "text"}, JSON-encoded once


ProjectEvent = PodStatusEvent | PodRemovedEvent | NodeSeenEvent | GpuHealthLiveEvent
