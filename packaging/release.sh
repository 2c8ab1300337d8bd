#!/usr/bin/env bash
# Build the release tarball dist/release/lite-<version>-linux-<arch>.tar.gz holding `lite` (the one-file
# executable of packaging/build.sh), `install.sh` and `sha256sum` (the checksum of `lite`, in `sha256sum -c`
# format; install.sh checks it), plus the tarball's own checksum beside it (<tarball>.sha256sum).
# Usage: packaging/release.sh [python]   (as build.sh; SKIP_BUILD=1 reuses an existing $DIST_DIR/bin/lite)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${1:-${PYTHON:-python3}}"
DIST="${DIST_DIR:-dist}"
[ "${SKIP_BUILD:-0}" = 1 ] || bash packaging/build.sh "$PY"
version=$("$DIST/lite/lite" --version | awk '{print $2}')  # the onedir: running the one file would unpack it
case $(uname -m) in
    x86_64) arch=amd64 ;;
    aarch64 | arm64) arch=arm64 ;;
    *) arch=$(uname -m) ;;
esac
name=lite-$version-linux-$arch
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir "$stage/$name"
cp "$DIST/bin/lite" "$stage/$name/lite"
cp packaging/install.sh "$stage/$name/install.sh"
chmod 0755 "$stage/$name/lite" "$stage/$name/install.sh"
(cd "$stage/$name" && sha256sum lite > sha256sum)
mkdir -p "$DIST/release"
tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - "$name" \
    | gzip -n -6 > "$DIST/release/$name.tar.gz"
(cd "$DIST/release" && sha256sum "$name.tar.gz" > "$name.tar.gz.sha256sum")
echo "built $DIST/release/$name.tar.gz ($(du -h "$DIST/release/$name.tar.gz" | cut -f1))"
