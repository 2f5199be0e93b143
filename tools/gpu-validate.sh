#!/usr/bin/env bash
# Runs every GPU-only check of Horus (pytest -m gpu) on a machine with an NVIDIA GPU, its
# driver, nvidia-cuda-mps-control and PyTorch with CUDA, and writes the log and facts about
# the machine to ${OUT:-gpu-validation}/ (docs/gpu-validation.md). Horus runs from src/ (no
# install); Python packages the machine lacks can come as wheels in .whl/ (pip download here,
# installed with --no-index there), since such machines often reach no package index.
set -uo pipefail
out=${OUT:-gpu-validation}
mkdir -p "$out"
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/horus-site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/horus-site
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    echo "mps control: $(command -v nvidia-cuda-mps-control || echo missing)"
    python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)'
} 2>&1 | tee "$out/machine.txt"
python3 -m pytest -p no:cacheprovider -o addopts= -m gpu -s -rs -v --timeout 300 \
    tests/integration/agent/test_agent_gpu.py tests/unit/deviceplugin/test_dp_nvml_gpu.py \
    tests/unit/predictor/test_predictor_measure.py 2>&1 | tee "$out/gpu-tests.log"
exit "${PIPESTATUS[0]}"
