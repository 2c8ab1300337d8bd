#!/usr/bin/env bash
# Build the `lite` executable: the PyInstaller onedir (dist/lite/lite), then the one file to ship
# (dist/bin/lite: a shell header plus the onedir as a gzip'd tar, unpacked once per version; packaging/sfx.sh).
# Usage: packaging/build.sh [python]   (default: $PYTHON, else the python on PATH; needs pyinstaller installed)
# DIST_DIR and WORK_DIR override the output (default dist/) and scratch (default build/pyinstaller) dirs.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${1:-${PYTHON:-python3}}"
DIST="${DIST_DIR:-dist}"
rm -rf "$DIST/lite" "$DIST/bin/lite"
# The bundled modules are compiled here (PyInstaller's compile()): without the column tables that Python 3.11
# keeps per instruction for tracebacks' ^^^ markers (line numbers stay). ~0.4 MB less resident per process.
export PYTHONNODEBUGRANGES=1
"$PY" -m PyInstaller --noconfirm --clean --log-level WARN \
    --distpath "$DIST" --workpath "${WORK_DIR:-build/pyinstaller}" packaging/lite.spec
echo "built $DIST/lite/lite ($(du -sh "$DIST/lite" | cut -f1) unpacked)"
bash packaging/sfx.sh "$DIST/lite" "$DIST/bin/lite"
