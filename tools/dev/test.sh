#!/usr/bin/env bash
# The whole test suite, as CI runs it: setup, static checks, then every pytest tier this
# machine can run (unit, integration and e2e against a real local control plane; GPU tests
# skip themselves where no NVIDIA GPU is present). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/../.."
start=$(date +%s)
bash tools/dev/setup.sh
export HORUS_BIN_DIR=$(cat .venv/.horus-bin-dir)
export PATH="$PWD/.venv/bin:$HORUS_BIN_DIR:$PATH"

echo "==> ruff" >&2
ruff check src tests benchmarks
ruff format --check src tests benchmarks
echo "==> mypy --strict" >&2
mypy
echo "==> import layering" >&2
lint-imports
echo "==> pytest" >&2
rc=0
python -m pytest --durations=25 "$@" || rc=$?
echo "==> tests finished in $(( $(date +%s) - start ))s (exit $rc)" >&2
exit $rc
