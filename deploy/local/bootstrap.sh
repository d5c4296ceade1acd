#!/usr/bin/env bash
# Installs what Tranche needs on a fresh Debian machine, idempotently and quickly when warm:
#   - Debian packages: PostgreSQL server, Redis server, Chromium (browser tests), build tools
#   - a virtualenv at .venv with requirements-dev.txt (re-installed only when the pins change)
# Safe to run as often as you like; prints one line per step.
set -euo pipefail
cd "$(dirname "$0")/../.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
[ -x /usr/bin/chromium ] || need+=(chromium)
command -v gcc >/dev/null 2>&1 || need+=(gcc make)
# The core's region reclaimer needs libatomic; the sanitizer builds need gcc's ASan/UBSan runtimes.
dpkg -s libatomic1 >/dev/null 2>&1 || need+=(libatomic1)
dpkg -s libasan8 >/dev/null 2>&1 || need+=(libasan8 libubsan1)
# WeasyPrint (invoice PDFs) renders text through Pango.
dpkg -s libpango-1.0-0 >/dev/null 2>&1 || need+=(libpango-1.0-0 libpangoft2-1.0-0)
# The install tier renders the installed portal's invoice PDF (pdftoppm); `make images` needs
# mmdebstrap for the images' root filesystem.
command -v pdftoppm >/dev/null 2>&1 || need+=(poppler-utils)
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
# The dev cluster's real nodes: Debian's runc under containerd, and the bridge, host-local and
# loopback CNI plugins (/usr/lib/cni); `ip` deletes a stopped node's bridge.
command -v runc >/dev/null 2>&1 || need+=(runc)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
# The pause image and the sample image's bypass binary are static builds (glibc's libc.a).
dpkg -s libc6-dev >/dev/null 2>&1 || need+=(libc6-dev)
# kubelet-lite runs simulated pod workloads in a private mount namespace (unshare).
command -v unshare >/dev/null 2>&1 || need+=(util-linux)
# The metrics tier runs Debian's Prometheus on loopback; promtool checks and unit-tests the rules.
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
if [ ${#need[@]} -gt 0 ]; then
  echo "bootstrap: installing Debian packages: ${need[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "bootstrap: need root (or sudo) to install ${need[*]}; install them and re-run" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # Debian starts its own Redis/PostgreSQL on the standard ports; Tranche uses project-owned
  # instances on other ports and leaves those alone.
else
  echo "bootstrap: Debian packages present"
fi

if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv with $PYTHON"
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.requirements.sha256
want=$(cat requirements.txt requirements-dev.txt nodeagent/native/requirements-headers.txt | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "bootstrap: installing Python packages (requirements-dev.txt)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements-dev.txt
  echo "$want" > "$stamp"
else
  echo "bootstrap: Python packages up to date"
fi
