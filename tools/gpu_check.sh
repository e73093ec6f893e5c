#!/usr/bin/env bash
# The GPU check (tools/gpu_check.py): run from the repository root on a machine with one CUDA GPU and its own PyTorch,
# timm and transformers; results go to $OUT/gpu_check.json (the device tool's $OUT), else ./gpu_check/.
# Timed on an H200 (book/performance.md, "The GPU check"); nothing is downloaded.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export HF_HUB_OFFLINE=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PYTHON="${PYTHON:-$(command -v python3 || command -v python)}"
# On a lent GPU machine (no internet), what travels with the call is named by two variables, e.g.
#   GPU_CHECK_WHEELS=.whl GPU_CHECK_TOKENIZERS=.gpu/tok bash tools/gpu_check.sh --only rehearsals
# GPU_CHECK_WHEELS: a folder of wheels the machine lacks (papermill, ipykernel, open_clip, ...; for its Python),
# installed into /tmp/site, never into the machine's own Python.
if [ -n "${GPU_CHECK_WHEELS:-}" ]; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$GPU_CHECK_WHEELS"/*.whl
  export PYTHONPATH="$PYTHONPATH:/tmp/site" PATH="/tmp/site/bin:$PATH"
fi
# GPU_CHECK_TOKENIZERS: the stand-ins' three tokenizers (python -m tools.gpu_check --save-tokenizers DIR, large
# files xz-compressed) and WordNet's noun files under DIR/wordnet; with it the rehearsals run, in a Jupyter kernel of
# this Python named as the notebooks' (frozen-lip).
if [ -n "${GPU_CHECK_TOKENIZERS:-}" ]; then
  rm -rf /tmp/standin-tokenizers && cp -r "$GPU_CHECK_TOKENIZERS" /tmp/standin-tokenizers
  "$PYTHON" -c "import lzma, pathlib, sys
for p in pathlib.Path(sys.argv[1]).rglob('*.xz'): p.with_suffix('').write_bytes(lzma.decompress(p.read_bytes())); p.unlink()" \
    /tmp/standin-tokenizers
  export STANDIN_TOKENIZERS=/tmp/standin-tokenizers
  # ImageNet's class tree for the stand-in IN-21k (WordNet 3.0's noun files, xz, where no Debian package is installed)
  if [ -d /tmp/standin-tokenizers/wordnet ] && [ ! -f /usr/share/wordnet/data.noun ]; then
    export WORDNET_DIR=/tmp/standin-tokenizers/wordnet
  fi
  "$PYTHON" -m ipykernel install --user --name frozen-lip >/dev/null
  set -- --world /tmp/frozen-lip-world "$@"
fi
if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true; fi
exec "$PYTHON" -m tools.gpu_check --device "${GPU_CHECK_DEVICE:-cuda}" --out "${OUT:-gpu_check}" "$@"
