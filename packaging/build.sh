#!/usr/bin/env bash
# Build the frozen `lite` executable (PyInstaller onedir) into dist/lite/lite.
# Usage: packaging/build.sh [python]   (default: $PYTHON, else the python on PATH; needs pyinstaller installed)
# DIST_DIR and WORK_DIR override the output (default dist/) and scratch (default build/pyinstaller) dirs.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${1:-${PYTHON:-python3}}"
"$PY" -m PyInstaller --noconfirm --clean --log-level WARN \
    --distpath "${DIST_DIR:-dist}" --workpath "${WORK_DIR:-build/pyinstaller}" packaging/lite.spec
echo "built ${DIST_DIR:-dist}/lite/lite ($(du -sh "${DIST_DIR:-dist}/lite" | cut -f1))"
