#!/bin/sh
# lite: one file to ship. This shell header is followed by a gzip'd tar of the PyInstaller onedir build; the
# first run unpacks it once into a directory named by the payload's SHA-256 and every run then execs the
# unpacked `lite` (a shell start plus one exec: the onedir's start-up, not an unpack per start as PyInstaller's
# onefile mode does). The directory persists, so container shims and the zygote, which re-exec
# sys.executable (the unpacked binary), outlive the agent that started them.
#
# Where: $LITE_UNPACK_DIR, else /var/lib/lite/.bin for root, else ${XDG_CACHE_HOME:-$HOME/.cache}/lite/bin
# (never a shared default such as /tmp).
# Unpacking goes to a temp dir beside the target, then one rename: a concurrent start either sees the whole
# tree or unpacks its own copy and throws it away. Built by packaging/sfx.sh (fills in the two values below).
LITE_PAYLOAD_SHA256=@@HASH@@
LITE_PAYLOAD_OFFSET=@@OFFSET@@
if [ -n "${LITE_UNPACK_DIR:-}" ]; then
    base=$LITE_UNPACK_DIR
elif [ "$(id -u)" -eq 0 ]; then
    base=/var/lib/lite/.bin
elif [ -n "${XDG_CACHE_HOME:-}" ] || [ -n "${HOME:-}" ]; then
    base=${XDG_CACHE_HOME:-$HOME/.cache}/lite/bin
else  # never a shared default such as /tmp: another user could plant a tree there
    echo "lite: set HOME or LITE_UNPACK_DIR (where to unpack this executable)" >&2
    exit 1
fi
dir=$base/$LITE_PAYLOAD_SHA256
if [ ! -x "$dir/lite/lite" ]; then
    self=$0
    case $self in */*) ;; *) self=$(command -v -- "$self") ;; esac
    mkdir -p "$base" || exit 1
    if command -v sha256sum >/dev/null 2>&1; then  # a truncated or altered file must not be run
        got=$(tail -c "+$LITE_PAYLOAD_OFFSET" "$self" | sha256sum | cut -c1-64)
        [ "$got" = "$LITE_PAYLOAD_SHA256" ] || { echo "lite: $self is damaged (payload sha256 $got)" >&2; exit 1; }
    fi
    tmp=$(mktemp -d "$base/.unpack.XXXXXX") || exit 1
    if ! tail -c "+$LITE_PAYLOAD_OFFSET" "$self" | tar -xzf - -C "$tmp"; then
        rm -rf "$tmp"
        echo "lite: cannot unpack $self into $base" >&2
        exit 1
    fi
    chmod 0755 "$tmp"
    if ! mv -T "$tmp" "$dir" 2>/dev/null && [ ! -e "$dir" ]; then
        mv "$tmp" "$dir"  # a mv without -T; the target is still free
    fi
    rm -rf "$tmp"  # left only when another start won the rename
    [ -x "$dir/lite/lite" ] || { echo "lite: cannot create $dir" >&2; exit 1; }
fi
exec "$dir/lite/lite" "$@"
