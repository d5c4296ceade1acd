"""Local Kubernetes control plane for tests and the demo, built from source without Docker.

Layers: `config` (paths, ports, versions), `build` (Go build into a version
cache), `pki` (certificates), `components` (command lines), `launcher`
(up/down/status) and `nodes` (kwok fake GPU nodes). The CLI is
`python -m deploy.devcluster build|up|down|status|nodes`.
"""
