#!/usr/bin/env bash
# The main job: a local Kubernetes control plane with simulated H100 nodes, shown.
# `make demo-down` (tools/dev/demo.sh down) stops it.
set -euo pipefail
cd "$(dirname "$0")/../.."
export HORUS_CLUSTER_DIR=${HORUS_CLUSTER_DIR:-$HOME/.local/state/horus/demo-cluster}
if [[ ${1:-up} == down ]]; then
  [[ -x .venv/bin/horus ]] || { echo "nothing to stop (no .venv)"; exit 0; }
  exec .venv/bin/horus dev cluster down
fi
start=$(date +%s)
bash tools/dev/setup.sh
export HORUS_BIN_DIR=$(cat .venv/.horus-bin-dir)
export PATH="$PWD/.venv/bin:$HORUS_BIN_DIR:$PATH"
horus dev cluster up
horus dev cluster add-nodes --count ${DEMO_NODES:-4} --gpus-per-node 8 --gpu-model H100 --gpu-memory-mib 81920
export KUBECONFIG=$HORUS_CLUSTER_DIR/kubeconfig
echo
kubectl get nodes -L horus.io/gpu-model \
  -o custom-columns='NAME:.metadata.name,STATUS:.status.conditions[?(@.type=="Ready")].status,GPU-CORE:.status.capacity.horus\.io/gpu-core,GPU-MEM-MIB:.status.capacity.horus\.io/gpu-memory,MODEL:.metadata.labels.horus\.io/gpu-model'
echo
echo "GPUs of the first node (annotation horus.io/gpu-inventory):"
kubectl get node gpu-node-0000 -o jsonpath='{.metadata.annotations.horus\.io/gpu-inventory}' | python3 -m json.tool | head -16
echo
echo "demo ready in $(( $(date +%s) - start ))s. Explore it:"
echo "  export KUBECONFIG=$KUBECONFIG PATH=$HORUS_BIN_DIR:\$PATH"
echo "  kubectl get nodes"
echo "stop it with: make demo-down"
