#!/usr/bin/env bash
# Make (or refresh) the kind cluster the end-to-end test runs against:
#   a kind cluster named ckptbench-e2e (kube context kind-ckptbench-e2e, nothing else is touched),
#   JobSet and Kueue from their release manifests (pinned versions),
#   the operator and workload images built from this tree and loaded into kind,
#   the chart installed from charts/ckptbench, watching namespace ckptbench-e2e, with its queue.
# Then: .venv/bin/python -m pytest --e2e tests/test_e2e.py
# Remove everything: e2e/setup-kind.sh --delete
#
# Needs docker, kind, kubectl and helm (kubectl and helm from scripts/install-helm.sh will do),
# and internet access for the release manifests and the images' packages.
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER=${CKPTBENCH_E2E_CLUSTER:-ckptbench-e2e}
CONTEXT="kind-$CLUSTER"
NAMESPACE=ckptbench-e2e
RELEASE=ckptbench
RELEASE_NAMESPACE=ckptbench-system
TAG=${CKPTBENCH_E2E_TAG:-e2e}
# Pinned releases; both serve the APIs the chart and operator use (jobset.x-k8s.io/v1alpha2,
# kueue.x-k8s.io/v1beta2, which Kueue serves from v0.15).
JOBSET_VERSION=${JOBSET_VERSION:-v0.10.1}
KUEUE_VERSION=${KUEUE_VERSION:-v0.15.7}

PATH="$PWD/.tools/bin:$PATH"
die() { echo "setup-kind: $*" >&2; exit 1; }
for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null || die "$tool not found (kubectl and helm: scripts/install-helm.sh)"
done
# Every call names the context: the user's current context is never used or changed.
k() { kubectl --context "$CONTEXT" "$@"; }

if [ "${1:-}" = "--delete" ]; then
  kind delete cluster --name "$CLUSTER"
  exit 0
fi

if kind get clusters | grep -qx "$CLUSTER"; then
  echo "setup-kind: reusing kind cluster $CLUSTER"
else
  kind create cluster --name "$CLUSTER" --wait 180s
fi
k cluster-info >/dev/null || die "cannot reach context $CONTEXT"

echo "setup-kind: JobSet $JOBSET_VERSION"
k apply --server-side -f "https://github.com/kubernetes-sigs/jobset/releases/download/$JOBSET_VERSION/manifests.yaml"
echo "setup-kind: Kueue $KUEUE_VERSION"
k apply --server-side -f "https://github.com/kubernetes-sigs/kueue/releases/download/$KUEUE_VERSION/manifests.yaml"
k -n jobset-system rollout status deployment/jobset-controller-manager --timeout=300s
k -n kueue-system rollout status deployment/kueue-controller-manager --timeout=300s
# The webhooks answer only once their certificates are in place; wait until a dry-run passes.
for _ in $(seq 60); do
  if k create --dry-run=server -f - >/dev/null 2>&1 <<'YAML'
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: ckptbench-webhook-probe
YAML
  then break; fi
  sleep 5
done

echo "setup-kind: images ckptbench-operator:$TAG and ckptbench-workload:$TAG"
docker build -f Dockerfile.operator -t "ckptbench-operator:$TAG" .
docker build -f Dockerfile.workload -t "ckptbench-workload:$TAG" .
kind load docker-image --name "$CLUSTER" "ckptbench-operator:$TAG" "ckptbench-workload:$TAG"

# The label marks the namespace as made here: tests/test_e2e.py refuses a cluster without it.
k create namespace "$NAMESPACE" --dry-run=client -o yaml | k apply -f -
k label namespace "$NAMESPACE" ckptbench.dev/e2e=true --overwrite

echo "setup-kind: chart from charts/ckptbench"
helm upgrade --install "$RELEASE" charts/ckptbench \
  --kube-context "$CONTEXT" \
  --namespace "$RELEASE_NAMESPACE" --create-namespace \
  --set image.tag="$TAG" \
  --set workload.image.tag="$TAG" \
  --set "watch.namespaces={$NAMESPACE}" \
  --set kueue.enabled=true \
  --set kueue.clusterQueue.cpu=4 \
  --set kueue.clusterQueue.memory=8Gi \
  --wait --timeout 5m
k -n "$RELEASE_NAMESPACE" rollout status "deployment/$RELEASE" --timeout=180s

echo "setup-kind: ready. Run: .venv/bin/python -m pytest --e2e tests/test_e2e.py"
