#!/usr/bin/env bash
# Regenerates spec.template.spec of the DLJob CRD from Kubernetes' own PodSpec type (k8s.io/api
# in tools/crdgen/go.mod: keep it at the control plane's version, tools/controlplane/go.mod).
# controller-gen (sigs.k8s.io/controller-tools, pinned in go.mod) writes the schema; splice.py
# adds Horus' rules and replaces the marked block of manifests/crds/horus.io_dljobs.yaml; then
# the chart's copy is synced. Run it after bumping Kubernetes; the result is committed, so
# neither CI nor users build controller-gen. First run: a few minutes of Go builds.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
(cd "$here" && go run sigs.k8s.io/controller-tools/cmd/controller-gen \
  crd:maxDescLen=0 paths=./podtemplate/... output:crd:dir="$out")
python3 "$here/splice.py" "$out/crdgen.horus.io_holders.yaml" "$root/manifests/crds/horus.io_dljobs.yaml"
bash "$root/tools/sync-chart.sh"
