"""Config files and LITE_* variables for `lite server`/`lite agent`: precedence (flags > files > environment >
defaults), drop-in files, `key+` appends, usage errors; and a real server configured by a file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from liteproc import LiteServer, find_free_port

from lite.cli.configfile import ConfigError, expand
from lite.cli.main import build_parser


def _parse(argv: list[str], env: dict[str, str] | None = None) -> object:
    parser = build_parser()
    return parser.parse_args(expand(parser, argv, env or {}))


def test_flags_beat_files_which_beat_the_environment(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("https-listen-port: 7443\nnode-name: from-file\ndisable-agent: true\ntls-san: [a, b]\n")
    (tmp_path / "config.yaml.d").mkdir()
    (tmp_path / "config.yaml.d" / "10-more.yaml").write_text("node-name: from-drop-in\ntls-san+: [c]\n")
    (tmp_path / "config.yaml.d" / "ignored.txt").write_text("node-name: nope\n")
    env = {"LITE_NODE_NAME": "from-env", "LITE_LOG_LEVEL": "debug", "LITE_CLUSTER_CIDR": "10.50.0.0/16"}
    args = _parse(["server", "--config", str(cfg), "--https-listen-port", "8443"], env)
    assert args.https_listen_port == 8443  # type: ignore[attr-defined]  # the flag wins
    assert args.node_name == "from-drop-in"  # type: ignore[attr-defined]  # drop-in over file over env
    assert args.disable_agent is True  # type: ignore[attr-defined]
    assert args.tls_san == ["a", "b", "c"]  # type: ignore[attr-defined]
    assert args.log_level == "debug" and args.cluster_cidr == "10.50.0.0/16"  # type: ignore[attr-defined]
    plain = _parse(["server"], {"LITE_CONFIG_FILE": str(cfg), "LITE_HTTPS_LISTEN_PORT": "9443"})
    assert plain.https_listen_port == 7443  # type: ignore[attr-defined]  # the file beats the environment
    agent = _parse(["agent"], {"LITE_URL": "https://s:6443", "LITE_NODE_NAME": "edge-1"})
    assert (agent.server, agent.node_name) == ("https://s:6443", "edge-1")  # type: ignore[attr-defined]


def test_request_and_connection_limits_come_from_files_as_every_flag(tmp_path: Path) -> None:
    plain = _parse(["server"])
    assert (plain.max_requests_inflight, plain.max_mutating_requests_inflight) == (400, 200)  # type: ignore[attr-defined]
    cfg = tmp_path / "config.yaml"
    cfg.write_text("max-requests-inflight: 7\nmax-mutating-requests-inflight: 0\nmax-connections-per-address: 9\n")
    args = _parse(["server", "--config", str(cfg)])
    assert (args.max_requests_inflight, args.max_mutating_requests_inflight,  # type: ignore[attr-defined]
            args.max_connections_per_address) == (7, 0, 9)  # type: ignore[attr-defined]
    with pytest.raises(SystemExit):
        _parse(["server", "--max-requests-inflight", "-1"])


def test_no_default_file_is_fine_and_a_named_missing_one_is_not(tmp_path: Path) -> None:
    assert _parse(["server"]).https_listen_port == 6443  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="does not exist"):
        _parse(["server", "--config", str(tmp_path / "missing.yaml")])


@pytest.mark.parametrize(("text", "message"), [
    ("no-such-flag: 1\n", "unknown key 'no-such-flag'"),
    ("https-listen-port: [1, 2]\n", "takes one value"),
    ("disable-agent: maybe\n", "takes true or false"),
    ("- a\n- b\n", "expected a mapping"),
    ("node-name: {a: b}\n", "plain value"),
    ("key: [unclosed\n", "config file"),
])
def test_bad_files_are_usage_errors_naming_the_key(tmp_path: Path, text: str, message: str) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError, match=message):
        _parse(["server", "--config", str(cfg)])
    done = subprocess.run([sys.executable, "-m", "lite.cli.main", "server", "--config", str(cfg)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and str(cfg) in done.stderr


def test_a_real_server_takes_its_settings_from_the_file(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("service-cidr: 10.96.0.0/16\ntls-san: [lite.example]\n")
    server = LiteServer(tmp_path / "data", find_free_port(), extra=("--config", str(cfg))).start()
    try:
        server.wait_ready(60)
        status, svc = server.request("/api/v1/namespaces/default/services/kubernetes")
        assert status == 200 and svc["spec"]["clusterIP"] == "10.96.0.1"
        crt = (tmp_path / "data" / "server" / "tls" / "serving.crt").read_bytes()
        from cryptography import x509

        sans = x509.load_pem_x509_certificate(crt).extensions.get_extension_for_class(x509.SubjectAlternativeName)
        assert "lite.example" in sans.value.get_values_for_type(x509.DNSName)
    finally:
        server.stop(timeout=15)
