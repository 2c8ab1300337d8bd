#!/usr/bin/env bash
# Make the one-file `lite`: packaging/sfx-header.sh followed by a gzip'd tar of a onedir build.
# Usage: packaging/sfx.sh ONEDIR OUT   (ONEDIR holds lite/lite, e.g. dist/lite; OUT is the file to write)
# The output is reproducible for a given onedir (sorted names, fixed owner and mtime, gzip -n).
# Why not PyInstaller's onefile: it unpacks into a fresh /tmp/_MEI* on every start (each `lite`, each shim
# or zygote exec pays ~0.2 s more; bench/startup.py) and deletes it when that process exits, while shims
# must outlive the agent. Unpacked once, this file starts as fast as the onedir.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$1" && pwd)
out=$2
[ -x "$src/lite" ] || { echo "sfx.sh: $src/lite is not an executable" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -C "$(dirname "$src")" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
    -cf - "$(basename "$src")" | gzip -n -6 > "$work/payload.tgz"
hash=$(sha256sum "$work/payload.tgz" | cut -c1-64)
# The offset is written with a fixed width so that filling it in does not move the payload.
sed "s/@@HASH@@/$hash/" "$here/sfx-header.sh" > "$work/header"
size=$(wc -c < "$work/header")  # "@@OFFSET@@" and its value are both 10 characters
offset=$(printf '%010d' $((size + 1)))
sed -i "s/@@OFFSET@@/$offset/" "$work/header"
[ "$(wc -c < "$work/header")" -eq "$size" ] || { echo "sfx.sh: header size changed" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
cat "$work/header" "$work/payload.tgz" > "$out.tmp"
chmod 0755 "$out.tmp"
mv -f "$out.tmp" "$out"
echo "built $out ($(du -h "$out" | cut -f1), payload sha256 ${hash:0:12})"
