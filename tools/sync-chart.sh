#!/usr/bin/env bash
# Copy the files the helm chart ships from their single source into charts/horus/:
#   manifests/crds/*.yaml                -> charts/horus/files/crds/   (templates/crds.yaml renders
#                                           them, so `helm upgrade` applies a changed CRD)
#   dashboards/*.json                    -> charts/horus/dashboards/   (ConfigMaps when dashboards.enabled)
#   manifests/scheduler/*.yaml           -> charts/horus/files/scheduler/  (extender configuration)
#   manifests/prometheus/*.rules.yaml    -> charts/horus/files/prometheus/ (the PrometheusRule's groups)
# Copies, not symlinks: `helm package` and chart repositories do not follow symlinks reliably.
# `--check` changes nothing and fails when a copy differs from its source (the e2e tests run
# the same comparison; run this script without arguments to fix it).
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
[[ ${1:-} == --check ]] && check=1
status=0
sync_dir() {  # sync_dir SRC_DIR PATTERN DEST_DIR
  local src=$1 pattern=$2 dest=$3
  [[ -d $src ]] || return 0
  if (( check )); then
    for f in "$src"/$pattern; do
      [[ -e $f ]] || continue
      cmp -s "$f" "$dest/$(basename "$f")" || { echo "out of date: $dest/$(basename "$f") (run tools/sync-chart.sh)"; status=1; }
    done
    for f in "$dest"/$pattern; do
      [[ -e $f ]] || continue
      [[ -e $src/$(basename "$f") ]] || { echo "stale: $f has no source in $src"; status=1; }
    done
  else
    mkdir -p "$dest"
    find "$dest" -maxdepth 1 -name "$pattern" -type f -delete
    for f in "$src"/$pattern; do [[ -e $f ]] && cp "$f" "$dest/"; done
  fi
  return 0
}
sync_dir manifests/crds '*.yaml' charts/horus/files/crds
sync_dir dashboards '*.json' charts/horus/dashboards
sync_dir manifests/scheduler '*.yaml' charts/horus/files/scheduler
sync_dir manifests/prometheus '*.rules.yaml' charts/horus/files/prometheus
# the chart's old crds/ folder: Helm would install it before the templates and collide with
# templates/crds.yaml
if [[ -d charts/horus/crds ]]; then
  if (( check )); then echo "stale: charts/horus/crds/ (the CRD lives in files/crds now)"; status=1
  else rm -rf charts/horus/crds; fi
fi
exit $status
