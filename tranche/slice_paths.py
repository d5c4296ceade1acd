"""Where a slice's files appear inside a tenant's container.

The node agent's CDI spec mounts them here (`nodeagent/cdi.py`), the shipped core reads its
config and region at exactly these paths (`nodeagent/native/src/config.h`, checked by
`tests/unit/nodeagent/test_cdi.py`), and admission keeps tenant volumes off them
(`controller/render/policies/pod_hardening.py`).
"""

from __future__ import annotations

CORE_IN_CONTAINER = "/usr/lib/tranche/libtranche.so"
PRELOAD_IN_CONTAINER = "/etc/ld.so.preload"  # names the core: the loader maps it into every process
CONFIG_IN_CONTAINER = "/etc/tranche/slice.conf"
REGION_IN_CONTAINER = "/var/run/tranche/region"
