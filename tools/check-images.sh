#!/usr/bin/env bash
# Check the three images without a Docker engine: lint each Dockerfile (tests/e2e/dockerlint.py),
# then replay its Python install step — copy what the Dockerfile COPYs (pyproject.toml,
# README.md, src/) to a scratch folder, `python -m venv` + `pip install <its target>` there, and
# run its ENTRYPOINT with --help from outside the repository. Slow, so it is a script and not
# part of `make test`: measured 323 s for the operator image's install on the 2-core dev machine;
# the predictor image pulls torch (GBs). ROLES="operator device-plugin" picks images.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT
.venv/bin/python - <<'PY'
import sys; sys.path.insert(0, "tests/e2e")
from pathlib import Path
import dockerlint
bad = [p for r in ("operator", "predictor", "device-plugin") for p in dockerlint.check(Path(r) / "Dockerfile", r)]
print("\n".join(bad) or "dockerlint: 3 Dockerfiles clean"); sys.exit(1 if bad else 0)
PY
mkdir -p "$scratch/src" && cp pyproject.toml README.md "$scratch/src/" && cp -r src "$scratch/src/src"
for role in ${ROLES:-operator predictor device-plugin}; do
  start=$(date +%s)
  target=$(grep -oE 'pip install --no-cache-dir "[^"]+"' "$role/Dockerfile" | sed -E 's/.*"([^"]+)"/\1/')
  entry=$(grep -E '^ENTRYPOINT' "$role/Dockerfile" | sed -E 's/ENTRYPOINT \[(.*)\]/\1/; s/"//g; s/,//g')
  $PY -m venv "$scratch/$role"
  (cd "$scratch/src" && "$scratch/$role/bin/pip" install -q "$target")
  # shellcheck disable=SC2086
  (cd "$scratch" && PATH="$scratch/$role/bin:$PATH" $entry --help >/dev/null)
  [[ $role == device-plugin ]] && (cd "$scratch" && "$scratch/$role/bin/python" -m horus.agent --help >/dev/null)
  echo "$role: pip install $target + '$entry --help' ok in $(( $(date +%s) - start ))s"
done
