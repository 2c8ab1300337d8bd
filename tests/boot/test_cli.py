"""The `lite` command line: flags, `token`, `kubeconfig`, `agent`, in real subprocesses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lite.cli.main import build_parser
from lite.server.certs import ensure_credentials, write_kubeconfig
from lite.server.config import ServerConfig


def lite(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lite.cli.main", *args], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def test_server_flags_parse_with_k3s_names() -> None:
    args = build_parser().parse_args(["server", "--data-dir", "/d", "--bind-address", "127.0.0.1",
                                      "--https-listen-port", "7000", "-o", "/k.yaml", "--token", "t",
                                      "--disable-agent", "--log-level", "debug", "--tls-san", "a", "--tls-san", "b"])
    assert (args.data_dir, args.bind_address, args.https_listen_port) == ("/d", "127.0.0.1", 7000)
    assert (args.write_kubeconfig, args.token, args.disable_agent, args.log_level) == ("/k.yaml", "t", True, "debug")
    assert args.tls_san == ["a", "b"]
    defaults = build_parser().parse_args(["server"])
    assert (defaults.bind_address, defaults.https_listen_port, defaults.write_kubeconfig) == ("0.0.0.0", 6443, None)


def test_leader_election_flags_take_go_durations() -> None:
    args = build_parser().parse_args(["server", "--leader-elect-lease-duration", "1m", "--leader-elect-renew-deadline",
                                      "30s", "--leader-elect-retry-period", "500ms"])
    assert (args.leader_elect_lease_duration, args.leader_elect_renew_deadline, args.leader_elect_retry_period) \
        == (60.0, 30.0, 0.5)
    defaults = build_parser().parse_args(["server"])  # kube-controller-manager's defaults
    assert (defaults.leader_elect_lease_duration, defaults.leader_elect_renew_deadline,
            defaults.leader_elect_retry_period) == (15.0, 10.0, 2.0)


@pytest.mark.parametrize("bad", [["server", "--https-listen-port", "70000"], ["server", "--log-level", "loud"],
                                 ["server", "--service-cidr", "bogus"], ["server", "--cluster-cidr", "10.42.0.1/16"],
                                 ["server", "--leader-elect-lease-duration", "15"],  # a Go duration needs its unit
                                 ["server", "--leader-elect-renew-deadline", "20s"],  # not below the lease duration
                                 ["nonsense"], []])
def test_usage_errors_exit_2(bad: list[str]) -> None:
    assert lite(*bad).returncode == 2


def test_token_and_kubeconfig_before_and_after_first_start(data_dir: Path) -> None:
    before = lite("token", "--data-dir", str(data_dir))
    assert before.returncode == 1 and "has `lite server` run" in before.stderr
    cfg = ServerConfig.create(data_dir, port=7443)
    creds = ensure_credentials(cfg)
    write_kubeconfig(cfg, creds)
    token = lite("token", "--data-dir", str(data_dir))
    assert token.returncode == 0 and token.stdout.strip() == creds.join_token
    kc = lite("kubeconfig", "--data-dir", str(data_dir))
    assert kc.returncode == 0 and kc.stdout == cfg.kubeconfig.read_text()
    assert creds.admin_token in kc.stdout and "https://127.0.0.1:7443" in kc.stdout


def test_version_is_printed_on_request() -> None:
    out = lite("--version")
    assert out.returncode == 0 and out.stdout.startswith("lite ") and len(out.stdout.split()) == 2


def test_agent_flags_parse() -> None:
    args = build_parser().parse_args(["agent", "--server", "https://10.0.0.1:6443", "--token", "K10x::server:y",
                                      "--node-name", "n1"])
    assert (args.server, args.token, args.node_name, args.simulate) == ("https://10.0.0.1:6443", "K10x::server:y",
                                                                         "n1", 0)
    sim = build_parser().parse_args(["agent", "--simulate", "3", "--kubeconfig", "/tmp/k"])
    assert (sim.simulate, sim.kubeconfig) == (3, "/tmp/k")


def test_default_data_dir_for_root() -> None:
    import os

    expected = Path("/var/lib/lite") if os.geteuid() == 0 else Path.home() / ".lite"
    assert ServerConfig.create().data_dir == expected


@pytest.mark.parametrize("command", ["server", "agent"])
def test_service_proxy_is_on_unless_disabled(command: str) -> None:
    assert build_parser().parse_args([command]).service_proxy is True
    assert build_parser().parse_args([command, "--service-proxy"]).service_proxy is True  # old command lines
    assert build_parser().parse_args([command, "--disable-service-proxy"]).service_proxy is False


@pytest.mark.parametrize("command", ["server", "agent"])
def test_network_policy_is_enforced_unless_disabled(command: str) -> None:
    assert build_parser().parse_args([command]).network_policy is True
    assert build_parser().parse_args([command, "--disable-network-policy"]).network_policy is False


@pytest.mark.parametrize("command", ["server", "agent"])
def test_node_address_flags(command: str) -> None:
    args = build_parser().parse_args([command, "--node-ip", "10.0.0.2", "--node-external-ip", "1.2.3.4",
                                      "--flannel-iface", "eth1"])
    assert (args.node_ip, args.node_external_ip, args.flannel_iface) == ("10.0.0.2", "1.2.3.4", "eth1")


def test_flannel_backend_flag() -> None:
    assert build_parser().parse_args(["server"]).flannel_backend == "vxlan"
    assert build_parser().parse_args(["server", "--flannel-backend", "host-gw"]).flannel_backend == "host-gw"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["server", "--flannel-backend", "wireguard"])
