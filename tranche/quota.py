"""Quota defaults of a project, in one place: the plan's non-GPU quota (stored per project, these
are the column defaults) and the container defaults of its LimitRange (controller settings
override them)."""

from __future__ import annotations

CPU_MILLICORES = 8000
MEMORY_MIB = 16384
PODS = 50
DEFAULT_MEMORY_REQUEST_MIB = 2048
DEFAULT_MEMORY_LIMIT_MIB = 4096
DEFAULT_CPU_REQUEST_MILLICORES = 250
