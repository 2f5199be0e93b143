#!/usr/bin/env bash
# Check the images without a Docker engine: lint each Dockerfile (tests/e2e/dockerlint.py),
# build the images with buildah exactly as the local cluster does (`horus dev images build`,
# cached in ~/.cache/horus/images; root), then run each image's ENTRYPOINT with --help inside
# the built image (`buildah run`; the node image's agent too), so a module the image lacks or a
# dependency pip did not install fails here. Not part of `make test`: the real-node tests run
# the operator and node images anyway, and the predictor image pulls torch (GBs).
# IMAGES="operator node predictor" picks images (default: operator node).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
$PY - <<'PY'
import sys; sys.path.insert(0, "tests/e2e")
from pathlib import Path
import dockerlint
bad = [p for r in ("operator", "predictor", "device-plugin") for p in dockerlint.check(Path(r) / "Dockerfile", r)]
print("\n".join(bad) or "dockerlint: 3 Dockerfiles clean"); sys.exit(1 if bad else 0)
PY
images=${IMAGES:-operator node}
start=$(date +%s)
# shellcheck disable=SC2086
$PY -m horus dev images build $images >/dev/null
echo "built ${images} in $(( $(date +%s) - start ))s (horus dev images build)"
for name in $images; do
  $PY - "$name" <<'PY'
import shlex, subprocess, sys
from pathlib import Path
from horus.devcluster.images import IMAGES, _buildah, reference
name = sys.argv[1]
image = IMAGES[name]
entry = next(l for l in Path(image.dockerfile).read_text().splitlines() if l.startswith("ENTRYPOINT"))
argv = __import__("json").loads(entry.split(None, 1)[1])
runs = [argv + ["--help"]] + ([["python", "-m", "horus.agent", "--help"]] if name == "node" else [])
ctr = subprocess.run(_buildah("from", "--pull=never", "--quiet", reference(image.repository)),
                     check=True, capture_output=True, text=True).stdout.strip()
try:
    for cmd in runs:
        got = subprocess.run(_buildah("run", "--isolation", "chroot", ctr, "--", *cmd),
                             capture_output=True, text=True)
        if got.returncode != 0:
            sys.exit(f"{name}: {shlex.join(cmd)} failed in the image:\n{got.stdout}{got.stderr}")
        print(f"{name}: {shlex.join(cmd)} ok in the image")
finally:
    subprocess.run(_buildah("rm", ctr), capture_output=True)
PY
done
