#!/usr/bin/env bash
# Set up everything on a fresh machine: a virtualenv with the workload, the operator and the
# dev tools, and the helm binary the chart tests use. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# The constraints file pins torch to the CPU build on disk, whoever asks for it.
.venv/bin/pip install --quiet --upgrade pip
.venv/bin/pip install --quiet -c constraints.txt -e '.[workload,operator,dev,report]'
if [ -x scripts/install-helm.sh ]; then
  scripts/install-helm.sh
fi
