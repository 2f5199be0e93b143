#!/usr/bin/env bash
# The main job (`make demo`): a local Kubernetes control plane with simulated H100 nodes, Horus
# installed with helm, the operator and the simulated-GPU agent, a real Prometheus, the example
# DLJobs, a live placement table and a PNG report (src/horus/devcluster/demo.py says how).
# `make demo-down` (tools/dev/demo.sh down) stops everything it started.
# DEMO_QUICK=1: the test suite's smaller variant. HORUS_DEMO_DIR: where its state lives.
set -euo pipefail
cd "$(dirname "$0")/../.."
export HORUS_DEMO_DIR=${HORUS_DEMO_DIR:-$HOME/.local/state/horus/demo}
if [[ ${1:-up} == down ]]; then
  [[ -x .venv/bin/horus ]] || { echo "nothing to stop (no .venv)"; exit 0; }
  exec .venv/bin/horus dev demo down
fi
start=$(date +%s)
bash tools/dev/setup.sh
export HORUS_BIN_DIR=$(cat .venv/.horus-bin-dir)
export PATH="$PWD/.venv/bin:$HORUS_BIN_DIR:$PATH"
horus dev demo up
echo "make demo took $(( $(date +%s) - start ))s in all (setup included)"
