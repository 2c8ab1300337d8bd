#!/bin/sh
# Install lite as a systemd service, in k3s's manner (no download: the executable comes with this script).
#
#   sudo ./install.sh                                        # a server: lite.service
#   sudo LITE_URL=https://10.0.0.1:6443 LITE_TOKEN=K10... ./install.sh   # an agent: lite-agent.service
#
# Environment:
#   INSTALL_LITE_EXEC        flags for `lite server` / `lite agent` (e.g. "--disable-agent --tls-san lb.example")
#   INSTALL_LITE_BIN         the executable to install (default: ./lite beside this script, else `lite` on PATH);
#                            ./lite is checked against ./sha256sum when that file is there (release tarballs)
#   INSTALL_LITE_BIN_DIR     where lite, lite-killall.sh and lite-uninstall.sh go (default /usr/local/bin)
#   INSTALL_LITE_SYSTEMD_DIR where the unit and its env file go (default /etc/systemd/system)
#   INSTALL_LITE_SKIP_START  true: write everything, do not enable or start the service
#   INSTALL_LITE_SKIP_ENABLE true: do not enable (nor start) the service
#   INSTALL_LITE_DATA_DIR    the data dir the scripts clean (default /var/lib/lite)
#   INSTALL_LITE_CONFIG_DIR  the config dir the uninstall script removes (default /etc/lite)
#   LITE_URL, LITE_TOKEN     make it an agent joined to that server; both go into the unit's env file (0600)
set -eu

info() { echo "[INFO]  $*"; }
fatal() { echo "[ERROR] $*" >&2; exit 1; }

BIN_DIR=${INSTALL_LITE_BIN_DIR:-/usr/local/bin}
SYSTEMD_DIR=${INSTALL_LITE_SYSTEMD_DIR:-/etc/systemd/system}
DATA_DIR=${INSTALL_LITE_DATA_DIR:-/var/lib/lite}
CONFIG_DIR=${INSTALL_LITE_CONFIG_DIR:-/etc/lite}
EXEC_FLAGS=${INSTALL_LITE_EXEC:-}
HERE=$(cd "$(dirname "$0")" && pwd)

if [ -n "${LITE_URL:-}" ]; then
    [ -n "${LITE_TOKEN:-}" ] || fatal "LITE_URL is set: LITE_TOKEN is needed too (run 'lite token' on the server)"
    case "$LITE_URL" in https://*) ;; *) fatal "LITE_URL must be an https:// URL, got $LITE_URL" ;; esac
    NAME=lite-agent
    CMD=agent
else
    NAME=lite
    CMD=server
fi

SRC=${INSTALL_LITE_BIN:-}
if [ -z "$SRC" ]; then
    if [ -x "$HERE/lite" ]; then SRC=$HERE/lite; else SRC=$(command -v lite || true); fi
fi
[ -n "$SRC" ] && [ -x "$SRC" ] || fatal "no lite executable: set INSTALL_LITE_BIN or put 'lite' beside install.sh"
# A release tarball carries `sha256sum` beside lite and this script: the executable installed must match it.
if [ -f "$HERE/sha256sum" ] && [ "$(readlink -f "$SRC")" = "$(readlink -f "$HERE/lite" 2>/dev/null || true)" ]; then
    want=$(awk '$2 == "lite" || $2 == "*lite" {print $1}' "$HERE/sha256sum")
    [ -n "$want" ] || fatal "$HERE/sha256sum has no line for lite"
    got=$(sha256sum "$SRC" | cut -d' ' -f1)
    [ "$got" = "$want" ] || fatal "checksum mismatch: $SRC has sha256 $got, $HERE/sha256sum says $want"
    info "Verified the sha256 of $SRC"
fi
[ "$(id -u)" -eq 0 ] || [ -n "${INSTALL_LITE_BIN_DIR:-}" ] || fatal "run as root (or set INSTALL_LITE_BIN_DIR)"

mkdir -p "$BIN_DIR" "$SYSTEMD_DIR"
if [ "$(readlink -f "$SRC")" != "$(readlink -f "$BIN_DIR/lite" 2>/dev/null || true)" ]; then
    info "Installing lite to $BIN_DIR/lite"
    cp -f "$SRC" "$BIN_DIR/lite.tmp"
    chmod 0755 "$BIN_DIR/lite.tmp"
    mv -f "$BIN_DIR/lite.tmp" "$BIN_DIR/lite"
fi

info "Creating killall script $BIN_DIR/lite-killall.sh"
cat > "$BIN_DIR/lite-killall.sh" <<EOF
#!/bin/sh
# Stops lite and every pod it runs; removes their processes, mounts, network namespaces, links, nftables
# tables and cgroups (lite keeps pods running across its own restarts: this is the way to stop them).
[ "\$(id -u)" -eq 0 ] || exec sudo "\$0" "\$@"
if command -v systemctl >/dev/null 2>&1; then
    for unit in lite.service lite-agent.service; do
        [ -s "$SYSTEMD_DIR/\$unit" ] && systemctl stop "\$unit" 2>/dev/null
    done
fi
exec "$BIN_DIR/lite" killall --data-dir "$DATA_DIR"
EOF
chmod 0755 "$BIN_DIR/lite-killall.sh"

info "Creating uninstall script $BIN_DIR/lite-uninstall.sh"
cat > "$BIN_DIR/lite-uninstall.sh" <<EOF
#!/bin/sh
# Removes lite: stops everything (lite-killall.sh), then the units, the executables and the data dir.
set -x
[ "\$(id -u)" -eq 0 ] || exec sudo "\$0" "\$@"
"$BIN_DIR/lite-killall.sh"
if command -v systemctl >/dev/null 2>&1; then
    systemctl disable lite.service lite-agent.service 2>/dev/null
    systemctl reset-failed lite.service lite-agent.service 2>/dev/null
fi
rm -f "$SYSTEMD_DIR/lite.service" "$SYSTEMD_DIR/lite.service.env" \\
      "$SYSTEMD_DIR/lite-agent.service" "$SYSTEMD_DIR/lite-agent.service.env"
command -v systemctl >/dev/null 2>&1 && systemctl daemon-reload 2>/dev/null
rm -rf "$DATA_DIR" "$CONFIG_DIR"
rm -f "$BIN_DIR/lite" "$BIN_DIR/lite-killall.sh"
rm -f "\$0"
EOF
chmod 0755 "$BIN_DIR/lite-uninstall.sh"

ENV_FILE=$SYSTEMD_DIR/$NAME.service.env
info "Writing environment file $ENV_FILE"
umask 077
: > "$ENV_FILE"
if [ "$CMD" = agent ]; then
    printf 'LITE_URL=%s\nLITE_TOKEN=%s\n' "$LITE_URL" "$LITE_TOKEN" >> "$ENV_FILE"
fi
chmod 0600 "$ENV_FILE"
umask 022

info "Writing systemd unit $SYSTEMD_DIR/$NAME.service"
cat > "$SYSTEMD_DIR/$NAME.service" <<EOF
[Unit]
Description=lite: a lightweight Kubernetes-compatible orchestrator ($CMD)
Wants=network-online.target
After=network-online.target

[Install]
WantedBy=multi-user.target

[Service]
Type=notify
EnvironmentFile=-/etc/default/%N
EnvironmentFile=-/etc/sysconfig/%N
EnvironmentFile=-$ENV_FILE
# Pods outlive lite's own restarts: only the main process is stopped, and the container shims' cgroups are
# lite's to manage (Delegate). lite-killall.sh stops the pods.
KillMode=process
Delegate=yes
LimitNOFILE=1048576
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
TimeoutStartSec=0
Restart=always
RestartSec=5s
ExecStartPre=-/sbin/modprobe br_netfilter
ExecStartPre=-/sbin/modprobe overlay
ExecStart=$BIN_DIR/lite $CMD $EXEC_FLAGS
EOF

case "${INSTALL_LITE_SKIP_START:-false}${INSTALL_LITE_SKIP_ENABLE:-false}" in
    *true*) info "Not starting $NAME.service (INSTALL_LITE_SKIP_START/INSTALL_LITE_SKIP_ENABLE)"; exit 0 ;;
esac
command -v systemctl >/dev/null 2>&1 || fatal "systemctl not found: start '$BIN_DIR/lite $CMD' yourself"
systemctl daemon-reload
info "Enabling and starting $NAME.service"
systemctl enable "$NAME.service" >/dev/null
systemctl restart "$NAME.service"
