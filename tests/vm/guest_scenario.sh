#!/bin/bash
# Runs INSIDE the cgroup-v2 guest (tests/vm/test_cgroup_v2_guest.py queues it; cwd /share).
# Installs lite with packaging/install.sh from the single executable in /share, starts lite.service
# (Type=notify), runs a pod with limits and a memory hog, restarts the service, runs lite-killall.sh, and
# prints one machine-readable line per check:
#     CHECK <name> PASS|FAIL <detail>
# plus `TIME <step> <seconds>` lines. It never stops at the first failure: each check reports on its own, and
# a check that depends on an earlier step that failed reports FAIL with that reason.
# Then it installs lite with pip into a venv of the guest's own python3 and runs a pod from an imported archive
# with that lite.
# Inputs in /share: lite (the executable), install.sh, kubectl, busybox-oci.tar (an OCI image archive named
# lite.local/airgap/busybox:oci, imported by the agent from <data-dir>/agent/images/), wheelhouse/ (lite's
# wheel and its dependencies', for pip install --no-index).
set -u
S=/share
DATA=/var/lib/lite
export KUBECONFIG=$DATA/kubeconfig.yaml PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin
IMAGE=lite.local/airgap/busybox:oci

pass() { echo "CHECK $1 PASS ${*:2}"; }
fail() { echo "CHECK $1 FAIL ${*:2}"; }
now() { date +%s.%N; }
T0=$(now)
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
step() { printf '\n===== [%ss] %s\n' "$(since "$T0")" "$*"; }
# wait_for SECONDS CMD...: retries CMD every half second; its last status
wait_for() {
    local end=$(( $(date +%s) + $1 )); shift
    while :; do "$@" >/dev/null 2>&1 && return 0; [ "$(date +%s)" -ge "$end" ] && return 1; sleep 0.5; done
}
k() { kubectl "$@"; }
jp() { kubectl get "$1" "$2" -o "jsonpath=$3" 2>/dev/null; }
links() { ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort; }
tables() { nft list tables 2>/dev/null | sort; }
mounts() { awk '{print $5}' /proc/self/mountinfo | sort -u; }

step "guest"
uname -r
systemctl --version | head -1
echo "cgroup fs: $(stat -fc %T /sys/fs/cgroup); controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then pass guest-cgroup2 "unified hierarchy"
else fail guest-cgroup2 "/sys/fs/cgroup is $(stat -fc %T /sys/fs/cgroup), not cgroup2fs"; fi
links > /tmp/links.before
tables > /tmp/tables.before
mounts > /tmp/mounts.before

step "install lite with install.sh from the single executable"
install -m 0755 $S/kubectl /usr/local/bin/kubectl
mkdir -p $DATA/agent/images
cp $S/busybox-oci.tar $DATA/agent/images/
t=$(now)
if INSTALL_LITE_BIN=$S/lite INSTALL_LITE_EXEC="--node-name litevm" sh $S/install.sh; then
    echo "TIME install-and-start $(since "$t")"
    main=$(systemctl show lite.service -p MainPID --value)
    exe=$(readlink "/proc/$main/exe" 2>/dev/null)
    if [ "$(systemctl show lite.service -p Type --value)" = notify ] && systemctl is-active --quiet lite.service \
        && [ "$(systemctl show lite.service -p ExecStart --value | grep -o 'path=[^ ;]*')" = "path=/usr/local/bin/lite" ]; then
        pass service-started "lite.service (Type=notify) active, main pid $main runs $exe"
    else
        fail service-started "lite.service: $(systemctl show lite.service -p Type -p ActiveState -p SubState -p ExecStart | tr '\n' ' ')"
    fi
else
    fail service-started "install.sh exited $? ($(systemctl show lite.service -p ActiveState -p Result | tr '\n' ' '))"
fi
wait_for 60 kubectl get --raw /readyz
t=$(now)
if wait_for 120 sh -c "kubectl get node litevm -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"; then
    echo "TIME node-ready $(since "$t")"
else
    echo "node not Ready:"; k get nodes -o wide; k describe node litevm | tail -20
fi

step "agent log: cgroup version and controllers"
line=$(journalctl -u lite.service -o cat --no-pager | grep -m1 'using cgroup v')
echo "$line"
want=$(cat /sys/fs/cgroup/cgroup.controllers)
if grep -q "using cgroup v2 at /sys/fs/cgroup (controllers: $want)" <<<"$line"; then pass agent-logs-cgroup "$line"
else fail agent-logs-cgroup "want 'using cgroup v2 at /sys/fs/cgroup (controllers: $want)', got '${line:-no such line}'"; fi

step "pods"
cat > /tmp/pods.yaml <<EOF
apiVersion: v1
kind: Pod
metadata: {name: limits}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: $IMAGE
    imagePullPolicy: Never
    # a log larger than a pipe's buffer (~150 KB), so `kubectl logs | head` closes its end mid-stream
    command: ["/bin/sh", "-c", "seq 1 30000; exec sleep 100000"]
    resources:
      requests: {cpu: 250m, memory: 64Mi}
      limits: {cpu: 250m, memory: 64Mi}
---
apiVersion: v1
kind: Pod
metadata: {name: hog}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: $IMAGE
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "echo eating; head -c 300m /dev/zero | tail; echo survived"]
    resources:
      limits: {cpu: 500m, memory: 24Mi}
EOF
t=$(now)
k apply -f /tmp/pods.yaml
if k wait --for=condition=Ready pod/limits --timeout=120s; then echo "TIME pod-ready $(since "$t")"
else k describe pod limits | tail -25; fi
uid=$(jp pod limits '{.metadata.uid}')
poddir=$(find /sys/fs/cgroup -type d -name "pod$uid" 2>/dev/null | head -1)
echo "pod limits uid=$uid qos=$(jp pod limits '{.status.qosClass}') cgroup=${poddir:-none}"
for f in cgroup.procs memory.max cpu.max memory.oom.group; do
    echo "  main/$f = $(tr '\n' ' ' < "$poddir/main/$f" 2>&1)"
done
got_mem=$(cat "$poddir/main/memory.max" 2>&1); got_cpu=$(cat "$poddir/main/cpu.max" 2>&1)
if [ -n "$poddir" ] && [ "$got_mem" = 67108864 ]; then pass limits-memory-max "$poddir/main/memory.max = $got_mem"
else fail limits-memory-max "want 67108864 (64Mi) in ${poddir:-<no pod$uid cgroup>}/main/memory.max, got '$got_mem'"; fi
if [ -n "$poddir" ] && [ "$got_cpu" = "25000 100000" ]; then pass limits-cpu-max "$poddir/main/cpu.max = $got_cpu"
else fail limits-cpu-max "want '25000 100000' (250m) in ${poddir:-<no pod$uid cgroup>}/main/cpu.max, got '$got_cpu'"; fi

images=$(kubectl get node litevm -o jsonpath='{.status.images[*].names}')
if [ -n "$poddir" ] && grep -q "$IMAGE" <<<"$images"; then pass airgap-import "pod ran $IMAGE, imported from $DATA/agent/images"
else fail airgap-import "node images: '$images'"; fi

step "devices: the cgroup-v2 device program denies what the allow-list does not name"
# A block device node made inside the container (/dev is a tmpfs that allows device nodes): opening it must be
# refused by the device program (EPERM) in a plain container, and not in a privileged one; /dev/null's numbers
# stay usable. Without a program attached (cgroup v2 has no devices controller) the open would not be EPERM.
DEVCMD='mknod /dev/probe b 7 0 2>&1; echo "OPEN $(head -c1 /dev/probe 2>&1 >/dev/null)"; mknod /dev/n2 c 1 3 && head -c1 /dev/n2 >/dev/null && echo NULL-OK'
# devpod NAME PRIVILEGED: a Never pod running $DEVCMD
devpod() {
    cat <<EOF
---
apiVersion: v1
kind: Pod
metadata: {name: $1}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: $IMAGE
    imagePullPolicy: Never
    securityContext: {privileged: $2}
    command:
    - /bin/sh
    - -c
    - |
      $DEVCMD
EOF
}
{ devpod devices false; devpod devices-privileged true; } > /tmp/devices.yaml
k apply -f /tmp/devices.yaml
for p in devices devices-privileged; do
    wait_for 90 sh -c "kubectl get pod $p -o jsonpath='{.status.phase}' | grep -qE 'Failed|Succeeded'"
done
for p in devices devices-privileged; do
    k get pod $p -o wide; k get events --field-selector involvedObject.name=$p -o custom-columns=REASON:.reason,MSG:.message
done
plain=$(k logs devices 2>&1 | tr '\n' ' '); priv=$(k logs devices-privileged 2>&1 | tr '\n' ' ')
echo "plain: $plain"; echo "privileged: $priv"
if grep -q 'Operation not permitted' <<<"$plain" && grep -q NULL-OK <<<"$plain" \
    && ! grep -q 'Operation not permitted' <<<"$priv" && grep -q NULL-OK <<<"$priv"; then
    pass devices-v2-program "plain: $plain; privileged: $priv"
else
    fail devices-v2-program "want EPERM on b 7:0 in the plain pod only and /dev/null usable in both; plain: '$plain'; privileged: '$priv'"
fi
k delete pod devices devices-privileged --wait=false

step "kubectl logs | head: the server must not log an error when the reader goes away"
since_logs=$(date '+%Y-%m-%d %H:%M:%S')
sleep 1
first=$(timeout 60 kubectl logs limits | head -1)
sleep 3
errs=$(journalctl -u lite.service -o cat --no-pager --since "$since_logs" \
       | grep -iE 'traceback|error handling request|clos(ed|ing) transport|internal error' | head -3 | tr '\n' ' ')
if [ "$first" = 1 ] && [ -z "$errs" ]; then pass logs-head-no-error "no error logged after the log reader went away"
else fail logs-head-no-error "first line '$first'; journal: ${errs:-nothing}"; fi

wait_for 90 sh -c "kubectl get pod hog -o jsonpath='{.status.phase}' | grep -qE 'Failed|Succeeded'"
row=$(k get pod hog --no-headers 2>&1)
reason=$(jp pod hog '{.status.containerStatuses[0].state.terminated.reason}')
echo "kubectl get pod hog: $row"
if grep -qw OOMKilled <<<"$row" && [ "$reason" = OOMKilled ]; then pass hog-oomkilled "$row"
else fail hog-oomkilled "kubectl get pod hog: '$row'; terminated.reason '$reason'; logs: $(k logs hog 2>&1 | tr '\n' ' ')"; fi

step "systemctl restart lite: the pod keeps running"
state() { echo "$(jp pod limits '{.status.containerStatuses[0].containerID} restarts={.status.containerStatuses[0].restartCount} ready={.status.containerStatuses[0].ready}') pid=$(cat "$poddir/main/cgroup.procs" 2>/dev/null | tr '\n' ' ')"; }
before=$(state)
echo "before: $before"
hog_ip=$(jp pod hog '{.status.podIP}')
t=$(now)
systemctl restart lite.service
echo "TIME service-restart $(since "$t")"
wait_for 60 kubectl get --raw /readyz
# the restarted agent adopts the running container and reports it again; give it time to (wrongly) restart it
sleep 10
wait_for 30 sh -c "kubectl get pod limits -o jsonpath='{.status.containerStatuses[0].ready}' | grep -qx true"
after=$(state)
echo "after:  $after"
pid=$(cat "$poddir/main/cgroup.procs" 2>/dev/null | head -1)
if [ -n "$pid" ] && [ "$before" = "$after" ] && grep -q 'restarts=0 ready=true' <<<"$after"; then
    pass restart-keeps-pod "same container, same process, no restart: $after"
else
    fail restart-keeps-pod "before: '$before'; after: '$after'; $(journalctl -u lite.service -o cat --no-pager --since=-60s | grep -iE 'shim|lost|adopt' | head -5 | tr '\n' ' ')"
fi
hog_after=$(jp pod hog '{.status.podIP} {.status.phase}')
if [ -n "$hog_ip" ] && [ "$hog_after" = "$hog_ip Failed" ]; then pass finished-pod-keeps-ip "hog: $hog_after"
else fail finished-pod-keeps-ip "hog podIP before the restart '$hog_ip', after: '$hog_after'"; fi
k get pods -o wide

step "lite-killall.sh"
shims() { ps -eo pid=,args= | awk '$3 == "shim" {print $1}'; }
echo "shims before: $(shims | tr '\n' ' '); container pid: ${pid:-none}"
t=$(now)
lite-killall.sh; rc=$?
echo "TIME killall $(since "$t")"
echo "lite-killall.sh exited $rc"
left=""
[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && left="container pid $pid"
s=$(shims | tr '\n' ' ')
if [ -z "$left" ] && [ -z "$s" ] && ! pgrep -f 'sleep 100000' >/dev/null; then pass killall-processes "no container or shim process left"
else fail killall-processes "left: ${left:-} shims: ${s:-none} sleep: $(pgrep -f 'sleep 100000' | tr '\n' ' ')"; fi
m=$(comm -13 /tmp/mounts.before <(mounts) | grep -vE '^/run/credentials' | tr '\n' ' ')
if [ -z "$m" ]; then pass killall-mounts "no mount left that was not there before lite"
else fail killall-mounts "mounts left: $m"; fi
n=$(ls /run/netns 2>/dev/null | tr '\n' ' ')
if [ -z "$n" ]; then pass killall-netns "/run/netns is empty"; else fail killall-netns "netns left: $n"; fi
l=$(comm -13 /tmp/links.before <(links) | tr '\n' ' ')
if [ -z "$l" ]; then pass killall-links "no link left that was not there before lite"
else fail killall-links "links left: $l"; fi
tb=$(comm -13 /tmp/tables.before <(tables) | tr '\n' ' ')
if [ -z "$tb" ]; then pass killall-nftables "no nftables table left"; else fail killall-nftables "tables left: $tb"; fi
c=$(find /sys/fs/cgroup -mindepth 1 -type d \( -name '*lite*' -o -name 'pod*' \) | tr '\n' ' ')
if [ -z "$c" ]; then pass killall-cgroups "no lite or pod cgroup left"; else fail killall-cgroups "cgroups left: $c"; fi

step "lite installed with pip on the guest's own python3: a pod from an imported archive"
# What a user of the distribution's Python does; no network here: /share/wheelhouse holds the wheels. The venv is
# made without a pip of its own (ensurepip, which installs pip and setuptools into it, took 33 s of the step under
# TCG): the distribution's pip (python3-pip) installs into it with --python, without compiling every module of
# every package (lite compiles what it imports as it starts). The server runs as a unit of its own (Type=notify,
# Delegate, as lite.service), from the venv's `lite` script.
VENV=/opt/lite-venv
PDATA=/var/lib/lite-pip
pyver=$(python3 -c 'import sys, tarfile; print(sys.version.split()[0], "with" if hasattr(tarfile, "data_filter") else "without", "tarfile extraction filters")' 2>&1)
echo "guest python3: $(readlink -f /usr/bin/python3) $pyver; $(python3 -m pip --version 2>&1)"
t=$(now)
if [ -e $S/wheelhouse/ERROR ]; then
    fail pip-install "the host could not build the wheelhouse: $(tr '\n' ' ' < $S/wheelhouse/ERROR)"
elif python3 -m venv --without-pip $VENV > /tmp/pip.log 2>&1 && echo "TIME pip-venv $(since "$t")" \
    && python3 -m pip --python $VENV/bin/python install --no-compile --no-index --find-links $S/wheelhouse lite \
       >> /tmp/pip.log 2>&1; then
    echo "TIME pip-install $(since "$t")"
    version=$($VENV/bin/lite --version 2>&1)
    if [ "$version" = "lite $(cd / && $VENV/bin/python -c 'import importlib.metadata as m; print(m.version("lite"))')" ]; then
        pip_ok=yes; pass pip-install "$version in $VENV on Python $pyver"
    else fail pip-install "$VENV/bin/lite --version: '$version'"; fi
else
    fail pip-install "python3 -m venv --without-pip $VENV, then python3 -m pip --python $VENV/bin/python install --no-index --find-links $S/wheelhouse lite: $(tail -5 /tmp/pip.log | tr '\n' ' ')"
fi
if [ -n "${pip_ok:-}" ]; then
    export KUBECONFIG=$PDATA/kubeconfig.yaml
    mkdir -p $PDATA/agent/images
    cp $S/busybox-oci.tar $PDATA/agent/images/
    t=$(now)
    systemd-run --unit=lite-pip --collect -p Type=notify -p Delegate=yes -p KillMode=process -p TimeoutStartSec=180 \
        $VENV/bin/lite server --data-dir $PDATA --node-name litevm && echo "TIME pip-server-start $(since "$t")"
    main=$(systemctl show lite-pip.service -p MainPID --value)
    exe=$(readlink "/proc/$main/exe" 2>/dev/null)
    wait_for 60 sh -c "kubectl get node litevm -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
    cat > /tmp/from-archive.yaml <<EOF
apiVersion: v1
kind: Pod
metadata: {name: from-archive}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: $IMAGE
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "echo ran from the archive"]
EOF
    wait_for 30 kubectl apply -f /tmp/from-archive.yaml
    wait_for 90 sh -c "kubectl get pod from-archive -o jsonpath='{.status.phase}' | grep -qE 'Failed|Succeeded'"
    echo "TIME pip-pod-done $(since "$t")"
    phase=$(jp pod from-archive '{.status.phase}')
    said=$(k logs from-archive 2>&1)
    # the node's status lists the image once the agent reports it (the pod may be done before that)
    wait_for 60 sh -c "kubectl get node litevm -o jsonpath='{.status.images[*].names}' | grep -q '$IMAGE'"
    images=$(kubectl get node litevm -o jsonpath='{.status.images[*].names}')
    k get pod from-archive -o wide
    if [ "$phase" = Succeeded ] && [ "$said" = "ran from the archive" ] && grep -q "$IMAGE" <<<"$images"; then
        pass pip-airgap-import "$version (pid $main runs $exe, Python $pyver): pod from-archive Succeeded from $IMAGE, imported from $PDATA/agent/images"
    else
        fail pip-airgap-import "$version (pid ${main:-none} runs ${exe:-nothing}, Python $pyver): pod phase '$phase', logs '$said', node images '$images'; events: $(k get events --field-selector involvedObject.name=from-archive -o custom-columns=REASON:.reason,MSG:.message --no-headers 2>&1 | tail -4 | tr '\n' ' '); journal: $(journalctl -u lite-pip.service -o cat --no-pager | grep -iE 'import|archive|error|traceback' | head -5 | tr '\n' ' ')"
    fi
    journalctl -u lite-pip.service -o short-precise --no-pager > $S/out/lite-pip-journal.txt 2>&1
    systemctl stop lite-pip.service
    $VENV/bin/lite killall --data-dir $PDATA > /dev/null
else
    fail pip-airgap-import "no pip-installed lite (see pip-install)"
fi

step "done in $(since "$T0")s"
journalctl -u lite.service -o short-precise --no-pager > $S/out/lite-journal.txt 2>&1
