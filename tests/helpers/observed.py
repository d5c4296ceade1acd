"""Typed observations for tests that stand in for the watcher: the same `tranche.observed` facts
`controller.observe` builds, from the short forms tests write."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tranche.observed import NamespaceView, ObservedPod, QuotaStatus, Refusal
from tranche.pod_reasons import PodFacts


def observed_pods(states: Mapping[str, Mapping[str, str]]) -> list[ObservedPod]:
    """Pods from name -> {"phase", "reason", "node", "uid"} (any may be left out)."""
    return [
        ObservedPod(
            PodFacts(name, phase=state.get("phase", "Running")),
            reason=state.get("reason", ""),
            node=state.get("node", ""),
            uid=state.get("uid", ""),
        )
        for name, state in states.items()
    ]


def namespace_view(
    namespace: str,
    pods: Iterable[PodFacts] = (),
    refusals: Iterable[tuple[str, str, str]] = (),
    quota: Mapping | None = None,
) -> NamespaceView:
    """A namespace's view from pod facts, (kind, name, message) refusals and a quota status as
    the API server writes it ({"hard": ..., "used": ...})."""
    status = None
    if quota is not None:
        status = QuotaStatus(hard=dict(quota.get("hard") or {}), used=quota.get("used"))
    return NamespaceView(
        namespace,
        pods=tuple(ObservedPod(p) for p in pods),
        refusals=tuple(Refusal(*r) for r in refusals),
        quota=status,
    )


def bind_pods(project_id: int, states: Mapping[str, Mapping[str, str]]) -> None:
    """Store pods' bindings as the watcher does (`portal.cluster.bindings.write_pod_states`)."""
    from portal.cluster.bindings import write_pod_states

    write_pod_states(project_id, observed_pods(states))
