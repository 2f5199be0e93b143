#!/usr/bin/env bash
# Regenerates go.mod for a new Kubernetes release: `tools/controlplane/gen-go-mod.sh v1.37.2`.
# go.mod is the ONE place the Kubernetes version is pinned; build.sh reads it from there.
# k8s.io/kubernetes replaces its staging modules with ./staging/... paths, which a dependent
# module cannot use, so every staging module is replaced by its published v0.X.Y twin
# (the pattern kubernetes-sigs/scheduler-plugins uses).
set -euo pipefail
ver=${1:?usage: gen-go-mod.sh v1.MINOR.PATCH}
[[ $ver =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || { echo "gen-go-mod.sh: '$ver' is not a Kubernetes release like v1.37.2" >&2; exit 2; }
staging="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
cd "$(dirname "$0")"
modfile=$(GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$ver" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
{
  echo "module github.com/horus/horus/tools/controlplane"
  echo
  echo "go 1.24.0"
  echo
  echo "require k8s.io/kubernetes $ver"
  echo
  echo "replace ("
  grep -E '^\s+k8s.io/[a-z0-9-]+ => ./staging/' "$modfile" | awk -v v="$staging" '{print "\t" $1 " => " $1 " " v}'
  echo ")"
} > go.mod
rm -f go.sum
GOFLAGS=-mod=mod go mod tidy
echo "go.mod now pins k8s.io/kubernetes $ver (staging modules $staging)"
