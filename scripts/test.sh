#!/usr/bin/env bash
# The test command the README shows and CI runs. pytest's exit 5 (nothing collected) is a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/pytest "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"
