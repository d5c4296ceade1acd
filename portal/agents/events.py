"""The Channels events the agent ingest publishes to `project.<id>` groups (the status page's
consumer handles them by `type`): typed, built from the agent message schema's own types."""

from __future__ import annotations

from typing import Literal

from tranche.agent_protocol import PodReport, RemovedPod


class PodStatusEvent(PodReport):
    """A pod's latest figures, as its node reported them."""

    type: Literal["pod.status"]
    node: str


class PodRemovedEvent(RemovedPod):
    """A pod its node no longer reports."""

    type: Literal["pod.removed"]


ProjectEvent = PodStatusEvent | PodRemovedEvent
