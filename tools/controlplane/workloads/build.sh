#!/usr/bin/env bash
# Builds (once per version) the workload controllers Horus runs beside on the local cluster and
# prints the folder that holds them:
#   kueue                        sigs.k8s.io/kueue/cmd/kueue
#   jobset-manager               sigs.k8s.io/jobset (the module root is its manager's main)
#   trainer-controller-manager   github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager
# plus each project's own manifests (CRDs, RBAC, webhook configurations, manager config and,
# for Trainer, its runtimes) copied out of the module cache, so running them needs no GOMODCACHE:
#   manifests/kueue   = kueue's config/components
#   manifests/jobset  = jobset's config/components
#   manifests/trainer = trainer's manifests/base
# The versions are the ones go.mod here resolves (one module, so shared dependencies such as
# client-go and controller-runtime compile once; versions.env says why these versions).
# Cache: ${HORUS_CACHE_DIR:-~/.cache/horus}/bin/workloads-kueue-<v>-jobset-<v>-trainer-<v>/.
# Progress goes to stderr, the folder to stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

fail() { echo "build.sh: step '$1' failed: $2" >&2; exit 1; }

modver() {
  local v
  v=$(awk -v m="$1" '$1==m && $2 ~ /^v[0-9]/ {print $2; exit}' "$here/go.mod")
  [[ $v =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "read $1 version" "no '$1 vX.Y.Z' requirement in $here/go.mod"
  echo "$v"
}
kueue_version=$(modver sigs.k8s.io/kueue)
jobset_version=$(modver sigs.k8s.io/jobset)
trainer_version=$(modver github.com/kubeflow/trainer/v2)

cache=${HORUS_CACHE_DIR:-$HOME/.cache/horus}
out="$cache/bin/workloads-kueue-$kueue_version-jobset-$jobset_version-trainer-$trainer_version"
bins=(kueue jobset-manager trainer-controller-manager)
have_all() {
  local b
  for b in "${bins[@]}"; do [[ -x $out/$b ]] || return 1; done
  [[ -f $out/manifests/.complete ]]
}
if have_all; then echo "$out"; exit 0; fi

mkdir -p "$cache/bin"
if command -v flock >/dev/null 2>&1; then
  exec 9>"$cache/bin/.build-workloads.lock"
  flock -n 9 || { echo "build.sh: another build is filling $out; waiting for it ..." >&2; flock 9; }
  if have_all; then echo "$out"; exit 0; fi
fi

command -v go >/dev/null 2>&1 || fail "find Go toolchain" \
  "no 'go' on PATH, and $out lacks the Kueue/JobSet/Trainer binaries. Install Go >= 1.26 (their go.mod files ask for it) and retry."

export CGO_ENABLED=0 GOFLAGS=-mod=mod
ldflags="-s -w"
ldflags+=" -X sigs.k8s.io/kueue/pkg/version.GitVersion=$kueue_version"
ldflags+=" -X sigs.k8s.io/jobset/pkg/version.GitVersion=$jobset_version"
echo "build.sh: building kueue $kueue_version, jobset $jobset_version, trainer $trainer_version (one go build; first time: minutes) ..." >&2
tmp="$out.tmp.$$"
rm -rf "$tmp"; mkdir -p "$tmp"
(cd "$here" && go build -trimpath -ldflags "$ldflags" -o "$tmp/" \
    sigs.k8s.io/kueue/cmd/kueue sigs.k8s.io/jobset github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager) \
  || { rm -rf "$tmp"; fail "go build kueue jobset trainer" "see the compiler output above; network access to the Go module proxy is needed"; }
# `go build -o DIR` names each binary after its package's last path element.
mv "$tmp/jobset" "$tmp/jobset-manager"

mods=$(cd "$here" && go env GOMODCACHE)
copy_manifests() {  # <name> <module path>@<version> <folder in the module>
  local src="$mods/$2/$3"
  [[ -d $src ]] || fail "copy $1 manifests" "$src is missing (go build should have downloaded $2)"
  mkdir -p "$tmp/manifests/$1"
  cp -R "$src/." "$tmp/manifests/$1/"
}
copy_manifests kueue "sigs.k8s.io/kueue@$kueue_version" config/components
copy_manifests jobset "sigs.k8s.io/jobset@$jobset_version" config/components
copy_manifests trainer "github.com/kubeflow/trainer/v2@$trainer_version" manifests/base
chmod -R u+w "$tmp/manifests"
touch "$tmp/manifests/.complete"
rm -rf "$out"; mv "$tmp" "$out"
echo "$out"
