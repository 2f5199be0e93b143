#!/usr/bin/env bash
# Every benchmark, each printing its figures and writing benchmarks/results/*.json.
# Baselines run in the same invocation as what they are compared with (ratios), because
# these machines are noisy. `make bench` = all; `tools/dev/bench.sh predictor scheduler` = some.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash tools/dev/setup.sh
export HORUS_BIN_DIR=$(cat .venv/.horus-bin-dir)
export PATH="$PWD/.venv/bin:$HORUS_BIN_DIR:$PATH" PYTHONUNBUFFERED=1
which=("$@")
((${#which[@]})) || which=(predictor pair_signal scheduler operator_e2e apiserver_costs deviceplugin agent realnodes_latency kueue_gang_start)
for b in "${which[@]}"; do
  [[ -f benchmarks/$b.py ]] || { echo "bench: no benchmarks/$b.py" >&2; exit 2; }
  echo "==> benchmarks/$b.py" >&2
  start=$(date +%s)
  python "benchmarks/$b.py"
  echo "==> $b took $(( $(date +%s) - start ))s" >&2
done
