"""Pods honour their securityContext, as root through the whole agent (real busybox image, namespaces,
cgroups): users and groups, capabilities, privileged, seccomp (RuntimeDefault, Localhost, Unconfined), the
cgroup namespace, runAsNonRoot refused with kubelet's message, sysctls applied or the pod rejected, hostPID and
hostIPC. Each pod prints what it sees; the test reads the container log."""

from __future__ import annotations

import asyncio
import base64
import json
import os
from typing import Any

import pytest

from lite import wire
from lite.agent.agent import Agent
from lite.agent.runtime import linux
from tests.agent import test_podrunner_root as base
from tests.agent.test_podrunner_root import Recorder, _cs, _pod
from tests.helpers.registry import RegistryServer

pytestmark = [pytest.mark.root, pytest.mark.timeout(180)]
agent = base.agent  # the whole-agent fixture of the podrunner tests
Obj = dict[str, Any]


def _c(registry: RegistryServer, script: str, sc: Obj | None = None, name: str = "c") -> Obj:
    c: Obj = {"name": name, "image": f"{registry.host}/test/busybox:oci", "command": ["sh", "-c", script]}
    if sc is not None:
        c["securityContext"] = sc
    return c


async def _run(a: Agent, rec: Recorder, pod: Obj) -> tuple[Obj, list[str]]:
    """Run a restartPolicy Never pod to its end; its final status and the lines its container printed on stdout.

    Only stdout: the log interleaves stdout and stderr in the order the agent read them from two pipes, which
    is not the order the container wrote them (a stderr line may land before or after the stdout line written
    after it). Scripts that need a message from stderr redirect it (`2>&1`)."""
    await a.handle(wire.PodUpsert(pod))
    uid = pod["metadata"]["uid"]
    s = await rec.until(uid, lambda s: s["phase"] in ("Succeeded", "Failed"), limit=150)
    log = a.runners[uid].log_path("c") if uid in a.runners else None
    lines = log.read_text().splitlines() if log is not None and log.exists() else []
    return s, [ln.split(" ", 3)[3] for ln in lines if ln.split(" ", 2)[1] == "stdout"]


def _status_field(lines: list[str], key: str) -> str:
    return next(ln.split(":", 1)[1].strip() for ln in lines if ln.startswith(key + ":"))


def _read(path: str) -> str:
    """A small /proc file of the host (tiny and bounded: read inline)."""
    with open(path) as f:
        return f.read()


def _host_device() -> str:
    """A device node this host has beyond the unprivileged container's set."""
    return next((d for d in ("loop-control", "kmsg", "mem") if os.path.exists(f"/dev/{d}")), "null")


def _mask(names: list[str]) -> str:
    return f"{sum(1 << n for n in linux.cap_numbers(names)):016x}"


# a /dev/kmsg node made inside the container (on /dev, a tmpfs without nodev), then opened
OPEN_KMSG = ("mknod /dev/xk c 1 11 && (dd if=/dev/xk of=/dev/null count=0 2>/dev/null && echo dev-open "
             "|| echo dev-refused)")
SHOW = "id; grep -E '^(CapEff|Seccomp|NoNewPrivs):' /proc/self/status"


async def test_runtime_default_seccomp_as_a_user_refuses_user_namespaces(agent: tuple[Agent, Recorder],
                                                                         registry: RegistryServer) -> None:
    a, rec = agent
    script = f"{SHOW}; unshare -Ur true && echo unshare-ok || echo unshare-refused"
    pod = _pod("rtdefault", [_c(registry, script, {"runAsUser": 1000, "runAsGroup": 3000,
                                                    "allowPrivilegeEscalation": False})],
               restartPolicy="Never", hostNetwork=True,
               securityContext={"seccompProfile": {"type": "RuntimeDefault"}, "supplementalGroups": [4000]})
    s, out = await _run(a, rec, pod)
    assert s["phase"] == "Succeeded", (json.dumps(s.get("containerStatuses")), out)
    assert out[0].startswith("uid=1000 gid=3000 groups=") and "4000" in out[0], out
    assert _status_field(out, "Seccomp") == "2" and _status_field(out, "NoNewPrivs") == "1", out
    assert _status_field(out, "CapEff") == "0000000000000000", out
    assert out[-1] == "unshare-refused", out


async def test_unconfined_user_namespaces_work_and_root_gets_containerds_default_caps(
        agent: tuple[Agent, Recorder], registry: RegistryServer) -> None:
    """The baseline the seccomp test stands on: without a profile the same unshare succeeds."""
    a, rec = agent
    script = f"{SHOW}; unshare -Ur true && echo unshare-ok || echo unshare-refused"
    pod = _pod("unconfined", [_c(registry, script)], restartPolicy="Never", hostNetwork=True)
    s, out = await _run(a, rec, pod)
    assert s["phase"] == "Succeeded", (json.dumps(s.get("containerStatuses")), out)
    assert out[0].startswith("uid=0(root) gid=0(root)"), out
    assert _status_field(out, "Seccomp") == "0", out
    assert _status_field(out, "CapEff") == _mask(list(linux.DEFAULT_CAPABILITIES)), out
    assert out[-1] == "unshare-ok", out


async def test_capabilities_add_and_drop(agent: tuple[Agent, Recorder], registry: RegistryServer) -> None:
    a, rec = agent
    sc = {"capabilities": {"add": ["NET_ADMIN", "CAP_SYS_TIME"], "drop": ["CHOWN", "NET_RAW"]}}
    pod = _pod("caps", [_c(registry, SHOW, sc)], restartPolicy="Never", hostNetwork=True)
    s, out = await _run(a, rec, pod)
    assert s["phase"] == "Succeeded", (json.dumps(s.get("containerStatuses")), out)
    want = sorted(set(linux.DEFAULT_CAPABILITIES) - {"CHOWN", "NET_RAW"} | {"NET_ADMIN", "SYS_TIME"})
    assert _status_field(out, "CapEff") == _mask(want), out


async def test_privileged_gets_every_capability_host_devices_and_a_writable_sys(
        agent: tuple[Agent, Recorder], registry: RegistryServer) -> None:
    a, rec = agent
    script = (f"{SHOW}; test -c /dev/{_host_device()} && echo dev-ok; "
              f"{OPEN_KMSG}; "
              "touch /sys/kernel/x 2>&1 | grep -q 'Read-only' && echo sys-ro || echo sys-rw")
    pod = _pod("priv", [_c(registry, script, {"privileged": True})], restartPolicy="Never", hostNetwork=True,
               securityContext={"seccompProfile": {"type": "RuntimeDefault"}})
    s, out = await _run(a, rec, pod)
    assert s["phase"] == "Succeeded", (json.dumps(s.get("containerStatuses")), out)
    host = _status_field(_read("/proc/self/status").splitlines(), "CapBnd")
    assert _status_field(out, "CapEff") == host and host != _mask(list(linux.DEFAULT_CAPABILITIES)), out
    assert _status_field(out, "Seccomp") == "0", out  # privileged containers are never filtered
    assert "dev-ok" in out and "dev-open" in out and "sys-rw" in out, out


async def test_unprivileged_root_sees_its_own_cgroup_namespace_and_a_read_only_sys(
        agent: tuple[Agent, Recorder], registry: RegistryServer) -> None:
    a, rec = agent
    script = ("readlink /proc/self/ns/cgroup; cat /proc/self/cgroup | cut -d: -f3 | sort -u; "
              "touch /sys/kernel/x 2>/dev/null && echo sys-rw || echo sys-ro; "
              "mknod /tmp/null c 1 3 && (cat /tmp/null 2>/dev/null && echo nodev-open || echo nodev-refused); "
              + OPEN_KMSG)
    pod = _pod("cgns", [_c(registry, script)], restartPolicy="Never", hostNetwork=True)
    s, out = await _run(a, rec, pod)
    assert s["phase"] == "Succeeded", (json.dumps(s.get("containerStatuses")), out)
    assert out[0] != os.readlink("/proc/self/ns/cgroup"), out
    assert out[1:-3] == ["/"], out  # every hierarchy's path is the namespace's root
    # a device node made in the image's root opens nothing (nodev); one made in /dev (a tmpfs) is stopped by the
    # devices cgroup (v1; on v2 the device program)
    assert out[-3:] == ["sys-ro", "nodev-refused", "dev-refused"], out


async def test_run_as_non_root_refuses_a_root_image(agent: tuple[Agent, Recorder],
                                                    registry: RegistryServer) -> None:
    a, rec = agent
    pod = _pod("nonroot", [_c(registry, "id")], restartPolicy="Never", hostNetwork=True,
               securityContext={"runAsNonRoot": True})
    await a.handle(wire.PodUpsert(pod))
    uid = pod["metadata"]["uid"]
    s = await rec.until(uid, lambda s: _cs(s)["state"].get("waiting", {}).get("reason")
                        == "CreateContainerConfigError")
    assert _cs(s)["state"]["waiting"]["message"] == (
        f'container has runAsNonRoot and image will run as root (pod: "nonroot_t({uid})", container: c)')
    ok = _pod("nonroot-ok", [_c(registry, "id -u")], restartPolicy="Never", hostNetwork=True,
              securityContext={"runAsNonRoot": True, "runAsUser": 1001})
    s, out = await _run(a, rec, ok)
    assert s["phase"] == "Succeeded" and out == ["1001"], (s, out)


async def test_localhost_profile_is_loaded_from_the_node_and_missing_one_is_refused(
        agent: tuple[Agent, Recorder], registry: RegistryServer) -> None:
    a, rec = agent
    profiles = a.deps.data_dir / "seccomp" / "profiles"
    profiles.mkdir(parents=True, exist_ok=True)
    (profiles / "no-mkdir.json").write_text(json.dumps({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
        {"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13}]}))
    local = {"type": "Localhost", "localhostProfile": "profiles/no-mkdir.json"}
    pod = _pod("local", [_c(registry, "grep Seccomp: /proc/self/status; mkdir /tmp/d 2>&1 || echo refused",
                            {"seccompProfile": local})], restartPolicy="Never", hostNetwork=True)
    s, out = await _run(a, rec, pod)
    assert s["phase"] == "Succeeded", (json.dumps(s.get("containerStatuses")), out)
    assert out[0].split()[-1] == "2" and out[-1] == "refused" and "Permission denied" in out[1], out

    missing = _pod("missing", [_c(registry, "true", {"seccompProfile": {
        "type": "Localhost", "localhostProfile": "profiles/absent.json"}})], restartPolicy="Never")
    await a.handle(wire.PodUpsert(missing))
    s = await rec.until(missing["metadata"]["uid"], lambda s: _cs(s)["state"].get("waiting", {}).get("reason")
                        == "CreateContainerConfigError")
    assert "absent.json" in _cs(s)["state"]["waiting"]["message"], s


async def test_safe_sysctls_are_set_in_the_pods_namespaces(agent: tuple[Agent, Recorder],
                                                           registry: RegistryServer) -> None:
    a, rec = agent
    host_value = _read("/proc/sys/net/ipv4/ip_unprivileged_port_start").strip()
    script = "sysctl -n net.ipv4.ip_unprivileged_port_start kernel.shm_rmid_forced net.ipv4.ping_group_range"
    pod = _pod("sysctls", [_c(registry, script)], restartPolicy="Never", securityContext={"sysctls": [
        {"name": "net.ipv4.ip_unprivileged_port_start", "value": "80"},
        {"name": "kernel/shm_rmid_forced", "value": "1"},
        {"name": "net.ipv4.ping_group_range", "value": "0 2000"}]})
    s, out = await _run(a, rec, pod)
    assert s["phase"] == "Succeeded", (json.dumps(s.get("containerStatuses")), out)
    assert out[0] == "80" and out[1] == "1" and out[2].split() == ["0", "2000"], out
    # written in the pod's namespaces only
    assert _read("/proc/sys/net/ipv4/ip_unprivileged_port_start").strip() == host_value


async def test_unsafe_sysctls_reject_the_pod(agent: tuple[Agent, Recorder], registry: RegistryServer) -> None:
    a, rec = agent
    pod = _pod("unsafe", [_c(registry, "true")], securityContext={"sysctls": [
        {"name": "kernel.msgmax", "value": "1"}]})
    await a.handle(wire.PodUpsert(pod))
    s = await rec.until(pod["metadata"]["uid"], lambda s: s["phase"] == "Failed")
    assert s["reason"] == "SysctlForbidden"
    assert s["message"] == 'Pod was rejected: forbidden sysctl: "kernel.msgmax" not allowlisted'
    hostnet = _pod("hostnet", [_c(registry, "true")], hostNetwork=True, securityContext={"sysctls": [
        {"name": "net.ipv4.tcp_syncookies", "value": "1"}]})
    await a.handle(wire.PodUpsert(hostnet))
    s = await rec.until(hostnet["metadata"]["uid"], lambda s: s["phase"] == "Failed")
    assert s["message"] == ('Pod was rejected: forbidden sysctl: "net.ipv4.tcp_syncookies" not allowed with '
                            'host net enabled')


async def test_host_pid_and_host_ipc(agent: tuple[Agent, Recorder], registry: RegistryServer) -> None:
    a, rec = agent
    script = ("readlink /proc/self/ns/pid; readlink /proc/self/ns/ipc; "
              "test -d /proc/{mine} && echo sees-host-pid || echo no")
    pod = _pod("hostns", [_c(registry, script.format(mine=os.getpid()))], restartPolicy="Never",
               hostNetwork=True, hostPID=True, hostIPC=True)
    s, out = await _run(a, rec, pod)
    assert s["phase"] == "Succeeded", (json.dumps(s.get("containerStatuses")), out)
    assert out == [os.readlink("/proc/self/ns/pid"), os.readlink("/proc/self/ns/ipc"), "sees-host-pid"], out
    private = _pod("privns", [_c(registry, script.format(mine=os.getpid()))], restartPolicy="Never",
                   hostNetwork=True)
    s, out = await _run(a, rec, private)
    assert out[0] != os.readlink("/proc/self/ns/pid") and out[1] != os.readlink("/proc/self/ns/ipc"), out
    assert out[2] == "no", out


async def test_fs_group_owns_the_volumes(agent: tuple[Agent, Recorder], registry: RegistryServer) -> None:
    a, rec = agent
    await a.handle(wire.ObjectUpsert("Secret", {"metadata": {"name": "key", "namespace": "t"},
                                                "data": {"pw": base64.b64encode(b"hunter2").decode()}}))
    script = ("id -G; cat /secret/pw; echo; stat -c '%g %a' /data; touch /data/new && stat -c '%g' /data/new; "
              "stat -L -c '%g %a' /secret/pw")
    c = _c(registry, script, {"runAsUser": 1000, "runAsGroup": 1000})
    c["volumeMounts"] = [{"name": "data", "mountPath": "/data"}, {"name": "key", "mountPath": "/secret"}]
    pod = _pod("fsgroup", [c], restartPolicy="Never", hostNetwork=True,
               securityContext={"fsGroup": 2000, "supplementalGroups": [3000]},
               volumes=[{"name": "data", "emptyDir": {}},
                        {"name": "key", "secret": {"secretName": "key", "defaultMode": 0o400}}])
    s, out = await _run(a, rec, pod)
    assert s["phase"] == "Succeeded", (json.dumps(s.get("containerStatuses")), out)
    assert sorted(out[0].split()) == ["1000", "2000", "3000"], out  # runAsGroup, fsGroup, supplementalGroups
    # the secret (mode 0400) is readable through the group; files made in the emptyDir inherit it (setgid)
    assert out[1:] == ["hunter2", "2000 2777", "2000", "2000 440"], out


async def test_share_process_namespace(agent: tuple[Agent, Recorder], registry: RegistryServer) -> None:
    a, rec = agent
    sleeper = {"name": "sleeper", "image": f"{registry.host}/test/busybox:oci", "command": ["sleep", "1234"]}
    looker = _c(registry, "until ps -o pid,args | grep -q '[s]leep 1234'; do sleep 0.1; done; "
                "ps -o pid,args | grep '[s]leep 1234' | awk '{print $1}'; kill $(pidof sleep) && echo signalled",
                name="c")
    pod = _pod("shared", [sleeper, looker], restartPolicy="Never", hostNetwork=True, shareProcessNamespace=True)
    await a.handle(wire.PodUpsert(pod))
    uid = pod["metadata"]["uid"]
    s = await rec.until(uid, lambda s: s["phase"] in ("Succeeded", "Failed"), limit=150)
    log = a.runners[uid].log_path("c")
    assert log is not None
    out = [ln.split(" ", 3)[3] for ln in log.read_text().splitlines() if ln.split(" ", 2)[1] == "stdout"]
    assert out[0].isdigit() and int(out[0]) > 1 and out[1] == "signalled", out  # PID 1 is the pause
    sleeper_state = s["containerStatuses"][1 if s["containerStatuses"][0]["name"] == "c" else 0]["state"]
    assert sleeper_state["terminated"]["exitCode"] == 143, s  # SIGTERM from its sibling


async def test_fs_group_follows_a_secret_update(agent: tuple[Agent, Recorder], registry: RegistryServer) -> None:
    a, rec = agent
    secret = {"metadata": {"name": "rotating", "namespace": "t"}, "data": {"pw": base64.b64encode(b"v1").decode()}}
    await a.handle(wire.ObjectUpsert("Secret", secret))
    c = _c(registry, "sleep 1000", {"runAsUser": 1000})
    c["volumeMounts"] = [{"name": "key", "mountPath": "/secret"}]
    pod = _pod("rotate", [c], hostNetwork=True, securityContext={"fsGroup": 2000},
               volumes=[{"name": "key", "secret": {"secretName": "rotating", "defaultMode": 0o400}}])
    await a.handle(wire.PodUpsert(pod))
    await rec.until(pod["metadata"]["uid"], lambda s: s["phase"] == "Running")
    assert await base._exec(a, pod, ["cat", "/secret/pw"]) == (0, "v1")
    await a.handle(wire.ObjectUpsert("Secret", {**secret, "data": {"pw": base64.b64encode(b"v2").decode()}}))
    for _ in range(100):
        if await base._exec(a, pod, ["cat", "/secret/pw"]) == (0, "v2"):
            break
        await asyncio.sleep(0.1)
    assert await base._exec(a, pod, ["stat", "-L", "-c", "%g %a", "/secret/pw"]) == (0, "2000 440\n")
