#!/usr/bin/env bash
# Installs everything Horus' demo and tests need, idempotently, on a fresh Debian machine:
#   - Debian packages: etcd-server (the control plane's store);
#     for real kubelet nodes (horus dev cluster add-nodes --real): runc,
#     containernetworking-plugins, iptables; buildah builds the images from their Dockerfiles,
#     mmdebstrap their Debian base
#   - a virtualenv in .venv with horus[dev,profile] (editable)
#   - the control-plane binaries, the kubelet and the real nodes' containerd 2.x, and
#     Prometheus with its Kubernetes service discovery (demo and tests; Debian's prometheus has
#     it patched out), and the workload controllers Kueue, JobSet and Kubeflow Trainer with their
#     manifests (tools/controlplane/workloads), built from their Go modules
#     (tools/controlplane/build.sh; cached in ~/.cache/horus)
# Re-running costs seconds once everything is there.
set -euo pipefail
cd "$(dirname "$0")/../.."

step() { echo "==> $*" >&2; }
fail() { echo "setup: step '$1' failed: $2" >&2; exit 1; }

SUDO=""
[[ $(id -u) -eq 0 ]] || SUDO="sudo"
missing=()
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v go >/dev/null 2>&1 || [[ -x /usr/local/go/bin/go ]] || missing+=(golang-go)
# Real nodes: one containerd + runc + CNI bridge per kubelet (src/horus/devcluster/realnodes.py);
# containerd itself is built by build.sh (Debian bookworm's 1.6 has no CDI).
command -v runc >/dev/null 2>&1 || missing+=(runc)
[[ -x /usr/lib/cni/bridge ]] || missing+=(containernetworking-plugins)
command -v iptables >/dev/null 2>&1 || missing+=(iptables)
# ip: the apiserver's own address (devcluster/apiaddress.py, every `up` as root) and node bridges
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
command -v buildah >/dev/null 2>&1 || missing+=(buildah)
if ((${#missing[@]})); then
  step "apt-get install ${missing[*]} (Debian packages the cluster, its real nodes and images need)"
  $SUDO apt-get update -qq || fail "apt-get update" "no access to Debian's package mirror?"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || fail "apt-get install ${missing[*]}" "install them by hand and retry"
fi
[[ -x /usr/local/go/bin/go ]] && export PATH="/usr/local/go/bin:$PATH"

PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  step "python virtualenv .venv"
  $PY -m venv .venv || fail "create .venv" "install python3-venv (Python >= 3.11)"
fi
stamp=.venv/.horus-installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
  step "pip install -e .[dev,profile] (first time: torch is large, a few minutes)"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e ".[dev,profile]" || fail "pip install" "see pip's message above"
  touch "$stamp"
fi

step "control-plane binaries, kubelet, containerd, Prometheus, Kueue/JobSet/Trainer (first build: timings in docs/results/build-and-ci.md; cached afterwards)"
bin_dir=$(bash tools/controlplane/build.sh) || exit 1
echo "$bin_dir" > .venv/.horus-bin-dir
step "ready: binaries in $bin_dir"
