#!/usr/bin/env bash
# The GPU check (tools/gpu_check.py): run from the repository root on a machine with one CUDA GPU and its own PyTorch,
# timm and transformers; results go to $OUT/gpu_check.json (the device tool's $OUT), else ./gpu_check/.
# Sized for one call of at most 8 minutes (not yet timed on a GPU); nothing is downloaded.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export HF_HUB_OFFLINE=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PYTHON="${PYTHON:-$(command -v python3 || command -v python)}"
# Packages the GPU machine lacks (papermill, ipykernel, open_clip, ...), carried as wheels under .whl/ (see
# book/performance.md, "The GPU check"): installed into /tmp/site, never into the machine's own Python.
if [ -d .whl ]; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="$PYTHONPATH:/tmp/site" PATH="/tmp/site/bin:$PATH"
fi
# The rehearsals on the GPU need the stand-ins' three tokenizers (python -m tools.gpu_check --save-tokenizers .gpu/tok,
# then xz the large files) and a Jupyter kernel of this Python named as the notebooks' (frozen-lip).
if [ -d .gpu/tok ]; then
  rm -rf /tmp/standin-tokenizers && cp -r .gpu/tok /tmp/standin-tokenizers
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
