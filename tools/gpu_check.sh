#!/usr/bin/env bash
# The GPU check (tools/gpu_check.py): run from the repository root on a machine with one CUDA GPU and its own PyTorch,
# timm and transformers; results go to $OUT/gpu_check.json (the device tool's $OUT), else ./gpu_check/.
# Sized for one call of at most 8 minutes (not yet timed on a GPU); nothing is downloaded.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export HF_HUB_OFFLINE=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PYTHON="${PYTHON:-$(command -v python3 || command -v python)}"
if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true; fi
exec "$PYTHON" -m tools.gpu_check --device "${GPU_CHECK_DEVICE:-cuda}" --out "${OUT:-gpu_check}" "$@"
