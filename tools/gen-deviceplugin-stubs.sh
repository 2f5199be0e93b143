#!/usr/bin/env bash
# Regenerate the checked-in Python stubs of the kubelet device-plugin API (v1beta1) from
# src/horus/deviceplugin/api/api.proto with grpcio-tools. The stubs are checked in so that
# installing Horus never needs protoc; rerun this after editing the .proto or upgrading grpcio
# (the generated code names the minimum grpcio/protobuf runtime it needs).
#   tools/gen-deviceplugin-stubs.sh            # uses .venv/bin/python, else python3
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
py="${PYTHON:-$root/.venv/bin/python}"
[ -x "$py" ] || py=python3
cd "$root/src"
"$py" -m grpc_tools.protoc -I . \
  --python_out=. --pyi_out=. --grpc_python_out=. \
  horus/deviceplugin/api/api.proto
echo "regenerated src/horus/deviceplugin/api/api_pb2{.py,.pyi,_grpc.py}"
