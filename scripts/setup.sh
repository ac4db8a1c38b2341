#!/usr/bin/env bash
# Set up everything on a fresh machine: a virtualenv with the workload, the operator and the
# dev tools, and the helm binary the chart tests use. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
# Made from outside the repository: `python -m` puts the current folder first on sys.path, where
# the project's operator/ would hide the standard library's operator module from venv itself.
[ -x .venv/bin/python ] || (root=$PWD && cd / && "$PY" -m venv "$root/.venv")
# The constraints file pins torch to its CPU build (torch==2.13.0+cpu), whoever asks for it.
.venv/bin/pip install --quiet -c constraints.txt --upgrade pip
.venv/bin/pip install --quiet -c constraints.txt -e '.[workload,local,operator,dev,report,dataflux]'
if [ -x scripts/install-helm.sh ]; then
  scripts/install-helm.sh
fi
# A real Prometheus for tests/test_prometheus.py, and its promtool for tests/test_alerts.py
# (both in Debian's package; those tests fail under CI=true without them). Installed when missing
# and we are root; otherwise the tests say what to do.
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus
  else
    echo "setup: prometheus is missing; install Debian's 'prometheus' package (as root)" >&2
  fi
fi
