#!/usr/bin/env bash
# Regenerate the checked-in Python stubs of the two kubelet APIs the DRA driver speaks
# (horus.dra): plugin registration (k8s.io/kubelet/pkg/apis/pluginregistration/v1) and the
# DRA plugin service (k8s.io/kubelet/pkg/apis/dra/v1), with grpcio-tools, as
# tools/gen-deviceplugin-stubs.sh does for the device plugin. The .proto files are copied from
# the Go module k8s.io/kubelet at $KUBELET_MODULE_VERSION (needs `go`; without it the
# checked-in copies are used) into src/horus/dra/api/ under names of their own, so their
# Python modules cannot collide with the device plugin's api.proto. The stubs are checked in
# so that installing Horus never needs protoc or Go.
#   tools/gen-dra-stubs.sh            # uses .venv/bin/python, else python3
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version="${KUBELET_MODULE_VERSION:-v0.37.2}"
py="${PYTHON:-$root/.venv/bin/python}"
[ -x "$py" ] || py=python3
api="$root/src/horus/dra/api"
if command -v go >/dev/null; then
  dir="$(cd /tmp && go mod download -json "k8s.io/kubelet@$version" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  for pair in "pluginregistration/v1:pluginregistration_v1" "dra/v1:dra_v1"; do
    src="$dir/pkg/apis/${pair%%:*}/api.proto"
    { echo "// Copied by tools/gen-dra-stubs.sh from k8s.io/kubelet@$version pkg/apis/${pair%%:*}/api.proto"
      cat "$src"; } >"$api/${pair##*:}.proto"
  done
  echo "copied the .proto files of k8s.io/kubelet@$version"
else
  echo "go not found: generating from the checked-in .proto files"
fi
cd "$root/src"
"$py" -m grpc_tools.protoc -I . \
  --python_out=. --pyi_out=. --grpc_python_out=. \
  horus/dra/api/pluginregistration_v1.proto horus/dra/api/dra_v1.proto
echo "regenerated src/horus/dra/api/{pluginregistration_v1,dra_v1}_pb2{.py,.pyi,_grpc.py}"
