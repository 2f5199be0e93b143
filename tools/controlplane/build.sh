#!/usr/bin/env bash
# Builds (once per version) the binaries of the local control plane and prints the folder that
# holds them:
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl  from k8s.io/kubernetes (go.mod)
#   kubelet, kube-proxy            the local cluster's real nodes (horus dev cluster add-nodes --real)
#   horus-pause                    their pod sandbox program (cmd/horus-pause, no dependencies)
#   kwok                                                              sigs.k8s.io/kwok/cmd/kwok
#   helm                                                              helm.sh/helm/v3/cmd/helm
#   containerd, containerd-shim-runc-v2, ctr   the real nodes' runtime   github.com/containerd/containerd/v2
#   coredns                        the cluster's DNS (a Deployment)    coredns/ (github.com/coredns/coredns)
#   prometheus, promtool           demo and e2e tests (links; own cache folder, see below)
#                                                                     github.com/prometheus/prometheus
#   kueue, jobset-manager, trainer-controller-manager   the workload controllers Horus runs
#                                  beside (links; own cache folder: workloads/build.sh)
# etcd comes from Debian's etcd-server package (see docs/decisions.md).
# Cache: ${HORUS_CACHE_DIR:-~/.cache/horus}/bin/k8s-<version>-…-coredns-<version>/ (every pinned
# version is in the name, so a new pin builds a new folder beside the old one); a binary already
# there is reused, so only the first build on a machine pays. Progress goes to stderr, the folder to stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/versions.env"

fail() { echo "build.sh: step '$1' failed: $2" >&2; exit 1; }

k8s_version=$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v1\./ {print $2; exit}' "$here/go.mod")
[[ -n $k8s_version ]] || k8s_version=$(sed -n 's/^require k8s.io\/kubernetes \(v1\.[0-9.]*\)$/\1/p' "$here/go.mod")
[[ -n $k8s_version ]] || fail "read Kubernetes version" "no 'k8s.io/kubernetes v1.x.y' requirement in $here/go.mod"
[[ $k8s_version =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || fail "read Kubernetes version" "odd version '$k8s_version' in go.mod"
minor=${BASH_REMATCH[1]}

coredns_version=$(awk '$1=="require" && $2=="github.com/coredns/coredns" {print $3}' "$here/coredns/go.mod")
[[ $coredns_version =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "read CoreDNS version" "no 'require github.com/coredns/coredns vX.Y.Z' in $here/coredns/go.mod"

cache=${HORUS_CACHE_DIR:-$HOME/.cache/horus}
out="$cache/bin/k8s-$k8s_version-kwok-$KWOK_VERSION-helm-$HELM_VERSION-containerd-$CONTAINERD_VERSION-coredns-$coredns_version"
mkdir -p "$out"
# One build at a time per cache: a second build.sh (a test tier run beside setup.sh) waits here,
# then finds the binaries built and only prints the folder.
# Without flock (util-linux) on PATH the build runs unlocked, as before the lock existed.
if command -v flock >/dev/null 2>&1; then
  exec 9>"$cache/bin/.build.lock"
  flock -n 9 || { echo "build.sh: another build.sh is filling $cache/bin; waiting for it ..." >&2; flock 9; }
fi

# The workload controllers (see the end of this script) build beside the rest; a step that
# fails here stops that build too.
wl_file=$(mktemp)
"$BASH" "$here/workloads/build.sh" > "$wl_file" &
wl_pid=$!
trap 'pkill -P "$wl_pid" 2>/dev/null || true; kill "$wl_pid" 2>/dev/null || true; rm -f "$wl_file"' EXIT

ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

need_go() {
  command -v go >/dev/null 2>&1 || fail "find Go toolchain" \
    "no 'go' on PATH, and $out lacks $1. Install Go >= 1.26 (Kubernetes 1.37's go.mod asks for it) and retry."
}

export CGO_ENABLED=0 GOFLAGS=-mod=mod
for b in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy horus-pause; do
  [[ -x $out/$b ]] && continue
  need_go "$b"
  echo "build.sh: building $b $k8s_version (first time on this machine; minutes) ..." >&2
  (cd "$here" && go build -trimpath -ldflags "$ldflags" -o "$out/$b.tmp.$$" "./cmd/$b") \
    || fail "go build $b" "see the compiler output above; 'go env' and network access to the Go module proxy are needed"
  mv "$out/$b.tmp.$$" "$out/$b"
done
# helm: the offline Kubernetes version as Helm's own Makefile sets it (pkg/chartutil and
# pkg/lint/rules), so `helm template` needs no --kube-version, as with a released helm.
helm_ldflags="-s -w"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
  helm_ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$HELM_K8S_MINOR"
done
for spec in "kwok sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" "helm helm.sh/helm/v3/cmd/helm@$HELM_VERSION"; do
  set -- $spec
  flags="-s -w"; [[ $1 == helm ]] && flags=$helm_ldflags
  # a binary built with other flags (the stamp records them) is built again
  [[ -x $out/$1 && $(cat "$out/$1.ldflags" 2>/dev/null || echo "-s -w") == "$flags" ]] && continue
  need_go "$1"
  echo "build.sh: go install $2 ..." >&2
  tmp=$(mktemp -d)
  GOBIN=$tmp GOFLAGS= go install -trimpath -ldflags "$flags" "$2" \
    || { rm -rf "$tmp"; fail "go install $2" "see the output above"; }
  mv "$tmp/$1" "$out/$1"; rm -rf "$tmp"
  echo "$flags" > "$out/$1.ldflags"
done
# containerd for the real nodes, from its own module as the kubelet comes from Kubernetes': CDI
# on by default (the DRA driver's device specs), config version 3. Tags and version stamp as
# containerd's Makefile sets them; CGO off leaves out only the cgo snapshotters (btrfs,
# devmapper, zfs), which realnode_config.py disables anyway; the shim gets Makefile's no_grpc tag.
ctrd_pkg=github.com/containerd/containerd/v2
ctrd_flags="-s -w -X $ctrd_pkg/version.Version=$CONTAINERD_VERSION -X $ctrd_pkg/version.Package=$ctrd_pkg"
for spec in "containerd urfave_cli_no_docs" "containerd-shim-runc-v2 urfave_cli_no_docs,no_grpc" "ctr urfave_cli_no_docs"; do
  set -- $spec
  [[ -x $out/$1 ]] && continue
  need_go "$1"
  echo "build.sh: go install $ctrd_pkg/cmd/$1@$CONTAINERD_VERSION ..." >&2
  tmp=$(mktemp -d)
  GOBIN=$tmp GOFLAGS= go install -trimpath -tags "$2" -ldflags "$ctrd_flags" "$ctrd_pkg/cmd/$1@$CONTAINERD_VERSION" \
    || { rm -rf "$tmp"; fail "go install $ctrd_pkg/cmd/$1@$CONTAINERD_VERSION" "see the output above"; }
  mv "$tmp/$1" "$out/$1"; rm -rf "$tmp"
done
# CoreDNS, the cluster's DNS server, pinned in coredns/go.mod: upstream's main with the plugins
# the cluster's Corefile uses (coredns/main.go says why not all of them).
if [[ ! -x $out/coredns ]]; then
  need_go coredns
  echo "build.sh: building coredns $coredns_version (coredns/main.go) ..." >&2
  (cd "$here/coredns" && go build -trimpath \
      -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$coredns_version" \
      -o "$out/coredns.tmp.$$" .) \
    || fail "go build coredns" "see the compiler output above; network access to the Go module proxy is needed"
  mv "$out/coredns.tmp.$$" "$out/coredns"
fi
# Prometheus and promtool (demo, e2e tests), in a cache folder of their own keyed by their
# version and build tags, so pinning another Prometheus rebuilds only Prometheus, then linked
# into $out, where the tests and the demo look. Tags: only the Kubernetes service discovery
# (remove_all_sd + enable_kubernetes_sd; the others compile the cloud SDKs), netgo as upstream's
# .promu.yml; not builtinassets, whose web UI needs npm: the HTTP API is all the demo and tests
# use. Version stamp as .promu.yml sets it (module v0.3MM.P is Prometheus 3.MM.P).
prom_tags=netgo,remove_all_sd,enable_kubernetes_sd
prom_out="$cache/bin/prometheus-$PROMETHEUS_VERSION-k8s-sd"
if [[ ! -x $prom_out/prometheus || ! -x $prom_out/promtool ]]; then
  need_go prometheus
  [[ $PROMETHEUS_VERSION =~ ^v0\.3([0-9][0-9])\.([0-9]+)$ ]] \
    || fail "read Prometheus version" "expected a v0.3MM.P module version, got '$PROMETHEUS_VERSION'"
  prom_release=3.$((10#${BASH_REMATCH[1]})).${BASH_REMATCH[2]}
  prom_pkg=github.com/prometheus/prometheus
  prom_flags="-s -w -X github.com/prometheus/common/version.Version=$prom_release"
  prom_flags+=" -X github.com/prometheus/common/version.Revision=$PROMETHEUS_VERSION"
  prom_flags+=" -X github.com/prometheus/common/version.Branch=HEAD"
  prom_flags+=" -X github.com/prometheus/common/version.BuildUser=horus"
  prom_flags+=" -X github.com/prometheus/common/version.BuildDate=19700101-00:00:00"
  echo "build.sh: go install $prom_pkg/cmd/{prometheus,promtool}@$PROMETHEUS_VERSION (tags $prom_tags; first time: minutes) ..." >&2
  tmp=$(mktemp -d)
  GOBIN=$tmp GOFLAGS= go install -trimpath -tags "$prom_tags" -ldflags "$prom_flags" \
      "$prom_pkg/cmd/prometheus@$PROMETHEUS_VERSION" "$prom_pkg/cmd/promtool@$PROMETHEUS_VERSION" \
    || { rm -rf "$tmp"; fail "go install $prom_pkg/cmd/prometheus@$PROMETHEUS_VERSION" "see the output above"; }
  mkdir -p "$prom_out"
  mv "$tmp/prometheus" "$tmp/promtool" "$prom_out/"; rm -rf "$tmp"
fi
for b in prometheus promtool; do
  [[ $(readlink "$out/$b" 2>/dev/null) == "$prom_out/$b" ]] || ln -sfn "$prom_out/$b" "$out/$b"
done
# Kueue, JobSet and Kubeflow Trainer with their own manifests, from one Go module of their own
# (workloads/go.mod), in a cache folder keyed by their three versions; linked into $out like
# Prometheus. Their manifests stay in that folder (the links' target folder, manifests/). Built
# beside the binaries above (started before them): on a first build the two go commands share
# the CPUs where one alone leaves a core idle (links, downloads, a package waiting on another).
wait "$wl_pid" || exit 1
wl_out=$(cat "$wl_file"); rm -f "$wl_file"
for b in kueue jobset-manager trainer-controller-manager; do
  [[ $(readlink "$out/$b" 2>/dev/null) == "$wl_out/$b" ]] || ln -sfn "$wl_out/$b" "$out/$b"
done
echo "$out"
