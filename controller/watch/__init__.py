"""The watcher: stream ResourceClaims, Pods, Events and ResourceQuotas of every namespace into
the portal's room for observed state.

Three layers, each its own module: `stream` (list/watch/resume per resource, talks to the API),
`state` (pure folding of events into claims/pods/warnings per namespace, read through
`controller.observe`; unit-tested without a cluster), `writer` (hands each changed namespace's
`tranche.observed.NamespaceView` to `controller.store`), tied together by `watcher` (threads,
backoff with jitter) and run by `__main__` (`python -m controller.watch`; restartable: it
relists on start).

`Watcher` is loaded lazily: importing the pure state does not need Django set up.
"""

from __future__ import annotations

from typing import Any

from controller.watch.state import ClusterState

__all__ = ["ClusterState", "Watcher"]


def __getattr__(name: str) -> Any:
    if name == "Watcher":
        from controller.watch.watcher import Watcher

        return Watcher
    raise AttributeError(name)
