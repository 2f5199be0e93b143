#!/usr/bin/env bash
# The main job (`make demo`): a local Kubernetes control plane with real kubelet nodes (simulated
# H100 GPUs), Horus' images built from this checkout, the chart installed with helm (operator
# Deployment + node DaemonSet in-cluster), a real Prometheus, the example DLJobs as real
# containers, a live placement table and a PNG report (src/horus/devcluster/demo.py says how).
# Real nodes need root. `make demo-down` (tools/dev/demo.sh down) stops everything it started
# and undoes what it changed on the host.
# DEMO_QUICK=1: the test suite's smaller variant. DEMO_KWOK=1: kwok nodes (no containers, no
# root). HORUS_DEMO_DIR: where its state lives.
set -euo pipefail
cd "$(dirname "$0")/../.."
export HORUS_DEMO_DIR=${HORUS_DEMO_DIR:-$HOME/.local/state/horus/demo}
if [[ ${1:-up} == down ]]; then
  # Whichever Horus is installed: this checkout's .venv, a `horus` on PATH (pip install), or
  # the package importable by python3. The demo's state file says what to stop either way.
  if [[ -x .venv/bin/horus ]]; then
    exec .venv/bin/horus dev demo down
  elif command -v horus >/dev/null 2>&1; then
    exec horus dev demo down
  elif python3 -c 'import horus' >/dev/null 2>&1; then
    exec python3 -m horus dev demo down
  elif [[ -f $HORUS_DEMO_DIR/demo.json ]]; then
    echo "a demo is up in $HORUS_DEMO_DIR but no Horus is installed to stop it:" >&2
    echo "  bash tools/dev/setup.sh && make demo-down   (or pip install . && horus dev demo down)" >&2
    exit 1
  fi
  echo "no demo runs in $HORUS_DEMO_DIR; nothing to stop"
  exit 0
fi
start=$(date +%s)
bash tools/dev/setup.sh
export HORUS_BIN_DIR=$(cat .venv/.horus-bin-dir)
export PATH="$PWD/.venv/bin:$HORUS_BIN_DIR:$PATH"
horus dev demo up
echo "make demo took $(( $(date +%s) - start ))s in all (setup included)"
