"""The node's securityContext decisions as tables (no root): sysctl admission, runAsNonRoot, seccomp choice,
capabilities, the RuntimeDefault rule set; plus libseccomp compilation, checked by installing the program in a
forked child (seccomp needs no privilege with no_new_privs)."""

from __future__ import annotations

import base64
import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest

from lite.agent import seccomp, security
from lite.agent.envs import ConfigError
from lite.agent.hooks.securitycontext import resolve_ids, supplementary_groups
from lite.agent.runtime import linux
from lite.agent.runtime.init import capability_set

Obj = dict[str, Any]


def _sysctls(*names: str, **spec: Any) -> Obj:
    return {"securityContext": {"sysctls": [{"name": n, "value": "1"} for n in names]}, **spec}


@pytest.mark.parametrize(("spec", "allowed", "want"), [
    (_sysctls("kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range"), (), None),
    (_sysctls("net.ipv4.tcp_keepalive_time"), (), None),
    (_sysctls("net/ipv4/tcp_syncookies"), (), None),  # slash form, normalised
    (_sysctls("kernel.msgmax"), (), 'forbidden sysctl: "kernel.msgmax" not allowlisted'),
    (_sysctls("kernel.msgmax"), ("kernel.msg*",), None),
    (_sysctls("net.core.somaxconn"), ("net.core.*",), None),
    (_sysctls("net.core.somaxconn"), ("net.ipv4.*",), 'forbidden sysctl: "net.core.somaxconn" not allowlisted'),
    # node-wide sysctls are never allowed, whatever the node's list says
    (_sysctls("vm.swappiness"), ("vm.*", "vm.swappiness"), 'forbidden sysctl: "vm.swappiness" not allowlisted'),
    (_sysctls("kernel.shm_rmid_forced", hostIPC=True), (),
     'forbidden sysctl: "kernel.shm_rmid_forced" not allowed with host ipc enabled'),
    (_sysctls("net.ipv4.tcp_syncookies", hostNetwork=True), (),
     'forbidden sysctl: "net.ipv4.tcp_syncookies" not allowed with host net enabled'),
    (_sysctls("net.ipv4.tcp_syncookies", hostIPC=True), (), None),
    ({}, (), None),
])
def test_sysctl_admission(spec: Obj, allowed: tuple[str, ...], want: str | None) -> None:
    assert security.sysctl_rejection(spec, allowed) == want


def test_safe_sysctls_need_the_kernel_that_namespaced_them() -> None:
    spec = _sysctls("net.ipv4.tcp_rmem")
    assert security.sysctl_rejection(spec, (), (4, 14)) == 'forbidden sysctl: "net.ipv4.tcp_rmem" not allowlisted'
    assert security.sysctl_rejection(spec, (), (4, 15)) is None
    assert security.kernel_version("6.1.0-26-amd64") == (6, 1)
    assert security.kernel_version("6.18.44-fc") == (6, 18)


@pytest.mark.parametrize(("name", "normal", "path", "ns"), [
    ("net.ipv4.ip_forward", "net.ipv4.ip_forward", "net/ipv4/ip_forward", "net"),
    ("net/ipv4/conf/eth0.1/forwarding", "net.ipv4.conf.eth0/1.forwarding", "net/ipv4/conf/eth0.1/forwarding",
     "net"),
    ("kernel.sem", "kernel.sem", "kernel/sem", "ipc"),
    ("kernel.shmmax", "kernel.shmmax", "kernel/shmmax", "ipc"),
    ("fs.mqueue.msg_max", "fs.mqueue.msg_max", "fs/mqueue/msg_max", "ipc"),
    ("kernel.hostname", "kernel.hostname", "kernel/hostname", None),
    ("vm.overcommit_memory", "vm.overcommit_memory", "vm/overcommit_memory", None),
])
def test_sysctl_names(name: str, normal: str, path: str, ns: str | None) -> None:
    assert security.normalize_sysctl(name) == normal
    assert security.sysctl_path(normal) == path
    assert security.sysctl_namespace(name) == ns


def _pod(pod_sc: Obj | None = None) -> Obj:
    return {"metadata": {"name": "web", "namespace": "prod", "uid": "u-1"},
            "spec": {"securityContext": pod_sc or {}}}


WHO = '(pod: "web_prod(u-1)", container: c)'


@pytest.mark.parametrize(("pod_sc", "sc", "image_user", "want"), [
    ({}, {}, "", None),  # runAsNonRoot not set
    ({"runAsNonRoot": True}, {}, "", f"container has runAsNonRoot and image will run as root {WHO}"),
    ({"runAsNonRoot": True}, {}, "0:0", f"container has runAsNonRoot and image will run as root {WHO}"),
    ({"runAsNonRoot": True}, {}, "1000", None),
    ({"runAsNonRoot": True}, {}, "nobody",
     f"container has runAsNonRoot and image has non-numeric user (nobody), cannot verify user is non-root {WHO}"),
    ({"runAsNonRoot": True}, {"runAsUser": 0}, "1000", f"container's runAsUser breaks non-root policy {WHO}"),
    ({"runAsNonRoot": True, "runAsUser": 5}, {}, "", None),
    ({}, {"runAsNonRoot": True, "runAsUser": 7}, "nobody", None),
    ({"runAsNonRoot": True}, {"runAsNonRoot": False}, "", None),  # the container's own setting wins
])
def test_run_as_non_root(pod_sc: Obj, sc: Obj, image_user: str, want: str | None) -> None:
    pod = _pod(pod_sc)
    c = {"name": "c", "securityContext": sc}
    if want is None:
        security.verify_run_as_non_root(pod, c, security.image_uid(image_user), image_user)
    else:
        with pytest.raises(ConfigError) as e:
            security.verify_run_as_non_root(pod, c, security.image_uid(image_user), image_user)
        assert str(e.value) == want


@pytest.mark.parametrize(("sc", "image_ids", "image_user", "want"), [
    ({}, (0, 0), "", (0, 0)),
    ({}, (1000, 1000), "app", (1000, 1000)),
    ({"runAsUser": 5}, (0, 0), "", (5, 0)),
    ({"runAsUser": 5}, (1000, 1001), "app", (5, 1001)),
    ({"runAsUser": 5, "runAsGroup": 6}, (1000, 1001), "app", (5, 6)),
    ({"runAsGroup": 6}, (1000, 1001), "app", (1000, 6)),
])
def test_user_and_group(sc: Obj, image_ids: tuple[int, int], image_user: str, want: tuple[int, int]) -> None:
    assert resolve_ids(sc, image_ids, image_user) == want


RD = {"type": "RuntimeDefault"}
LOCAL = {"type": "Localhost", "localhostProfile": "p.json"}


@pytest.mark.parametrize(("pod_sc", "sc", "default", "want"), [
    ({}, {}, False, ("Unconfined", "")),
    ({}, {}, True, ("RuntimeDefault", "")),  # --seccomp-default
    ({"seccompProfile": RD}, {}, False, ("RuntimeDefault", "")),
    ({"seccompProfile": RD}, {"seccompProfile": {"type": "Unconfined"}}, True, ("Unconfined", "")),
    ({}, {"seccompProfile": LOCAL}, False, ("Localhost", "p.json")),
    ({"seccompProfile": RD}, {"privileged": True}, True, ("Unconfined", "")),  # privileged is never filtered
])
def test_seccomp_choice(pod_sc: Obj, sc: Obj, default: bool, want: tuple[str, str]) -> None:
    assert security.seccomp_choice({"securityContext": pod_sc}, {"securityContext": sc},
                                   default_runtime=default) == want


@pytest.mark.parametrize(("sc", "want"), [
    ({}, set(linux.DEFAULT_CAPABILITIES)),
    ({"capabilities": {"drop": ["ALL"]}}, set()),
    ({"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}, {"NET_BIND_SERVICE"}),
    ({"capabilities": {"add": ["CAP_SYS_ADMIN"], "drop": ["KILL"]}},
     set(linux.DEFAULT_CAPABILITIES) - {"KILL"} | {"SYS_ADMIN"}),
    ({"capabilities": {"add": ["ALL"], "drop": ["SYS_ADMIN"]}}, set(linux.CAPABILITIES) - {"SYS_ADMIN"}),
    ({"privileged": True, "capabilities": {"drop": ["ALL"]}}, set(linux.CAPABILITIES)),
])
def test_capability_sets(sc: Obj, want: set[str]) -> None:
    add, drop = security.capabilities({"securityContext": sc})
    assert capability_set(add, drop) == linux.cap_numbers(sorted(want))


def test_proc_mount() -> None:
    assert security.proc_mount_error({}, {"securityContext": {"procMount": "Default"}}) is None
    assert "hostUsers: false" in str(security.proc_mount_error({}, {"securityContext": {"procMount": "Unmasked"}}))
    assert "not supported" in str(security.proc_mount_error({"hostUsers": False}, {}))
    assert security.proc_mount_error({"hostUsers": True}, {}) is None


def _denied(profile: seccomp.Profile) -> dict[str, int]:
    return {n: r["errnoRet"] for r in profile["syscalls"] if not r.get("args") for n in r["names"]}


@pytest.mark.parametrize(("caps", "denied", "allowed"), [
    (set(), {"unshare", "mount", "setns", "keyctl", "bpf", "init_module", "kexec_load",
             "process_vm_readv", "reboot", "clock_settime", "open_by_handle_at", "userfaultfd", "fsopen"},
     {"read", "clone", "ptrace", "personality"}),
    ({"SYS_ADMIN"}, {"keyctl", "init_module", "reboot"}, {"unshare", "mount", "setns", "clone3", "bpf"}),
    ({"SYS_PTRACE", "SYS_TIME", "SYS_MODULE"}, {"unshare", "reboot"},
     {"process_vm_readv", "kcmp", "clock_settime", "init_module", "delete_module"}),
])
def test_runtime_default_rules(caps: set[str], denied: set[str], allowed: set[str]) -> None:
    profile = seccomp.runtime_default(caps)
    assert profile["defaultAction"] == seccomp.ALLOW
    rules = _denied(profile)
    assert denied <= set(rules) and not allowed & set(rules)
    clone_rules = [r for r in profile["syscalls"] if r["names"] == ["clone"]]
    if "SYS_ADMIN" in caps:
        assert not clone_rules and "clone3" not in rules
    else:
        assert rules["clone3"] == errno.ENOSYS  # libc falls back to clone, whose flags are checked
        assert sorted(r["args"][0]["value"] for r in clone_rules) == sorted(seccomp.NAMESPACE_FLAGS)
        assert rules["unshare"] == errno.EPERM


def test_localhost_profiles(tmp_path: Path) -> None:
    (tmp_path / "ok.json").write_text(json.dumps({"defaultAction": "SCMP_ACT_ALLOW"}))
    (tmp_path / "bad.json").write_text("{not json")
    assert seccomp.load_localhost(tmp_path, "ok.json") == {"defaultAction": "SCMP_ACT_ALLOW"}
    for name, text in (("absent.json", "no such file or directory"), ("bad.json", "cannot load seccomp profile"),
                       ("../x.json", "outside")):
        with pytest.raises(seccomp.ProfileError, match=text):
            seccomp.load_localhost(tmp_path, name)


def _in_child(program: bytes, call: str) -> int:
    """Install `program` in a forked child (with no_new_privs) and return the errno of `call` there."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            linux.prctl(linux.PR_SET_NO_NEW_PRIVS, 1)
            linux.install_seccomp(program)
            if call == "unshare":
                linux.unshare(0x10000000)  # CLONE_NEWUSER
            elif call == "mkdir":
                os.mkdir(f"/tmp/secctx-{os.getpid()}")
                os.rmdir(f"/tmp/secctx-{os.getpid()}")
            elif call == "getpid":
                os.getpid()
        except OSError as e:
            code = e.errno or 0
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_compiled_runtime_default_denies_in_the_kernel() -> None:
    program = seccomp.compile_profile(seccomp.runtime_default(set()))
    assert program and len(program) % 8 == 0
    assert _in_child(program, "unshare") == errno.EPERM
    assert _in_child(program, "getpid") == 0
    assert _in_child(program, "mkdir") == 0


def test_compiled_localhost_profile_with_errno_and_unknown_names() -> None:
    profile = {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
        {"names": ["mkdir", "mkdirat", "no_such_syscall_here"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13},
        {"names": ["getpid"], "action": "SCMP_ACT_ALLOW"}]}  # same as the default: skipped, not an error
    program = seccomp.compile_profile(profile)
    assert _in_child(program, "mkdir") == errno.EACCES
    assert base64.b64decode(base64.b64encode(program)) == program
    with pytest.raises(seccomp.ProfileError, match="unsupported seccomp action"):
        seccomp.compile_profile({"defaultAction": "SCMP_ACT_NOPE"})


@pytest.mark.parametrize(("gid", "pod_sc", "want"), [
    (0, {}, [0]),
    (3000, {"supplementalGroups": [4000, 3000]}, [3000, 4000]),
    (3000, {"supplementalGroups": [4000], "fsGroup": 2000}, [3000, 4000, 2000]),
])
def test_supplementary_groups(gid: int, pod_sc: Obj, want: list[int]) -> None:
    assert supplementary_groups(gid, pod_sc) == want


def test_image_groups_merge(tmp_path: Path) -> None:
    from lite.agent.hooks.containers import image_groups

    top, base = tmp_path / "top", tmp_path / "base"
    for layer in (top, base):
        (layer / "etc").mkdir(parents=True)
    (base / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\napp:x:1000:1000::/app:/bin/sh\n")
    (base / "etc" / "group").write_text("root:x:0:\nwheel:x:10:root,app\nold:x:20:app\n")
    (top / "etc" / "group").write_text("root:x:0:\nwheel:x:10:root,app\nvideo:x:44:app,other\n")  # wins
    assert image_groups([top, base], 1000) == [10, 44]
    assert image_groups([top, base], 0) == [10]
    assert image_groups([top, base], 4242) == []  # no such user in the image
    assert supplementary_groups(1000, {"supplementalGroups": [10, 7]}, [10, 44]) == [1000, 10, 44, 7]


@pytest.mark.parametrize(("pod", "want"), [
    ({"spec": {"containers": [{"name": "c"}]}}, None),
    ({"spec": {"securityContext": {"appArmorProfile": {"type": "Unconfined"}}}}, None),
    ({"spec": {"securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}}}}, "AppArmor"),
    ({"spec": {"containers": [{"securityContext": {"appArmorProfile": {"type": "Localhost",
                                                                       "localhostProfile": "p"}}}]}}, "AppArmor"),
    ({"metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/c": "runtime/default"}}},
     "AppArmor"),
    ({"metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}}}, None),
    ({"spec": {"securityContext": {"sysctls": [{"name": "vm.swappiness", "value": "1"}],
                                   "appArmorProfile": {"type": "RuntimeDefault"}}}}, "SysctlForbidden"),
])
def test_pod_rejection(pod: Obj, want: str | None) -> None:
    got = security.pod_rejection(pod)
    assert (got[0] if got else None) == want
    if want == "AppArmor":
        assert got is not None and got[1].startswith("Cannot enforce AppArmor: ")


@pytest.mark.parametrize("command", ["server", "agent"])
def test_node_flags(command: str) -> None:
    from lite.cli.main import _csv, build_parser

    args = build_parser().parse_args([command, "--seccomp-default", "--allowed-unsafe-sysctls",
                                      "net.core.*, kernel.msgmax"])
    assert args.seccomp_default is True
    assert _csv(args.allowed_unsafe_sysctls) == ("net.core.*", "kernel.msgmax")
    plain = build_parser().parse_args([command])
    assert plain.seccomp_default is False and _csv(plain.allowed_unsafe_sysctls) == ()


def _ports(*ports: Obj, init: bool = False) -> Obj:
    return {("initContainers" if init else "containers"): [{"name": "c", "ports": list(ports)}]}


@pytest.mark.parametrize(("spec", "active", "conflict"), [
    (_ports({"containerPort": 80, "hostPort": 21017}), [_ports({"containerPort": 80, "hostPort": 21017})], True),
    (_ports({"containerPort": 80}), [_ports({"containerPort": 80})], False),  # no hostPort: nothing taken
    (_ports({"containerPort": 80, "hostPort": 8080}), [_ports({"containerPort": 1, "hostPort": 8081})], False),
    (_ports({"containerPort": 53, "hostPort": 53, "protocol": "UDP"}),
     [_ports({"containerPort": 53, "hostPort": 53})], False),  # TCP and UDP are separate
    (_ports({"containerPort": 80, "hostPort": 80, "hostIP": "10.0.0.1"}),
     [_ports({"containerPort": 80, "hostPort": 80, "hostIP": "10.0.0.2"})], False),
    (_ports({"containerPort": 80, "hostPort": 80, "hostIP": "10.0.0.1"}),
     [_ports({"containerPort": 80, "hostPort": 80})], True),  # 0.0.0.0 holds every address
    (_ports({"containerPort": 80, "hostPort": 80}),
     [_ports({"containerPort": 80, "hostPort": 80, "hostIP": "10.0.0.2"})], True),
    (_ports({"containerPort": 80, "hostPort": 80}), [_ports({"containerPort": 80, "hostPort": 80}, init=True)], True),
    (_ports({"containerPort": 80, "hostPort": 80}), [], False),
])
def test_host_port_admission(spec: Obj, active: list[Obj], conflict: bool) -> None:
    got = security.pod_rejection({"spec": spec}, active=active)
    assert got == ((security.NODE_PORTS, "Predicate NodePorts failed: node(s) didn't have free ports for the "
                    "requested pod ports") if conflict else None)
