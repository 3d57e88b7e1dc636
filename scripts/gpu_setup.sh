#!/usr/bin/env bash
# Install attnzoo on an offline GPU machine and run scripts/gpu_check.py there, in one command
# that ends within --total seconds, the installation included.
#
#   bash scripts/gpu_setup.sh [--wheels DIR] [--data DIR] [--out DIR] [--total SECONDS]
#                             [-- OPTIONS]
#
# Such a machine has Python with torch, triton, numpy, einops, tiktoken, tokenizers, matplotlib
# and pytest, but no network and no hydra-core, omegaconf or antlr4-python3-runtime (W&B is not
# needed: gpu_check runs with logging disabled). --wheels names a folder holding wheels of those
# three, --data one holding tinyshakespeare/input.txt (for the training benchmark); by default
# .gpu/wheels/ and .gpu/data/ in the checkout (keep .gpu/ out of git with .git/info/exclude, so
# that it travels with the working tree but is never committed).
#
# Everything goes under a private prefix, nothing into the system's Python: the wheels with
# --no-deps, then this checkout itself, as a regular (not editable) install, so that the tests
# and scripts import attnzoo the way a user's environment does. The commands then run outside
# the checkout (whose attnzoo/ folder, lacking kernels/, would shadow the installed package).
#
# --out: the report folder (default results/gpu); --total: the seconds the whole command may take
# (default 360): what the installation leaves, less 10 s for Python's start and the last report,
# is gpu_check's --budget. OPTIONS after -- go to
# gpu_check.py (e.g. --budget 900, --dry-run) and win over the ones this script passes.
set -euo pipefail

START=$SECONDS
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WHEELS="$ROOT/.gpu/wheels"
DATA=""
OUT="$ROOT/results/gpu"
TOTAL=360
PY="${PYTHON:-python3}"
PREFIX="${TMPDIR:-/tmp}/attnzoo-gpu-$$"

while [ $# -gt 0 ]; do
  case "$1" in
    --wheels) WHEELS="$2"; shift 2 ;;
    --data) DATA="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --total) TOTAL="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "gpu_setup.sh: unknown option $1 (see the comment at the top)" >&2; exit 2 ;;
  esac
done
if [ -z "$DATA" ] && [ -d "$ROOT/.gpu/data" ]; then DATA="$ROOT/.gpu/data"; fi
if ! [[ "$TOTAL" =~ ^[0-9]+$ ]]; then
  echo "gpu_setup.sh: --total must be whole seconds, got '$TOTAL'" >&2; exit 2
fi

mkdir -p "$PREFIX/run"
if compgen -G "$WHEELS/*.whl" > /dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --target "$PREFIX/site" "$WHEELS"/*.whl
else
  echo "gpu_setup.sh: no wheels in $WHEELS; using what $PY already has" >&2
fi
if ! "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --target "$PREFIX/proj" \
    "$ROOT" > "$PREFIX/pip.log" 2>&1; then
  # No build backend on the machine (setuptools without `wheel`): lay the packages out as
  # pyproject.toml's package-dir does, which is all the installed wheel holds.
  echo "gpu_setup.sh: pip could not build the checkout ($(tail -n 1 "$PREFIX/pip.log")); copying its packages" >&2
  rm -rf "$PREFIX/proj" && mkdir -p "$PREFIX/proj"
  cp -r "$ROOT/attnzoo" "$PREFIX/proj/attnzoo"
  cp -r "$ROOT/kernels" "$PREFIX/proj/attnzoo/kernels"
  cp -r "$ROOT/conf" "$PREFIX/proj/attnzoo/conf"
fi
export PYTHONPATH="$PREFIX/proj:$PREFIX/site${PYTHONPATH:+:$PYTHONPATH}"

cd "$PREFIX/run"
"$PY" -c "import attnzoo.kernels, hydra, omegaconf; print('attnzoo from', attnzoo.kernels.__file__)"
SETUP=$((SECONDS - START))
BUDGET=$((TOTAL - SETUP - 10))
echo "gpu_setup.sh: installed in $SETUP s; $BUDGET s left for the check"
if [ "$BUDGET" -le 0 ]; then
  echo "gpu_setup.sh: the installation took $SETUP s of --total $TOTAL s: no time left for the check" >&2
  exit 2
fi
ARGS=(--out "$OUT" --budget "$BUDGET" --setup-s "$SETUP")
if [ -n "$DATA" ]; then ARGS+=(--data-dir "$DATA"); fi
set +e
"$PY" "$ROOT/scripts/gpu_check.py" "${ARGS[@]}" "$@"
status=$?
cd / && rm -rf "$PREFIX"
exit $status
